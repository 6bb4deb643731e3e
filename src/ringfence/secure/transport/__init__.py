"""ringfence-transport: an authenticated-encrypted torch.distributed backend (see docs/transport.md).

Registration is an explicit call: ``ringfence.secure.transport.register()`` makes
``dist.init_process_group("ringfence")`` work (it needs torch). Importing this package registers
nothing and never imports torch, so the protocol (handshake, records, ring schedules) is importable,
and tested, without it.
"""

from ringfence.secure.transport.config import TransportConfig, config_from_env, configure, current_config
from ringfence.secure.transport.engine import Group
from ringfence.secure.transport.wire import KeyEvent, RecordError, TransportError

BACKEND_NAME = "ringfence"


def register() -> None:
    """Register the ``ringfence`` backend with torch.distributed (idempotent; imports torch)."""
    # Imported here, not at module level: torch costs seconds and most users of this package
    # (the CLI, the assessment, the protocol tests) never touch it.
    from ringfence.secure.transport import backend

    backend.register_backend()


#: The name ``--plugin MODULE:FUNC`` and older docs use; the same function.
register_backend = register

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
    "register",
    "register_backend",
]
