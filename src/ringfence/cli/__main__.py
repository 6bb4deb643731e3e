"""``python -m ringfence.cli``."""

import sys

from ringfence.cli import main

sys.exit(main())
