"""The NFLOG conventions the renderer writes and the ulogd reader reads (no heavy imports: both sides use it)."""

from __future__ import annotations

from typing import Final

#: NFLOG group per verdict; ulogd's stack for each group sets ``numeric_label`` to its label below.
GROUPS: Final = {"accept": 11, "drop": 12, "audit": 13}
#: ``raw.label`` → verdict (ulogd's own convention: 0 blocked, 1 allowed; 2 is ringfence's audit).
LABEL_VERDICTS: Final = {1: "accept", 0: "drop", 2: "audit"}
LABELS: Final = {v: k for k, v in LABEL_VERDICTS.items()}
#: ulogd's ``action`` word (newer ulogd, other setups) → verdict.
ACTION_VERDICTS: Final = {"allowed": "accept", "blocked": "drop"}
#: ``<log_prefix>-drop|audit|contain SCOPE/CHAIN``: ringfence's own decisions that name no policy rule.
UNNAMED: Final = r"^[A-Za-z0-9_]{1,16}-(drop|audit|contain) \S{1,80}/\S{1,40}\s*$"
#: ulogd's default ``dvc`` when no ``device`` is configured: it names no node.
DEFAULT_DEVICE: Final = "Netfilter"

__all__ = ["ACTION_VERDICTS", "DEFAULT_DEVICE", "GROUPS", "LABELS", "LABEL_VERDICTS", "UNNAMED"]
