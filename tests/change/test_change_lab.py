"""Change control on the real lab, through the CLI: propose, approve by another identity, apply, probe,
drift (a live `nft` edit outside ringfence is caught, naming the node and the rule), roll back, and the
change traced end to end by change_control; an exception that the kernel expires by itself."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from change_kit import commit_policy, key, policy_doc

from ringfence.cli import main
from ringfence.controls import change_control
from ringfence.controls.interface import Facts, Verdict
from ringfence.enforce.apply import FABRIC, apply_policy
from ringfence.enforce.facts import change_facts
from ringfence.enforce.nftrun import delete_table
from ringfence.enforce.probe import denied_packets, tcp_probe
from ringfence.evidence import EvidenceStore
from ringfence.lab import Lab
from ringfence.lab.points import lab_inventory, lab_points
from ringfence.policy import load_policy, parse_policy

pytestmark = [pytest.mark.privileged, pytest.mark.slow]


def _clear(lab: Lab) -> None:
    """Put the shared lab back as found: no ringfence tables anywhere."""
    for scope, ex in lab_points(lab).items():
        delete_table(ex, "inet", "ringfence")
        if scope == FABRIC:
            delete_table(ex, "bridge", "ringfence")


def _lab_doc(lab: Lab, approvers: dict[str, Any]) -> dict[str, Any]:
    doc = policy_doc(approvers)
    lab_doc: dict[str, Any] = yaml.safe_load(lab.policy_yaml())
    return {**lab_doc, "change_control": doc["change_control"]}


def test_a_change_from_request_to_rollback_with_drift(lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RINGFENCE_EVIDENCE_KEY", str(tmp_path / "store.key"))
    ev = str(tmp_path / "evidence")
    (alice_key, alice), (bob_key, bob) = key(tmp_path, "alice"), key(tmp_path, "bob")
    repo = tmp_path / "policy-repo"
    v1_doc = _lab_doc(lab, {"alice": alice, "bob": bob})
    policy = commit_policy(repo, v1_doc, "v1")
    v1_copy = tmp_path / "v1.yaml"
    v1_copy.write_text(policy.read_text())
    lab_args = ["--target", "lab", "--name", lab.name]
    req1, req2 = str(tmp_path / "req1.json"), str(tmp_path / "req2.json")
    try:
        assert main(["change", "propose", str(policy), "--by", "alice", "--ticket", "CHG-1", "-o", req1,
                     "--evidence", ev]) == 0
        assert main(["change", "approve", req1, "--by", "alice", "--key", str(alice_key), "--evidence", ev]) == 1
        assert main(["change", "approve", req1, "--by", "bob", "--key", str(bob_key), "--evidence", ev]) == 0
        # change control required: no request, no deploy
        assert main(["apply", str(policy), *lab_args, "--evidence", ev]) == 1
        assert "requires change control" in capsys.readouterr().err
        assert main(["apply", str(policy), *lab_args, "--request", req1, "--evidence", ev]) == 0
        # v2 drops a flow; proposed against v1, approved, deployed, its effect observed by a probe
        v2_doc = {**v1_doc, "approved": [f for f in v1_doc["approved"] if f["id"] != "aux-telemetry"]}
        commit_policy(repo, v2_doc, "v2: aux telemetry retired")
        assert main(["change", "propose", str(policy), "--by", "alice", "--ticket", "CHG-2", "-o", req2,
                     "--evidence", ev]) == 0
        assert "aux-telemetry" in json.loads(Path(req2).read_text())["request"]["policy_diff"]
        assert main(["change", "approve", req2, "--by", "bob", "--key", str(bob_key), "--evidence", ev]) == 0
        assert main(["apply", str(policy), *lab_args, "--request", req2, "--evidence", ev]) == 0
        assert main(["probe", str(policy), *lab_args, "-o", str(tmp_path / "p2.json"), "--store", ev]) == 0
        # drift: the live rulesets are the approved ones
        out = tmp_path / "drift.json"
        assert main(["drift", str(policy), *lab_args, "-o", str(out), "--evidence", ev]) == 0
        assert json.loads(out.read_text())["verdict"] == "pass"
        # a live edit outside ringfence, on one node
        w0 = lab.executor("worker-0")
        res = w0.run(["nft", "add", "rule", "inet", "ringfence", "input", "tcp", "dport", "4444", "accept"],
                     timeout=30)
        assert res.returncode == 0, res.stderr
        assert main(["drift", str(policy), *lab_args, "-o", str(out), "--evidence", ev]) == 1
        report = json.loads(out.read_text())
        assert report["nodes"]["worker-0"]["status"] == "drift"
        (diff,) = report["nodes"]["worker-0"]["differences"]
        assert diff["node"] == "worker-0" and diff["kind"] == "rule added" and "4444" in diff["detail"]
        assert all(n["status"] == "match" for name, n in report["nodes"].items() if name != "worker-0")
        # roll back to the previous approved version (which also replaces the edited table), recorded
        capsys.readouterr()
        assert main(["change", "rollback", *lab_args, "--by", "carol", "--evidence", ev]) == 0
        rolled = json.loads(capsys.readouterr().out)
        assert rolled["live"].startswith("ev-")
        assert main(["drift", str(v1_copy), *lab_args, "-o", str(out), "--evidence", ev]) == 0
        assert main(["drift", str(policy), *lab_args, "-o", str(out), "--evidence", ev]) == 1  # v2 not in force
        assert main(["probe", str(v1_copy), *lab_args, "-o", str(tmp_path / "p1.json"), "--store", ev]) == 0
        # the whole trace, judged from the evidence store alone
        store = EvidenceStore.open(ev)
        changes = change_facts(store, f"lab:{lab.name}")
        v2_change, rollback = changes[1], changes[2]
        assert v2_change["requested_by"] == "alice" and v2_change["approved_by"] == "bob"
        assert v2_change["verified"] is True and v2_change["live"]
        assert rollback["action"] == "rollback" and rollback["previous"] == v2_change["version"]
        assert rollback["rolled_back_by"] == "carol" and rollback["live"] and rollback["verified"] is True
        findings = change_control.evaluate(load_policy(v1_copy), Facts(now=datetime.now(UTC), changes=changes))
        traced = [f for f in findings if f.requirement == "change-traced"]
        assert [f.verdict for f in traced] == [Verdict.PASS], [f.message for f in traced]
    finally:
        _clear(lab)


def test_an_exception_expires_at_the_enforcement_point(lab: Lab, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RINGFENCE_EVIDENCE_KEY", str(tmp_path / "store.key"))
    doc: dict[str, Any] = yaml.safe_load(lab.policy_yaml())
    until = datetime.now(UTC) + timedelta(seconds=20)  # short, yet longer than an apply on a busy machine
    doc["exceptions"] = [{"id": "tmp-aux-storage", "control": "zones", "subject": "node:aux", "owner": "netsec@lab",
                          "reason": "one-off dataset check", "expires": until.date().isoformat(),
                          "until": until.isoformat(), "review_trigger": "check done",
                          "opens": {"from": "aux", "to": "storage", "port": 8080}}]
    policy = parse_policy(yaml.safe_dump(doc), "exception-policy")
    points = lab_points(lab)
    store = EvidenceStore.open(tmp_path / "evidence")
    aux, storage = lab.topology.address("aux"), lab.topology.address("storage")
    apply_policy(policy, points, store, target=f"lab:{lab.name}", inventory=lab_inventory(lab))
    try:
        opened = tcp_probe(points["aux"], storage, 8080, app="http")
        assert datetime.now(UTC) < until, "the apply outlasted the exception; the test proves nothing"
        assert opened.outcome == "connected" and opened.app_ok, opened
        # nobody acts: wait (bounded) until the kernel has dropped the element, observed on the fabric
        deadline = time.monotonic() + 60
        while _exception_elements(points[FABRIC]) and time.monotonic() < deadline:
            time.sleep(0.5)  # polling an observation, bounded by the deadline
        assert not _exception_elements(points[FABRIC]), "the kernel did not expire the exception"
        assert datetime.now(UTC) >= until - timedelta(seconds=1)  # it closed on time, not early
        closed = tcp_probe(points["aux"], storage, 8080, timeout=1.5)
        assert closed.outcome == "timeout", closed
        packets, where = denied_packets([points["aux"], points[FABRIC], points["storage"]], aux, storage,
                                        closed.sport, 8080)
        assert packets >= 1, "the denial was not caused by policy"
        assert where
    finally:
        _clear(lab)


def _exception_elements(fabric: Any) -> list[Any]:
    res = fabric.run(["nft", "-j", "list", "set", "inet", "ringfence", "exceptions"], timeout=30)
    assert res.returncode == 0, res.stderr
    for obj in json.loads(res.stdout)["nftables"]:
        if "set" in obj:
            return list(obj["set"].get("elem", []))
    return []
