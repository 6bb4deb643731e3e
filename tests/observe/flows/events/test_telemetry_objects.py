"""The object server's access log: requests with their 5-tuple, identity and bytes; hostile input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringfence.observe.flows._common import BLOCK_SIZE, MAX_LINE_BYTES
from ringfence.observe.flows.events.interface import OBJECT_SCHEMA
from ringfence.observe.flows.events.objects import ObjectLogReader
from ringfence.observe.flows.events.registry import reader
from ringfence.observe.flows.interface import FlowSourceError


def _rec(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"time": 1796125964.671315, "peer": "10.77.1.10", "peer_port": 41000,
                            "local": "10.77.2.10", "local_port": 8080, "identity": "-", "method": "GET",
                            "path": "/datasets/train-a/shard-3", "job": "train-a", "result": "served",
                            "bytes": 131072}
    base.update(over)
    return {k: v for k, v in base.items() if v is not ...}


def _write(tmp_path: Path, *lines: Any) -> Path:
    p = tmp_path / "objects.json"
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return p


def test_served_and_refused_requests_with_their_tuple(tmp_path: Path) -> None:
    path = _write(tmp_path, _rec(), _rec(peer="10.77.1.50", peer_port=50000, result="refused", bytes=0,
                                         identity="spiffe://lab/node/aux"),
                  # written before the server logged ports and its own address: still a request
                  _rec(peer_port=..., local=..., local_port=..., method="PUT", path="/checkpoints/train-a/s1"))
    res = reader("objects").read(path, node="storage")
    assert res.warnings == () and res.records == 3 and res.events.schema == OBJECT_SCHEMA
    a, b, c = res.events.to_pylist()
    assert (a["peer"], a["peer_port"], a["local"], a["local_port"], a["identity"]) == \
        ("10.77.1.10", 41000, "10.77.2.10", 8080, None)  # "-": no certificate, not an identity
    assert (a["result"], a["bytes"], a["node"], a["line"], a["time"].year) == ("served", 131072, "storage", 1, 2026)
    assert (b["result"], b["identity"], b["peer"]) == ("refused", "spiffe://lab/node/aux", "10.77.1.50")
    assert (c["peer_port"], c["local"], c["method"]) == (None, None, "PUT")


def test_bad_records_are_skipped_by_line_and_the_rest_kept(tmp_path: Path) -> None:
    path = _write(tmp_path, _rec(), "not json", _rec(peer="10.77.1.999"), _rec(result="maybe"),
                  _rec(peer_port=70000), _rec(method="get me"), _rec(path="datasets/x"), _rec(time=-5),
                  _rec(time="soon"), _rec(bytes=-1), _rec(identity="x" * 5000), "[1]", _rec(local="nowhere"),
                  _rec(path=...), _rec())
    res = ObjectLogReader().read(path)
    assert [r["line"] for r in res.events.to_pylist()] == [1, 15]
    text = "\n".join(res.warnings)
    for needle in (":2: skipped", "line 3: no usable peer address", "line 4: no usable result",
                   "line 5: no usable ports", "line 6: no usable method", "lines 7, 14: no usable path",
                   "line 8: no usable time",
                   ":9: skipped", "line 10: no usable byte count", "line 11: no usable identity", ":12: skipped",
                   "line 13: no usable local address"):
        assert needle in text, (needle, text)


def test_an_overlong_line_is_skipped_unread_and_named(tmp_path: Path) -> None:
    path = tmp_path / "objects.json"
    # past a block and the line bound: read through without holding it, named
    path.write_text(json.dumps(_rec()) + "\n" + "{" + "x" * (BLOCK_SIZE + MAX_LINE_BYTES) + "\n" + json.dumps(_rec())
                    + "\n")
    res = ObjectLogReader().read(path)
    assert [r["line"] for r in res.events.to_pylist()] == [1, 3]
    assert any(":2: longer than" in w for w in res.warnings)


def test_unreadable_file_is_our_error(tmp_path: Path) -> None:
    with pytest.raises(FlowSourceError, match="missing.json"):
        ObjectLogReader().read(tmp_path / "missing.json")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_random_bytes_never_escape_as_foreign_exceptions(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.json"
    path.write_bytes(json.dumps(_rec()).encode() + b"\n" + data)
    try:
        res = ObjectLogReader().read(path)
    except FlowSourceError:
        return
    assert res.events.schema == OBJECT_SCHEMA
    assert res.events.num_rows >= 1
