"""The collective transport's side of a credential compromise: one ringfence-transport handshake between the
holder of a job rank's credential and an honest rank of the same job, through the site's executors
(:mod:`ringfence.secure.transport.peercheck` on both hosts).

The thief's side runs from the victim's own address (the fabric approves the job's collective between its
ranks, so nothing but the credential decides) and honours no revocation list, as a stolen copy would not;
the honest rank reads the list the CA published to its host, re-read at the handshake as in a real group. As
in a group, the lower rank listens and the higher connects: whichever role the honest rank has, its own
verdict on the credential is what counts. The port is one of the job's collective range that nothing on the
listening host uses.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ringfence.drill.interface import DrillError
from ringfence.targets.interface import Site, TargetError
from ringfence.targets.ops import free_ports

MODULE = "ringfence.secure.transport.peercheck"


@dataclass(frozen=True)
class Side:
    """One end of the handshake: where it runs, with which credential directory (on that host), as which rank."""

    node: str
    rank: int
    cred_dir: str
    revoked: str | None = None  # the revocation list on that host; None: none honoured (the thief)


@dataclass(frozen=True)
class Handshake:
    """Both ends' outcomes (as :mod:`~ringfence.secure.transport.peercheck` printed them) and where it ran."""

    honest: dict[str, Any]
    thief: dict[str, Any]
    listener: str
    port: int
    fingerprint: str  # the presented credential's certificate (``sha256:<hex>``)

    @property
    def accepted(self) -> bool:
        """The honest rank completed the handshake with the credential."""
        return self.honest.get("ok") is True

    @property
    def refused_as_revoked(self) -> bool:
        """The honest rank refused *this* certificate because it is revoked — not for a timeout, another reason,
        or its own certificate being revoked (that refusal names the honest rank's fingerprint, not this one)."""
        error = str(self.honest.get("error") or "")
        return self.honest.get("ok") is False and f"({self.fingerprint}) is revoked" in error


def free_port(site: Site, node: str, ports: tuple[int, int]) -> int:
    """A port of ``ports`` nothing on ``node`` listens on (from the top of the range, where services rarely are)."""
    lo, hi = ports
    free = free_ports(site.executor(node), lo, hi)
    if free is None:
        raise DrillError(f"cannot read the listening ports of {node}: no transport handshake can be placed there")
    if not free:
        raise DrillError(f"every port of {lo}-{hi} is in use on {node}")
    return free[-1]


def _argv(site: Site, side: Side, role: str, *, world: int, group: str, port: int, peer: Side,
          timeout: float) -> tuple[list[str], dict[str, str]]:
    host = site.host(side.node)
    args = ["--dir", side.cred_dir, "--rank", str(side.rank), "--world", str(world), "--group", group,
            "--port", str(port), "--timeout", f"{timeout:g}"]
    if side.revoked:
        args += ["--revoked", side.revoked]
    if role == "accept":
        args += ["--bind", site.address(side.node)]
    else:
        args += ["--peer", str(peer.rank), "--host", site.address(peer.node)]
    return [*host.python, "-m", MODULE, role, *args], dict(host.env)


def _outcome(site: Site, side: Side, argv: Sequence[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    try:
        res = site.executor(side.node).run(list(argv), env=env, timeout=timeout)
    except TargetError as exc:
        return {"ok": None, "error": f"{side.node}: {exc.message}"}
    try:
        out = json.loads(res.stdout.decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": None, "error": f"{side.node}: no outcome (exit {res.returncode}"
                f"{', timed out' if res.timed_out else ''}): {res.stderr.decode(errors='replace')[-300:]}"}
    return out if isinstance(out, dict) else {"ok": None, "error": f"{side.node}: unreadable outcome"}


def handshake(site: Site, honest: Side, thief: Side, *, world: int, ports: tuple[int, int], fingerprint: str,
              timeout: float = 15.0) -> Handshake:
    """Run one handshake between ``honest`` and ``thief`` (the lower rank listens), ``fingerprint`` being the
    thief's certificate, and return both outcomes."""
    if honest.rank == thief.rank:
        raise DrillError(f"the honest rank and the credential's rank are both {honest.rank}")
    low, high = sorted((honest, thief), key=lambda s: s.rank)
    port = free_port(site, low.node, ports)
    group = f"ringfence-drill-{secrets.token_hex(6)}"  # fresh: a replayed or stale group never matches
    acc = _argv(site, low, "accept", world=world, group=group, port=port, peer=high, timeout=timeout)
    con = _argv(site, high, "connect", world=world, group=group, port=port, peer=low, timeout=timeout)
    with ThreadPoolExecutor(max_workers=2) as pool:
        # the connecting side retries until the listener is up (bounded by its own timeout), so no sleep here
        fa = pool.submit(_outcome, site, low, acc[0], acc[1], timeout + 30)
        fc = pool.submit(_outcome, site, high, con[0], con[1], timeout + 30)
        got_low, got_high = fa.result(), fc.result()
    return (Handshake(got_low, got_high, low.node, port, fingerprint) if low is honest
            else Handshake(got_high, got_low, low.node, port, fingerprint))


__all__ = ["MODULE", "Handshake", "Side", "free_port", "handshake"]
