"""A containment drill on a real 2-job lab: snapshot, isolation at the node and the fabric (each proven on
its own), the collector still reachable, the other job still training, release restoring the paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.controls import containment
from ringfence.controls.interface import Facts, Verdict
from ringfence.enforce.apply import apply_policy, rollback
from ringfence.enforce.contain import ContainError, resolve_subject
from ringfence.enforce.facts import load_containment_facts
from ringfence.enforce.probe import tcp_probe
from ringfence.errors import EnvironmentProblem
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.lab import Lab
from ringfence.lab.netns import require_privileges
from ringfence.lab.points import lab_inventory, lab_points
from ringfence.policy import parse_policy

pytestmark = [pytest.mark.privileged, pytest.mark.slow]


def test_containment_drill_end_to_end(tmp_path: Path) -> None:
    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    with Lab.up(workers=4, jobs=2) as lab:
        policy = parse_policy(lab.policy_yaml(), "two-jobs")
        points = lab_points(lab)
        store = EvidenceStore.open(tmp_path / "evidence")
        target = f"lab:{lab.name}"
        with pytest.raises(ContainError, match="needs an applied policy"):  # nothing to isolate with yet
            main(["-v", "contain", "--job", "train-b", "--name", lab.name, "--store", str(tmp_path / "e0")])
        apply_policy(policy, points, store, target=target, inventory=lab_inventory(lab))
        try:
            out = tmp_path / "containment.json"
            code = main(["contain", "--job", "train-b", "--drill", "--name", lab.name, "--store", str(store.path),
                         "--seconds", "3", "-o", str(out), "--approved-by", "secops@lab", "--ticket", "IR-1"])
            doc = json.loads(out.read_text())
            assert code == 0, {k: v for k, v in doc.items() if k not in ("probes", "release_probes")}
            assert doc["isolated"] and doc["collector_reachable"] and doc["points"] == {"node": True, "fabric": True}
            assert doc["others_training"] and all(doc["training"]["steps"][w] >= 2 for w in ("worker-0", "worker-1"))
            assert doc["released"] and doc["release_verified"]
            # the fabric alone drops an approved path once the suspect lifts its own containment
            fab = [p for p in doc["probes"] if "own containment lifted" in p["detail"]]
            assert fab and all(p["by_policy"] and "fabric/" in p["rule"] for p in fab)
            # the snapshot was hashed into the store before anything changed
            snap = store.get(doc["snapshot"]["evidence"])
            assert set(snap.inputs) == {"capture", "flows", "rules"} and snap.data["captured"]
            seqs = {r.data.get("action"): r.seq for r in store.records()
                    if r.kind is RecordKind.ACTION and isinstance(r.data, dict)}
            assert snap.seq < seqs["contain"] < seqs["fabric-check"] < seqs["release"]
            contain_rec = next(r for r in store.records() if r.kind is RecordKind.ACTION
                               and r.data.get("action") == "contain")
            assert contain_rec.data["approved_by"] == "secops@lab" and contain_rec.data["scopes"][0] == "fabric"
            facts = load_containment_facts(out)
            assert [d["node"] for d in facts["drills"]] == ["worker-2", "worker-3"]
            verdicts = {f.verdict for f in containment.evaluate(policy, Facts(containment=facts))}
            assert verdicts == {Verdict.PASS}
            # released: the subject's approved path connects again, and nothing stays contained
            assert tcp_probe(points["worker-2"], lab.topology.address("storage"), 8080, app="http").app_ok
            assert store.verify().ok
            # a node that is not in the policy is refused with a clear message (exit 2)
            assert main(["contain", "--node", "nosuch", "--name", lab.name, "--store", str(store.path)]) == 2
            assert resolve_subject(policy, identity="spiffe://lab/job/train-a").nodes == ("worker-0", "worker-1")
        finally:
            rollback(points, store, target=target)
