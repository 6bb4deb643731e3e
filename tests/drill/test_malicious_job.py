"""The malicious-job drill's judgement (what got through, what was stopped, what was detected with whose
identity), the attacker's program against real loopback servers, and the object server's per-job refusal."""

from __future__ import annotations

import http.client
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ringfence.drill._attack import (
    Conn,
    Outcome,
    approved_to,
    attack,
    combine,
    detection_of,
    judge_connection,
    match_decisions,
    moved,
    who,
)
from ringfence.drill.interface import DrillError
from ringfence.drill.malicious_job import (
    _jobs,
    admin_ssh,
    gate_denials,
    judge_read,
    parse_object_log,
    refusals,
    scan_targets,
    storage_service,
)
from ringfence.drill.registry import NAMES, scenarios
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.policy import Policy, parse_policy
from ringfence.policy.matrix import resolve
from ringfence.targets.interface import RunResult, TargetError
from ringfence.targets.local import LocalExecutor


@pytest.fixture(scope="module")
def policy() -> Policy:
    return parse_policy(render_policy(build_topology("rfunit", 4, 2)), "two-jobs")


def _o(outcome: str, *, sport: int = 40000, reply: str = "", sent: int = 0, conn: Conn | None = None) -> Outcome:
    return Outcome(conn or Conn("worker-0", "10.77.1.10", 29500), outcome, sport, sent, reply, time.time())


# ------------------------------------------------------------------ judging one connection


def test_a_connection_that_connected_got_through() -> None:
    got, why = judge_connection(_o("connected", reply="SSH-2.0-OpenSSH_9.2\r\n"), True, {})
    assert got is True and "SSH-2.0" in why


def test_a_drop_counts_only_on_a_listening_port_with_its_own_counter_moved() -> None:
    assert judge_connection(_o("timeout"), True, {"fabric/inet": 2})[0] is False
    assert "denied@fabric/inet +2" in judge_connection(_o("timeout"), True, {"fabric/inet": 2})[1]
    assert judge_connection(_o("reset"), True, {"worker-2/inet": 1})[0] is False
    # a timeout nobody can tie to policy, a silent port, an unknown port, a refusal: nothing proven
    assert judge_connection(_o("timeout"), True, {})[0] is None
    assert judge_connection(_o("timeout"), False, {"fabric/inet": 1})[0] is None
    assert judge_connection(_o("timeout"), None, {"fabric/inet": 1})[0] is None
    assert judge_connection(_o("refused"), True, {"fabric/inet": 1})[0] is None
    assert judge_connection(_o("unreachable", reply="ssh: no route"), True, {})[0] is None


def test_combine_any_through_wins_then_any_unproven() -> None:
    stop, through, unknown = (False, "a"), (True, "b"), (None, "c")
    assert combine([stop, through, unknown]) == (True, "b")
    assert combine([stop, unknown]) == (None, "c")
    assert combine([stop, stop]) == (False, "a; a")
    assert combine([])[0] is None


def test_moved_is_the_growth_of_exactly_that_element() -> None:
    key = ("10.77.1.12", "10.77.1.10", "tcp", 40000, 29500)
    other = ("10.77.1.12", "10.77.1.10", "tcp", 40001, 29500)
    before = {"fabric/inet": {key: 1, other: 5}}
    after = {"fabric/inet": {key: 3, other: 9}, "worker-2/inet": {key: 1}}
    assert moved(before, after, key) == {"fabric/inet": 2, "worker-2/inet": 1}
    assert moved(after, after, key) == {}


# ------------------------------------------------------------------ the dataset read


def _read(status: str, body: str) -> Outcome:
    conn = Conn("storage", "10.77.2.10", 8080, "GET", "/datasets/train-a/shard-0", first_line=False)
    return _o("connected", reply=f"HTTP/1.0 {status}\r\nContent-Type: x\r\n\r\n{body}", conn=conn)


def test_the_dataset_read_got_through_on_200_and_was_stopped_on_403() -> None:
    assert judge_read(_read("200 OK", '{"id": "train-a-0-0"}'), {}, "storage")[0] is True
    got, why = judge_read(_read("403 Forbidden", '{"error": "objects of job train-a are not served to '
                                                 '10.77.1.12"}'), {}, "storage")
    assert got is False and "the object server" in why and "10.77.1.12" in why
    assert judge_read(_read("403 Forbidden", '{"error": "identity not allowed"}'), {}, "storage")[1].startswith(
        "refused by the store's gate")
    # a gateway error is neither a read nor a refusal
    assert judge_read(_read("502 Bad Gateway", "tls failed"), {}, "storage")[0] is None
    # dropped on the way (a job with no storage path at all) is a stop by policy, proven as any other
    assert judge_read(_o("timeout"), {"fabric/inet": 1}, "storage")[0] is False


