"""The admission gate: an nftables set of the fabric's admitted members, whose elements expire by themselves.

At the fabric's forwarding point (the lab's fabric namespace; on real hosts the router or the hosts'
own firewall) traffic between two fabric members is dropped unless both are in ``admitted``. The
gate runs in the ``bridge`` family (members on one segment are bridged, never routed) and in ``inet``
(members in other subnets are routed). An admission is a set element with a *timeout* equal to the
re-attestation interval: the kernel removes it when the verifier does not renew it in time, so a
verifier that stops leaves no node admitted on stale results (Keylime CVE-2022-3500).

Renewal is one transaction (add, delete, add with a fresh timeout), since adding an element that is
already there keeps its old expiry; a revocation likewise never fails on an absent element.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable

from ringfence.attest.interface import AttestError
from ringfence.targets.interface import Executor, TargetError

TABLE = "ringfence_attest"
FAMILIES = ("bridge", "inet")


def _v4(addresses: Iterable[str]) -> list[str]:
    out = []
    for a in addresses:
        ip = ipaddress.ip_address(a)
        if ip.version != 4:
            raise AttestError(f"the gate handles IPv4 members only, not {a}")
        out.append(str(ip))
    return sorted(set(out))


class Gate:
    """The gate at one enforcement point (an executor where ``nft`` runs)."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def _nft(self, script: str, what: str) -> bytes:
        try:
            res = self.executor.run(["nft", "-f", "-"], stdin=script.encode(), timeout=30)
        except TargetError as exc:
            raise AttestError(f"gate at {self.executor.name}: {what}: {exc.message}") from exc
        if res.returncode != 0 or res.timed_out:
            raise AttestError(f"gate at {self.executor.name}: {what} failed: "
                              f"{res.stderr.decode(errors='replace').strip()[-300:]}")
        return res.stdout

    def install(self, members: Iterable[str]) -> None:
        """Create (or refresh) the gate for ``members``; admissions already in the set are kept."""
        mem = _v4(members)
        lines = []
        for fam in FAMILIES:
            t = f"{fam} {TABLE}"
            lines += [
                f"add table {t}",
                f"add set {t} members {{ type ipv4_addr; }}",
                f"add set {t} admitted {{ type ipv4_addr; flags timeout; }}",
                f"add chain {t} forward {{ type filter hook forward priority -10; policy accept; }}",
                f"flush chain {t} forward",
                f"flush set {t} members",
                f"add rule {t} forward ip saddr @members ip daddr @members ip saddr != @admitted counter drop",
                f"add rule {t} forward ip saddr @members ip daddr @members ip daddr != @admitted counter drop",
            ]
            if mem:
                lines.append(f"add element {t} members {{ {', '.join(mem)} }}")
        self._nft("\n".join(lines) + "\n", "installing")

    def admit(self, addresses: Iterable[str], seconds: int) -> None:
        """Admit ``addresses`` for ``seconds`` (renewing an admission restarts its timeout)."""
        addrs = _v4(addresses)
        if not addrs:
            return
        lines = []
        for fam in FAMILIES:
            for a in addrs:
                el = f"{fam} {TABLE} admitted {{ {a} timeout {seconds}s }}"
                lines += [f"add element {el}", f"delete element {fam} {TABLE} admitted {{ {a} }}",
                          f"add element {el}"]
        self._nft("\n".join(lines) + "\n", "admitting")

    def revoke(self, addresses: Iterable[str]) -> None:
        """Remove ``addresses`` from the admitted set (present or not)."""
        addrs = _v4(addresses)
        lines = []
        for fam in FAMILIES:
            for a in addrs:
                lines += [f"add element {fam} {TABLE} admitted {{ {a} timeout 1s }}",
                          f"delete element {fam} {TABLE} admitted {{ {a} }}"]
        if lines:
            self._nft("\n".join(lines) + "\n", "revoking")

    def admitted(self) -> dict[str, int | None]:
        """Address → seconds left of its admission (bridge family: where same-segment members meet)."""
        try:
            res = self.executor.run(["nft", "-j", "list", "set", "bridge", TABLE, "admitted"], timeout=30)
        except TargetError as exc:
            raise AttestError(f"gate at {self.executor.name}: reading the admitted set: {exc.message}") from exc
        if res.returncode != 0:
            return {}  # no gate installed: nobody is admitted
        try:
            doc = json.loads(res.stdout)
        except ValueError as exc:
            raise AttestError(f"gate at {self.executor.name}: nft printed no JSON") from exc
        out: dict[str, int | None] = {}
        for item in doc.get("nftables", []):
            for el in item.get("set", {}).get("elem", []) or []:
                if isinstance(el, str):
                    out[el] = None
                elif isinstance(el, dict) and isinstance(el.get("elem"), dict):
                    inner = el["elem"]
                    out[str(inner.get("val"))] = inner.get("expires")
        return out

    def remove(self) -> None:
        """Delete the gate (every member may talk again): the lifting half of a denied-side proof."""
        for fam in FAMILIES:
            try:
                res = self.executor.run(["nft", "list", "table", fam, TABLE], timeout=30)
            except TargetError as exc:
                raise AttestError(f"gate at {self.executor.name}: removing: {exc.message}") from exc
            if res.returncode == 0:  # nft 1.0.6 has no `destroy`: delete only what exists
                self._nft(f"delete table {fam} {TABLE}\n", "removing")


__all__ = ["FAMILIES", "TABLE", "Gate"]
