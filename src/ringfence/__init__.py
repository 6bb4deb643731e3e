"""ringfence: network-security assurance for AI training clusters.

Proves, with evidence, that every path of a training network is protected as its policy says, and
measures what that protection costs the training job.

Importing ringfence registers nothing and imports nothing heavy (no torch, DuckDB or pyarrow): the
``ringfence`` torch.distributed backend is registered by an explicit call,
``ringfence.secure.transport.register()``, made by whoever is about to use it (the benchmark worker,
a training script), never as a side effect of an import.
"""

from ringfence.errors import RingfenceError

__version__ = "0.1.0"

__all__ = ["RingfenceError", "__version__"]
