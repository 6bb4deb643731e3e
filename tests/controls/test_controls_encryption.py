"""encryption_keys: plaintext on required classes, exceptions (active / expired), optional classes,
unknown payloads, layers, and key facts."""

from __future__ import annotations

from typing import Any

import pytest
from ctl_kit import NOW, by_control, facts_for, verdicts

from flow_kit import EXT, JUMP, MGMT, STORAGE, W0, W1, lab_policy, policy_variant
from ringfence.controls.encryption_keys import evaluate
from ringfence.controls.interface import Facts, Verdict

POLICY = lab_policy()


def _exception(expires: str, subject: str = "class:collective") -> Any:
    def change(doc: dict[str, Any]) -> None:
        doc["exceptions"] = [
            {
                "id": "exc-gradients",
                "control": "encryption_keys",
                "subject": subject,
                "owner": "ml-platform-security@lab",
                "reason": "canary measurement pending",
                "expires": expires,
                "review_trigger": "canary benchmark result",
            }
        ]

    return policy_variant(change)


def test_plaintext_on_required_class_fails_naming_class_and_bytes() -> None:
    f = evaluate(POLICY, facts_for(POLICY, [{"src": W0, "dst": STORAGE, "dport": 8080, "bytes": 4096}]))
    fail = next(x for x in f if x.verdict is Verdict.FAIL)
    assert fail.subject == "flow 10.77.1.10:40000 [worker-0] → 10.77.2.10:8080 [storage · storage-http] (storage)"
    assert "plaintext payload on class storage" in fail.message and "4.1 kB" in fail.message


def test_encrypted_flows_pass_per_class() -> None:
    rows = [
        {"src": W0, "dst": STORAGE, "dport": 8080, "protection": "encrypted", "protocol": "tls1.3"},
        {"src": JUMP, "dst": MGMT, "dport": 22, "protection": "encrypted", "protocol": "ssh"},
        {"src": STORAGE, "dst": EXT, "dport": 9000, "protection": "handshake-only", "protocol": "tls1.3"},
    ]
    f = evaluate(POLICY, facts_for(POLICY, rows))
    assert {(x.verdict.value, x.subject) for x in f if x.verdict is not Verdict.UNKNOWN} == {
        ("pass", "class storage"),
        ("pass", "class management"),
        ("pass", "class replication"),
        ("pass", "plaintext on protected classes"),
    }
    # The pass text claims what was inspected, no more: a payload sample, not every byte.
    storage = next(x for x in f if x.subject == "class storage")
    assert "payload sample" in storage.message and "carried no plaintext" not in storage.message
    # collective requires protection and was not seen at all: unproven, never skipped.
    assert any(x.verdict is Verdict.UNKNOWN and x.subject == "class collective" for x in f)


def test_wrong_layer_fails() -> None:
    row = {"src": W0, "dst": W1, "dport": 29500, "protection": "encrypted", "protocol": "tls1.3"}
    f = evaluate(POLICY, facts_for(POLICY, [row]))
    assert any(x.verdict is Verdict.FAIL and "requires wireguard" in x.message for x in f)


def test_unknown_protection_is_unknown() -> None:
    row = {"src": W0, "dst": STORAGE, "dport": 8080, "protection": "unknown", "reason": "payload not captured"}
    f = evaluate(POLICY, facts_for(POLICY, [row]))
    flow = [x for x in f if x.subject.startswith("flow ")]
    assert [x.verdict for x in flow] == [Verdict.UNKNOWN]
    assert "cannot prove confidentiality" in flow[0].message


def test_active_exception_exempts_naming_owner_and_expiry() -> None:
    policy = _exception("2027-01-31")
    f = evaluate(policy, facts_for(policy, [{"src": W0, "dst": W1, "dport": 29500}]))
    exempt = [x for x in f if x.subject.startswith("flow ")]
    assert [x.verdict for x in exempt] == [Verdict.EXEMPT]
    assert "ml-platform-security@lab" in exempt[0].message and "2027-01-31" in exempt[0].message


def test_expired_exception_fails() -> None:
    policy = _exception("2026-11-01")
    f = evaluate(policy, facts_for(policy, [{"src": W0, "dst": W1, "dport": 29500}]))
    flow = [x for x in f if x.subject.startswith("flow ")]
    assert [x.verdict for x in flow] == [Verdict.FAIL]
    assert "EXPIRED 2026-11-01" in flow[0].message


