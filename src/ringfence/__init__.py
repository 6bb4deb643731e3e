"""ringfence: network-security assurance for AI training clusters.

Proves, with evidence, that every path of a training network is protected as its policy says, and
measures what that protection costs the training job.

``import torch`` then ``import ringfence`` registers the ``ringfence`` torch.distributed backend, so
``dist.init_process_group("ringfence")`` works. Without torch already imported, ``import ringfence``
does not import it: the CLI and the assessment never pay torch's start-up cost.
"""

import sys

from ringfence.errors import RingfenceError

__version__ = "0.1.0"

if "torch" in sys.modules:
    import ringfence.secure.transport  # noqa: F401 - registers the "ringfence" backend with torch

__all__ = ["RingfenceError", "__version__"]
