"""The probe matrix on a real 2-job lab under its policy: both sides proven, through namespaces and OpenSSH,
the CLI's facts files, and the controls' verdicts on them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ringfence.cli import main
from ringfence.controls import admin_paths, training_traffic
from ringfence.controls.interface import Facts, Verdict
from ringfence.controls.requirements import enforce_requirements
from ringfence.enforce.apply import FABRIC, apply_policy, rollback
from ringfence.enforce.facts import load_change_facts, load_probe_facts, load_ruleset_facts
from ringfence.enforce.partition_probe import arp_probe
from ringfence.enforce.probe_matrix import ProbePlan, ProbeSpec, behaviour_failed, probe_policy, run_probes
from ringfence.errors import EnvironmentProblem
from ringfence.evidence import EvidenceStore
from ringfence.facts.partitions import load as load_partition_facts
from ringfence.lab import Lab
from ringfence.lab.netns import require_privileges
from ringfence.lab.points import lab_fabric_ports, lab_inventory, lab_points
from ringfence.policy import Policy, load_policy, parse_policy
from ringfence.targets.ops import listening_ports

pytestmark = [pytest.mark.privileged, pytest.mark.slow]


@pytest.fixture(scope="module")
def enforced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Policy, EvidenceStore]]:
    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    with Lab.up(workers=4, jobs=2) as lab:
        policy = parse_policy(lab.policy_yaml(), "two-jobs")
        store = EvidenceStore.open(tmp_path_factory.mktemp("probe-lab") / "evidence")
        apply_policy(policy, lab_points(lab), store, target=f"lab:{lab.name}", inventory=lab_inventory(lab),
                     approved_by="cab@lab", ticket="CHG-1")
        try:
            yield lab, policy, store
        finally:
            rollback(lab_points(lab), store, target=f"lab:{lab.name}")


def test_matrix_proves_both_sides_and_jobs_are_separated(enforced: tuple[Lab, Policy, EvidenceStore]) -> None:
    lab, policy, store = enforced
    extra = (ProbeSpec("aux", "mgmt", lab.topology.address("mgmt"), 22, "deny", why="aux → sshd"),)
    run = probe_policy(policy, lab_points(lab), store, target=f"lab:{lab.name}", extra=extra)
    assert not run.failures, [(r.source, r.destination, r.outcome, r.detail) for r in run.failures]
    by = {(r.source, r.destination, r.expected): r for r in run.results}
    # each job's ranks reach each other's rendezvous, and never the other job's (denied by policy)
    assert by[("worker-1", "worker-0:29500", "allow")].outcome == "connected"
    assert by[("worker-3", "worker-2:29501", "allow")].outcome == "connected"
    for cross in (("worker-0", "worker-2:29501", "deny"), ("worker-2", "worker-0:29500", "deny")):
        assert by[cross].outcome == "timeout" and by[cross].by_policy is True
    # the administrative path: jump → sshd (with the SSH greeting); user and aux are dropped by policy
    assert "SSH-" in by[("jump", "mgmt:22", "allow")].detail
    for src in ("user", "aux", "worker-0"):
        r = by[(src, "mgmt:22", "deny")]
        assert r.by_policy is True and r.rule and r.rule.startswith(f"denied@{src}/"), r
    # srun on the submit host listens only while a step runs: a stand-in on a port of its range shows both
    # sides (the job's ranks connect; another zone's node is dropped by policy on its way to it) — and is gone
    stood = [r for r in run.results if "stand-in listener on mgmt:" in r.detail]
    assert {r.expected for r in stood} == {"allow", "deny"}, [(r.source, r.destination, r.detail) for r in stood]
    assert all(r.outcome == "connected" for r in stood if r.expected == "allow")
    assert all(r.by_policy is True for r in stood if r.expected == "deny")
    port = int(stood[0].destination.rsplit(":", 1)[1])
    assert store.get(run.evidence).data["stand_ins"][0]["port"] == port
    assert port not in (listening_ports(lab_points(lab)["mgmt"]) or frozenset())
    facts = Facts(probes=run.results)
    for control in (admin_paths, training_traffic):
        verdicts = {f.verdict for f in control.evaluate(policy, facts) if f.subject.startswith("probe ")}
        assert verdicts == {Verdict.PASS}, control.meta.id


def test_refused_and_silent_ports_prove_nothing(enforced: tuple[Lab, Policy, EvidenceStore], tmp_path: Path) -> None:
    lab, policy, _ = enforced
    # A store of its own: these probes fail on purpose, and would otherwise mark the shared lab's
    # applied version as unverified for the tests that follow (a failed probe run after a change does).
    store = EvidenceStore.open(tmp_path / "evidence")
    w0, mgmt = lab.topology.address("worker-0"), lab.topology.address("mgmt")
    plan = ProbePlan((
        # inside the job's approved collective range, so the packet reaches worker-0: a closed port answers RST
        ProbeSpec("worker-1", "worker-0", w0, 1025, "deny", why="closed port"),
        # dropped by policy, but nothing listens there: without policy it would have been refused anyway
        ProbeSpec("user", "mgmt", mgmt, 2222, "deny", why="silent port"),
    ))
    refused, silent = run_probes(policy, plan, lab_points(lab), store, target=f"lab:{lab.name}", timeout=1.0).results
    assert refused.outcome == "refused" and refused.by_policy is False and behaviour_failed(refused)
    assert silent.outcome == "timeout" and silent.rule and silent.by_policy is False and behaviour_failed(silent)


def test_probes_over_openssh_and_the_cli_facts(enforced: tuple[Lab, Policy, EvidenceStore], tmp_path: Path) -> None:
    lab, policy, store = enforced
    points = lab_points(lab)
    points["mgmt"] = lab.ssh_executor()  # a real OpenSSH session from jump, probes and nft reads alike
    plan = ProbePlan((ProbeSpec("mgmt", "storage", lab.topology.address("storage"), 8080, "deny"),
                      ProbeSpec("mgmt", "external", lab.topology.address("external"), 9000, "deny")))
    for r in run_probes(policy, plan, points, store, target=f"lab:{lab.name}").results:
        assert r.by_policy is True and r.rule and "mgmt/inet" in r.rule, r

    (tmp_path / "policy.yaml").write_text(lab.policy_yaml())
    out, rules, changes = tmp_path / "probes.json", tmp_path / "ruleset.json", tmp_path / "changes.json"
    code = main(["probe", str(tmp_path / "policy.yaml"), "--target", "lab", "--name", lab.name, "-o", str(out),
                 "--store", str(store.path), "--ruleset", str(rules), "--changes", str(changes),
                 "--via-ssh", "mgmt"])
    assert code == 0
    probes = load_probe_facts(out)
    assert len(probes) > 30 and all(p.evidence for p in probes)
    ruleset = load_ruleset_facts(rules)
    assert all(not p["missing_flows"] and not p["extra_flows"] for p in ruleset["points"].values())
    assert ruleset["points"][FABRIC]["present"] and ruleset["version"]
    egress = [e for e in ruleset["egress"] if e["destination_node"] == "external"]
    assert egress and all(e["decision"] == "accept" and e["bytes"] > 0 for e in egress if e["source_node"] == "storage")
    assert {e["identity"] for e in egress if e["source_node"] == "storage"} == {"spiffe://lab/node/storage"}
    history = load_change_facts(changes)
    assert history[0]["action"] == "apply" and history[0]["verified"] is True
    assert (history[0]["approved_by"], history[0]["ticket"]) == ("cab@lab", "CHG-1")
    assert json.loads(out.read_text())["target"] == f"lab:{lab.name}"
    assert main(["probe", str(tmp_path / "nope.yaml"), "--name", lab.name]) == 2


def test_assess_judges_both_sides_with_the_probe_facts(
    enforced: tuple[Lab, Policy, EvidenceStore], tmp_path: Path
) -> None:
    """The whole loop: enforce → probe → capture → assess with the facts files: the path controls that
    were `unknown` from a capture alone now have their denied side proven, and nothing fails."""
    lab, _, store = enforced
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(lab.policy_yaml())
    probes, rules, changes = tmp_path / "probes.json", tmp_path / "ruleset.json", tmp_path / "changes.json"
    assert main(["probe", str(policy_file), "--target", "lab", "--name", lab.name, "-o", str(probes),
                 "--store", str(store.path), "--ruleset", str(rules), "--changes", str(changes)]) == 0
    capture = tmp_path / "enforced.pcap"
    lab.capture(4, capture)
    out = tmp_path / "report"
    code = main(["assess", str(policy_file), "--captures", str(capture), "-o", str(out), "-q",
                 "--probes", str(probes), "--ruleset", str(rules), "--changes", str(changes)])
    report = json.loads((out / "report.json").read_text())
    by = {c["id"]: c for c in report["controls"]}
    for cid in ("zones", "admin_paths", "training_traffic", "egress"):
        verdicts = {f["verdict"] for f in by[cid]["findings"]}
        assert "fail" not in verdicts, (cid, [f["subject"] for f in by[cid]["findings"] if f["verdict"] == "fail"])
        # the denied side is proven by the probes now, not left unknown for lack of them
        assert not any("no probe results" in f["message"] for f in by[cid]["findings"]), cid
        assert any(f["verdict"] == "pass" and f["subject"].startswith("probe ") for f in by[cid]["findings"]), cid
    assert by["change_control"]["verdict"] in ("pass", "unknown")
    # Plaintext is still on the wire (no encryption layer in this lab): the encryption control fails.
    assert by["encryption_keys"]["verdict"] == "fail" and code == 1


def _partitioned(lab: Lab, path: Path) -> Policy:
    """The lab's policy with a partition declared for each job (what apply installs on the bridge fabric), also
    written to ``path`` for the CLI."""
    doc = yaml.safe_load(lab.policy_yaml())
    for i, job in enumerate(doc["jobs"]):
        job["partition"] = {"vlan": 100 + i}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_policy(path)


def test_a_partition_per_job_holds_at_l2_and_l3_both_ways(
    enforced: tuple[Lab, Policy, EvidenceStore], tmp_path: Path
) -> None:
    """apply installs a partition per job (bridge ports); the proof shows each job's ranks reach each other and
    train while the other job's rank gets neither an ARP answer nor a SYN answered (direct or routed), dropped by
    the partition; the control passes on those facts; and without the partition the same ARP is answered."""
    lab, policy, store = enforced
    parted = _partitioned(lab, tmp_path / "partitioned.yaml")
    target = f"lab:{lab.name}"
    version = apply_policy(parted, lab_points(lab), store, target=target, inventory=lab_inventory(lab),
                           approved_by="cab@lab", ticket="CHG-2", fabric_ports=lab_fabric_ports(lab))
    restored = False
    try:
        record = store.get(version.evidence).data
        assert record["partition"] == {"installed": True, "jobs": ["train-a", "train-b"]}
        out = tmp_path / "partitions.json"
        assert main(["partition", "prove", str(tmp_path / "partitioned.yaml"), "--name", lab.name, "-o", str(out),
                     "--timeout", "1", "--evidence", str(store.path)]) == 0
        doc = json.loads(out.read_text())
        assert store.get(doc["evidence"]).data["probes"] == doc["probes"]  # recorded in the evidence store
        by = {(p["layer"], p["source"], p["destination"], p["expected"]): p for p in doc["probes"]}
        for src, dst in (("worker-1", "worker-0"), ("worker-3", "worker-2")):  # each job inside its partition
            assert by[("l2", src, dst, "allow")]["outcome"] == "answered", by[("l2", src, dst, "allow")]
            assert by[("l3", src, dst, "allow")]["outcome"] == "connected", by[("l3", src, dst, "allow")]
        for src, dst in (("worker-2", "worker-0"), ("worker-0", "worker-2")):  # across jobs: dropped by the fabric
            for layer in ("l2", "l3", "l3-routed"):  # ARP; raw SYN to the member's MAC; raw SYN via the gateway
                p = by[(layer, src, dst, "deny")]
                assert p["outcome"] in ("silent", "timeout") and p["by_policy"] is True, p
        for j in doc["jobs"]:  # every rank stepped over the probe window
            assert all(j["steps_after"][m] > j["steps_before"][m] for m in j["members"]), j
        loaded = load_partition_facts(out)
        assert loaded.taken is not None
        facts = Facts(partitions=loaded.value, taken={"partitions": loaded.taken})
        found = enforce_requirements(training_traffic.meta, parted, facts,
                                     training_traffic.job_partitions(parted, facts))
        assert {(f.requirement, f.verdict) for f in found if f.requirement.startswith("job-partition")} == {
            ("job-partition-permitted", Verdict.PASS), ("job-partition-denied", Verdict.PASS)}, found
        # without the partition the other job's rank resolves job A's rank again: the probe that proved the
        # drop now gets its answer, so the same proof cannot pass on a fabric that does not partition
        apply_policy(policy, lab_points(lab), store, target=target, inventory=lab_inventory(lab),
                     approved_by="cab@lab", ticket="CHG-3", fabric_ports=lab_fabric_ports(lab))
        restored = True
        w2 = lab.executor("worker-2")
        outcome, _ = arp_probe(w2, lab.topology.interface("worker-2"), lab.topology.address("worker-0"),
                               "02:00:5e:10:00:01", timeout=1.0)
        assert outcome == "answered"
    finally:
        if not restored:
            apply_policy(policy, lab_points(lab), store, target=target, inventory=lab_inventory(lab),
                         approved_by="cab@lab", ticket="CHG-4")