def test_refusals_name_the_actor_and_the_victims_prefix_only() -> None:
    log = "\n".join([
        json.dumps({"time": 100.0, "peer": "10.77.1.12", "job": "train-a", "result": "refused", "method": "GET",
                    "path": "/datasets/train-a/shard-0"}),
        '{"torn line',
        json.dumps({"time": 100.0, "peer": "10.77.1.50", "job": "train-a", "result": "refused"}),  # aux, not them
        json.dumps({"time": 10.0, "peer": "10.77.1.12", "job": "train-a", "result": "refused"}),  # before the drill
        json.dumps({"time": 101.0, "peer": "10.77.1.13", "job": "train-c", "result": "refused"}),  # another prefix
        "[1, 2]",
    ])
    rows = parse_object_log(log)
    assert len(rows) == 4
    hits = refusals(rows, ["10.77.1.12", "10.77.1.13"], "train-a", 99.0)
    assert [r["peer"] for r in hits] == ["10.77.1.12"]


def test_with_tls_the_gates_denial_of_the_victims_prefix_is_the_detection() -> None:
    base = {"dir": "in", "node": "storage", "peer": "10.77.1.12", "method": "GET", "result": "denied",
            "peer_identity": "spiffe://lab/job/train-b/rank/0", "reason": "rule job:train-a"}
    events = [
        {**base, "t": 101.0, "path": "/datasets/train-a/shard-0"},
        {**base, "t": 100.5, "path": "/checkpoints/train-a/rank-0/step-9"},
        {**base, "t": 101.0, "path": "/datasets/train-b/shard-0", "result": "allowed"},  # its own data
        {**base, "t": 101.0, "path": "/datasets/train-a/shard-0", "dir": "out"},  # the client side's view
        {**base, "t": 101.0, "path": "/datasets/train-a/shard-0", "node": "mgmt"},
        {**base, "t": 101.0, "path": "/datasets/train-a/shard-0", "peer": "10.77.1.50"},  # aux
        {**base, "t": 50.0, "path": "/datasets/train-a/shard-0"},  # before the drill
        {**base, "t": 101.0, "path": "/datasets/train-ab/shard-0"},  # another job whose name only begins alike
    ]
    hits = gate_denials(events, "storage", ["10.77.1.12", "10.77.1.13"], "train-a", 99.0)
    assert [e["path"] for e in hits] == ["/checkpoints/train-a/rank-0/step-9", "/datasets/train-a/shard-0"]


# ------------------------------------------------------------------ planning from the policy


def test_jobs_services_and_scan_targets_come_from_the_policy(policy: Policy) -> None:
    actor, victim = _jobs(policy, None)
    assert (actor.name, victim.name) == ("train-b", "train-a")
    assert storage_service(policy) == ("storage", "10.77.2.10", 8080)
    assert admin_ssh(policy) == ("mgmt", "10.77.3.10", 22)
    listening: dict[str, frozenset[int] | None] = {
        "worker-0": frozenset({22, 29500, 40001, 40002, 40003, 40004, 40005}), "worker-1": None}
    scan = scan_targets(policy, victim, listening)
    assert [c.port for c in scan] == [29500, 40001, 40002, 40003]  # the rendezvous first, port 22 is no rank's
    assert {c.node for c in scan} == {"worker-0"} and all(c.mark for c in scan)
    with pytest.raises(DrillError, match="no job 'nosuch'"):
        _jobs(policy, "nosuch")
    one = parse_policy(render_policy(build_topology("rfunit", 2, 1)), "one-job")
    with pytest.raises(DrillError, match="needs another job"):
        _jobs(one, None)


def test_who_names_the_node_its_address_its_job_and_identity(policy: Policy) -> None:
    assert who(policy, "worker-2") == "worker-2 (10.77.1.12), job train-b (spiffe://lab/job/train-b)"
    assert who(policy, "aux") == "aux (10.77.1.50) (spiffe://lab/node/aux)"


def test_approved_to_follows_the_policys_flows(policy: Policy) -> None:
    m = resolve(policy)
    assert approved_to(m, "worker-2", "10.77.2.10", 8080) == "train-b-storage"
    assert approved_to(m, "worker-2", "10.77.3.10", 22) is None
    assert approved_to(m, "worker-2", "10.77.1.10", 29500) is None  # another job's collective
    assert approved_to(m, "worker-3", "10.77.1.12", 29501) == "train-b-collective"


# ------------------------------------------------------------------ detection with identity


def _row(src: str, dst: str, dport: int, t: float, verdict: str = "drop", node: str = "fabric") -> dict[str, object]:
    return {"time": datetime.fromtimestamp(t, UTC), "src": src, "dst": dst, "dport": dport, "verdict": verdict,
            "rule": None, "prefix": "rf-drop fabric/forward", "node": node}


