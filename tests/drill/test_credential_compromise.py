"""The credential-compromise drill's pure parts: whose credential is stolen, what is asked with it, how an
answer is judged — and the gate's address binding that refuses a copied credential (no lab)."""

from __future__ import annotations

import json
import re

import pytest

from ringfence.drill.credential_compromise import (
    SCENARIO,
    Request,
    attack_plan,
    choose_victim,
    judge_attack,
)
from ringfence.drill.interface import DrillError
from ringfence.drill.registry import NAMES, scenarios
from ringfence.enforce.revoke import judge_revoked
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.policy import Policy, parse_policy
from ringfence.secure import pki
from ringfence.secure.layers._tls_mesh import Rule, authorise, bound_to
from ringfence.secure.layers.tls import bindings, identity_of, rules_for


def _policy(workers: int = 4, jobs: int = 2) -> Policy:
    return parse_policy(render_policy(build_topology("rfunit", workers, jobs)), "two-jobs")


STORAGE = Request("storage-http", "storage", "10.77.2.10", 8080, "GET", "/datasets/train-b/shard-0")


def _gate_reply(status: int, why: str) -> dict[str, object]:
    return {"outcome": "response", "status": status, "body": json.dumps({"error": why, "by": "ringfence-tls"})}


def test_the_victim_is_a_rank_of_the_last_job_so_the_first_stays_a_bystander() -> None:
    policy = _policy()
    assert choose_victim(policy, "aux") == ("worker-2", "train-b")
    assert choose_victim(policy, "aux", "worker-1") == ("worker-1", "train-a")
    assert choose_victim(policy, "worker-2") == ("worker-0", "train-a")  # never the attacker's own job
    with pytest.raises(DrillError, match="no job rank"):
        choose_victim(policy, "aux", "storage")


def test_the_stolen_rank_identity_is_entitled_to_every_planned_request() -> None:
    policy = _policy()
    plan, skipped = attack_plan(policy, ["storage-http", "mgmt-api", "replica-sink"], "train-b", 0)
    assert [(r.service, r.method, r.url) for r in plan] == [
        ("storage-http", "GET", "https://10.77.2.10:8080/datasets/train-b/shard-0"),
        ("mgmt-api", "POST", "https://10.77.3.10:8000/report"),
    ]
    assert json.loads(plan[1].body)["job"] == "train-b"
    assert skipped and "replica-sink" in skipped[0]
    # what makes the theft worth it: the gate's own rules authorise exactly these requests for the rank ...
    ident = pki.parse_identity(identity_of(policy, "worker-2"))
    for req in plan:
        rules = tuple(Rule(r["method"], re.compile(r["path"]), r["allow"]) for r in rules_for(req.service, policy))
        assert authorise(rules, ident, req.method, req.path)[0], req
    # ... and aux's own identity is not entitled to them
    aux = pki.parse_identity(identity_of(policy, "aux"))
    rules = tuple(Rule(r["method"], re.compile(r["path"]), r["allow"]) for r in rules_for("storage-http", policy))
    assert not authorise(rules, aux, "GET", plan[0].path)[0]


def test_a_copied_rank_identity_is_refused_from_another_address() -> None:
    policy = _policy()
    b = {k: frozenset(v) for k, v in bindings(policy).items()}
    rank = pki.parse_identity(identity_of(policy, "worker-2"))
    w2 = policy.node("worker-2").addresses[0]  # type: ignore[union-attr]
    aux = policy.node("aux").addresses[0]  # type: ignore[union-attr]
    assert b[rank.uri] == {w2}
    assert bound_to(b, rank, w2) == (True, "")
    ok, why = bound_to(b, rank, aux)
    assert not ok and w2 in why and aux in why and why.startswith("address binding")
    stranger = pki.parse_identity("spiffe://lab/job/train-z/rank/0")
    assert not bound_to(b, stranger, w2)[0]  # an identity the policy gives no node: refused
    assert bound_to(None, rank, aux) == (True, "")  # a sidecar configured before bindings: identity alone


