"""ringfence-transport: an authenticated-encrypted torch.distributed backend (see docs/transport.md).

Importing this package registers the ``ringfence`` backend with torch.distributed when torch is
installed — the same convention as torch's own backend plug-ins, so that
``dist.init_process_group("ringfence")`` works after ``import ringfence.secure.transport``.
Without torch, the protocol (handshake, records, ring schedules) is still importable.
"""

from ringfence.secure.transport.config import TransportConfig, config_from_env, configure, current_config
from ringfence.secure.transport.engine import Group
from ringfence.secure.transport.wire import KeyEvent, RecordError, TransportError

BACKEND_NAME = "ringfence"


def register_backend() -> None:
    """Register the ``ringfence`` backend with torch.distributed (idempotent; needs torch)."""
    from ringfence.secure.transport import backend

    backend.register_backend()


try:
    import torch.distributed  # noqa: F401 - only probing whether torch is present
except ImportError:  # torch is the optional "lab" extra; the protocol works without it
    pass
else:
    register_backend()

__all__ = [
    "BACKEND_NAME",
    "Group",
    "KeyEvent",
    "RecordError",
    "TransportConfig",
    "TransportError",
    "config_from_env",
    "configure",
    "current_config",
    "register_backend",
]