def test_detection_needs_a_drop_of_that_connection_attributed_to_the_actor(policy: Policy) -> None:
    keys = [("10.77.1.12", "10.77.3.10", 22)]
    rows = [
        _row("10.77.1.12", "10.77.3.10", 22, 90.0),  # before the attempt
        _row("10.77.1.12", "10.77.3.10", 22, 101.0, verdict="accept"),  # an accept is no detection
        _row("10.77.1.50", "10.77.3.10", 22, 101.0),  # aux's own lateral attempt: not the actor
        _row("10.77.1.12", "10.77.3.10", 8000, 101.0),  # another port
        _row("10.77.1.12", "10.77.3.10", 22, 100.5, node="worker-2"),
        _row("10.77.1.12", "10.77.3.10", 22, 100.2),
    ]
    m = match_decisions(rows, policy, ["worker-2", "worker-3"], keys, 99.5)
    assert [r["node"] for r in m] == ["fabric", "worker-2"]
    d = detection_of(m, policy, 100.0, 100.8, "firewall telemetry (NFLOG)")
    assert d.found and d.seconds == 0.8 and d.where == "fabric" and d.count == 2
    assert "job train-b (spiffe://lab/job/train-b)" in d.text and "worker-2 (10.77.1.12)" in d.text
    assert match_decisions(rows, policy, ["worker-0"], keys, 99.5) == []
    none = detection_of([], policy, 100.0, 101.0, "firewall telemetry")
    assert not none.found and none.seconds is None


# ------------------------------------------------------------------ the attacker's program, for real


class _Http(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"id": "train-a-0-0"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self) -> None:
        n = int(self.headers["Content-Length"])
        got = 0
        while got < n:
            got += len(self.rfile.read(min(65536, n - got)))
        self.send_response(201)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Http)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_the_attacker_really_reads_streams_and_meets_a_closed_port(server: int) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    outs = attack(LocalExecutor(), [
        Conn("storage", "127.0.0.1", server, "GET", "/datasets/train-a/shard-0", first_line=False),
        Conn("external", "127.0.0.1", server, "PUT", "/replica/exfil/worker-3/checkpoint", 300_000),
        Conn("worker-0", "127.0.0.1", port),
    ])
    read, put, refused = outs
    assert read.outcome == "connected" and read.status == 200 and "train-a-0-0" in read.reply
    assert judge_read(read, {}, "storage")[0] is True
    assert put.outcome == "connected" and put.sent == 300_000 and put.status == 201
    assert refused.outcome == "refused" and judge_connection(refused, True, {"fabric/inet": 1})[0] is None
    assert all(o.sport > 0 for o in outs)


class _Broken:
    name = "broken"

    def __init__(self, stdout: bytes = b"", rc: int = 0, raise_: bool = False) -> None:
        self.stdout, self.rc, self.raise_ = stdout, rc, raise_

    def run(self, argv: object, *, timeout: float = 30.0, stdin: object = None, env: object = None) -> RunResult:
        if self.raise_:
            raise TargetError("ssh: connect to host broken: No route to host")
        return RunResult(("python3",), self.rc, self.stdout, b"Traceback: boom", 0.1)

    def spawn(self, *a: object, **k: object) -> object:
        raise NotImplementedError

    def copy_to(self, local: Path, remote: str) -> None:
        raise NotImplementedError

    def copy_from(self, remote: str, local: Path) -> None:
        raise NotImplementedError


def test_an_attack_that_did_not_run_is_an_error_per_connection_never_a_stop() -> None:
    conns = [Conn("mgmt", "10.77.3.10", 22), Conn("worker-0", "10.77.1.10", 29500)]
    for ex in (_Broken(rc=1), _Broken(b"[]"), _Broken(b"not json"), _Broken(raise_=True)):
        outs = attack(ex, conns)  # type: ignore[arg-type]  # a fake executor
        assert len(outs) == 2 and {o.outcome for o in outs} <= {"error", "unreachable"}
        assert all(judge_connection(o, True, {"fabric/inet": 1})[0] is None for o in outs)


# ------------------------------------------------------------------ the object server's own refusal


