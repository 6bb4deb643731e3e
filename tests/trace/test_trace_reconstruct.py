"""trace on recorded logs: the join, the default-drop state, versions and changes, jobs, Hubble, the CLI's exits."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ringfence.errors import InputError
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.policy import Policy, load_policy
from ringfence.trace.jobs_file import SpanFile
from ringfence.trace.reconstruct import FlowSpec, NoSample, Telemetry, load, reconstruct
from ringfence.trace.timeline import render

ROOT = Path(__file__).resolve().parents[2]
HUBBLE = ROOT.parent / "shared" / "samples" / "hubble"
W0, STORAGE, AUX, OUTSIDER = "10.77.1.10", "10.77.2.10", "10.77.1.50", "10.99.9.9"
TARGET = "lab:t"


@pytest.fixture()
def policy() -> Policy:
    return load_policy(ROOT / "examples" / "lab-policy.yaml")


def _ulogd(t: float, point: str, src: str, prefix: str, label: int, sport: int) -> str:
    return json.dumps({"timestamp": "x", "dvc": point, "oob.prefix": prefix, "oob.time.sec": int(t),
                       "oob.time.usec": int((t % 1) * 1e6), "raw.label": label, "ip.protocol": 6,
                       "src_port": sport, "dest_port": 8080, "src_ip": src, "dest_ip": STORAGE})


def _logs(tmp: Path, t: float) -> list[tuple[str, str, Path]]:
    files = {
        ("worker-0", "ulogd"): [_ulogd(t, "worker-0", W0, "train-a-storage", 1, 41000)],
        ("storage", "ulogd"): [_ulogd(t + 0.001, "storage", W0, "train-a-storage", 1, 41000),
                               _ulogd(t + 2, "storage", OUTSIDER, "rf-drop storage/input ", 0, 50000)],
        ("aux", "ulogd"): [_ulogd(t + 1, "aux", AUX, "rf-drop aux/output ", 0, 42000)],
        ("storage", "conntrack"): [
            f"[{t + 0.001:.6f}]\t    [NEW] tcp      6 120 SYN_SENT src={W0} dst={STORAGE} sport=41000 dport=8080 "
            f"[UNREPLIED] src={STORAGE} dst={W0} sport=8080 dport=41000 id=7"],
        ("mgmt", "dnsmasq"): [
            f"{datetime.fromtimestamp(t - 5, UTC):%b %e %H:%M:%S} dnsmasq[1]: 1 {W0}/5353 /etc/hosts.lab "
            f"storage.t.lab is {STORAGE}"],
    }
    out = []
    for (point, reader), lines in files.items():
        p = tmp / f"{point}.{reader}"
        p.write_text("\n".join(lines) + "\n")
        out.append((point, reader, p))
    return out


def _store(tmp: Path, rule_in_bundle: bool = True) -> tuple[EvidenceStore, str]:
    store = EvidenceStore.open(tmp / "evidence")
    body = '{"fabric": {"comment": "flow train-a-storage (storage)"}}' if rule_in_bundle else "{}"
    art = store.add_artifact(body.encode(), "ruleset.json", source="enforce.apply")
    blob = store.get(art).data["blob"]
    ev = store.append(RecordKind.ACTION, "enforce.apply", f"target {TARGET}",
                      {"action": "apply", "version": "v1" * 32, "bundle": blob, "approved_by": "rev", "ticket": "T-1"})
    return store, str(ev)


def test_allowed_flow_joined_across_points_with_version_change_and_dns(tmp_path: Path, policy: Policy) -> None:
    store, ev = _store(tmp_path)
    tel = load(_logs(tmp_path, time.time() + 5))
    tr = reconstruct(tel, policy, "allowed", store=store, target=TARGET)
    assert (tr.decision.rule, tr.decision.verdict, tr.decision.state) == ("train-a-storage", "accept", "named-rule")
    assert tr.decision.policy_version == "v1" * 32 and tr.decision.point == "worker-0"
    assert [p.point for p in tr.decisions] == ["worker-0", "storage"]
    assert [r.event for r in tr.records] == ["NEW"]
    assert (tr.src.node, tr.src.zone, tr.dst.node, tr.dst.dns) == ("worker-0", "workload", "storage", "storage.t.lab")
    assert tr.change is not None and (tr.change.evidence, tr.change.approved_by, tr.change.ticket) == (ev, "rev", "T-1")
    assert tr.attributed and tr.flow.community_id and tr.flow.community_id.startswith("1:")
    assert tr.timeline[0].where == "dns"
    assert "policy rule train-a-storage" in render(tr)


def test_denied_default_drop_is_its_own_state(tmp_path: Path, policy: Policy) -> None:
    store, _ = _store(tmp_path)
    tel = load(_logs(tmp_path, time.time() + 5))
    tr = reconstruct(tel, policy, "denied", spec=FlowSpec.parse(f"{AUX}:*-{STORAGE}:8080/tcp"), store=store,
                     target=TARGET)
    assert (tr.decision.rule, tr.decision.state, tr.decision.point) == (None, "default-drop", "aux")
    assert "no policy rule names this flow" in tr.decision.explanation and tr.change is None
    assert tr.dst.dns is None  # storage's name was resolved by worker-0, not by aux: it is not aux's name


def test_unattributable_source_and_unknown_version(tmp_path: Path, policy: Policy) -> None:
    tel = load(_logs(tmp_path, time.time() + 5))
    tr = reconstruct(tel, policy, "denied", spec=FlowSpec.parse(f"{OUTSIDER}:50000-{STORAGE}:8080"))
    assert not tr.attributed and tr.src.node is None
    assert tr.decision.policy_version is None
    assert any("evidence store" in n for n in tr.notes) and any("no inventory node" in n for n in tr.notes)


def test_version_before_any_apply_is_unknown_and_a_missing_rule_has_no_change(tmp_path: Path, policy: Policy) -> None:
    store, _ = _store(tmp_path, rule_in_bundle=False)
    tr = reconstruct(load(_logs(tmp_path, time.time() + 5)), policy, "allowed", store=store, target=TARGET)
    assert tr.change is None and any("introduced it is unknown" in n for n in tr.notes)
    early = reconstruct(load(_logs(tmp_path, time.time() - 3600)), policy, "allowed", store=store, target=TARGET)
    assert early.decision.policy_version is None


def test_jobs_attribute_by_node_and_time(tmp_path: Path, policy: Policy) -> None:
    t = time.time() + 5
    start = datetime.fromtimestamp(t - 60, UTC)
    spans = [{"job": "42", "user": "alice", "nodes": ["worker-0", "worker-1"], "start": start.isoformat(),
              "end": (start + timedelta(seconds=30)).isoformat()},
             {"job": "43", "user": "bob", "nodes": ["worker-0"], "start": (start + timedelta(seconds=30)).isoformat()}]
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(spans))
    tr = reconstruct(load(_logs(tmp_path, t)), policy, "allowed", jobs=SpanFile(path))
    assert (tr.src.job, tr.src.user, tr.dst.job) == ("43", "bob", None)
    path.write_text(json.dumps([{**spans[0], "nodes": "worker-0", "extra": 1}]))
    with pytest.raises(InputError, match="jobs.json"):
        SpanFile(path)


def test_no_sample_and_bad_flow_specs(policy: Policy) -> None:
    empty = load([])
    with pytest.raises(NoSample, match="no accepted flow"):
        reconstruct(empty, policy, "allowed")
    for bad in ("10.0.0.1-10.0.0.2:80", "10.0.0.1:1-10.0.0.2:99999", "10.0.0.1:1-10.0.0.2:80/ipx"):
        with pytest.raises(InputError, match="--flow"):
            FlowSpec.parse(bad)
    assert FlowSpec.parse("10.0.0.1:*-10.0.0.2:80/udp") == FlowSpec("10.0.0.1", None, "10.0.0.2", 80, 17)


@pytest.mark.skipif(not HUBBLE.is_dir(), reason="../shared/samples not present")
def test_hubble_drop_feeds_the_same_trace(policy: Policy) -> None:
    tel: Telemetry = load([], [HUBBLE / "cilium_docs_hubble_exporter_dropped.json"])
    tr = reconstruct(tel, policy, "denied")
    assert tr.decision.state == "hubble-dropped" and tr.decision.rule is None
    assert "DROPPED" in tr.decisions[0].prefix
    assert not tr.attributed or tr.src.identity is not None or tr.dst.identity is not None


def test_since_leaves_out_an_earlier_policys_better_scored_drop(tmp_path: Path, policy: Policy) -> None:
    # an old drop of the flow that conntrack also recorded (it scores higher: a conntrack record), and a new
    # one after a change, without: the sample "since the change" is the new one, never the old
    t = time.time() - 600
    drops = [_ulogd(t + dt, "aux", AUX, "rf-drop aux/output ", 0, sport) for dt, sport in ((0, 42000), (300, 43000))]
    (tmp_path / "aux.ulogd").write_text("\n".join(drops) + "\n")
    (tmp_path / "aux.conntrack").write_text(
        f"[{t:.6f}]\t    [NEW] tcp      6 120 SYN_SENT src={AUX} dst={STORAGE} sport=42000 dport=8080 "
        f"[UNREPLIED] src={STORAGE} dst={AUX} sport=8080 dport=42000 id=9\n")
    tel = load([("aux", "ulogd", tmp_path / "aux.ulogd"), ("aux", "conntrack", tmp_path / "aux.conntrack")])
    spec = FlowSpec.parse(f"{AUX}:*-{STORAGE}:8080/tcp")
    assert reconstruct(tel, policy, "denied", spec=spec).flow.sport == 42000  # the better-scored, older one
    change = datetime.fromtimestamp(t + 200, UTC)
    assert reconstruct(tel, policy, "denied", spec=spec, since=change).flow.sport == 43000
    with pytest.raises(NoSample, match="since"):
        reconstruct(tel, policy, "denied", spec=spec, since=datetime.fromtimestamp(t + 400, UTC))
    with pytest.raises(InputError, match="no timezone"):
        reconstruct(tel, policy, "denied", spec=spec, since=change.replace(tzinfo=None))


@pytest.mark.parametrize("since", ["yesterday", "2026-12-02T21:30:00"])
def test_cli_since_must_be_a_time_with_its_zone(tmp_path: Path, since: str, capsys: pytest.CaptureFixture[str]) -> None:
    from ringfence.cli import main

    code = main(["trace", "--sample", "denied", "--since", since, "--target", "lab", "--name", "rfnone", "-o",
                 str(tmp_path / "t.json")])
    assert code == 2 and "--since" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
