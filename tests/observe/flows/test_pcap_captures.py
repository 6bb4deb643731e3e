"""The pcap reader on tcpdump's own regression captures, checked against tcpdump's and tshark's decodes."""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
from collections import Counter
from functools import cache
from pathlib import Path

import pyarrow as pa
import pytest

from ringfence.observe.flows.interface import FlowSourceError, ReadResult
from ringfence.observe.flows.pcap import PcapReader
from ringfence.observe.schema import FLOW_SCHEMA

CAPTURES = Path(__file__).resolve().parents[3] / ".." / "shared" / "captures" / "tcpdump-tests"
ALL = sorted(p.name for p in CAPTURES.glob("*.pcap*")) if CAPTURES.is_dir() else []


def _decodes() -> dict[str, Path]:
    """Capture → tcpdump's decode of it: ``NAME.out``, or the one TESTLIST.excerpt names (``afs.pcap`` →
    ``rx.out``). Decodes made with ``-E`` (ESP decrypted with the secrets) are left out: we do not decrypt."""
    found = {n: (CAPTURES / n).with_suffix(".out") for n in ALL if (CAPTURES / n).with_suffix(".out").is_file()}
    listing = CAPTURES / "TESTLIST.excerpt"
    for line in listing.read_text().splitlines() if listing.is_file() else []:
        parts = line.split("\t")
        options = parts[3].split() if len(parts) > 3 else []
        if len(parts) >= 3 and parts[1] in ALL and (CAPTURES / parts[2]).is_file() and "-E" not in options:
            found.setdefault(parts[1], CAPTURES / parts[2])
    return found


DECODES = _decodes()
WITH_OUT = sorted(DECODES)
TUNNEL_PORTS = {4789, 4790, 6081, 6635}

pytestmark = pytest.mark.skipif(not ALL, reason="shared tcpdump captures not present")

Endpoint = tuple[str, int | None]
Pair = frozenset[Endpoint] | tuple[Endpoint, Endpoint]


@cache
def read(name: str) -> ReadResult:
    """Each capture is read once per session."""
    return PcapReader().read(CAPTURES / name)


#: Valid capture files none of whose packets decodes (the reader refuses them rather than report nothing).
UNDECODABLE = {"ipv6_invalid_length.pcap": "1 × IPv6 header truncated or invalid version"}
#: Captures holding a tunnel we open that tcpdump does not (it prints the outer packet and stops): there our
#: flows are counted by their outer endpoints. various_gre.pcap: Cisco MetaData (GRE protocol type 0x8909).
OPENED_BEYOND_TCPDUMP = {"various_gre.pcap"}
_OUTER = re.compile(r"^\S+ (\S+)→(\S+)")


def rows(table: pa.Table) -> list[dict[str, object]]:
    """Rows as dicts, without the nanosecond timestamps (which Python datetimes cannot hold)."""
    return table.drop_columns(["first_seen", "last_seen"]).to_pylist()


def _endpoint(text: str) -> Endpoint | None:
    """``1.2.3.4.80``, ``1.2.3.4``, ``2001:db8::1.53``, ``::1`` → (canonical address, port or None)."""
    addr, port = text, None
    if ":" in text:
        if "." in text:
            addr, p = text.rsplit(".", 1)
            if not p.isdigit():  # not IP: e.g. an IPX address ``a8f87967.00:00:00:ff:ff:ff.7f55`` (hex socket)
                return None
            port = int(p)
    else:
        parts = text.split(".")
        if len(parts) == 5:
            addr, port = ".".join(parts[:4]), int(parts[4])
        elif len(parts) != 4:
            return None
    try:
        return ipaddress.ip_address(addr).compressed, port
    except ValueError:
        return None


def _pair(a: Endpoint, b: Endpoint) -> tuple[Endpoint, Endpoint]:
    return (a, b) if (a[0], a[1] or -1) <= (b[0], b[1] or -1) else (b, a)


_PACKET = re.compile(r"^\s*\d+\s+\S+ \S+ |^\s*\d+\s+\d\d:\d\d:\d\d\.\d+ ")
_IP_PAIR = re.compile(r"(?<!\S)([0-9a-fA-F:.]+) > ([0-9a-fA-F:.]+):")
_MAC_PAIR = re.compile(r"([0-9a-f]{2}(?::[0-9a-f]{2}){5}) > ([0-9a-f]{2}(?::[0-9a-f]{2}){5}), ethertype 802\.1AE")


