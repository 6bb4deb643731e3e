"""A cluster behind any site: its hosts, its policy, its job's progress and a capture — all through executors.

The drills (:mod:`ringfence.secure.drills`), the rollout's actions and ``contain`` observe a cluster
through four things: the site's hosts, the policy, whether the training job keeps stepping, and a
capture of its traffic. The lab answers them from its own state; :class:`SiteCluster` answers them
for any site — SSH hosts of a Slurm cluster included — using only the hosts' executors:

* progress: each training rank's host names a *progress file* (``progress:`` in the hosts file), a
  JSON document the rank rewrites as it steps — ``{"counters": {"steps": N}, "ready": true,
  "updated": EPOCH}`` (the lab's workers write exactly this). It is read with ``cat`` over the
  executor, together with the host's own clock, so a stale file (a rank that stopped) is seen as
  stopped whatever the skew between the hosts and this machine;
* capture: :func:`ringfence.targets.capture.capture_site` (egress of every host, merged).

A host that cannot be read is absent from :meth:`SiteCluster.agent_status` — never reported as a
rank that made no progress — so a drill says "unknown" for it, not "stopped".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ringfence.policy import Policy
from ringfence.targets.capture import SiteCapture, capture_site
from ringfence.targets.fanout import HostOutcome, host_outcome
from ringfence.targets.interface import Site

#: a progress file older than this (by the host's own clock) belongs to a rank that stopped
STALE_S = 30.0
#: prints the file, a separator line, then the host's clock (seconds since the epoch)
_READ = 'cat -- "$1" && printf "\\n--ringfence-clock--\\n" && date +%s'


def _parse(stdout: bytes) -> tuple[dict[str, Any], float] | None:
    text = stdout.decode("utf-8", errors="replace")
    body, sep, clock = text.rpartition("\n--ringfence-clock--\n")
    if not sep:
        return None
    try:
        doc = json.loads(body)
        now = float(clock.strip())
    except ValueError:
        return None
    return (doc, now) if isinstance(doc, dict) and isinstance(doc.get("counters", {}), dict) else None


class SiteCluster:
    """The :class:`~ringfence.secure.drills.Cluster` of any site (the hosts' progress files, a site capture)."""

    def __init__(self, site: Site, policy: Policy, *, stale_s: float = STALE_S) -> None:
        self._site, self._policy, self._stale = site, policy, stale_s

    def site(self) -> Site:
        """The hosts, each behind its executor."""
        return self._site

    def policy(self) -> Policy:
        """The cluster's policy."""
        return self._policy

    def progress_hosts(self) -> dict[str, str]:
        """Host → its progress file, for every host that runs a training rank."""
        return {n: h.progress for n, h in sorted(self._site.hosts.items()) if h.progress}

    def _read(self) -> dict[str, tuple[dict[str, Any], float]]:
        files = self.progress_hosts()
        timeout = min(30.0, self._site.timeout)

        def one(node: str) -> HostOutcome:  # each host its own file, all at once within the site's fan-out
            return host_outcome(node, self._site.executor(node), ["sh", "-c", _READ, "sh", files[node]], timeout)

        with ThreadPoolExecutor(max_workers=max(1, min(self._site.fanout, len(files)))) as pool:
            outcomes = list(pool.map(one, files))
        out: dict[str, tuple[dict[str, Any], float]] = {}
        for res in outcomes:
            parsed = _parse(res.result.stdout) if res.ok and res.result is not None else None
            if parsed is not None:
                out[res.node] = parsed
        return out

    def agent_status(self) -> dict[str, dict[str, Any]]:
        """``<node>-worker`` → the rank's progress document, for every host whose file could be read."""
        return {f"{node}-worker": doc for node, (doc, _) in self._read().items()}

    def workers_alive(self) -> bool:
        """Every rank's progress file was read, says ready, and was rewritten within :data:`STALE_S`."""
        files = self.progress_hosts()
        read = self._read()
        if not files or set(read) != set(files):
            return False
        for doc, now in read.values():
            updated = doc.get("updated")
            if doc.get("ready") is not True or not isinstance(updated, int | float) or now - updated > self._stale:
                return False
        return True

    def capture(self, seconds: float, out_path: Path) -> SiteCapture:
        """``seconds`` of every host's egress, merged into one pcap at ``out_path``."""
        return capture_site(self._site, seconds, out_path)


def steps_of(status: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Node → training steps, from an :meth:`agent_status` answer (``<node>-worker`` entries only)."""
    out: dict[str, int] = {}
    for key, doc in status.items():
        if not key.endswith("-worker"):
            continue
        counters = doc.get("counters")
        steps = counters.get("steps", 0) if isinstance(counters, Mapping) else 0
        out[key.removesuffix("-worker")] = int(steps) if isinstance(steps, int) else 0
    return out


__all__ = ["STALE_S", "SiteCluster", "steps_of"]
