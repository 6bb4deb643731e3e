"""``--target ssh`` on the lab's own nodes, driven only over OpenSSH, as it would drive a Slurm cluster.

``ringfence lab hosts`` starts an sshd in every node and writes the inventory; from then on the
layers are enabled, inspected and removed through SSH sessions from the jump node only. The
results must be the lab's: the same record, the same protection on the wire (judged from a lab
capture), and a node made unreachable mid-run is named in the error — never skipped, never hung.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringfence.bench.run import load_run
from ringfence.cli import main
from ringfence.errors import EnvironmentProblem
from ringfence.evidence import EvidenceStore
from ringfence.lab import Lab
from ringfence.lab.netns import namespace_pids, require_privileges
from ringfence.rollout import Rollout, StepStatus
from ringfence.secure.layers import tls_run, wireguard_run
from ringfence.secure.layers.runtime import StateStore
from ringfence.targets import ops
from ringfence.targets.hosts import load_hosts, ssh_site
from ringfence.targets.interface import Site, TargetError
from ringfence.targets.ssh import SshExecutor

pytestmark = [pytest.mark.privileged, pytest.mark.slow]


@pytest.fixture(scope="module")
def own_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Path, Path]]:
    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    work = tmp_path_factory.mktemp("ssh-site")
    lab = Lab.up(workers=2, jobs=1)
    try:
        hosts = work / "hosts.yaml"
        assert main(["lab", "hosts", "--name", lab.name, "-o", str(hosts)]) == 0
        policy = work / "policy.yaml"  # after the hosts: their sshd are administrative services of the policy
        policy.write_text(lab.policy_yaml())
        yield lab, hosts, policy
    finally:
        try:
            wireguard_run.disable_wireguard(lab.site())
            tls_run.disable_tls(lab.site())
        finally:
            StateStore(lab.name).forget()
            lab.down()


def _ssh(own_lab: tuple[Lab, Path, Path]) -> Site:
    return ssh_site(load_hosts(own_lab[1]))


def test_every_node_is_reached_over_ssh_inside_its_own_network(own_lab: tuple[Lab, Path, Path]) -> None:
    lab, _, _ = own_lab
    site = _ssh(own_lab)
    # every node — the jump host too, whose own ruleset is applied like any other's — and the fabric
    assert site.name == lab.name and set(site.hosts) == {*lab.topology.node_names(), "fabric"}
    for node in ("worker-0", "worker-1", "storage", "mgmt", "external", "jump"):
        ex = site.executor(node)
        assert isinstance(ex, SshExecutor)
        over_ssh = ex.run(["ip", "-o", "-4", "addr", "show"]).stdout
        in_netns = lab.executor(node).run(["ip", "-o", "-4", "addr", "show"]).stdout
        assert f" {lab.topology.address(node)}/".encode() in over_ssh
        assert sorted(over_ssh.split(b"\n")) == sorted(in_netns.split(b"\n"))
        # sshd really answered: the session knows it is one
        assert ex.run(["sh", "-c", 'echo "$SSH_CONNECTION"']).stdout.split()[2] == lab.topology.address(node).encode()


def test_a_host_key_not_pinned_for_that_host_is_refused(own_lab: tuple[Lab, Path, Path]) -> None:
    lab, hosts, _ = own_lab
    inv = load_hosts(hosts)
    w0, w1 = inv.hosts["worker-0"], inv.hosts["worker-1"]
    wrong = SshExecutor(w0.address, user=w0.user, key=Path(w0.key), known_hosts=Path(w1.known_hosts),
                        name="worker-0", prefix=w0.client_prefix, connect_timeout=5)
    with pytest.raises(TargetError, match="worker-0: ssh .* failed"):
        wrong.run(["true"], timeout=30)


def test_daemons_start_and_stop_over_ssh(own_lab: tuple[Lab, Path, Path], tmp_path: Path) -> None:
    site = _ssh(own_lab)
    ex = site.executor("aux")
    marker = f"/run/ringfence/secure/{site.name}-probe/"
    pid = ops.start_daemon(ex, ["sh", "-c", "sleep 120", marker], marker=marker, pidfile=f"{marker}p.pid",
                           log=f"{marker}p.log")
    try:
        assert ops.alive(ex, [pid], marker=marker) == {pid}
    finally:
        assert ops.stop_daemons(ex, [pid], marker=marker) == set()
        ops.remove_tree(ex, marker.rstrip("/"))
    deadline = time.monotonic() + 10
    while ops.alive(ex, [pid], marker=marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ops.alive(ex, [pid], marker=marker) == set()


def _cli_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    assert main(argv) == 0
    doc: dict[str, object] = json.loads(capsys.readouterr().out)
    return doc


def test_layers_enabled_over_ssh_protect_the_lab_as_the_lab_target_does(
    own_lab: tuple[Lab, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lab, hosts, policy = own_lab
    ssh = ["--target", "ssh", "--hosts", str(hosts), "--policy", str(policy)]
    done = _cli_json(["encrypt", "enable", "--class", "storage,management,replication", "--layer", "tls", *ssh],
                     capsys)
    assert done["classes"] == ["management", "replication", "storage"]
    wg = _cli_json(["encrypt", "enable", "--class", "collective", "--layer", "wireguard", *ssh], capsys)
    assert wg["nodes"] == ["worker-0", "worker-1"]
    assert wg["handshakes"].keys() == {"worker-0<->worker-1"} and None not in wg["handshakes"].values(), wg
    # one record, whichever executor family reads it
    over_ssh = _cli_json(["encrypt", "status", *ssh], capsys)
    on_lab = _cli_json(["encrypt", "status", "--target", "lab", "--name", lab.name], capsys)
    assert over_ssh == on_lab
    assert over_ssh["classes"] == {"collective": "wireguard", "management": "tls", "replication": "tls",
                                   "storage": "tls"}
    # the processes the layers run were started over SSH, inside the nodes' networks
    procs = StateStore(lab.name).read().processes
    assert {p.label for p in procs} >= {"tls-storage", "tls-worker-0", "wg-worker-0", "wg-worker-1"}
    # judged on the wire: from the lab's own fabric capture here, and below (the first half of `verify keys`)
    # from a capture taken on every host over SSH (each host's egress, merged) — every class encrypted both ways
    out = tmp_path / "keys-lab.json"
    for _ in range(3):  # a capture in which the job was in TCP back-off shows no collective: take another
        code = main(["verify", "confidentiality", "--target", "lab", "--name", lab.name, "--policy", str(policy),
                     "--seconds", "6", "-o", str(out)])
        if code == 0:
            break
    assert code == 0, out.read_text()
    on_the_fabric = json.loads(out.read_text())["classes"]
    # and the live key drills over SSH alone: rotation under load (the job watched through the ranks'
    # progress files), a wrong WireGuard key and an untrusted certificate each stop their traffic with no
    # plaintext and recover, bad credentials are refused — the same facts `--target lab` records
    keys = tmp_path / "keys-drills.json"
    for _ in range(2):  # a capture in TCP back-off shows no collective: the confidentiality half says so
        code = main(["verify", "keys", "--target", "ssh", "--hosts", str(hosts), "--policy", str(policy),
                     "--seconds", "6", "-o", str(keys)])
        if code == 0:
            break
    doc = json.loads(keys.read_text())
    assert code == 0, _what_failed(doc)
    assert {c: v["verdict"] for c, v in doc["classes"].items()} == {c: v["verdict"] for c, v in on_the_fabric.items()}
    assert all(doc["classes"][c]["verdict"] == "pass" and doc["classes"][c]["payload"]["encrypted"] > 0
               for c in ("storage", "collective", "management", "replication")), doc["classes"]
    assert {r["layer"] for r in doc["rotation"]} == {"tls", "wireguard"}, doc["rotation"]
    assert {f["layer"] for f in doc["fail_closed"]} == {"tls", "wireguard"}, doc["fail_closed"]
    assert all(f["plaintext_bytes"] == 0 and f["recovered"] for f in doc["fail_closed"]), doc["fail_closed"]
    assert {c["kind"]: c["outcome"] for c in doc["credentials"]}["revoked"] == "refused"


def _what_failed(keys: dict[str, object]) -> str:
    """The parts of a `verify keys` document that did not pass, each with its own detail, shortest first:
    CI keeps only the head of a failure's message."""
    parts = [f"verdict: {keys.get('verdict')}"]
    for name in ("classes", "scope", "rotation", "fail_closed", "credentials"):
        rows = keys.get(name) or []
        parts.extend(f"{name}: " + json.dumps({k: v for k, v in row.items() if k != "flows"})[:600]
                     for row in (rows.values() if isinstance(rows, dict) else rows)
                     if isinstance(row, dict) and row.get("verdict") not in ("pass", "exempt"))
    return "\n".join(parts) or json.dumps({k: v for k, v in keys.items() if k != "inventory"})[:3000]


