"""Prove each job's partition both ways on a Linux-bridge fabric, through executors, as a facts document.

For every job that declares ``jobs[].partition``:

* **permitted**: a rank resolves another rank of its own job at L2 (an ARP request answered) and connects to
  the job's rendezvous port at L3; every rank of every job keeps stepping (the step counters the target
  reports move over the probe window);
* **denied**: a rank of another job gets no ARP answer from the job's rank (``l2``), and no answer to a TCP
  SYN for its rendezvous port sent straight to the member's MAC (``l3``) or through the zone gateway
  (``l3-routed``). The SYNs go out as raw frames, past the prober's own firewall — a rank with root flushes
  that — so what stops them is the fabric alone. A denial counts as the partition's (``by_policy``) only when
  the fabric's own record moved for *this* probe: the ARP request and the direct SYN come from a MAC address
  made up for the probe alone (locally administered, random), so the bridge's ``part_denied`` element (that
  MAC . the member's port) is the probe's own; the routed SYN is found by its 5-tuple in ``inet``'s.

The ARP request is sent as an RFC 5227 probe (sender address 0.0.0.0): the answering host updates no
neighbour entry, so the made-up MAC never reaches anyone's ARP cache and the jobs' traffic is not disturbed.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Final

from ringfence.enforce.interface import EnforceError
from ringfence.enforce.nftables import TABLE
from ringfence.enforce.partition_nft import DENIED_SET, PartitionJob
from ringfence.enforce.probe import ProbeTarget, tcp_probes
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.targets.interface import FABRIC_HOST, Executor

FORMAT: Final = "ringfence-partitions/1"

_ARP_PY = r"""
import json, socket, struct, sys, time
a = json.loads(sys.argv[1])
mac = bytes.fromhex(a["mac"].replace(":", ""))
tip = socket.inet_aton(a["ip"])
out = {"outcome": "silent", "detail": ""}
try:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
    s.bind((a["iface"], 0x0806))
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac, b"\0" * 4, b"\0" * 6, tip)
    s.send(b"\xff" * 6 + mac + b"\x08\x06" + arp)
    end = time.monotonic() + a["timeout"]
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            f = s.recv(128)
        except socket.timeout:
            break
        if len(f) >= 42 and f[12:14] == b"\x08\x06" and f[20:22] == b"\x00\x02" and f[28:32] == tip \
                and f[32:38] == mac:
            out = {"outcome": "answered", "detail": "reply from " + f[22:28].hex(":")}
            break
except OSError as e:
    out = {"outcome": "error", "detail": f"{type(e).__name__}: {e}"}
