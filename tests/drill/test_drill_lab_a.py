"""The malicious-job and exfiltration drills on a real 2-job lab with its egress gateway, through the CLI: before
``apply`` the attack gets through and the drill fails naming it (the gateway itself refuses the node, logged with
its identity); after ``apply`` every attempt is stopped (proven by its own drop counter), detected with the
actor's identity, contained, and the bystander job keeps training — and storage's replication leaves through
the gateway, logged with its destination and client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ringfence.cli import main
from ringfence.enforce.apply import apply_policy, rollback
from ringfence.errors import EnvironmentProblem
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.lab import Lab
from ringfence.lab import procs as lab_procs
from ringfence.lab.netns import require_privileges
from ringfence.lab.points import lab_inventory, lab_points
from ringfence.lab.state import read_state
from ringfence.observe.flows.events.tinyproxy import TinyproxyReader

pytestmark = [pytest.mark.privileged, pytest.mark.slow, pytest.mark.alone]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    with Lab.up(workers=4, jobs=2, scheduler=False, egress_gateway=True) as lab:
        gateway = [p.pid for p in read_state(lab.paths).processes if p.label == "mgmt-tinyproxy"]
        assert len(gateway) == 1 and lab.egress_gateway
        yield lab
    assert not lab_procs.is_alive(gateway[0])  # lab down ends the gateway like every lab process


def _gateway_log(lab: Lab) -> list[dict[str, Any]]:
    return list(TinyproxyReader().read(lab.telemetry_dir / "mgmt" / "tinyproxy.log", node="mgmt")
                .events.to_pylist())


def _drill(lab: Lab, scenario: str, out: Path, store: Path) -> tuple[int, dict[str, Any]]:
    code = main(["drill", "run", scenario, "--name", lab.name, "-o", str(out), "--store", str(store)])
    return code, json.loads(out.read_text())


def _brief(doc: dict[str, Any]) -> dict[str, Any]:
    """The report without its long lists, for an assertion message."""
    return {k: v for k, v in doc.items() if k not in ("evidence",)}


def test_before_apply_the_checkpoint_gets_out_and_the_drill_fails(lab: Lab, tmp_path: Path) -> None:
    code, doc = _drill(lab, "exfiltration", tmp_path / "exfil.json", tmp_path / "evidence")
    direct, gateway = (next(a for a in doc["attempts"] if a["step"] == s)
                       for s in ("exfil-direct", "exfil-egress-gateway"))
    assert doc["verdict"] == "fail" and code == 1, _brief(doc)
    assert direct["got_through"] is True and direct["bytes_out"] > 0 and "connected to external" in direct["stopped_by"]
    assert doc["why"] == "got through: exfil-direct"
    # no fabric rule yet: the node's CONNECT reaches the gateway, which refuses it (it is no approved client) and
    # logs the refusal with its address — the gateway's layer alone, detected by its own log
    assert gateway["got_through"] is False and "refused by the gateway mgmt" in gateway["stopped_by"], _brief(doc)
    assert gateway["detected"] is True and "egress gateway's log at mgmt (unauthorized client" in gateway["detection"]
    assert "worker-3 (10.77.1.13), job train-b" in gateway["detection"]
    assert any(r["client"] == "10.77.1.13" and r["decision"] == "deny" for r in _gateway_log(lab))
    # nothing to contain with before a policy is applied: containment did not hold, said so
    assert doc["contained"] is False and "needs an applied policy" in doc["containment"]
    assert EvidenceStore.open(tmp_path / "evidence").verify().ok


def test_after_apply_both_drills_are_stopped_detected_and_contained(lab: Lab, tmp_path: Path) -> None:
    policy = lab.policy()
    points = lab_points(lab)
    store = EvidenceStore.open(tmp_path / "evidence")
    target = f"lab:{lab.name}"
    apply_policy(policy, points, store, target=target, inventory=lab_inventory(lab))
    try:
        code, mj = _drill(lab, "malicious-job", tmp_path / "mj.json", store.path)
        steps = {a["step"]: a for a in mj["attempts"]}
        assert set(steps) == {"scan-ranks", "read-dataset", "ssh-mgmt"}
        assert all(a["got_through"] is False for a in steps.values()), _brief(mj)
        assert "dropped by policy (denied@" in steps["scan-ranks"]["stopped_by"]
        assert "dropped by policy (denied@" in steps["ssh-mgmt"]["stopped_by"]
        assert "refused by the object server" in steps["read-dataset"]["stopped_by"]
        assert all(a["detected"] is True and "job train-b (spiffe://lab/job/train-b)" in a["detection"]
                   for a in steps.values()), _brief(mj)
        assert mj["contained"] is True and "job train-b" in mj["containment"], _brief(mj)
        assert mj["bystander"]["job"] == "train-a" and mj["bystander"]["within_budget"] is True, _brief(mj)
        assert mj["detection_seconds"] is not None and mj["containment_seconds"] is not None
        assert mj["verdict"] == "pass" and code == 0, _brief(mj)

        code, ex = _drill(lab, "exfiltration", tmp_path / "ex.json", store.path)
        direct, gateway = (next(a for a in ex["attempts"] if a["step"] == s)
                           for s in ("exfil-direct", "exfil-egress-gateway"))
        assert direct["got_through"] is False and direct["bytes_out"] == 0, _brief(ex)
        assert direct["detected"] is True and "worker-3 (10.77.1.13)" in direct["detection"], _brief(ex)
        assert ex["contained"] is True and ex["bystander"]["within_budget"] is True, _brief(ex)
        # through the gateway: the fabric drops the node on its way there (it is no approved client), the gateway
        # forwarded nothing for it, and the capture saw no byte leave
        assert gateway["got_through"] is False and "mgmt (10.77.3.10:8888): timeout, dropped by policy (denied@" \
            in gateway["stopped_by"], _brief(ex)
        assert "shows no forward for 10.77.1.13" in gateway["stopped_by"] and gateway["bytes_out"] == 0
        assert "saw 0 payload bytes between the node and the gateway's port" in gateway["stopped_by"], _brief(ex)
        assert gateway["detected"] is True and "worker-3 (10.77.1.13)" in gateway["detection"], _brief(ex)
        assert ex["verdict"] == "pass" and code == 0, _brief(ex)
        findings = [r for r in store.records() if r.kind is RecordKind.FINDING and r.data.get("control") == "egress"]
        assert findings and findings[-1].data["node"] == "worker-3" and findings[-1].data["blocked"] is True
        # approved egress leaves through the gateway: storage's replication, logged with client and destination
        assert any(r["client"] == "10.77.2.10" and r["decision"] == "allow" and (r["host"], r["port"])
                   == ("10.77.9.10", 9000) for r in _gateway_log(lab))
        assert store.verify().ok
    finally:
        rollback(points, store, target=target)


def test_over_ssh_alone_the_exfiltration_drill_passes_as_it_does_on_the_lab(lab: Lab, tmp_path: Path) -> None:
    """The same drill, driven only through SSH sessions from the jump node (``lab hosts`` gives every node and
    the fabric an sshd), the policy applied over SSH too: the drill on the lab is the drill on a cluster. (One
    scenario: each costs minutes over SSH on two shared cores; malicious-job passes the same way.)"""
    hosts, policy, store = tmp_path / "hosts.yaml", tmp_path / "policy.yaml", tmp_path / "evidence"
    assert main(["lab", "hosts", "--name", lab.name, "-o", str(hosts)]) == 0
    policy.write_text(lab.policy_yaml())  # now with the administrators' SSH paths from the jump node
    ssh = ["--target", "ssh", "--hosts", str(hosts)]
    assert main(["apply", str(policy), *ssh, "--evidence", str(store), "--approved-by", "cab"]) == 0
    try:
        # the hosts share the lab's filesystem: each keeps its telemetry in a directory of its own
        code = main(["drill", "run", "exfiltration", *ssh, "--policy", str(policy), "--store", str(store),
                     "--telemetry-dir", f"{lab.telemetry_dir}/{{host}}", "-o", str(tmp_path / "ex.json")])
        ex = json.loads((tmp_path / "ex.json").read_text())
        assert ex["target"] == f"ssh:{hosts}", _brief(ex)
        direct, gateway = (next(a for a in ex["attempts"] if a["step"] == s)
                           for s in ("exfil-direct", "exfil-egress-gateway"))
        # both paths dropped by policy, detected in the NFLOG telemetry read over SSH with the node's identity,
        # 0 bytes out in the SSH site's own capture; the last rank of train-b is contained at its own ruleset
        # AND at the fabric (lifted on its own approved paths) — what a one-job lab cannot show
        for a in (direct, gateway):
            assert a["got_through"] is False and a["detected"] is True and a["bytes_out"] == 0, _brief(ex)
            assert "worker-3 (10.77.1.13)" in a["detection"], _brief(ex)
        assert "dropped by policy (denied@" in direct["stopped_by"], _brief(ex)
        assert "mgmt (10.77.3.10:8888)" in gateway["target"], _brief(ex)
        assert ex["contained"] is True and "at node, fabric" in ex["containment"], _brief(ex)
        assert ex["bystander"]["job"] == "train-a" and ex["bystander"]["within_budget"] is True, _brief(ex)
        assert ex["verdict"] == "pass" and code == 0, _brief(ex)
        assert EvidenceStore.open(store).verify().ok
    finally:
        assert main(["apply", "--rollback", *ssh, "--evidence", str(store)]) == 0
