"""Community ID v1 against the spec's own reference vectors (corelight/community-id-spec, baseline/)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringfence.observe.community_id import CommunityIdError, community_id, community_ids, icmp_ports
from ringfence.observe.schema import FLOW_SCHEMA

# (proto, saddr, daddr, sport, dport, id with seed 0, id with seed 1) — baseline_deflt.json / baseline_seed1.json.
# For ICMP the ports are the spec's port equivalents (type, counter-type or code).
VECTORS = [
    (58, "fe80::200:86ff:fe05:80da", "fe80::260:97ff:fe07:69ea", 135, 136,
     "1:dGHyGvjMfljg6Bppwm3bg0LO8TY=", "1:kHa1FhMYIT6Ym2Vm2AOtoOARDzY="),
    (58, "fe80::260:97ff:fe07:69ea", "fe80::200:86ff:fe05:80da", 136, 135,
     "1:dGHyGvjMfljg6Bppwm3bg0LO8TY=", "1:kHa1FhMYIT6Ym2Vm2AOtoOARDzY="),
    (58, "fe80::260:97ff:fe07:69ea", "fe80::200:86ff:fe05:80da", 135, 136,
     "1:zavyT/cezQr1fmImYCwYnMXbgck=", "1:2hSqmsDZ2kdcY9kbiUzOEBic0iM="),
    (58, "3ffe:501:1800:2345::2", "3ffe:507:0:1:200:86ff:fe05:80da", 3, 0,
     "1:2ObVBgIn28oZvibYZhZMBgh7WdQ=", "1:lVEtCZpYu84Xqaa++3lXFyuu2n4="),
    (58, "3ffe:507:0:1:200:86ff:fe05:80da", "3ffe:501:0:1001::2", 128, 129,
     "1:+TW+HtLHvV1xnGhV1lv7XoJrqQg=", "1:GfZxjAkDk2MkegpBYHV6tadtFXQ="),
    (58, "fe80::200:86ff:fe05:80da", "ff02::2", 133, 134,
     "1:hO+sN4H+MG5MY/8hIrXPqc4ZQz0=", "1:L7Ka0ZMYu+J3bL4ulW2PrqyXNo8="),
    (1, "192.168.0.89", "192.168.0.1", 8, 0, "1:X0snYXpgwiv9TZtqg64sgzUn6Dk=", "1:03g6IloqVBdcZlPyX8r0hgoE7kA="),
    (1, "192.168.0.1", "192.168.0.89", 0, 8, "1:X0snYXpgwiv9TZtqg64sgzUn6Dk=", "1:03g6IloqVBdcZlPyX8r0hgoE7kA="),
    (1, "10.0.0.1", "10.0.0.2", 11, 0, "1:YHxtAirCG//0OzkcVAukqKQN9xM=", "1:XjUibYHaafLQ3pxQeiMI8g25q20="),
    (6, "2001:470:e5bf:dead:4957:2174:e82c:4887", "2607:f8b0:400c:c03::1a", 63943, 25,
     "1:/qFaeAR+gFe1KYjMzVDsMv+wgU4=", "1:eJYTW6AOzFLlSUoESovMjnu7rMw="),
    (132, "192.168.170.8", "192.168.170.56", 7, 7, "1:MP2EtRCAUIZvTw6MxJHLV7N7JDs=", "1:5w3ZRjeKBzqT3zsaEECDGjUbYeg="),
    (132, "192.168.170.56", "192.168.170.8", 7, 7, "1:MP2EtRCAUIZvTw6MxJHLV7N7JDs=", "1:5w3ZRjeKBzqT3zsaEECDGjUbYeg="),
    (6, "128.232.110.120", "66.35.250.204", 34855, 80,
     "1:LQU9qZlK+B5F3KDmev6m5PMibrg=", "1:3V71V58M3Ksw/yuFALMcW0LAHvc="),
    (6, "66.35.250.204", "128.232.110.120", 80, 34855,
     "1:LQU9qZlK+B5F3KDmev6m5PMibrg=", "1:3V71V58M3Ksw/yuFALMcW0LAHvc="),
    (17, "192.168.1.52", "8.8.8.8", 54585, 53, "1:d/FP5EW3wiY1vCndhwleRRKHowQ=", "1:Q9We8WO3piVF8yEQBNJF4uiSVrI="),
    (17, "8.8.8.8", "192.168.1.52", 53, 54585, "1:d/FP5EW3wiY1vCndhwleRRKHowQ=", "1:Q9We8WO3piVF8yEQBNJF4uiSVrI="),
    (46, "10.1.12.1", "10.1.12.2", None, None, "1:KHlLkgoJW7ifUTyTSgyVfkFHzKw=", "1:rYir8gphR31noO9iDRQmF/BteEI="),
    (46, "10.1.12.2", "10.1.12.1", None, None, "1:KHlLkgoJW7ifUTyTSgyVfkFHzKw=", "1:rYir8gphR31noO9iDRQmF/BteEI="),
]  # fmt: skip


def _one_way(proto: int, sport: int | None, dport: int | None) -> bool:
    return proto in (1, 58) and sport is not None and dport is not None and icmp_ports(proto, sport, dport)[2]


@pytest.mark.parametrize("vector", VECTORS)
def test_reference_vectors_with_seed_0_and_1(vector: tuple[object, ...]) -> None:
    proto, saddr, daddr, sport, dport, seed0, seed1 = vector
    assert isinstance(proto, int) and isinstance(saddr, str) and isinstance(daddr, str)
    assert sport is None or isinstance(sport, int)
    assert dport is None or isinstance(dport, int)
    one_way = _one_way(proto, sport, dport)
    assert community_id(saddr, daddr, proto, sport, dport, one_way=one_way) == seed0
    assert community_id(saddr, daddr, proto, sport, dport, seed=1, one_way=one_way) == seed1


def test_icmp_port_equivalents_follow_zeek() -> None:
    assert icmp_ports(1, 8, 0) == (8, 0, False)  # echo request ↔ reply
    assert icmp_ports(1, 0, 0) == (0, 8, False)
    assert icmp_ports(1, 3, 1) == (3, 1, True)  # destination unreachable: one-way, the code is the port
    assert icmp_ports(58, 135, 0) == (135, 136, False)
    assert icmp_ports(58, 1, 4) == (1, 4, True)


def test_the_flow_table_gets_the_same_ids_and_null_where_the_spec_has_no_input() -> None:
    rows = [v for v in VECTORS if v[0] not in (1, 58)]
    names = ["src", "dst", "sport", "dport", "proto"]
    extra = [("10.0.0.1", "10.0.0.2", None, None, 1),  # ICMP: the table keeps no message type
             ("10.0.0.1", "10.0.0.2", None, 443, 6),  # TCP whose ports were not readable
             ("2e:b7:3f:39:95:c3", "3e:6f:f3:74:23:7c", None, None, 0)]  # MACsec: an L2 flow  # fmt: skip
    cols: dict[str, list[object]] = {n: [] for n in names}
    for proto, saddr, daddr, sport, dport, *_ in rows:
        for n, v in zip(names, (saddr, daddr, sport, dport, proto), strict=True):
            cols[n].append(v)
    for row in extra:
        for n, v in zip(names, row, strict=True):
            cols[n].append(v)
    schema = pa.schema([FLOW_SCHEMA.field(n) for n in names])
    table = pa.table(cols, schema=schema)
    got = community_ids(table).to_pylist()
    assert got[: len(rows)] == [v[5] for v in rows]
    assert got[len(rows) :] == [None, None, None]
    assert community_ids(table, seed=1).to_pylist()[: len(rows)] == [v[6] for v in rows]


def test_bad_inputs_are_named() -> None:
    with pytest.raises(CommunityIdError, match="not an IP address"):
        community_id("banana", "10.0.0.1", 6, 1, 2)
    with pytest.raises(CommunityIdError, match="different address families"):
        community_id("::1", "10.0.0.1", 6, 1, 2)
    with pytest.raises(CommunityIdError, match="seed"):
        community_id("10.0.0.2", "10.0.0.1", 6, 1, 2, seed=70000)
    with pytest.raises(CommunityIdError, match="needs both ports"):
        community_id("10.0.0.2", "10.0.0.1", 17, None, 2)


@given(st.ip_addresses(v=4), st.ip_addresses(v=4), st.integers(0, 65535), st.integers(0, 65535),
       st.sampled_from([6, 17, 132, 47, 50]))  # fmt: skip
def test_direction_never_changes_the_id(a: object, b: object, pa_: int, pb: int, proto: int) -> None:
    ported = proto in (6, 17, 132)
    sp, dp = (pa_, pb) if ported else (None, None)
    assert community_id(str(a), str(b), proto, sp, dp) == community_id(str(b), str(a), proto, dp, sp)
