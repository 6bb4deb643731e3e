"""The confidentiality judgement from facts: per-class bytes, covered vs exempt, scope, the Facts.keys shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ringfence.controls.interface import Verdict
from ringfence.observe.schema import CLASSIFIED_SCHEMA
from ringfence.policy import load_policy, parse_policy
from ringfence.secure.verify import class_breakdown, coverage, judge, scope_check
from ringfence.secure.verify_types import FailClosedResult, RotationResult

REPO = Path(__file__).resolve().parents[2]
POLICY_TEXT = (REPO / "examples" / "lab-policy.yaml").read_text()
NOW = datetime(2026, 11, 1, tzinfo=UTC)


def _flows(rows: list[dict[str, Any]]) -> pa.Table:
    base = {"sport": 40000, "dport": 8080, "proto": 6, "packets": 10, "bytes": 1000, "source": "test", "reason": "test"}
    full = [{**base, **r} for r in rows]
    cols = {f.name: [r.get(f.name) for r in full] for f in CLASSIFIED_SCHEMA}
    return pa.Table.from_pydict(cols, schema=CLASSIFIED_SCHEMA)


def _row(
    cls: str,
    protection: str,
    payload: int,
    protocol: str | None = "tls1.3",
    src: str = "10.77.1.10",
    dst: str = "10.77.2.10",
) -> dict[str, Any]:
    return {
        "src": src,
        "dst": dst,
        "class": cls,
        "protection": protection,
        "payload_bytes": payload,
        "protocol": protocol,
    }


ALL_ENCRYPTED = [
    _row("storage", "encrypted", 5000),
    _row("storage", "handshake-only", 800),
    _row("collective", "encrypted", 90000, "wireguard", dst="10.77.1.11"),
    _row("management", "encrypted", 300, dst="10.77.3.10"),
    _row("management", "encrypted", 300, "ssh", dst="10.77.3.10"),
    _row("replication", "encrypted", 7000, src="10.77.2.10", dst="10.77.9.10"),
]
ENABLED = {"storage": "tls", "management": "tls", "replication": "tls", "collective": "wireguard"}


def _policy(exceptions: str = "") -> Any:
    text = POLICY_TEXT.replace("exceptions: []", exceptions or "exceptions: []")
    return parse_policy(text, "test-policy")


def _by_class(items: Any) -> dict[str, Any]:
    return {i.traffic_class: i for i in items}


def test_zero_plaintext_passes_and_handshakes_are_excepted() -> None:
    out = _by_class(class_breakdown(_flows(ALL_ENCRYPTED), _policy()))
    assert out["storage"].verdict is Verdict.PASS
    assert out["storage"].payload["handshake-only"] == 800 and "excepted" in out["storage"].reason
    assert all(out[c].verdict is Verdict.PASS for c in ("collective", "management", "replication"))


def test_one_plaintext_byte_fails_the_class_and_names_the_flow() -> None:
    rows = [*ALL_ENCRYPTED, _row("storage", "plaintext", 1, "http", src="10.77.1.11")]
    out = _by_class(class_breakdown(_flows(rows), _policy()))
    assert out["storage"].verdict is Verdict.FAIL
    assert out["storage"].payload["plaintext"] == 1
    assert out["storage"].plaintext_flows and "10.77.1.11:40000 → 10.77.2.10:8080" in out["storage"].plaintext_flows[0]
    assert out["collective"].verdict is Verdict.PASS


def test_a_class_not_seen_is_unknown_never_pass() -> None:
    rows = [r for r in ALL_ENCRYPTED if r["class"] != "replication"]
    out = _by_class(class_breakdown(_flows(rows), _policy()))
    assert out["replication"].verdict is Verdict.UNKNOWN
    only_unknown = [_row("storage", "unknown", 900, None)]
    assert _by_class(class_breakdown(_flows(only_unknown), _policy()))["storage"].verdict is Verdict.UNKNOWN


def test_coverage_covered_exempt_expired_uncovered() -> None:
    pol = _policy("""exceptions:
  - {id: exc-coll, control: encryption_keys, subject: "class:collective", owner: "ml-platform-security@lab",
     reason: "isolated fabric", expires: 2026-12-31, trusted_boundary: "rack 4 switch",
     compensating: ["physical access control"]}
  - {id: exc-repl, control: encryption_keys, subject: "class:replication", owner: "dr@lab",
     reason: "legacy", expires: 2026-01-01, trusted_boundary: "dark fibre", compensating: ["mtls later"]}""")
    cov = _by_class(coverage(pol, {"storage": "tls"}, now=NOW))
    assert cov["storage"].status == "covered" and cov["storage"].verdict is Verdict.PASS
    assert cov["collective"].status == "exempt" and cov["collective"].verdict is Verdict.EXEMPT
    assert cov["collective"].exception is not None and cov["collective"].exception["owner"]
    assert cov["replication"].verdict is Verdict.FAIL and "expired" in cov["replication"].reason
    assert cov["management"].status == "uncovered" and cov["management"].verdict is Verdict.FAIL


def test_coverage_refuses_a_layer_the_policy_does_not_accept_or_the_wire_does_not_show() -> None:
    pol = _policy()
    cov = _by_class(coverage(pol, {"storage": "wireguard"}, now=NOW))
    assert cov["storage"].verdict is Verdict.FAIL and "not a layer the policy accepts" in cov["storage"].reason
    seen_http = class_breakdown(_flows([_row("storage", "plaintext", 50, "http")]), pol)
    cov = _by_class(coverage(pol, {"storage": "tls"}, now=NOW, breakdown=seen_http))
    assert cov["storage"].verdict is Verdict.FAIL and cov["storage"].seen_on_wire is False


def test_scope_nccl_tls_does_not_cover_rdma_and_macsec_not_a_routed_path() -> None:
    text = (
        POLICY_TEXT.replace("backend: gloo", "backend: nccl-ib")
        .replace("layers: [wireguard, macsec, ipsec, ringfence-transport]", "layers: []")
        .replace("storage: {protection: required, layers: [tls]}", "storage: {protection: required, layers: []}")
    )
    pol = parse_policy(text, "rdma-policy")
    checks = {s.path: s for s in scope_check(pol, {**ENABLED, "collective": "nccl-tls", "storage": "macsec"})}
    assert checks["train-a-collective"].verdict is Verdict.FAIL and checks["train-a-collective"].transport == "rdma"
    assert "not rdma" in checks["train-a-collective"].reason
    assert checks["train-a-storage"].verdict is Verdict.FAIL and "routed" in checks["train-a-storage"].reason
    assert checks["checkpoint-replication"].verdict is Verdict.PASS
    assert "external" in checks["checkpoint-replication"].boundary
    ok = {s.path: s for s in scope_check(_policy(), ENABLED)}
    assert all(s.verdict is Verdict.PASS for s in ok.values())
    # The admin path is sshd: SSH covers it itself; the management class's TLS layer is not claimed for it.
    assert ok["admin-ssh"].layer == "ssh" and "SSH encrypts" in ok["admin-ssh"].reason
    assert checks["admin-ssh"].layer == "ssh"


def _rotation(ok: bool) -> RotationResult:
    return RotationResult(
        "wireguard",
        ("worker-0", "worker-1"),
        ok,
        0.9,
        0.5,
        0.9,
        0,
        ok,
        ok,
        Verdict.PASS if ok else Verdict.FAIL,
        "drill",
        at=NOW.isoformat(),
    )


def test_report_verdict_and_facts_keys_shape() -> None:
    pol = load_policy(REPO / "examples" / "lab-policy.yaml")
    fc = FailClosedResult("wireguard", "collective", "wrong key", True, "no handshake", 0, 1, True, Verdict.PASS, "d")
    rep = judge(
        _flows(ALL_ENCRYPTED),
        pol,
        ENABLED,
        now=NOW,
        rotation=[_rotation(True)],
        fail_closed=[fc],
        before=_flows([_row("storage", "plaintext", 100, "http")]),
    )
    assert rep.verdict is Verdict.PASS
    keys = rep.facts_keys()
    json.dumps(keys)  # JSON-ready all the way down
    assert keys["classes"]["storage"]["payload"]["encrypted"] == 5000
    assert keys["before"]["storage"]["verdict"] == "fail"
    assert keys["rotations"] == [
        {"layer": "wireguard", "at": NOW.isoformat(), "ok": True, "dropped_job": False, "detail": "drill"}
    ]
    assert keys["mismatch"][0]["failed_closed"] is True
    assert rep.to_facts().keys == keys
    bad = judge(_flows(ALL_ENCRYPTED), pol, ENABLED, now=NOW, rotation=[_rotation(False)])
    assert bad.verdict is Verdict.FAIL and bad.facts_keys()["rotations"][0]["dropped_job"] is True


def test_breakdown_needs_classified_flows() -> None:
    from ringfence.observe.schema import empty_flows

    with pytest.raises(ValueError, match="classified"):
        class_breakdown(empty_flows(), _policy())