def test_an_attack_answered_by_the_service_got_through() -> None:
    assert judge_attack({"outcome": "response", "status": 200, "body": "shard"}, {}, [], STORAGE)[0] is True
    # a 404 from the service itself still means the gate let the stolen identity in
    assert judge_attack({"outcome": "response", "status": 404, "body": "no"}, {}, [], STORAGE)[0] is True


def test_an_attack_is_stopped_only_by_a_named_refusal() -> None:
    gate = [{"result": "denied", "reason": "address binding: spiffe://lab/job/train-b/rank/0 is bound to x"}]
    through, why = judge_attack(_gate_reply(403, "bound"), {}, gate, STORAGE)
    assert through is False and "address binding" in why and "storage" in why
    # the reply's body comes back cut short: the gate's own log still tells its refusal from the service's
    cut = {"outcome": "response", "status": 403, "body": '{"error": "spiffe://lab/job/train-b/rank/0 may not GE'}
    assert judge_attack(cut, {}, gate, STORAGE)[0] is False
    assert judge_attack(cut, {}, [], STORAGE)[0] is True  # no gate said no: the service itself answered
    through, why = judge_attack({"outcome": "refused", "error": "timed out"}, {"fabric/inet": 3}, [], STORAGE)
    assert through is False and "denied@fabric/inet +3" in why
    refused = [{"result": "refused", "reason": "certificate of x is revoked"}]
    assert judge_attack({"outcome": "closed"}, {}, refused, STORAGE)[0] is False
    # a timeout nobody attributes to policy proves nothing
    through, why = judge_attack({"outcome": "refused", "error": "timed out"}, {}, [], STORAGE)
    assert through is None and "not known" in why


def test_a_revoked_copy_counts_as_refused_only_when_the_gate_says_revoked() -> None:
    revoked = [{"result": "refused", "reason": "certificate of x (ab) is revoked", "t": 1.0}]
    assert judge_revoked({"outcome": "closed"}, revoked, STORAGE)[0] is False
    assert judge_revoked({"outcome": "response", "status": 200, "body": ""}, [], STORAGE)[0] is True
    other = [{"result": "refused", "reason": "TLS handshake failed: reset"}]
    assert judge_revoked({"outcome": "closed"}, other, STORAGE)[0] is None
    assert judge_revoked({"outcome": "refused", "error": "timed out"}, [], STORAGE)[0] is None


def test_both_scenarios_are_in_the_registry_under_their_cli_names() -> None:
    from ringfence.cli.drill_cmd import SCENARIOS
    from ringfence.drill.mgmt_failure import SCENARIO as MGMT

    table = scenarios()
    assert table["credential-compromise"] is SCENARIO and table["management-plane-failure"] is MGMT
    assert set(table) <= set(NAMES) == set(SCENARIOS)


def test_a_drop_is_attributed_to_the_one_connection_by_its_source_port() -> None:
    from ringfence.drill._site import moved

    key = ("10.77.1.50", "10.77.2.10", "tcp", 40001, 8080)
    other = ("10.77.1.50", "10.77.2.10", "tcp", 40002, 8080)  # the same node's own traffic to the same port
    before = {"fabric/inet": {other: 5}}
    after = {"fabric/inet": {key: 2, other: 9}, "aux/inet": {}}
    assert moved(before, after, saddr="10.77.1.50", daddr="10.77.2.10", dport=8080, sport=40001) == {"fabric/inet": 2}
    assert moved(before, {"fabric/inet": {other: 9}}, saddr="10.77.1.50", daddr="10.77.2.10", dport=8080,
                 sport=40001) == {}
    assert moved(before, after, saddr="10.77.1.50", daddr="10.77.2.10", dport=8080, sport=None) == {"fabric/inet": 6}
