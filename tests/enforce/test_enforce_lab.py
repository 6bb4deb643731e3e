"""Apply, prove and roll back on the real lab: approved traffic keeps flowing, denials are proven by
their own drop counters, a refused policy changes nothing, and rollback lifts the policy again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ringfence.enforce import UnsafePolicy
from ringfence.enforce.apply import FABRIC, apply_policy, live_rulesets, rollback
from ringfence.enforce.probe import denied_packets, tcp_probe
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.lab import Lab
from ringfence.lab.points import lab_inventory, lab_points
from ringfence.policy import parse_policy

pytestmark = [pytest.mark.privileged, pytest.mark.slow]

_PROGRESS = [("worker-0-worker", "steps"), ("worker-1-worker", "steps"), ("worker-0-worker", "reports"),
             ("storage-storage", "replicated"), ("user-user", "jobs_submitted"), ("jump-jump", "ssh_ok"),
             ("aux-aux", "metrics_sent")]


def _counters(lab: Lab) -> dict[tuple[str, str], int]:
    st = lab.agent_status()
    return {(a, c): int(st.get(a, {}).get("counters", {}).get(c, 0)) for a, c in _PROGRESS}


def test_apply_probe_rollback_on_the_lab(lab: Lab, tmp_path: Path) -> None:
    policy = parse_policy(lab.policy_yaml(), "lab-policy")
    points = lab_points(lab)
    store = EvidenceStore.open(tmp_path / "evidence")
    target = f"lab:{lab.name}"
    mgmt, storage, external = (lab.topology.address(n) for n in ("mgmt", "storage", "external"))
    v1 = apply_policy(policy, points, store, target=target, inventory=lab_inventory(lab))
    try:
        before = _counters(lab)
        # permitted: TCP connect plus the application's own greeting
        for src, host, port, app in (("jump", mgmt, 22, "ssh"), ("user", mgmt, 8000, "http"),
                                     ("worker-0", storage, 8080, "http"), ("storage", external, 9000, "http")):
            p = tcp_probe(points[src], host, port, app=app)
            assert p.outcome == "connected" and p.app_ok, (src, host, port, p)
        # denied: the probe times out AND its own element in a denied set moved
        proofs = {}
        for src, host, port in (("user", mgmt, 22), ("aux", storage, 8080), ("worker-0", external, 9000),
                                ("aux", lab.topology.address("worker-0"), 29500)):
            p = tcp_probe(points[src], host, port, timeout=1.5)
            assert p.outcome == "timeout", (src, host, port, p)
            packets, where = denied_packets([points[src], points[FABRIC], *(
                [points[n] for n in lab.topology.node_names() if lab.topology.address(n) == host])],
                lab.topology.address(src), host, p.sport, port)
            assert packets >= 1, (src, host, port)
            proofs[(src, port)] = where
        assert proofs[("user", 22)][0].startswith("user/")  # the source node's own egress rule dropped it
        # the lab's own traffic keeps flowing under the policy
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = _counters(lab)
            if all(now[k] > before[k] for k in _PROGRESS):
                break
            time.sleep(0.5)
        stalled = [k for k in _PROGRESS if now[k] <= before[k]]
        assert not stalled, f"traffic stopped under the policy: {stalled}"
        rules = live_rulesets(points)
        assert set(rules) == set(points) and rules[FABRIC]["bridge"]["nftables"]

        # a refused policy changes nothing
        bad = parse_policy(lab.policy_yaml().replace("approved:\n", "approved:\n  - {id: all, from: {cidr: "
                                                     "0.0.0.0/0}, to: {cidr: 0.0.0.0/0}, proto: any, "
                                                     "class: management}\n", 1), "bad")
        with pytest.raises(UnsafePolicy, match="any to any"):
            apply_policy(bad, points, store, target=target, inventory=lab_inventory(lab))
        assert tcp_probe(points["user"], mgmt, 22, timeout=1).outcome == "timeout"
    finally:
        back = rollback(points, store, target=target)
    assert back.version == "none" and back.previous == v1.version
    # lifted: the same path now connects, so the earlier timeout was the policy's doing
    assert tcp_probe(points["user"], mgmt, 22, app="ssh").outcome == "connected"
    assert store.verify().ok
    actions = [r.data for r in store.records() if r.source == "enforce.apply" and r.kind is RecordKind.ACTION]
    assert [a["action"] for a in actions] == ["apply", "rollback"]
    assert actions[0]["version"] == v1.version and "+" in actions[0]["diff"]