#: Where tcpdump starts printing what a tunnel carries (UDP tunnels only count on their ports).
_GRE = re.compile(r"GREv[01],")
_UDP_TUNNEL = re.compile(r"VXLAN|Geneve|MPLS \(label")
_ERSPAN = re.compile(r"erspan type\d")


def _packet_pair(text: str, frags: _Fragments) -> tuple[Endpoint, Endpoint] | None:
    """The endpoint pair a packet counts for, following tunnels the way our reader does.

    The pair is the first one after the innermost tunnel header that tcpdump printed. Where a tunnel shows no
    inner pair: an ERSPAN mirror of a frame that is not IP makes no flow, but a cut-short mirror keeps the GRE
    flow (``[|erspan]``); GRE whose payload is not IP (keepalives, PPTP's LCP, unknown protocol types) keeps the
    GRE flow; a UDP tunnel carrying a frame that is not IP (ARP in VXLAN) makes no flow.
    """
    found = [
        (m.start(), a, b)
        for m in _IP_PAIR.finditer(text)
        for a, b in [(_endpoint(m.group(1)), _endpoint(m.group(2)))]
        if a and b
    ]
    if not found:
        return None  # ARP, or an IP header too broken to print
    _, a, b = found[0]
    udp_tunnel = bool({a[1], b[1]} & TUNNEL_PORTS) and _UDP_TUNNEL.search(text) is not None
    starts = [m.end() for rx in (_GRE, _UDP_TUNNEL, _ERSPAN) for m in rx.finditer(text)]
    if not starts or (not udp_tunnel and _GRE.search(text) is None):
        return frags.pair(text, a, b)
    inner = [(at, x, y) for at, x, y in found if at >= max(starts)]
    if inner:
        _, x, y = inner[0]
        return frags.pair(text[max(starts) :], x, y)  # the inner packet's own IP id and offset, not the tunnel's
    if _ERSPAN.search(text):
        return _pair(a, b) if "[|erspan]" in text else None
    return _pair(a, b) if _GRE.search(text) else None


_FRAG4 = re.compile(r"id (\d+), offset (\d+), flags \[([^\]]*)\]")
_FRAG6 = re.compile(r"frag \((0x[0-9a-f]+):(\d+)\|")
_LATER_NO_V = re.compile(r": ip-proto-(?:6|17|132)\s*$", re.M)


class _Fragments:
    """Later IP fragments counted in their datagram's pair, as our reader counts them.

    tcpdump prints a later fragment without ports. With ``-v`` it prints the IP id (IPv6: the fragment id) and
    offset, so a later fragment is matched to its first by (source, destination, id); without ``-v`` (``rx.out``)
    it prints ``ip-proto-17``, and is matched to the latest ported packet in the same direction.
    """

    def __init__(self) -> None:
        self.by_id: dict[tuple[str, str, str], tuple[Endpoint, Endpoint]] = {}
        self.last: dict[tuple[str, str], tuple[Endpoint, Endpoint]] = {}

    def pair(self, text: str, a: Endpoint, b: Endpoint) -> tuple[Endpoint, Endpoint]:
        m4, m6 = _FRAG4.search(text), _FRAG6.search(text)
        ident = m4.group(1) if m4 else m6.group(1) if m6 else None
        offset = int(m4.group(2)) if m4 else int(m6.group(2)) if m6 else None
        key = (a[0], b[0], ident or "")
        if a[1] is not None:
            self.last[(a[0], b[0])] = _pair(a, b)
            if ident is not None and offset == 0:
                self.by_id[key] = _pair(a, b)
            return _pair(a, b)
        if ident is not None and offset:
            return self.by_id.get(key, _pair(a, b))
        if ident is None and _LATER_NO_V.search(text):
            return self.last.get((a[0], b[0]), _pair(a, b))
        return _pair(a, b)


