"""Reachability probes through an executor, and the proof that a denial was caused by policy.

A probe is a tiny stdlib-only Python program run on the source host (``python3 -c``), so it works the
same in a lab namespace and over SSH. It binds its own source port first and reports it, which lets
the proof find *its* packet: every ringfence drop rule is preceded by an update of the dynamic set
``denied`` keyed by (saddr, daddr, proto, sport, dport) with a per-element counter. A deny counts as
proven only when the probe timed out or was reset AND that element's counter moved during the probe.
A refused connection (closed port) proves nothing and never counts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ringfence.enforce.nftables import TABLE
from ringfence.enforce.nftrun import NftError
from ringfence.targets.interface import Executor

_PROBE_PY = r"""
import json, socket, sys, threading
def probe(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if a.get("mark"):
        s.setsockopt(socket.SOL_SOCKET, 36, a["mark"])  # SO_MARK
    s.bind(("0.0.0.0", 0))
    out = {"sport": s.getsockname()[1], "app": None, "detail": ""}
    s.settimeout(a["timeout"])
    try:
        s.connect((a["host"], a["port"]))
        out["outcome"] = "connected"
    except socket.timeout:
        out["outcome"] = "timeout"
    except ConnectionRefusedError:
        out["outcome"] = "refused"
    except ConnectionResetError:
        out["outcome"] = "reset"
    except OSError as e:
        out["outcome"] = "error"
        out["detail"] = f"{type(e).__name__}: {e}"
    if out["outcome"] == "connected" and a["app"]:
        try:
            if a["app"] in ("http", "https"):
                s.sendall(b"GET / HTTP/1.0\r\nHost: " + a["host"].encode() + b"\r\n\r\n")
            data = s.recv(64)
            out["app"] = data.startswith(b"SSH-") if a["app"] == "ssh" else data.startswith(b"HTTP/")
            if a["app"] == "https":
                out["app"] = data[:1] == b"\x15" or data[:1] == b"\x16"  # a TLS server answers plaintext with an alert
            out["detail"] = repr(data[:24])
        except OSError as e:
            out["app"] = False
            out["detail"] = f"{type(e).__name__}: {e}"
    s.close()
    return out
a = json.loads(sys.argv[1])
if isinstance(a, dict):
    print(json.dumps(probe(a)))
else:  # a batch: every probe at once, each in its own thread, results in the order given
    res = [None] * len(a)
    def run(i):
        try:
            res[i] = probe(a[i])
        except Exception as e:
            res[i] = {"sport": 0, "app": None, "outcome": "error", "detail": f"{type(e).__name__}: {e}"}
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(a))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps(res))
"""


@dataclass(frozen=True)
class RawProbe:
    """What the probe program saw: the outcome, its source port, and the application exchange."""

    outcome: str  # connected | timeout | refused | reset | error
    sport: int
    app_ok: bool | None  # None: no application exchange attempted
    detail: str
    tries: int = 1  # 2: the first try timed out and this is the second, with a longer timeout

    def timed_out(self) -> bool:
        """Whether the connection or its application greeting ran out of time (not refused, not reset)."""
        if self.outcome == "timeout":
            return True
        return self.outcome == "connected" and self.app_ok is False and "timed out" in self.detail


def tcp_probe(executor: Executor, host: str, port: int, *, app: str = "", timeout: float = 2.0) -> RawProbe:
    """Connect from ``executor``'s host to ``host:port``; with ``app`` (http, https, ssh) also exchange a greeting."""
    args = json.dumps({"host": host, "port": port, "timeout": timeout, "app": app})
    res = executor.run(["python3", "-c", _PROBE_PY, args], timeout=timeout + 15)
    if res.returncode != 0 or res.timed_out:
        return RawProbe("error", 0, None, res.stderr.decode(errors="replace").strip()[-300:] or "probe did not run")
    try:
        data: dict[str, Any] = json.loads(res.stdout)
    except ValueError:
        return RawProbe("error", 0, None, f"unreadable probe output {res.stdout[:80]!r}")
    return _raw(data)


def _raw(data: dict[str, Any]) -> RawProbe:
    return RawProbe(str(data["outcome"]), int(data["sport"]), data["app"], str(data["detail"]))


@dataclass(frozen=True)
class ProbeTarget:
    """One connection a batch should try: ``host:port`` over TCP, with an optional application greeting."""

    host: str
    port: int
    app: str = ""
    mark: int = 0  # SO_MARK of the probe's socket (deny probes: bypass node-local proxies)


def tcp_probes(executor: Executor, targets: Sequence[ProbeTarget], *, timeout: float = 2.0) -> list[RawProbe]:
    """Run every probe of ``targets`` at once from ``executor``'s host (one program, one thread per probe).

    One process per source host instead of one per probe: over SSH that is one session, and the whole
    batch takes about one ``timeout``. Results come back in the order of ``targets``; a batch that could
    not run gives every target an ``error`` outcome with the reason.
    """
    if not targets:
        return []
    args = json.dumps([{"host": t.host, "port": t.port, "timeout": timeout, "app": t.app, "mark": t.mark}
                       for t in targets])
    res = executor.run(["python3", "-c", _PROBE_PY, args], timeout=timeout * 2 + 30)
    failed = ""
    if res.returncode != 0 or res.timed_out:
        failed = res.stderr.decode(errors="replace").strip()[-300:] or "probe batch did not run"
    else:
        try:
            rows = json.loads(res.stdout)
            if isinstance(rows, list) and len(rows) == len(targets):
                return [_raw(r) for r in rows]
            failed = f"probe batch printed {len(rows) if isinstance(rows, list) else 'no'} results for {len(targets)}"
        except (ValueError, KeyError, TypeError):
            failed = f"unreadable probe output {res.stdout[:80]!r}"
    return [RawProbe("error", 0, None, failed) for _ in targets]


def _elements(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for obj in doc.get("nftables", []):
        st = obj.get("set")
        if st:
            out += [e["elem"] for e in st.get("elem", []) if isinstance(e, dict) and "elem" in e]
    return out


def denied_packets(executors: Sequence[Executor], saddr: str, daddr: str, sport: int, dport: int,
                   proto: str = "tcp") -> tuple[int, list[str]]:
    """Packets recorded in the ``denied`` sets for exactly this (saddr, daddr, proto, sport, dport), summed over
    the given hosts and both families; and where they were seen (``host/family``)."""
    total, where = 0, []
    for ex in executors:
        for family in ("inet", "bridge"):
            res = ex.run(["nft", "-j", "list", "set", family, TABLE, "denied"], timeout=30)
            if res.timed_out:
                raise NftError(f"{ex.name}: reading the denied set gave no answer within 30s")
            if res.returncode != 0:
                err = res.stderr.decode(errors="replace")
                if "No such file or directory" in err:
                    continue  # this host has no such table (a node has no bridge table)
                raise NftError(f"{ex.name}: cannot read the denied set: {err.strip()[:500]}")
            for e in _elements(json.loads(res.stdout)):
                if e.get("val", {}).get("concat") == [saddr, daddr, proto, sport, dport]:
                    n = int(e.get("counter", {}).get("packets", 0))
                    if n:
                        total += n
                        where.append(f"{ex.name}/{family}")
    return total, where


__all__ = ["ProbeTarget", "RawProbe", "denied_packets", "tcp_probe", "tcp_probes"]
