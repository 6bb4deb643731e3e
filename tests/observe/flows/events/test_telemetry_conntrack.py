"""conntrack -E reader: real event lines, the original direction, hostile input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringfence.observe.flows.events.conntrack import ConntrackReader
from ringfence.observe.flows.events.interface import CONN_SCHEMA
from ringfence.observe.flows.interface import FlowSourceError

# Lines as conntrack 1.4.7 printed them here for `-E -o timestamp,id -e NEW,DESTROY`.
NEW = ("[1796125964.671445]\t    [NEW] tcp      6 120 SYN_SENT src=10.99.0.1 dst=10.99.0.2 sport=36672 dport=8080 "
       "[UNREPLIED] src=10.99.0.2 dst=10.99.0.1 sport=8080 dport=36672 id=4290469242")
DESTROY = ("[1796125965.100000]\t [DESTROY] tcp      6 src=10.99.0.1 dst=10.99.0.2 sport=36672 dport=8080 "
           "src=10.99.0.2 dst=10.99.0.1 sport=8080 dport=36672 [ASSURED] id=4290469242")
ICMP = ("[1796125965.2]\t    [NEW] icmp     1 30 src=10.99.0.1 dst=10.99.0.2 type=8 code=0 id=17 [UNREPLIED] "
        "src=10.99.0.2 dst=10.99.0.1 type=0 code=0 id=17 id=99")


def test_new_destroy_and_icmp(tmp_path: Path) -> None:
    path = tmp_path / "ct.log"
    path.write_text("\n".join([NEW, DESTROY, ICMP,
                               "conntrack v1.4.7 (conntrack-tools): 3 flow events have been shown.", ""]))
    res = ConntrackReader().read(path, node="storage")
    assert res.events.schema == CONN_SCHEMA and res.warnings == ()
    rows = res.events.to_pylist()
    assert [(r["event"], r["src"], r["sport"], r["dport"], r["proto"], r["ct_id"]) for r in rows] == [
        ("NEW", "10.99.0.1", 36672, 8080, 6, 4290469242), ("DESTROY", "10.99.0.1", 36672, 8080, 6, 4290469242),
        ("NEW", "10.99.0.1", None, None, 1, 99)]
    assert rows[0]["node"] == "storage"
    assert rows[0]["time"].timestamp() == pytest.approx(1796125964.671445)


def test_bad_lines_are_named_and_good_ones_kept(tmp_path: Path) -> None:
    path = tmp_path / "ct.log"
    path.write_bytes("\n".join([NEW, "garbage", NEW.replace("10.99.0.1 dst", "10.99.0.999 dst"),
                                NEW.replace("sport=36672", "sport=99999"), NEW]).encode() + b"\n\xff\xfe\n" + b"x" * 10)
    res = ConntrackReader().read(path)
    assert [r["line"] for r in res.events.to_pylist()] == [1, 5]
    text = "\n".join(res.warnings)
    assert "line 2" in text and "lines 3, 4" in text and "line 6: not UTF-8" in text and "line 7" in text


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FlowSourceError):
        ConntrackReader().read(tmp_path / "nope.log")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_random_tails_keep_the_valid_event(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.log"
    path.write_bytes(NEW.encode() + b"\n" + data)
    try:
        res = ConntrackReader().read(path)
    except FlowSourceError:
        return
    assert res.events.num_rows >= 1 and res.events.to_pylist()[0]["ct_id"] == 4290469242