@pytest.mark.parametrize("subject", ["flow:train-a-collective", "node:worker-1", "job:train-a"])
def test_exception_subjects(subject: str) -> None:
    policy = _exception("2027-01-31", subject)
    f = evaluate(policy, facts_for(policy, [{"src": W0, "dst": W1, "dport": 29500}]))
    assert [x.verdict for x in f if x.subject.startswith("flow ")] == [Verdict.EXEMPT]


def _optional(owner: str) -> Any:
    def change(doc: dict[str, Any]) -> None:
        doc["classes"]["collective"] = {"protection": "optional", "decision_owner": owner, "rationale": "isolated"}

    return policy_variant(change)


def test_optional_class_is_exempt_with_owner_and_fails_without() -> None:
    rows = [{"src": W0, "dst": W1, "dport": 29500}]
    owned = evaluate(_optional("cto@lab"), facts_for(_optional("cto@lab"), rows))
    assert [(x.verdict, x.subject) for x in owned if "collective" in x.subject] == [
        (Verdict.EXEMPT, "class collective")
    ]
    unowned = evaluate(_optional(""), facts_for(_optional(""), rows))
    assert [x.verdict for x in unowned if x.subject == "class collective"] == [Verdict.FAIL]


def test_key_facts() -> None:
    good = {
        "rotations": [{"layer": "wireguard", "at": "2026-11-30T11:00:00+00:00", "ok": True, "dropped_job": False}],
        "mismatch": [{"layer": "wireguard", "failed_closed": True}],
    }
    f = evaluate(POLICY, Facts(now=NOW, keys=good))
    keyf = [x for x in f if x.subject.startswith("key ")]
    assert {x.verdict for x in keyf} == {Verdict.PASS}
    bad = {
        "rotations": [{"layer": "wireguard", "at": "2026-11-01T11:00:00+00:00", "ok": True, "dropped_job": False}],
        "mismatch": [{"layer": "wireguard", "failed_closed": False, "detail": "fell back to plaintext"}],
    }
    f = evaluate(POLICY, Facts(now=NOW, keys=bad))
    fails = [x.message for x in f if x.verdict is Verdict.FAIL]
    assert any("overdue" in m for m in fails) and any("fell back to plaintext" in m for m in fails)
    unknown = evaluate(POLICY, Facts(now=NOW))
    assert any(x.verdict is Verdict.UNKNOWN and "ringfence verify keys" in x.message for x in unknown)


def test_clean_policy_gives_no_fail() -> None:
    """Approve exactly what runs, exempt protection with an owner: no control fails (issue 2)."""

    def change(doc: dict[str, Any]) -> None:
        for cls in ("storage", "collective", "management", "replication"):
            doc["classes"][cls] = {"protection": "optional", "decision_owner": "ciso@lab", "rationale": "lab"}

    policy = policy_variant(change)
    rows = [
        {"src": W0, "dst": W1, "dport": 29500},
        {"src": W1, "dst": W0, "dport": 29500},
        {"src": W0, "dst": STORAGE, "dport": 8080},
        {"src": W1, "dst": MGMT, "dport": 8000},
        {"src": "10.77.1.50", "dst": MGMT, "dport": 8000},
        {"src": "10.77.4.10", "dst": MGMT, "dport": 8000},
        {"src": JUMP, "dst": MGMT, "dport": 22},
        {"src": STORAGE, "dst": EXT, "dport": 9000},
    ]
    results = by_control(policy, facts_for(policy, rows))
    assert {cid: r.verdict for cid, r in results.items() if r.verdict is Verdict.FAIL} == {}
    for cid in ("zones", "admin_paths", "storage_flows", "training_traffic", "egress", "telemetry"):
        assert any(v == "pass" for v, _ in verdicts(results[cid])), cid
    # telemetry also needs the live ruleset (an allowed flow and a denied attempt followed to their rules):
    # from flows alone its records are attributable, but the control is not proven.
    assert ("pass", "flow source pcap:test.pcap") in verdicts(results["telemetry"])
    assert results["telemetry"].verdict is Verdict.UNKNOWN
    assert results["encryption_keys"].owner == "ml-platform-security@lab"