def tcpdump_counts(out: Path) -> Counter[tuple[Endpoint, Endpoint]]:
    """Packets per endpoint pair in tcpdump's decode (the inner pair for the tunnels we open; later fragments in
    their datagram's pair)."""
    packets: list[str] = []
    for line in out.read_text(errors="replace").splitlines():
        if _PACKET.match(line):
            packets.append(line)
        elif packets and not line.lstrip().startswith("0x"):
            packets[-1] += "\n" + line
    counts: Counter[tuple[Endpoint, Endpoint]] = Counter()
    frags = _Fragments()
    for text in packets:
        mac = _MAC_PAIR.search(text)
        if mac:
            counts[_pair((mac.group(1), None), (mac.group(2), None))] += 1
            continue
        pair = _packet_pair(text, frags)
        if pair is not None:
            counts[pair] += 1
    return counts


def our_counts(table: pa.Table, by_outer: bool = False) -> Counter[tuple[Endpoint, Endpoint]]:
    """Packets per endpoint pair of our flows; ``by_outer``: a tunnelled flow's by its tunnel's endpoints."""
    counts: Counter[tuple[Endpoint, Endpoint]] = Counter()
    for row in table.select(["src", "sport", "dst", "dport", "packets", "outer"]).to_pylist():
        outer = _OUTER.match(row["outer"] or "") if by_outer else None
        if outer:
            counts[_pair((outer.group(1), None), (outer.group(2), None))] += row["packets"]
            continue
        counts[_pair((row["src"], row["sport"]), (row["dst"], row["dport"]))] += row["packets"]
    return counts


@pytest.mark.parametrize("name", ALL)
def test_every_capture_reads_into_the_flow_schema(name: str) -> None:
    if name in UNDECODABLE:
        with pytest.raises(FlowSourceError) as caught:
            read(name)
        assert caught.value.message.startswith(f"{CAPTURES / name}@24")
        assert "none of its 1 packet(s) could be decoded into a flow" in caught.value.message
        assert UNDECODABLE[name] in caught.value.message
        return
    try:
        result = read(name)
    except FlowSourceError as exc:  # allowed only for captures that are corrupt as files
        assert str(CAPTURES / name) in exc.message
        pytest.fail(f"{name} is a valid capture file but was refused: {exc.message}")
    assert result.flows.schema == FLOW_SCHEMA
    assert all(s == f"pcap:{name}" for s in result.flows.column("source").to_pylist())
    packets = sum(result.flows.column("packets").to_pylist())
    assert packets <= result.records
    fwd = result.flows.column("packets_fwd").to_pylist()
    assert all(0 <= f <= p for f, p in zip(fwd, result.flows.column("packets").to_pylist(), strict=True))


@pytest.mark.parametrize("name", WITH_OUT)
def test_packet_counts_agree_with_tcpdump(name: str) -> None:
    expected = tcpdump_counts(DECODES[name])
    if name in UNDECODABLE:
        assert not expected  # tcpdump could not print an endpoint pair either
        return
    assert our_counts(read(name).flows, by_outer=name in OPENED_BEYOND_TCPDUMP) == expected


def test_counts_cover_the_interesting_encapsulations() -> None:
    # The comparison above must really have exercised these: guard against a parser that finds nothing.
    for name, pairs in (("vxlan.pcap", 1), ("mpls-over-udp.pcap", 1), ("ipoib.pcap", 7), ("ssh.pcap", 1)):
        assert len(tcpdump_counts((CAPTURES / name).with_suffix(".out"))) == pairs, name


def test_nanosecond_timestamps_are_exact() -> None:
    flows = read("tcp-handshake-nano.pcap").flows
    assert flows.num_rows == 1
    first = flows.column("first_seen").cast(pa.int64())[0].as_py()
    last = flows.column("last_seen").cast(pa.int64())[0].as_py()
    assert first % 10**9 == 924505488 and last % 10**9 == 52115157  # 17:16:09.924505488 … 17:16:10.052115157
    assert last - first == 127609669


def test_handshake_orientation_and_counters() -> None:
    (row,) = rows(read("tcp-handshake-nano.pcap").flows)
    assert (row["src"], row["sport"], row["dst"], row["dport"], row["proto"]) == (
        "131.155.215.69", 46656, "137.116.81.94", 80, 6)  # fmt: skip
    assert (row["packets"], row["packets_fwd"]) == (3, 2)
    assert row["payload_bytes"] == 0