print(json.dumps(out))
"""


_SYN_PY = r"""
import json, random, socket, struct, sys, time
a = json.loads(sys.argv[1])
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
src, dst = socket.inet_aton(a["src_ip"]), socket.inet_aton(a["dst_ip"])
sport = random.randint(40000, 60999)
out = {"outcome": "timeout", "sport": sport, "detail": ""}
try:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
    s.bind((a["iface"], 0x0800))
    tcp = struct.pack("!HHIIBBHHH", sport, a["port"], random.getrandbits(32), 0, 5 << 4, 0x02, 64240, 0, 0)
    tcp = tcp[:16] + struct.pack("!H", csum(src + dst + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), random.getrandbits(16), 0x4000, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    s.send(bytes.fromhex(a["dst_mac"].replace(":", "")) + bytes.fromhex(a["src_mac"].replace(":", ""))
           + b"\x08\x00" + ip + tcp)
    end = time.monotonic() + a["timeout"]
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            f = s.recv(128)
        except socket.timeout:
            break
        h = 14 + (f[14] & 0x0F) * 4 if len(f) > 34 else 0
        if h and f[23] == 6 and f[26:30] == dst and f[30:34] == src and len(f) >= h + 14 \
                and struct.unpack("!HH", f[h:h + 4]) == (a["port"], sport):
            flags = f[h + 13]
            out["outcome"] = "reset" if flags & 0x04 else "connected" if (flags & 0x12) == 0x12 else "timeout"
            out["detail"] = "flags %#x" % flags
            break
except OSError as e:
    out = {"outcome": "error", "sport": sport, "detail": f"{type(e).__name__}: {e}"}
print(json.dumps(out))
"""


@dataclass(frozen=True)
class PartitionProbe:
    """One probe of a partition: who tried to reach whom, at which layer, and what happened."""

    layer: str  # "l2" (ARP) | "l3" (TCP to the member's MAC) | "l3-routed" (TCP through the zone gateway)
    source: str
    source_job: str | None
    destination: str
    destination_job: str
    address: str
    port: int  # 0 for l2
    expected: str  # "allow" | "deny"
    outcome: str  # l2: answered | silent | error; l3: connected | timeout | refused | reset | error
    by_policy: bool | None  # a deny: the fabric's partition record moved for this probe's frames
    detail: str = ""


def _random_mac() -> str:
    b = bytearray(secrets.token_bytes(6))
    b[0] = (b[0] & 0xFC) | 0x02  # locally administered, unicast: nothing real has it
    return ":".join(f"{x:02x}" for x in b)


def arp_probe(executor: Executor, iface: str, address: str, mac: str, *, timeout: float = 1.5) -> tuple[str, str]:
    """Send one ARP request for ``address`` from ``mac`` out of ``iface`` on ``executor``'s host; (outcome, detail)."""
    args = json.dumps({"iface": iface, "ip": address, "mac": mac, "timeout": timeout})
    res = executor.run(["python3", "-c", _ARP_PY, args], timeout=timeout + 15)
    if res.returncode != 0 or res.timed_out:
        return "error", res.stderr.decode(errors="replace").strip()[-300:] or "ARP probe did not run"
    try:
        data = json.loads(res.stdout)
        return str(data["outcome"]), str(data.get("detail", ""))
    except (ValueError, KeyError, TypeError):
        return "error", f"unreadable ARP probe output {res.stdout[:80]!r}"


def syn_probe(executor: Executor, iface: str, *, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, port: int,
              timeout: float = 1.5) -> tuple[str, int, str]:
    """Send one TCP SYN as a raw frame (past the host's own firewall, as a rank with root could) and wait for
    the answer; (outcome connected|reset|timeout|error, source port, detail)."""
    args = json.dumps({"iface": iface, "src_mac": src_mac, "dst_mac": dst_mac, "src_ip": src_ip, "dst_ip": dst_ip,
                       "port": port, "timeout": timeout})
    res = executor.run(["python3", "-c", _SYN_PY, args], timeout=timeout + 15)
    if res.returncode != 0 or res.timed_out:
        return "error", 0, res.stderr.decode(errors="replace").strip()[-300:] or "SYN probe did not run"
    try:
        data = json.loads(res.stdout)
        return str(data["outcome"]), int(data["sport"]), str(data.get("detail", ""))
    except (ValueError, KeyError, TypeError):
        return "error", 0, f"unreadable SYN probe output {res.stdout[:80]!r}"


def _denied(fabric: Executor) -> dict[tuple[str, ...], int]:
    """The fabric's partition records (both families): element key → packets."""
    out: dict[tuple[str, ...], int] = {}
    for family in ("bridge", "inet"):
        res = fabric.run(["nft", "-j", "list", "set", family, TABLE, DENIED_SET], timeout=30)
        if res.returncode != 0:
            continue  # no partition installed: nothing moves, and no deny is proven
        for obj in json.loads(res.stdout).get("nftables", []):
            for e in (obj.get("set") or {}).get("elem", []):
                if isinstance(e, dict) and "elem" in e:
                    key = e["elem"].get("val", {}).get("concat")
                    if isinstance(key, list):
                        out[tuple(str(k) for k in key)] = int(e["elem"].get("counter", {}).get("packets", 0))
    return out


def _moved(before: Mapping[tuple[str, ...], int], after: Mapping[tuple[str, ...], int],
           keys: set[tuple[str, ...]]) -> bool:
    return any(n > before.get(k, 0) for k, n in after.items() if k in keys)


def _mac(executor: Executor, iface: str) -> str:
    res = executor.run(["cat", f"/sys/class/net/{iface}/address"], timeout=15)
    return res.stdout.decode().strip().lower() if res.returncode == 0 else ""


@dataclass(frozen=True)
class ProveInputs:
    """What the target supplies: executors, each node's interface and fabric ports, each job's rendezvous."""

    points: Mapping[str, Executor]  # the fabric point (FABRIC_HOST) and every node
    interfaces: Mapping[str, str]  # node → the interface it reaches the fabric by
    rendezvous: Mapping[str, tuple[str, int]]  # job → (rank node, port) a rank of the job listens on
    gateways: Mapping[str, str]  # node → its zone gateway's address on the fabric (the routed path)
    steps: Callable[[], Mapping[str, int]]  # node → its training rank's step counter, now


def _job_probes(job: PartitionJob, others: Sequence[PartitionJob], addr: Mapping[str, str],
                ports: Mapping[str, str], inp: ProveInputs, timeout: float) -> list[PartitionProbe]:
    fabric = inp.points[FABRIC_HOST]
    target, rport = inp.rendezvous[job.name]
    out: list[PartitionProbe] = []
    peers = [m for m in job.members if m != target]
    if peers:
        src = peers[0]
        ex = inp.points[src]
        outcome, detail = arp_probe(ex, inp.interfaces[src], addr[target], _random_mac(), timeout=timeout)
        out.append(PartitionProbe("l2", src, job.name, target, job.name, addr[target], 0, "allow", outcome, None,
                                  detail))
        (raw,) = tcp_probes(ex, [ProbeTarget(addr[target], rport)], timeout=timeout)
        out.append(PartitionProbe("l3", src, job.name, target, job.name, addr[target], rport, "allow", raw.outcome,
                                  None, raw.detail))
    for other in others:
        src = other.members[0]
        ex = inp.points[src]
        mac = _random_mac()
        before = _denied(fabric)
        outcome, detail = arp_probe(ex, inp.interfaces[src], addr[target], mac, timeout=timeout)
        after = _denied(fabric)
        dropped = _moved(before, after, {(mac, ports[target])})
        out.append(PartitionProbe("l2", src, other.name, target, job.name, addr[target], 0, "deny", outcome, dropped,
                                  detail))
        # L3 past the prober's own firewall (a rank with root flushes it): a raw SYN straight to the member's
        # MAC, from a MAC of this probe alone, and one through the zone gateway, judged by its own 5-tuple
        own, member_mac = _mac(ex, inp.interfaces[src]), _mac(inp.points[target], inp.interfaces[target])
        gw_state, gw_detail = arp_probe(ex, inp.interfaces[src], inp.gateways[src], _random_mac(), timeout=timeout)
        gw_mac = gw_detail.removeprefix("reply from ") if gw_state == "answered" else ""
        for layer, src_mac, dst_mac in (("l3", _random_mac(), member_mac), ("l3-routed", own, gw_mac)):
            if not (src_mac and dst_mac):
                out.append(PartitionProbe(layer, src, other.name, target, job.name, addr[target], rport, "deny",
                                          "error", None, f"no MAC for the {layer} probe (gateway: {gw_detail})"))
                continue
            before = _denied(fabric)
            outcome, sport, detail = syn_probe(ex, inp.interfaces[src], src_mac=src_mac, dst_mac=dst_mac,
                                               src_ip=addr[src], dst_ip=addr[target], port=rport, timeout=timeout)
            after = _denied(fabric)
            keys: set[tuple[str, ...]] = ({(src_mac, ports[target])} if layer == "l3" else
                                          {(addr[src], addr[target], "tcp", str(sport), str(rport))})
            out.append(PartitionProbe(layer, src, other.name, target, job.name, addr[target], rport, "deny", outcome,
                                      sport > 0 and _moved(before, after, keys), detail))
    return out


def prove_partitions(jobs: Sequence[PartitionJob], inp: ProveInputs, *, target: str, timeout: float = 1.5,
                     settle_s: float = 10.0) -> dict[str, Any]:
    """Probe every partitioned job both ways and read the ranks' progress around it; the facts document.

    ``jobs`` as :func:`~ringfence.enforce.partition_nft.partition_jobs` gives them (the policy's jobs with the
    target's ports). Ranks that made no step over the probes are given up to ``settle_s`` more to show one.
    """
    parted = [j for j in jobs if j.partitioned]
    if not parted:
        raise EnforceError("no job declares a partition: nothing to prove (policy jobs[].partition)")
    missing = [j.name for j in parted if j.name not in inp.rendezvous]
    if FABRIC_HOST not in inp.points:
        raise EnforceError("cannot probe partitions: the target has no fabric point (where the partition's record is)")
    if missing:
        raise EnforceError(f"cannot probe partitions: no rendezvous port for job {', '.join(missing)}")
    addr = {m: a for j in jobs for m, a in zip(j.members, j.addresses, strict=False)}
    ports = {m: p for j in jobs for m, p in zip(j.members, j.ports, strict=False)}
    before = dict(inp.steps())
    probes: list[PartitionProbe] = []
    for job in parted:
        probes += _job_probes(job, [o for o in jobs if o.name != job.name], addr, ports, inp, timeout)
    members = [m for j in jobs for m in j.members]
    deadline = time.monotonic() + settle_s
    after = dict(inp.steps())
    while any(after.get(m, 0) <= before.get(m, 0) for m in members) and time.monotonic() < deadline:
        time.sleep(0.5)
        after = dict(inp.steps())
    return {
        "format": FORMAT, "target": target, "taken": datetime.now(UTC).isoformat(), "evidence": None,
        "jobs": [{"job": j.name, "partitioned": j.partitioned, "members": list(j.members), "ports": list(j.ports),
                  "steps_before": {m: before[m] for m in j.members if m in before},
                  "steps_after": {m: after[m] for m in j.members if m in after}} for j in jobs],
        "probes": [asdict(p) for p in probes],
    }


def record_partitions(store: EvidenceStore, doc: dict[str, Any]) -> dict[str, Any]:
    """Record the document as an observation in ``store``; the document carrying the record's id."""
    ev = store.append(RecordKind.OBSERVATION, "enforce.partition", f"target {doc['target']}", doc)
    return {**doc, "evidence": str(ev)}


__all__ = ["FORMAT", "PartitionProbe", "ProveInputs", "arp_probe", "prove_partitions", "record_partitions",
           "syn_probe"]