def _probe_outcomes(argv: list[str], out: Path) -> tuple[int, dict[tuple[str, str, str], str]]:
    code = main([*argv, "-o", str(out)])
    doc = json.loads(out.read_text())
    rows = doc.get("probes", doc.get("results", []))
    return code, {(r["source"], r["destination"], r["expected"]): r["outcome"] for r in rows}


def test_probes_over_ssh_find_what_the_lab_target_finds(own_lab: tuple[Lab, Path, Path], tmp_path: Path) -> None:
    lab, hosts, policy = own_lab
    code_lab, on_lab = _probe_outcomes(["probe", str(policy), "--target", "lab", "--name", lab.name,
                                        "--store", str(tmp_path / "ev")], tmp_path / "lab.json")
    code_ssh, over_ssh = _probe_outcomes(["probe", str(policy), "--target", "ssh", "--hosts", str(hosts),
                                          "--store", str(tmp_path / "ev")], tmp_path / "ssh.json")
    assert on_lab and code_ssh == code_lab
    # every probe from a host the inventory reaches has the lab's outcome (jump is not in it: it is the client)
    from_hosts = {k: v for k, v in on_lab.items() if k[0] != "jump"}
    assert from_hosts and {k: over_ssh.get(k) for k in from_hosts} == from_hosts


