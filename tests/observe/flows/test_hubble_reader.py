"""Hubble reader: real samples, folding events into conversations, identity, verdicts, hostile input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringfence.observe.flows.hubble import ENCRYPTED_REASON, HubbleReader
from ringfence.observe.flows.interface import FlowSourceError
from ringfence.observe.schema import FLOW_SCHEMA

SAMPLES = Path(__file__).resolve().parents[3].parent / "shared" / "samples" / "hubble"


def _rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = HubbleReader().read(path).flows.drop_columns(["first_seen", "last_seen"]).to_pylist()
    return rows


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.json")), ids=lambda p: p.name)
def test_every_sample_parses(path: Path) -> None:
    result = HubbleReader().read(path)
    assert result.flows.schema == FLOW_SCHEMA and result.warnings == ()
    assert 0 < result.flows.num_rows <= result.records
    assert HubbleReader().sniff(path.read_bytes()[:4096])


def test_dns_events_fold_into_one_conversation() -> None:
    rows = _rows(SAMPLES / "basic-sample-5-dns-flows.json")
    assert len(rows) == 1
    r = rows[0]
    assert (r["src"], r["sport"], r["dst"], r["dport"], r["proto"]) == ("10.156.2.2", 59102, "10.156.2.3", 53, 6)
    assert (r["packets"], r["packets_fwd"], r["bytes"]) == (5, 3, 0)  # events, not packets: no byte counters
    assert r["protection"] == "plaintext" and r["protocol"] == "dns"
    assert r["src_identity"].startswith("k8s:kube-system/node-local-dns-88zrp ")
    assert r["src_identity"].endswith("identity 1563") and "k8s-app=node-local-dns" in r["src_identity"]
    assert r["dst_identity"].startswith("k8s:kube-system/kube-dns-b4f5c58c7-vnx5s ")
    assert r["verdict"] == "FORWARDED"


def test_reply_orients_and_reserved_identity_stays_null() -> None:
    rows = _rows(SAMPLES / "basic-sample-10-flows.json")
    # First record: 10.0.2.16:15020 -> 10.0.2.1:42044 with reply:true, so the host is the initiator.
    first = next(r for r in rows if r["dport"] == 15020 and r["src"] == "10.0.2.1")
    assert first["sport"] == 42044 and first["packets"] == 2
    assert first["src_identity"] is None  # reserved:host is no workload identity
    assert first["dst_identity"].startswith("k8s:bookinfo/reviews-v1-545db77b95-s6jb8 app=reviews")
    assert first["protection"] == "unknown"


def test_icmp_without_ports() -> None:
    rows = _rows(SAMPLES / "basic-sample-400-icmpv4-flows.json")
    assert all(r["proto"] == 1 and r["sport"] is None and r["dport"] is None for r in rows)
    health = next(r for r in rows if r["dst"] == "10.244.0.160" and r["src"] == "10.244.0.148")
    assert health["packets"] == 8 and health["packets_fwd"] == 4


def test_http_is_plaintext() -> None:
    rows = _rows(SAMPLES / "basic-sample-5-http-flows.json")
    assert {r["protection"] for r in rows} == {"plaintext"} and {r["protocol"] for r in rows} == {"http"}


def _event(**over: object) -> dict[str, object]:
    flow: dict[str, object] = {
        "time": "2024-01-01T00:00:00.5Z",
        "verdict": "FORWARDED",
        "IP": {"source": "10.0.0.1", "destination": "10.0.0.2", "ipVersion": "IPv4"},
        "l4": {"UDP": {"source_port": 40000, "destination_port": 29500}},
        "source": {"ID": 7, "identity": 3001, "namespace": "train", "pod_name": "worker-0", "labels": ["k8s:app=w"]},
        "destination": {"identity": 3002, "namespace": "train", "pod_name": "worker-1", "labels": ["k8s:app=w"]},
        "Type": "L3_L4",
        "node_name": "n1",
    }
    flow.update(over)
    return flow


def test_drops_encryption_and_bare_objects(tmp_path: Path) -> None:
    lines = [
        json.dumps(_event(verdict="DROPPED", drop_reason_desc="POLICY_DENIED")),  # bare flow object
        json.dumps(
            {
                "flow": _event(
                    time="2024-01-01T00:00:01Z",
                    IP={"source": "10.0.0.2", "destination": "10.0.0.1", "encrypted": True},
                    l4={"UDP": {"source_port": 29500, "destination_port": 40000}},
                    is_reply=True,
                )
            }
        ),
        json.dumps(
            _event(
                IP={"source": "10.0.0.5", "destination": "8.8.8.8"},
                source={"identity": 2, "labels": ["reserved:world"]},
            )
        ),
    ]
    p = tmp_path / "h.json"
    p.write_text("\n".join(lines) + "\n")
    rows = {(r["src"], r["dst"]): r for r in _rows(p)}
    conv = rows[("10.0.0.1", "10.0.0.2")]
    assert conv["verdict"] == "DROPPED:POLICY_DENIED,FORWARDED"
    assert conv["protection"] == "encrypted" and conv["reason"] == ENCRYPTED_REASON
    assert conv["src_identity"] == "k8s:train/worker-0 app=w identity 3001"
    assert conv["packets"] == 2 and conv["packets_fwd"] == 1
    lone = rows[("10.0.0.5", "8.8.8.8")]
    assert lone["src_identity"] is None and lone["protection"] == "unknown"


def test_bad_events_are_skipped_with_their_line(tmp_path: Path) -> None:
    p = tmp_path / "h.json"
    good = json.dumps(_event())
    p.write_text(
        "\n".join(
            [
                good,
                "{not json",
                json.dumps(_event(IP={"source": "nope", "destination": "1.1.1.1"})),
                json.dumps({"flow": {"IP": 5}}),
                "[1]",
                good,
            ]
        )
        + "\n"
    )
    result = HubbleReader().read(p)
    assert result.flows.num_rows == 1 and result.flows["packets"][0].as_py() == 2
    text = "\n".join(result.warnings)
    for line in (2, 3, 4, 5):
        assert f":{line}" in text or f"line {line}" in text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=800), cut=st.integers(min_value=0, max_value=3000))
def test_hostile_input_never_crashes(tmp_path: Path, data: bytes, cut: int) -> None:
    p = tmp_path / "hostile.json"
    p.write_bytes((SAMPLES / "basic-sample-10-flows.json").read_bytes()[:cut] + data)
    try:
        result = HubbleReader().read(p)
    except FlowSourceError:
        return
    assert result.flows.schema == FLOW_SCHEMA