def _object_server(tmp_path: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The lab's object server on a free port, listening. A port found free can be taken by another process
    before the server binds it (the server then exits): then again on another port, up to three times."""
    err = tmp_path / "storage.err"
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with err.open("wb") as fh:
            proc = subprocess.Popen([sys.executable, "-m", "ringfence.lab.agents.storage", "--bind", "0.0.0.0",
                                     "--port", str(port), "--status-file", str(tmp_path / "storage.json"), "--owner",
                                     "train-a=127.0.0.3", "--owner", "train-b=127.0.0.2", "--refusal-log", str(log)],
                                    stderr=fh)
        deadline = time.monotonic() + 120  # a Python start on a busy machine; bounded by what is observed
        while proc.poll() is None and time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return proc, port
            time.sleep(0.1)
        proc.kill()
        proc.wait()
    raise AssertionError(f"the object server never listened: {err.read_text()[-2000:]}")


def test_the_object_server_serves_a_jobs_prefix_to_its_ranks_only(tmp_path: Path) -> None:
    log = tmp_path / "objects.json"
    proc, port = _object_server(tmp_path, log)
    try:
        def get(src: str, path: str) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(src, 0))
            try:
                conn.request("GET", path)
                return conn.getresponse().status
            finally:
                conn.close()

        assert get("127.0.0.2", "/datasets/train-b/shard-0") == 200  # its own job's data
        assert get("127.0.0.2", "/datasets/train-a/shard-0") == 403  # another job's
        assert get("127.0.0.3", "/datasets/train-a/shard-0") == 200
        assert get("127.0.0.1", "/datasets/train-a/shard-0") == 200  # the node's TLS gate, which decided already
        assert get("127.0.0.4", "/datasets/train-c/shard-0") == 403  # a job nobody owns is nobody's
        rows = parse_object_log(log.read_text())
        # every object request is on the record, with its peer, job, result and size (a served read too)
        assert [(r["peer"], r["job"], r["result"]) for r in rows] == [
            ("127.0.0.2", "train-b", "served"), ("127.0.0.2", "train-a", "refused"), ("127.0.0.3", "train-a", "served"),
            ("127.0.0.1", "train-a", "served"), ("127.0.0.4", "train-c", "refused")]
        assert all(r["bytes"] > 0 for r in rows if r["result"] == "served")
        assert [r["peer"] for r in refusals(rows, ["127.0.0.2", "127.0.0.3"], "train-a", time.time() - 60)] == [
            "127.0.0.2"]
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_registry_offers_both_scenarios_under_their_names() -> None:
    table = scenarios()
    assert {"malicious-job", "exfiltration"} <= set(table) <= set(NAMES)
    assert all(table[n].name == n and table[n].summary for n in table)


class _Telemetry(_Broken):
    """A point whose executor serves a ulogd log (and records what it was asked to read)."""

    def __init__(self, lines: list[dict[str, object]]) -> None:
        super().__init__(("\n".join(json.dumps(x) for x in lines) + "\n").encode())
        self.asked: list[str] = []

    def run(self, argv: object, *, timeout: float = 30.0, stdin: object = None, env: object = None) -> RunResult:
        assert isinstance(argv, list)
        self.asked.append(argv[3])
        return RunResult(tuple(argv), 0, self.stdout, b"", 0.01)


def _ulogd(src: str, dst: str, dport: int, t: float, prefix: str = "rf-drop worker-2/output ",
           label: int = 0) -> dict[str, object]:
    return {"oob.time.sec": int(t), "oob.time.usec": int((t % 1) * 1e6), "src_ip": src, "dest_ip": dst,
            "src_port": 40000, "dest_port": dport, "ip.protocol": 6, "raw.label": label, "oob.prefix": prefix,
            "dvc": "worker-2"}


def test_await_detection_reads_the_points_decision_logs_and_names_the_job(policy: Policy, tmp_path: Path) -> None:
    from ringfence.drill._attack import await_detection
    from ringfence.drill.interface import DrillContext
    from ringfence.evidence import EvidenceStore

    t = time.time()
    point = _Telemetry([_ulogd("10.77.1.12", "10.77.3.10", 22, t + 0.1),
                        _ulogd("10.77.1.12", "10.77.1.10", 29500, t + 0.1, "train-a-collective", 1)])  # accepted
    ctx = DrillContext(object(), policy, EvidenceStore.open(tmp_path / "ev"), tmp_path, "lab:rfunit")  # type: ignore[arg-type]
    found = await_detection(ctx, {"worker-2": point}, ["worker-2", "fabric"], {  # type: ignore[dict-item]
        "ssh-mgmt": ([("10.77.1.12", "10.77.3.10", 22)], t),
        "scan-ranks": ([("10.77.1.12", "10.77.1.10", 29500)], t),
    }, ["worker-2", "worker-3"], bound=0.5)
    assert found["ssh-mgmt"].found and found["ssh-mgmt"].where == "worker-2"
    assert "job train-b" in found["ssh-mgmt"].text
    assert not found["scan-ranks"].found and "within 0.5s" in found["scan-ranks"].text
    assert point.asked and all(p == "/var/log/ringfence/telemetry/ulogd.json" for p in point.asked)


def test_the_detector_waits_only_where_a_drop_rule_can_have_logged() -> None:
    from ringfence.drill._attack import look_for

    assert look_for([_o("connected"), _o("timeout")], 10.0) == 10.0
    assert look_for([_o("reset")], 10.0) == 10.0
    assert look_for([_o("connected"), _o("refused")], 10.0) == 0.0
    assert look_for([], 10.0) == 0.0