@pytest.mark.parametrize("launcher", ["direct", "torchrun"])
def test_the_benchmark_launches_its_ranks_over_ssh(own_lab: tuple[Lab, Path, Path], tmp_path: Path,
                                                   launcher: str) -> None:
    lab, hosts, _ = own_lab
    pytest.importorskip("torch")
    run = tmp_path / "ssh-run.json"
    t0 = time.monotonic()
    assert main(["bench", "allreduce", "--target", "ssh", "--hosts", str(hosts), "--nodes", "worker-0,worker-1",
                 "--sizes", "1M", "--warmup", "1", "--iters", "3", "--repeats", "1", "--timeout", "300",
                 "--launcher", launcher, "-o", str(run)]) == 0
    print(f"\nbench over ssh, {launcher}: {time.monotonic() - t0:.1f} s", file=sys.__stderr__, flush=True)
    doc = json.loads(run.read_text())
    assert doc["config"]["nodes"] == ["worker-0", "worker-1"]
    assert all(r["wrong"] == 0 and r["busbw"] > 0 for rep in doc["repeats"] for r in rep["results"])
    assert doc["launch"] == {"launcher": launcher} and f"launcher: {launcher}" in doc["notes"]
    # nothing of the run is left on the hosts: every rank (and torchrun agent) ended with it
    assert _bench_processes(lab, ("worker-0", "worker-1")) == []


def _bench_processes(lab: Lab, nodes: tuple[str, ...]) -> list[str]:
    """Command lines of benchmark ranks and torchrun agents still running in ``nodes``' namespaces."""
    out = []
    for node in nodes:
        for pid in namespace_pids(lab.topology.namespace(node)):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue  # ended meanwhile
            if "ringfence.bench.worker" in cmd or "torch.distributed.run" in cmd:
                out.append(f"{node} {pid} {cmd}")
    return out


def _accepted(lab: Lab, node: str) -> int:
    """SSH sessions ``node``'s sshd has accepted so far (its log, LogLevel INFO)."""
    log = lab.paths.log_dir / f"{node}-sshd.log"
    return log.read_text(errors="replace").count("Accepted publickey") if log.exists() else 0


