"""The containment plan never expects a collector to be refused: it may reach the contained node."""

from __future__ import annotations

from ringfence.enforce.contain import containment_plan, fabric_probes, resolve_subject
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.policy import parse_policy


def test_the_inbound_denial_is_probed_from_a_peer_that_is_not_a_collector() -> None:
    topo = build_topology("rfplan", 2, 1)
    # aux runs an sshd reached from the jump host (the SSH inventory's path): jump is then an approved peer
    policy = parse_policy(render_policy(topo, {"aux"}), "plan")
    subject = resolve_subject(policy, node="aux")
    listening = {"aux": frozenset({22}), "mgmt": frozenset({8000, 22}), "storage": frozenset({8080})}
    sources = [n.name for n in policy.nodes]
    jump, mgmt = topo.address("jump"), topo.address("mgmt")
    inbound = [p for p in containment_plan(policy, subject, (mgmt, jump), listening, sources).probes
               if p.destination == "aux" and p.expected == "deny"]
    assert all(p.source not in ("jump", "mgmt") for p in inbound), inbound
    # without jump as a collector, jump is the approved peer the denial is shown from
    plain = [p for p in containment_plan(policy, subject, (mgmt,), listening, sources).probes
             if p.destination == "aux" and p.expected == "deny"]
    assert [p.source for p in plain] == ["jump"]


def test_a_node_that_listens_nowhere_is_still_probed_inbound_and_the_gap_is_said() -> None:
    topo = build_topology("rfplan", 2, 1)
    policy = parse_policy(render_policy(topo), "plan")  # aux serves nothing: no approved peer reaches it
    subject = resolve_subject(policy, node="aux")
    listening = {"mgmt": frozenset({8000, 22}), "storage": frozenset({8080})}
    sources = [n.name for n in policy.nodes]
    plan = containment_plan(policy, subject, (topo.address("mgmt"),), listening, sources)
    inbound = [p for p in plan.probes if p.destination == "aux" and p.expected == "deny"]
    assert len(inbound) == 1 and inbound[0].port == 22 and inbound[0].source not in ("aux", "mgmt")
    assert "listens nowhere" in inbound[0].why
    # and the plan says the fabric's own inbound drop cannot be shown that way
    assert any(s.startswith("aux: no approved path into it") for s in plan.skipped)


def test_a_kept_control_host_is_neither_a_collector_nor_probed() -> None:
    topo = build_topology("rfplan", 2, 1)
    policy = parse_policy(render_policy(topo, {"aux"}), "plan")
    subject = resolve_subject(policy, node="aux")
    listening = {"aux": frozenset({22}), "mgmt": frozenset({8000, 22}), "storage": frozenset({8080}),
                 "jump": frozenset({22})}
    sources = [n.name for n in policy.nodes]
    plan = containment_plan(policy, subject, (topo.address("mgmt"),), listening, sources,
                            keep=(topo.address("jump"),))
    assert not [p for p in plan.probes if "jump" in (p.source, p.destination)], plan.probes
    assert any("jump: kept reachable" in s for s in plan.skipped)
    allows = [p for p in plan.probes if p.expected == "allow"]
    assert {p.destination for p in allows} == {"mgmt"}


def test_a_rank_is_probed_inbound_on_its_jobs_approved_collective_path() -> None:
    topo = build_topology("rfplan", 2, 1)
    policy = parse_policy(render_policy(topo), "plan")
    subject = resolve_subject(policy, node="worker-1")
    listening = {"worker-0": frozenset({29500, 41000}), "worker-1": frozenset({41007}),
                 "mgmt": frozenset({8000, 22}), "storage": frozenset({8080})}
    sources = [n.name for n in policy.nodes]
    plan = containment_plan(policy, subject, (topo.address("mgmt"),), listening, sources)
    inbound = [p for p in plan.probes if p.destination == "worker-1" and p.expected == "deny"]
    # the matrix probes train-a's collective at its rendezvous on worker-0; into worker-1 the approved path
    # is found from the flow itself, on the port the rank listens on
    assert [(p.source, p.port) for p in inbound] == [("worker-0", 41007)], inbound
    assert "train-a-collective" in inbound[0].why


def test_the_fabric_check_lifts_a_jobs_last_rank_on_its_own_approved_paths() -> None:
    """A flow approved for a whole job (its storage reads) is shown from the contained rank itself, not from the
    job's first member: with its collective down (the job stalled), the last rank still has paths to lift."""
    topo = build_topology("rfplan", 4, 2)
    policy = parse_policy(render_policy(topo), "plan")
    listening = {"mgmt": frozenset({8000, 22}), "storage": frozenset({8080}), "worker-0": frozenset({29500})}
    mgmt = topo.address("mgmt")
    specs = fabric_probes(policy, ["worker-3"], listening, (mgmt,))
    assert specs and {p.source for p in specs} == {"worker-3"}, specs
    assert all(p.expected == "deny" and p.host != mgmt and p.destination != "worker-3" for p in specs)
    assert ("storage", 8080) in {(p.destination, p.port) for p in specs}
    # nothing but the collectors listening: nothing to lift, so the fabric alone is not checked
    assert fabric_probes(policy, ["worker-3"], {"mgmt": frozenset({8000})}, (mgmt,)) == []
