"""The TLS sidecars' connection log: gate and client events with the SPIFFE identity proved; hostile input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringfence.observe.flows.events.interface import TLS_SCHEMA
from ringfence.observe.flows.events.registry import reader
from ringfence.observe.flows.events.tls_sidecar import TlsSidecarReader
from ringfence.observe.flows.interface import FlowSourceError

ID_A, ID_STORE = "spiffe://lab/job/train-a", "spiffe://lab/node/storage"


def _in(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"t": 1796125964.7, "dir": "in", "node": "storage", "service": "storage-http",
                            "peer": "10.77.1.10", "own_fingerprint": "ab", "peer_fingerprint": "cd",
                            "tls_version": "TLSv1.3", "peer_identity": ID_A, "method": "GET",
                            "path": "/datasets/train-a/shard-3", "result": "allowed", "reason": "job:train-a",
                            "response_bytes": 131100}
    base.update(over)
    return {k: v for k, v in base.items() if v is not ...}


def _out(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"t": 1796125964.69, "dir": "out", "node": "worker-0", "peer": "10.77.2.10:8080",
                            "expected_identity": ID_STORE, "own_fingerprint": "cd", "peer_identity": ID_STORE,
                            "method": "GET", "path": "/datasets/train-a/shard-3", "result": "allowed",
                            "response_bytes": 131100}
    base.update(over)
    return base


def _write(tmp_path: Path, *lines: Any) -> Path:
    p = tmp_path / "storage.events.jsonl"
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return p


def test_gate_and_client_events_with_the_identity_proved(tmp_path: Path) -> None:
    refused = _in(peer="10.77.1.50", peer_identity=..., method=..., path=..., response_bytes=..., result="refused",
                  reason="TLS handshake failed: no certificate")
    res = reader("tls").read(_write(tmp_path, _in(), _out(), refused))
    assert res.warnings == () and res.events.schema == TLS_SCHEMA
    gate, client, bad = res.events.to_pylist()
    assert (gate["direction"], gate["node"], gate["peer"], gate["peer_port"], gate["identity"]) == \
        ("in", "storage", "10.77.1.10", None, ID_A)
    assert (gate["path"], gate["bytes"], gate["result"]) == ("/datasets/train-a/shard-3", 131100, "allowed")
    assert (client["peer"], client["peer_port"], client["identity"], client["expected_identity"]) == \
        ("10.77.2.10", 8080, ID_STORE, ID_STORE)
    assert (bad["identity"], bad["method"], bad["result"]) == (None, None, "refused")


def test_bad_records_are_skipped_by_line_and_the_rest_kept(tmp_path: Path) -> None:
    path = _write(tmp_path, _in(), "{torn", _in(dir="sideways"), _in(peer="nobody"), _out(peer="10.77.2.10:99999"),
                  _in(result="fine"), _in(t="now"), _in(node="../etc"), _in(reason="r" * 5000),
                  _in(response_bytes=-3), _out())
    res = TlsSidecarReader().read(path)
    assert [r["line"] for r in res.events.to_pylist()] == [1, 11]
    text = "\n".join(res.warnings)
    for needle in (":2: skipped", "line 3: no usable direction", "lines 4, 5: no usable peer address",
                   "line 6: no usable result", ":7: skipped",
                   "line 8: no usable node", "line 9: no usable field", "line 10: no usable byte count"):
        assert needle in text, (needle, text)


def test_the_gate_logs_the_clients_port(tmp_path: Path) -> None:
    path = _write(tmp_path, _in(peer_port=41000), _in(peer_port=70000), _in(peer_port=-1), _in(peer_port="x"), _in())
    res = TlsSidecarReader().read(path)
    got = [(r["line"], r["peer_port"]) for r in res.events.to_pylist()]
    assert got[0] == (1, 41000) and got[-1] == (5, None), got
    assert (2, 70000) not in got and (3, -1) not in got
    assert "no usable peer address" in "\n".join(res.warnings)


def test_unreadable_file_is_our_error(tmp_path: Path) -> None:
    with pytest.raises(FlowSourceError, match="nothing.jsonl"):
        TlsSidecarReader().read(tmp_path / "nothing.jsonl")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_random_bytes_never_escape_as_foreign_exceptions(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(json.dumps(_in()).encode() + b"\n" + data)
    try:
        res = TlsSidecarReader().read(path)
    except FlowSourceError:
        return
    assert res.events.schema == TLS_SCHEMA
    assert res.events.num_rows >= 1