def test_the_rollout_runs_over_ssh(own_lab: tuple[Lab, Path, Path], capsys: pytest.CaptureFixture[str],
                                   tmp_path: Path) -> None:
    """plan → budget → TLS enabled and proven (step 1) → keys rotated (2) → baseline and canary layer (3) →
    the gate (4) → rolled back, every step through the hosts' sshd.

    That the gate fails a layer that costs bandwidth is shown on the lab target (wireguard-go,
    tests/rollout/test_rollout_lab.py); here the gate's own launches go over SSH and a no-op is never failed."""
    lab, hosts, policy = own_lab
    pytest.importorskip("torch")
    t0 = time.monotonic()
    ssh = ["--target", "ssh", "--hosts", str(hosts), "--policy", str(policy)]
    state, evidence = tmp_path / "ro.json", tmp_path / "evidence"
    common = ["--state", str(state), "--evidence", str(evidence)]
    assert main(["rollout", "plan", *common, "--pair", "worker-0,worker-1", "--layer", "noop", *ssh,
                 "--sizes", "1M", "--warmup", "1", "--iters", "8", "--repeats", "2", "--timeout", "240"]) == 0
    # two interleaved pairs (B A | A B), the fewest in which a drift in time cancels: with one pair of a few
    # iterations a noop canary once came out "fail" (p99 +186 %) through this module's WireGuard tunnel
    assert main(["rollout", "budget", *common, "--policy", str(policy), "--min-repeats", "2"]) == 0
    sessions = {n: _accepted(lab, n) for n in ("storage", "worker-0", "worker-1")}
    store = EvidenceStore.open(evidence)

    def step(n: int, tries: int = 1) -> StepStatus:
        t = time.monotonic()
        for _ in range(tries):  # a capture that saw no replication cannot tell: the step says run it again
            main(["rollout", "advance", *common, "--step", str(n)])
            status = Rollout.open(state, store).state.step(n).status
            if status is not StepStatus.PENDING:
                break
        print(f"\nrollout over ssh, step {n}: {status.value}, {time.monotonic() - t:.1f} s", file=sys.__stderr__,
              flush=True)
        return status

    # step 1 enables TLS over SSH, or finds it in force (this module's layer test enabled it over SSH): either way
    # its proof is a capture taken on every host over SSH
    assert step(1, tries=3) is StepStatus.DONE, Rollout.open(state, store).state.step(1).detail
    applied = store.get(Rollout.open(state, store).state.step(1).evidence[0]).data
    assert applied["verdict"] == "pass" and set(applied["classes"]) == {"storage", "management", "replication"}
    tls = StateStore(lab.name).read()
    assert {"storage", "management", "replication"} <= {c for c, layer in tls.classes.items() if layer == "tls"}
    assert {p.label for p in tls.processes} >= {"tls-storage", "tls-worker-0"}
    assert step(2) is StepStatus.DONE, Rollout.open(state, store).state.step(2).detail
    assert step(3) is StepStatus.DONE, Rollout.open(state, store).state.step(3).detail
    # the gate (step 4): the same benchmark again beside the layer, interleaved with the baseline on the same
    # pair, every launch over SSH. A no-op canary is never failed: passed, or inconclusive when the load moved
    gate = step(4)
    assert gate in (StepStatus.DONE, StepStatus.INCONCLUSIVE), Rollout.open(state, store).state.step(4).detail
    finding = Rollout.open(state, store).state.step(4).detail
    assert "gate fail" not in finding and ("gate pass" in finding or "gate inconclusive" in finding), finding
    capsys.readouterr()
    assert main(["rollout", "advance", *common, "--step", "5"]) == 2  # a no-op layer never goes fleet-wide
    assert "step 5" in capsys.readouterr().err
    assert main(["rollout", "abort", *common, "--reason", "rollout over ssh: proven to the gate"]) == 0
    ro = Rollout.open(state, store)
    assert ro.state.aborted and ro.state.step(3).status is StepStatus.ROLLED_BACK
    # the record names the SSH target and its inventory; the measurements ran on the canary over SSH
    assert ro.state.bench["target"] == "ssh" and ro.state.bench["hosts"] == str(hosts.resolve())
    plan = next(r for r in store.records() if r.data.get("event") == "plan")
    assert plan.data["target"] == "ssh"
    assert ro.state.baseline is not None
    baseline = load_run(state.with_name(ro.state.baseline.path))
    assert baseline.config.nodes == ("worker-0", "worker-1") and "launcher: direct" in baseline.notes
    # and it all went through sshd: the capture and TLS's sidecars on storage and the workers, the ranks on the workers
    assert all(_accepted(lab, n) > sessions[n] for n in sessions), (sessions, {n: _accepted(lab, n) for n in sessions})
    assert store.verify().ok
    print(f"\nrollout over ssh to the gate: {time.monotonic() - t0:.1f} s", file=sys.__stderr__,
          flush=True)


def test_a_host_made_unreachable_mid_run_is_named_not_skipped(
    own_lab: tuple[Lab, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lab, hosts, policy = own_lab
    sshd = next(p for n in lab.status().nodes for p in n.processes if p.label == "worker-1-sshd")
    # worker-1 stops answering SSH, its open sessions with it (the shared connection a run may hold): its
    # sshd and the session processes that sshd started; everything else keeps running
    sessions = [int(p) for p in namespace_pids(lab.topology.namespace("worker-1"))
                if Path(f"/proc/{p}/comm").exists() and Path(f"/proc/{p}/comm").read_text().strip() == "sshd"
                and int(p) != sshd.pid]
    os.kill(sshd.pid, signal.SIGTERM)
    for pid in sessions:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    capsys.readouterr()
    start = time.monotonic()
    code = main(["encrypt", "disable", "--layer", "wireguard", "--target", "ssh", "--hosts", str(hosts),
                 "--policy", str(policy)])
    err = capsys.readouterr().err
    assert code == 2 and "worker-1" in err, err
    assert time.monotonic() - start < 120
    # nothing was forgotten: the record still lists worker-1's daemon, so the lab target can finish the job
    assert any(p.node == "worker-1" for p in StateStore(lab.name).read().processes)
    wireguard_run.disable_wireguard(lab.site())
    assert not any(p.layer == "wireguard" for p in StateStore(lab.name).read().processes)
    # gathering facts goes on without it: worker-1's probes are kept, named, unreachable — the rest run
    code, outcomes = _probe_outcomes(["probe", str(policy), "--target", "ssh", "--hosts", str(hosts),
                                      "--store", str(tmp_path / "ev")], tmp_path / "probes.json")
    mine = {k: v for k, v in outcomes.items() if k[0] == "worker-1"}
    assert mine and set(mine.values()) == {"unreachable"}
    assert any(v == "connected" for k, v in outcomes.items() if k[0] != "worker-1")
