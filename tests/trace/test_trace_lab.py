"""On the lab: an allowed flow and a denied attempt reconstructed from real ulogd2/conntrack/dnsmasq output, the
allowed one joined to the object server's record of the request it carried."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.enforce.apply import apply_policy, rollback
from ringfence.enforce.probe import tcp_probe
from ringfence.evidence import EvidenceStore
from ringfence.lab import Lab
from ringfence.lab.points import lab_inventory, lab_points
from ringfence.lab.telemetry import dns_name, point_dir
from ringfence.policy import parse_policy
from ringfence.trace.collect import collect
from ringfence.trace.model import Trace
from ringfence.trace.reconstruct import FlowSpec, NoSample, load, reconstruct

pytestmark = pytest.mark.privileged


def _trace(lab: Lab, store: EvidenceStore, target: str, sample: str, flow: str, tmp: Path,
           after: datetime, objects: str | None = None, provoke: tuple[str, str, int] | None = None) -> Trace:
    """Wait (observing the logs, up to 60 s) until a flow decided after ``after`` is in the telemetry, then
    reconstruct it (the session's lab keeps the logs of earlier tests' policies: those are not this one's).

    ``provoke`` (node, host, port): make one attempt of the flow from that node before each look, so the
    wait is bounded by what the test does, not by an agent's cadence on a busy host."""
    points = lab_points(lab)
    dirs = {p: str(point_dir(lab.telemetry_dir, p)) for p in points}
    deadline = time.monotonic() + 60
    n = 0
    while True:
        n += 1
        if provoke is not None:
            node, host, port = provoke
            tcp_probe(points[node], host, port, timeout=1.0)  # dropped by policy: a timeout, and a log record
        got = collect(points, dirs, tmp / f"{sample}-{time.monotonic_ns()}-{n}")
        try:
            trace = reconstruct(load(got.files), lab.policy(), sample,  # type: ignore[arg-type]
                                spec=FlowSpec.parse(flow), store=store, target=target,
                                objects=objects, since=after)  # type: ignore[arg-type]
            assert datetime.fromisoformat(trace.decision.time) >= after
            if trace.records or sample == "denied":
                return trace
        except NoSample:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"{sample} flow {flow} never got a conntrack record")
        time.sleep(0.5)


def test_allowed_and_denied_flows_reconstructed_end_to_end(lab: Lab, tmp_path: Path) -> None:
    policy = parse_policy(lab.policy_yaml(), "lab-policy")
    points = lab_points(lab)
    store = EvidenceStore.open(tmp_path / "evidence")
    target = f"lab:{lab.name}"
    addr = lab.topology.address
    applied = apply_policy(policy, points, store, target=target, inventory=lab_inventory(lab),
                           approved_by="reviewer@example", ticket="CHG-13")
    t_apply = datetime.now(UTC)  # once every point holds the policy (the fabric's is loaded first)
    try:
        first = _trace(lab, store, target, "allowed", f"{addr('worker-0')}:*-{addr('storage')}:8080/tcp", tmp_path,
                       t_apply)
        # the points' logs are read one after another: the same connection again, once every point has written it
        f = first.flow
        time.sleep(1.0)
        allowed = _trace(lab, store, target, "allowed", f"{f.src}:{f.sport}-{f.dst}:{f.dport}/tcp", tmp_path,
                         t_apply)
        denied = _trace(lab, store, target, "denied", f"{addr('aux')}:*-{addr('storage')}:8080/tcp", tmp_path,
                        t_apply, provoke=("aux", addr("storage"), 8080))
        # a flow that carried a request the object server served: its access log joined by the 5-tuple
        read = _trace(lab, store, target, "allowed", f"{addr('worker-0')}:*-{addr('storage')}:8080/tcp", tmp_path,
                      t_apply, objects="served")
        # the CLI writes the same reconstruction, from the same logs
        out = tmp_path / "trace.json"
        page = tmp_path / "trace.html"
        code = main(["trace", "--sample", "denied", "--flow", f"{addr('aux')}:*-{addr('storage')}:8080/tcp",
                     "--since", t_apply.isoformat(),
                     "--target", "lab", "--name", lab.name, "--evidence", str(tmp_path / "evidence"), "-o", str(out),
                     "--html", str(page)])
    finally:
        rollback(points, store, target=target)
    storage_name = dns_name(lab.topology, "storage")
    d = allowed.decision
    assert (d.verdict, d.state, d.policy_version) == ("accept", "named-rule", applied.version)
    assert d.rule is not None and d.rule in {f.id for f in policy.approved}
    # logged where it left, where it crossed the fabric and where it arrived, each point with the same rule
    assert {p.point for p in allowed.decisions} >= {"worker-0", "fabric", "storage"}
    assert all(p.rule == d.rule for p in allowed.decisions)
    assert "NEW" in {r.event for r in allowed.records}
    assert (allowed.src.node, allowed.dst.node, allowed.dst.dns) == ("worker-0", "storage", storage_name)
    assert allowed.src.job is None and allowed.attributed
    assert allowed.change is not None and allowed.change.evidence == applied.evidence
    assert allowed.change.approved_by == "reviewer@example" and allowed.change.ticket == "CHG-13"
    d = denied.decision
    assert (d.verdict, d.state, d.rule, d.point) == ("drop", "default-drop", None, "aux")
    assert "no policy rule names this flow" in d.explanation
    assert d.policy_version == applied.version and denied.change is None
    assert (denied.src.node, denied.dst.node, denied.dst.dns) == ("aux", "storage", storage_name)
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["decision"]["rule"] is None and doc["decision"]["policy_version"] == applied.version
    assert set(doc["src"]) >= {"node", "job", "user", "identity", "dns"} and doc["src"]["job"] is None
    assert page.read_text().startswith("<!DOCTYPE html>") and "default drop" in page.read_text()
    # the object server's own record of the request, on the flow it rode (a shard read or a checkpoint write)
    served = [o for o in read.objects if o.result == "served"]
    assert served and all(o.joined == "5-tuple" and o.node == "storage" for o in read.objects)
    assert served[0].path.startswith(("/datasets/train-a/", "/checkpoints/train-a/")) and served[0].job == "train-a"
    assert (served[0].bytes or 0) > 0 and read.src.node == "worker-0"
    assert any(e.where == "objects storage" for e in read.timeline)
