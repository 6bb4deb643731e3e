"""ringfence: network-security assurance for AI training clusters.

Proves, with evidence, that every path of a training network is protected as its policy says, and
measures what that protection costs the training job.
"""

from ringfence.errors import RingfenceError

__version__ = "0.1.0"
__all__ = ["RingfenceError", "__version__"]
