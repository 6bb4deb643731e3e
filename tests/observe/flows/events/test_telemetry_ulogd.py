"""ulogd JSON reader: the real sample, ringfence's prefixes and labels, hostile input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringfence.observe.flows.events.interface import DECISION_SCHEMA
from ringfence.observe.flows.events.ulogd import UlogdReader
from ringfence.observe.flows.interface import FlowSourceError

SAMPLES = Path(__file__).resolve().parents[4].parent / "shared" / "samples" / "ulogd"


def _rec(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "timestamp": "2026-12-01T11:52:44.671315", "dvc": "worker-0", "oob.prefix": "storage-read",
        "oob.time.sec": 1796125964, "oob.time.usec": 671315, "raw.label": 1, "ip.protocol": 6,
        "src_port": 36672, "dest_port": 8080, "src_ip": "10.77.1.10", "dest_ip": "10.77.2.10",
    }
    base.update(over)
    return base


def _write(tmp_path: Path, *lines: Any) -> Path:
    p = tmp_path / "ulogd.json"
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return p


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="../shared/samples not present")
def test_spr_sample_is_a_blocked_icmpv6_decision() -> None:
    res = UlogdReader().read(SAMPLES / "spr_packet_logs_readme_ulogd.json")
    [row] = res.events.to_pylist()
    assert res.warnings == ()
    assert (row["src"], row["dst"], row["proto"], row["sport"]) == ("fe80::dad7:75ff:fef2:f959", "ff02::1", 58, None)
    assert (row["rule"], row["verdict"], row["node"]) == ("DRP:INP", "drop", "spr")
    assert row["time"].timestamp() == pytest.approx(1658754118.947620)


def test_named_accept_default_drop_containment_and_audit(tmp_path: Path) -> None:
    path = _write(tmp_path, _rec(),
                  _rec(**{"oob.prefix": "rf-drop worker-0/output ", "raw.label": 0, "dest_port": 9000}),
                  _rec(**{"oob.prefix": "rf-contain fabric/filter ", "raw.label": 0, "dvc": "Netfilter"}),
                  _rec(**{"oob.prefix": "rf-audit fabric/filter ", "raw.label": 2}))
    res = UlogdReader().read(path, node="fabric")
    assert res.events.schema == DECISION_SCHEMA
    rows = res.events.to_pylist()
    assert [(r["rule"], r["verdict"], r["node"]) for r in rows] == [
        ("storage-read", "accept", "worker-0"), (None, "drop", "worker-0"), ("containment", "drop", "fabric"),
        (None, "audit", "worker-0")]
    assert rows[0]["time"].timestamp() == pytest.approx(1796125964.671315)
    assert res.records == 4 and res.warnings == ()


def test_bad_records_are_skipped_by_line_and_the_rest_kept(tmp_path: Path) -> None:
    path = _write(tmp_path, _rec(), "not json", _rec(src_ip="10.77.1.999"), _rec(**{"raw.label": 7}),
                  _rec(dest_port=70000), {"oob.prefix": 5}, "[1, 2]", _rec(**{"ip.protocol": 300}), _rec())
    res = UlogdReader().read(path)
    assert [r["line"] for r in res.events.to_pylist()] == [1, 9]
    text = "\n".join(res.warnings)
    for needle in (":2: skipped", "line 3: no usable addresses", "line 4: no usable verdict", "line 5: no usable ports",
                   ":6: skipped", ":7: skipped", "line 8: no usable IP protocol"):
        assert needle in text


def test_unreadable_file_is_our_error(tmp_path: Path) -> None:
    with pytest.raises(FlowSourceError, match="missing.json"):
        UlogdReader().read(tmp_path / "missing.json")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_random_bytes_never_escape_as_foreign_exceptions(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.json"
    path.write_bytes(json.dumps(_rec()).encode() + b"\n" + data)
    try:
        res = UlogdReader().read(path)
    except FlowSourceError:
        return
    assert res.events.schema == DECISION_SCHEMA
    assert res.events.num_rows >= 1  # the valid record before the bad bytes is kept
