"""Discovery on the real lab: the as-found capture → a proposal that loads, approves the job's paths with
bounded collective ranges, flags aux's lateral attempts and the egress, passes the path controls, and —
enforced — keeps the training job working through a restart (new rendezvous, new ephemeral ports)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from flow_kit import LAB_POLICY
from ringfence.analyze import classify
from ringfence.analyze.discover import Proposal, discover, render_yaml
from ringfence.cli import main
from ringfence.controls.interface import Facts, Verdict
from ringfence.controls.registry import evaluate_all
from ringfence.lab import Lab
from ringfence.observe.flows.registry import read_any
from ringfence.policy import Policy, parse_policy

pytestmark = pytest.mark.privileged

AUX = "10.77.1.50"


@pytest.fixture(scope="module")
def inventory_yaml(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    doc: dict[str, Any] = yaml.safe_load(lab.policy_yaml())
    doc["approved"] = []
    path = tmp_path_factory.mktemp("discover-lab") / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def observed(lab_capture: Path) -> pa.Table:
    return read_any(lab_capture).flows


@pytest.fixture(scope="module")
def proposal(observed: pa.Table, inventory_yaml: Path) -> Proposal:
    return discover(observed, parse_policy(inventory_yaml.read_text(), str(inventory_yaml)))


@pytest.fixture(scope="module")
def approved_by_hand(proposal: Proposal) -> Policy:
    """The proposal with the flagged replication egress approved by a human (its entry uncommented)."""
    text = render_yaml(proposal)
    line = next(ln for ln in text.splitlines() if ln.startswith("  # - {") and "replica-sink" in ln)
    return parse_policy(text.replace(line, line.replace("  # - {", "  - {", 1)), "approved-by-hand")


def _ends(p: Proposal) -> set[tuple[str, str, str]]:
    return {(r.rule.source.describe(), r.rule.destination.describe(), r.rule.traffic_class.value) for r in p.rules}


def test_proposal_approves_the_jobs_paths_with_bounded_collective_ranges(proposal: Proposal) -> None:
    assert parse_policy(render_yaml(proposal), "proposal").approved == proposal.policy.approved
    collective = [r.rule for r in proposal.rules if r.rule.traffic_class.value == "collective"]
    assert collective and all(r.source.job == r.destination.job == "train-a" for r in collective)
    ranges = [r.port_range for r in collective if r.port_range is not None]
    assert len(ranges) == len(collective)  # every collective entry states its ports
    assert (32768, 60999) in ranges  # gloo's pair listeners: the OS ephemeral range, not 1-65535
    assert any(lo <= 29500 <= hi for lo, hi in ranges if lo == hi)  # the rendezvous store, one port
    assert all(lo >= 1024 and hi - lo <= 60999 - 32768 for lo, hi in ranges)
    ends = _ends(proposal)
    assert {("job:train-a", "service:storage-http", "storage"), ("job:train-a", "service:mgmt-api", "management"),
            ("node:jump", "service:mgmt-ssh", "management")} <= ends
    assert not any(src == "node:aux" and dst in ("service:storage-http", "service:mgmt-ssh") for src, dst, _ in ends)
    assert not any(cls == "replication" for _, _, cls in ends)


def test_proposal_flags_lateral_admin_and_egress(proposal: Proposal) -> None:
    flagged = {(f.source.split(" ")[0], f.destination.split(" ")[0], f.ports): f.reasons for f in proposal.flagged}
    assert "administrative service mgmt-ssh" in " ".join(flagged[("aux", "mgmt", "22")])
    assert "member of no job" in " ".join(flagged[("aux", "storage", "8080")])
    assert "egress outside the trust boundary" in " ".join(flagged[("storage", "external", "9000")])


def test_path_controls_pass_for_the_jobs_traffic_under_the_proposal(observed: pa.Table,
                                                                   approved_by_hand: Policy) -> None:
    # The judgement of `ringfence assess`: classify against the policy, then the ten control points.
    results = {r.id: r for r in evaluate_all(approved_by_hand, Facts(flows=classify(observed, approved_by_hand)))}
    for control in ("zones", "training_traffic", "egress"):
        fails = [f.subject for f in results[control].findings if f.verdict is Verdict.FAIL]
        assert not fails, (control, fails)
    passes = {f.subject for f in results["training_traffic"].findings if f.verdict is Verdict.PASS}
    assert "approved flow train-a-collective" in passes
    # what still fails is exactly what discovery flagged and nobody approved: aux's lateral attempts
    for control in ("admin_paths", "storage_flows"):
        fails = [f.subject for f in results[control].findings if f.verdict is Verdict.FAIL]
        assert fails and all(s.startswith(f"flow {AUX}:") for s in fails), (control, fails)


def test_cli_diff_on_the_lab_capture(lab_capture: Path, inventory_yaml: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", str(lab_capture), "--inventory", str(inventory_yaml), "--diff", str(LAB_POLICY)]) == 0
    out, err = capsys.readouterr()
    assert "~ train-a-collective: ports tcp/1024-65535 → tcp/32768-60999" in out
    assert "- checkpoint-replication: node:storage → service:replica-sink tcp/9000 replication" in out
    assert "flagged: storage (storage) → external (external):9000/tcp" in err


def _workers(lab: Lab) -> dict[str, tuple[int, int]]:
    st = lab.agent_status()
    return {a: (int(st[a].get("pid", 0)), int(st[a].get("counters", {}).get("steps", 0)))
            for a in ("worker-0-worker", "worker-1-worker") if a in st}


@pytest.mark.slow
def test_enforced_proposal_keeps_training_through_a_restart(lab: Lab, approved_by_hand: Policy,
                                                            tmp_path: Path) -> None:
    from ringfence.enforce.apply import apply_policy, rollback
    from ringfence.evidence import EvidenceStore
    from ringfence.lab.points import lab_inventory, lab_points

    points = lab_points(lab)
    store = EvidenceStore.open(tmp_path / "evidence")
    target = f"lab:{lab.name}"
    before = _workers(lab)
    apply_policy(approved_by_hand, points, store, target=target, inventory=lab_inventory(lab))
    try:
        # A new run: a new rendezvous on the store port, new gloo pair sockets on new ephemeral ports.
        lab.stop_traffic()
        lab.start_traffic(wait=False)
        deadline = time.monotonic() + 60
        now = _workers(lab)
        while time.monotonic() < deadline:
            now = _workers(lab)
            if len(now) == 2 and all(now[a][0] != before.get(a, (0, 0))[0] and now[a][1] >= 3 for a in now):
                break
            time.sleep(0.5)
        assert len(now) == 2 and all(now[a][0] != before.get(a, (0, 0))[0] and now[a][1] >= 3 for a in now), (
            f"training did not restart under the proposed policy: {now}; errors: "
            f"{json.dumps({a: s.get('last_error') for a, s in lab.agent_status().items() if 'worker' in a})[:800]}")
    finally:
        rollback(points, store, target=target)
