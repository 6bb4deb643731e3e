"""The exfiltration drill's judgement: where it may send, what counts as bytes out (the site's capture, never
the attacker's count), when a stop is proven, and that a drill without its gateway part cannot pass."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from ringfence.controls.interface import Verdict
from ringfence.drill._attack import Conn, Outcome
from ringfence.drill._gateway import gateway_detection, judge_gateway
from ringfence.drill.exfiltration import bytes_out, judge_exfil, outside_target, suspect_node
from ringfence.drill.interface import Attempt, Bystander, DrillError, DrillReport
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.policy import Policy, parse_policy
from ringfence.policy.egress import Gateway, find_gateway


@pytest.fixture(scope="module")
def policy() -> Policy:
    return parse_policy(render_policy(build_topology("rfunit", 4, 2)), "two-jobs")


def _o(outcome: str, sport: int, sent: int = 0) -> Outcome:
    conn = Conn("external", "10.77.9.10", 9000, "PUT", "/replica/exfil/worker-3/checkpoint", 4 << 20)
    return Outcome(conn, outcome, sport, sent, "", time.time())


def _flows(rows: list[tuple[str, str, int | None]], ports: list[tuple[int, int]] | None = None) -> pa.Table:
    ports = ports or [(40000, 9000)] * len(rows)
    return pa.table({"src": [r[0] for r in rows], "dst": [r[1] for r in rows],
                     "sport": pa.array([p[0] for p in ports], pa.int32()),
                     "dport": pa.array([p[1] for p in ports], pa.int32()),
                     "payload_bytes": pa.array([r[2] for r in rows], pa.int64())})


def test_the_suspect_and_where_it_sends_come_from_the_policy(policy: Policy) -> None:
    assert suspect_node(policy, None) == "worker-3"  # the last rank of the last job: train-a stays a bystander
    assert suspect_node(policy, "worker-2") == "worker-2"
    with pytest.raises(DrillError, match="no node 'nosuch'"):
        suspect_node(policy, "nosuch")
    out = outside_target(policy, "worker-3")
    assert (out.node, out.address, out.port, out.service) == ("external", "10.77.9.10", 9000, "replica-sink")
    # storage may replicate there (checkpoint-replication): for it, nothing outside is unapproved
    with pytest.raises(DrillError, match="nothing to exfiltrate to"):
        outside_target(policy, "storage")


def test_bytes_out_are_the_payload_between_the_node_and_the_outside_address() -> None:
    flows = _flows([("10.77.1.13", "10.77.9.10", 0), ("10.77.2.10", "10.77.9.10", 9000),  # storage's own replica
                    ("10.77.1.13", "10.77.2.10", 5000)])
    assert bytes_out(flows, ["10.77.1.13"], "10.77.9.10") == 0
    assert bytes_out(_flows([("10.77.1.13", "10.77.9.10", 4_200_000)]), ["10.77.1.13"], "10.77.9.10") == 4_200_000
    assert bytes_out(_flows([("10.77.9.10", "10.77.1.13", 12)]), ["10.77.1.13"], "10.77.9.10") == 12  # either way
    assert bytes_out(_flows([("10.77.1.13", "10.77.9.10", None)]), ["10.77.1.13"], "10.77.9.10") is None
    # on the gateway's port only: the node's approved job-API reports to the same host are not the attempt
    to_mgmt = _flows([("10.77.1.13", "10.77.3.10", 700), ("10.77.1.13", "10.77.3.10", 0)],
                     [(40000, 8000), (40001, 8888)])
    assert bytes_out(to_mgmt, ["10.77.1.13"], "10.77.3.10", 8888) == 0
    assert bytes_out(to_mgmt, ["10.77.1.13"], "10.77.3.10") == 700


def test_a_stop_needs_every_try_dropped_by_policy_and_a_live_capture_with_zero_bytes() -> None:
    tries = [_o("timeout", 40000), _o("timeout", 40001)]
    dropped = [{"worker-3/inet": 2}, {"fabric/inet": 1}]
    assert judge_exfil(tries, dropped, True, 0, 40)[0] is False
    # one try not tied to policy, a dead capture, no capture, an unknown port: unproven
    assert judge_exfil(tries, [{"worker-3/inet": 2}, {}], True, 0, 40)[0] is None
    assert judge_exfil(tries, dropped, True, 0, 0)[0] is None
    assert judge_exfil(tries, dropped, True, None, 40)[0] is None
    assert judge_exfil(tries, dropped, None, 0, 40)[0] is None


def test_it_got_through_when_a_try_connected_or_the_capture_saw_bytes() -> None:
    got, why = judge_exfil([_o("connected", 40000, sent=4 << 20)], [{}], True, 4_300_000, 40)
    assert got is True and "sent 4194304 bytes" in why and "4300000 payload bytes" in why
    # the attacker saw a timeout, but the site's capture saw payload cross: it got through
    got, why = judge_exfil([_o("timeout", 40000)], [{"fabric/inet": 1}], True, 1200, 40)
    assert got is True and "1200 payload bytes" in why


def _report(direct: Attempt, gateway: Attempt) -> DrillReport:
    by = Bystander("train-a", ("worker-0", "worker-1"), 10, 20, 0.4, 10.0)
    return DrillReport("exfiltration", "lab:rfunit", "t0", "t1", (direct, gateway), by, True, "contained")


def test_without_an_egress_gateway_the_drill_is_unknown_never_pass_and_a_leak_fails_it() -> None:
    stopped = Attempt("exfil-direct", "worker-3", "external", "streamed", False, "dropped", True, "nflog", 0.4,
                      bytes_out=0)
    missing = Attempt("exfil-egress-gateway", "worker-3", "external via gateway", "same", None,
                      "not attempted: no egress gateway on this target")
    assert _report(stopped, missing).verdict is Verdict.UNKNOWN
    assert "not told: exfil-egress-gateway" in _report(stopped, missing).why()
    leaked = Attempt("exfil-direct", "worker-3", "external", "streamed", True, "connected", False, "", None,
                     bytes_out=4_300_000)
    assert _report(leaked, missing).verdict is Verdict.FAIL
    assert _report(leaked, missing).why() == "got through: exfil-direct"


def test_drill_list_offers_both_scenarios_with_their_summaries(capsys: pytest.CaptureFixture[str]) -> None:
    from ringfence.cli import main
    from ringfence.cli.drill_cmd import SCENARIOS
    from ringfence.drill.registry import NAMES

    assert SCENARIOS == NAMES
    assert main(["drill", "list"]) == 0
    lines = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines()}
    assert "outside the trust boundary" in lines["exfiltration"]
    assert "scans the first job's ranks" in lines["malicious-job"]


def _gw_try(outcome: str, sport: int, reply: str = "") -> Outcome:
    conn = Conn("mgmt", "10.77.3.10", 8888, "CONNECT", "10.77.9.10:9000", 0)
    return Outcome(conn, outcome, sport, 0, reply, time.time())


def _gateway(policy: Policy) -> Gateway:
    gw = find_gateway(parse_policy(render_policy(build_topology("rfunit", 4, 2), egress_gateway=True), "gw"))
    assert gw is not None
    return gw


def test_through_the_gateway_a_stop_is_its_logged_refusal_or_a_proven_drop_on_the_way(policy: Policy) -> None:
    gw, t0 = _gateway(policy), time.time()
    deny = {"client": "10.77.1.13", "time": datetime.fromtimestamp(t0 + 0.1, UTC), "decision": "deny",
            "reason": "unauthorized client", "node": "mgmt"}
    refused = [_gw_try("connected", 41000, "HTTP/1.0 403 Access denied\r\n")]
    v = judge_gateway(refused, [{}], True, [deny], "10.77.1.13", t0, gw, 0, 30)
    assert v.got_through is False and "refused by the gateway" in v.stopped_by and "admits only storage" in v.stopped_by
    ctx: Any = Ctx(policy)
    assert gateway_detection(v, ctx, "worker-3", t0, t0 + 1)[0] is True  # the gateway's log names it
    # a 403 the gateway's log does not back, or a log not read: unproven
    assert judge_gateway(refused, [{}], True, [], "10.77.1.13", t0, gw, 0, 30).got_through is None
    assert judge_gateway(refused, [{}], True, None, "10.77.1.13", t0, gw, 0, 30).got_through is None
    # dropped by policy before the gateway (its own denied element), no forward logged, capture alive with 0
    dropped = [_gw_try("timeout", 41001)]
    v = judge_gateway(dropped, [{"fabric/inet": 1}], True, [], "10.77.1.13", t0, gw, 0, 30)
    assert v.got_through is False and "dropped by policy (denied@fabric/inet +1)" in v.stopped_by
    assert judge_gateway(dropped, [{}], True, [], "10.77.1.13", t0, gw, 0, 30).got_through is None
    assert judge_gateway(dropped, [{"fabric/inet": 1}], True, [], "10.77.1.13", t0, gw, 0, 0).got_through is None


def test_through_the_gateway_a_tunnel_or_a_logged_forward_got_through(policy: Policy) -> None:
    gw, t0 = _gateway(policy), time.time()
    opened = [_gw_try("connected", 41000, "HTTP/1.0 200 Connection established\r\n")]
    assert judge_gateway(opened, [{}], True, [], "10.77.1.13", t0, gw, 0, 30).got_through is True
    allow = {"client": "10.77.1.13", "time": datetime.fromtimestamp(t0, UTC), "decision": "allow",
             "reason": "established", "node": "mgmt"}
    v = judge_gateway([_gw_try("timeout", 41001)], [{"fabric/inet": 1}], True, [allow], "10.77.1.13", t0, gw, 0, 30)
    assert v.got_through is True and "1 forward(s) for 10.77.1.13" in v.stopped_by
    # another client's decisions, or older ones, are not this attempt's
    other = dict(allow, client="10.77.2.10")
    old = dict(allow, time=datetime.fromtimestamp(t0 - 60, UTC))
    v = judge_gateway([_gw_try("timeout", 41001)], [{"fabric/inet": 1}], True, [other, old], "10.77.1.13", t0, gw,
                      0, 30)
    assert v.got_through is False


class Ctx:
    """Just what gateway_detection reads of a drill context."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