def test_overlays_report_the_inner_flow_and_describe_the_outer() -> None:
    (vx,) = rows(read("vxlan.pcap").flows)
    assert (vx["src"], vx["dst"], vx["proto"], vx["sport"]) == ("192.168.203.3", "192.168.203.5", 1, None)
    assert vx["outer"] == "vxlan 192.168.203.1→192.168.202.1 vni 100"
    (mp,) = rows(read("mpls-over-udp.pcap").flows)
    assert mp["outer"] == "mpls-over-udp 10.100.12.170→10.100.13.157 label 21"
    geneve = rows(read("geneve.pcap").flows)
    assert {r["outer"].split(" vni ")[0].split(" ")[0] for r in geneve} == {"geneve"}
    assert sum(r["packets"] for r in geneve if r["proto"] == 6) == 33


def test_macsec_is_an_l2_flow_between_mac_addresses() -> None:
    (row,) = rows(read("macsec-encrypted.pcap").flows)
    assert (row["src"], row["dst"], row["proto"], row["sport"]) == ("2e:b7:3f:39:95:c3", "3e:6f:f3:74:23:7c", 0, None)
    assert row["bytes"] == 116  # frame after the MAC addresses: SecTAG, payload, ICV


def test_esp_has_no_ports_and_vlan_is_recorded() -> None:
    (esp,) = rows(read("02-sunrise-sunset-esp.pcap").flows)
    assert (esp["proto"], esp["sport"], esp["dport"], esp["packets"]) == (50, None, None, 8)
    (http,) = rows(read("ipv4_tcp_http_xml.pcap").flows)
    assert http["vlan"] is not None and http["dport"] == 80


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("ipv6hdr-heapoverflow.pcap", "counted in flows without ports (first at byte 24)"),
        ("802.1ad_QinQ.pcap", "2 frame(s) that are not IP made no flow (ethertype 0x0806×2)"),
    ],
)
def test_malformed_packets_are_named_in_warnings(name: str, words: str) -> None:
    warnings = read(name).warnings
    assert any(words in w and w.startswith(name) for w in warnings), warnings


@pytest.mark.parametrize("name", ["heapoverflow-tcp_print.pcap", "tcp_header_heapoverflow.pcap",
                                  "udp-length-heapoverflow.pcap", "esp_truncated.pcap"])  # fmt: skip
def test_hostile_lengths_do_not_read_past_the_capture(name: str) -> None:
    (row,) = rows(read(name).flows)
    assert row["payload_bytes"] >= 0
    assert row["packets"] == 1


def test_empty_pcapng_has_no_flows_and_no_warning() -> None:
    result = read("empty.pcapng")
    assert result.flows.num_rows == 0 and result.records == 0 and not result.warnings


_CONV = re.compile(r"^(\S+)\s+<->\s+(\S+)\s+\d+\s+\S+\s+\w+\s+\d+\s+\S+\s+\w+\s+(\d+)\s")


def tshark_counts(path: Path) -> Counter[tuple[Endpoint, Endpoint]]:
    """Total frames per TCP and UDP conversation from ``tshark -q -z conv,tcp -z conv,udp``."""
    out = subprocess.run(
        ["tshark", "-q", "-n", "-r", str(path), "-z", "conv,tcp", "-z", "conv,udp"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    counts: Counter[tuple[Endpoint, Endpoint]] = Counter()
    for line in out.splitlines():
        m = _CONV.match(line)
        if not m:
            continue
        ends = []
        for text in m.group(1, 2):
            addr, port = text.rsplit(":", 1)
            ends.append((ipaddress.ip_address(addr).compressed, int(port)))
        if {ends[0][1], ends[1][1]} & TUNNEL_PORTS:
            continue  # the tunnel itself: we report what is inside it
        counts[_pair(ends[0], ends[1])] += int(m.group(3))
    return counts


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
@pytest.mark.parametrize("name", ["geneve.pcap", "ssh.pcap", "quic_handshake.pcap", "mptcp-v1.pcap", "ntp.pcap"])
def test_tcp_and_udp_counts_agree_with_tshark(name: str) -> None:
    expected = tshark_counts(CAPTURES / name)
    assert expected, "tshark found no conversations: the parser is out of date"
    ours = Counter({k: v for k, v in our_counts(read(name).flows).items() if k[0][1] is not None})
    assert ours == expected
