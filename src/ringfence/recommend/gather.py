"""Gather NIC capability facts from the nodes themselves, through the site's executors.

One short script per host (one round trip over SSH): it finds the interface that carries the node's
address (or takes the one the inventory names), then prints ``ethtool -k``, ``ip -d link show`` and
``devlink port show`` for it, each section behind a marker chosen afresh for the run, so a tool's output
cannot forge another section. The result is a ``ringfence.nic/1`` document — the same strict shape as a
facts file a user gathers by hand — and is read back through :func:`ringfence.facts.nic.load` before the
recommendation uses it.

A tool that is not installed leaves its output empty and says so in the node's ``notes``: absent output
proves no offload, and the recommendation then assumes none. A host that cannot be reached, or that
times out, is kept with its ``error``, never dropped: its offloads are unknown, and it is named.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from ringfence.facts.nic import NIC_FORMAT
from ringfence.targets.interface import FABRIC_HOST, Site, TargetError

#: what one host runs: $1 the marker, $2 the node's address, $3 the interface (empty: find it by address)
_SCRIPT = r"""
m=$1; addr=$2; ifc=$3
if [ -z "$ifc" ]; then
  ifc=$(ip -o addr show 2>/dev/null | awk -v a="$addr" '{split($4, p, "/"); if (p[1] == a) {print $2; exit}}')
fi
echo "$m iface $ifc"
echo "$m ethtool"
if [ -n "$ifc" ] && command -v ethtool >/dev/null 2>&1; then ethtool -k "$ifc" 2>&1; else echo "$m missing"; fi
echo "$m iplink"
if [ -n "$ifc" ]; then ip -d link show dev "$ifc" 2>&1; fi
echo "$m devlink"
if command -v devlink >/dev/null 2>&1; then devlink port show 2>&1; else echo "$m missing"; fi
echo "$m end"
"""

#: bytes of one host's answer kept at most (three tools' text; a NIC lists a few hundred lines)
_MAX_OUTPUT = 1 << 20


def _sections(text: str, marker: str) -> dict[str, str] | None:
    """``{iface, ethtool, iplink, devlink}`` from one host's answer; None when the answer is not whole."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    iface = ""
    ended = False
    for line in text.splitlines():
        if line.startswith(marker + " "):
            word = line[len(marker) + 1:]
            if word.startswith("iface"):
                iface = word[len("iface"):].strip()
            elif word == "end":
                ended = True
                current = None
            elif word == "missing" and current is not None:
                out[current].append(f"{marker} missing")
            else:
                current = word
                out[current] = []
        elif current is not None:
            out[current].append(line)
    if not ended:
        return None
    return {"iface": iface, **{k: "\n".join(v) for k, v in out.items()}}


def _node(site: Site, node: str, timeout: float) -> dict[str, Any]:
    host = site.host(node)
    marker = "@@rf-" + secrets.token_hex(8)
    argv = ["sh", "-c", _SCRIPT, "sh", marker, host.address, host.interface or ""]
    try:
        res = host.executor.run(argv, timeout=timeout)
    except TargetError as exc:
        return {"node": node, "error": exc.message}
    if res.timed_out:
        return {"node": node, "error": f"no answer within {timeout:g}s"}
    found = _sections(res.stdout[:_MAX_OUTPUT].decode(errors="replace"), marker)
    if res.returncode != 0 or found is None:
        why = res.stderr.decode(errors="replace").strip()[-300:]
        return {"node": node, "error": f"exit {res.returncode}, answer incomplete{': ' + why if why else ''}"}
    notes: list[str] = []
    if not found["iface"]:
        notes.append(f"no interface carries {host.address}: nothing gathered")
    doc: dict[str, Any] = {"node": node, "interface": found["iface"]}
    for key, tool in (("ethtool_k", "ethtool"), ("ip_link", "iplink"), ("devlink", "devlink")):
        text = found.get(tool, "")
        if f"{marker} missing" in text:
            notes.append(f"{'ethtool' if tool == 'ethtool' else tool} not installed (or no interface): "
                         "no offload assumed from it")
            text = ""
        doc[key] = text
    if notes:
        doc["notes"] = notes
    return doc


def gather_nic(site: Site, nodes: Sequence[str] | None = None, *, timeout: float = 20.0) -> dict[str, Any]:
    """A ``ringfence.nic/1`` document for ``nodes`` (default: every host of ``site`` but the fabric)."""
    chosen = sorted(nodes) if nodes is not None else sorted(n for n in site.hosts if n != FABRIC_HOST)
    for n in chosen:
        site.host(n)  # an unknown node is refused, naming the site's nodes, before any host is asked
    taken = datetime.now(UTC)
    with ThreadPoolExecutor(max_workers=max(1, min(site.fanout, len(chosen)))) as pool:
        rows = list(pool.map(lambda n: _node(site, n, timeout), chosen))
    return {"format": NIC_FORMAT, "taken": taken.isoformat(), "target": f"{site.kind} {site.name}", "nodes": rows}


__all__ = ["gather_nic"]
