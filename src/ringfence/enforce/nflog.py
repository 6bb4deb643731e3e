"""Firewall decisions to NFLOG: the rule id as the log prefix, one NFLOG group per verdict.

Applied to every rule as the renderer adds it (one call in :mod:`ringfence.enforce.nftables`), so
the renderer's rules stay as they are and the logging convention lives here, next to the reader
that depends on it (:mod:`ringfence.observe.flows.events.ulogd`):

* an approved flow's accept rule logs each new connection it admits to the ``accept`` group, its
  prefix the flow's id (the rule id the policy gives it);
* the default drop, the audit rule and containment already log ``rf-drop|audit|contain SCOPE/CHAIN``:
  they get their verdict's group;
* stateless UDP-reply rules (bridge) would log every packet, not a connection: they stay silent, and
  so do accept rules of the bridge family (ulogd binds the IP families only).

Only new connections reach these rules (established traffic is accepted earlier), so the log grows
with connections, not packets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from ringfence.observe.flows.events.conventions import GROUPS

Json = dict[str, Any]

_FLOW_COMMENT: Final = re.compile(r"^flow (?P<id>\S{1,100}) \((?!udp replies)")


def _verdict(expr: Sequence[Json]) -> str | None:
    for e in expr:
        if isinstance(e, dict) and ("accept" in e or "drop" in e):
            return "accept" if "accept" in e else "drop"
    return None


def tag(family: str, expr: Sequence[Json], comment: str | None) -> list[Json]:
    """``expr`` with its decision logged to NFLOG (see the module docstring); other rules unchanged."""
    out = [dict(e) for e in expr]
    verdict = _verdict(out)
    logs = [i for i, e in enumerate(out) if isinstance(e, dict) and "log" in e]
    if logs:
        for i in logs:
            prefix = str(out[i]["log"].get("prefix", ""))
            group = GROUPS["audit"] if "-audit " in prefix else GROUPS[verdict or "drop"]
            out[i] = {"log": {**out[i]["log"], "group": group}}
        return out
    m = _FLOW_COMMENT.match(comment or "")
    if m is None or verdict != "accept" or family == "bridge":
        return out
    at = next(i for i, e in enumerate(out) if isinstance(e, dict) and "accept" in e)
    out.insert(at, {"log": {"prefix": m.group("id"), "group": GROUPS["accept"]}})
    return out


__all__ = ["tag"]
