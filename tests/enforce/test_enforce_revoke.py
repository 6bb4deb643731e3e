"""``contain --identity``: revocation, reissue and the gates' proof, over a fake TLS mesh (no lab).

The fake plays the sidecars as :class:`ringfence.enforce.revoke.Mesh` describes them: a gate refuses a
certificate its copy of the revocation list names (and logs it), accepts a current one. Each fact of the
proof is then taken away in turn — the verdict never stays ``pass``.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ringfence.cli import main
from ringfence.controls.interface import Verdict
from ringfence.enforce.contain import ContainError
from ringfence.enforce.revoke import (
    GateCheck,
    GateRequest,
    Revocation,
    RevokedCert,
    contain_identity,
    gate_plan,
    holders,
    judge_reissued,
)
from ringfence.errors import InputError
from ringfence.evidence import EvidenceStore
from ringfence.facts.containment import ContainmentDoc, drills
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.policy import Policy, parse_policy
from ringfence.secure.layers.tls import identity_of
from ringfence.secure.layers.tls_run import Rotated

SERVICES = ["storage-http", "mgmt-api", "replica-sink"]
RANK = "spiffe://lab/job/train-b/rank/0"  # worker-2


def _policy() -> Policy:
    return parse_policy(render_policy(build_topology("rfunit", 4, 2)), "two-jobs")


class FakeMesh:
    """Sidecars that behave as the real ones do, unless told a fault (see the parametrised test)."""

    def __init__(self, policy: Policy, tmp: Path, faults: Sequence[str] = ()) -> None:
        self.policy, self.tmp, self.faults = policy, tmp, set(faults)
        # a gate that cannot be reached: nothing arrives there, its log tells nothing
        self.dark = {f.split("-")[0] for f in faults if f in ("mgmt-silent", "storage-unreachable")}
        self.nodes = {n.name: {"identity": identity_of(policy, n.name), "fingerprint": f"sha256:{n.name}-1"}
                      for n in policy.nodes if n.name != "jump"}
        self.fps: set[str] = set()
        self.serials: set[int] = set()
        self.lists: dict[str, set[str]] = {}
        self.log: list[dict[str, Any]] = []
        self.forgotten: list[str] = []
        self.serial = itertools.count(100)

    def info(self) -> Mapping[str, Any] | None:
        return {"pki": str(self.tmp / "pki"), "services": SERVICES, "nodes": self.nodes}

    def reissue(self, nodes: Sequence[str], evidence: EvidenceStore) -> Sequence[Rotated]:
        out = []
        for n in nodes:
            old = self.nodes[n]["fingerprint"]
            new = old[:-1] + str(int(old[-1]) + 1)
            serial = next(self.serial)
            if "ca-forgets" not in self.faults:
                self.fps.add(old)
                self.serials.add(serial)
            self.nodes[n] = {**self.nodes[n], "fingerprint": new}
            dark = "holder-unreachable" in self.faults
            out.append(Rotated(n, self.nodes[n]["identity"], old, new, self.tmp / "retired" / n, serial, time.time(),
                               unpushed=f"ssh {n}: connection timed out" if dark else None))
            if "no-sidecar-on-new" not in self.faults:  # the holder's own clients, now on the new certificate
                self.log.append({"t": time.time() + 0.01, "dir": "out", "node": n, "own_fingerprint": new,
                                 "result": "allowed"})
        return out

    def ca_lists(self) -> tuple[frozenset[str], frozenset[int]]:
        return frozenset(self.fps), frozenset(self.serials)

    def publish(self, node: str) -> str | None:
        if "holder-unreachable" in self.faults and node in self.dark_holders():
            return f"ssh {node}: connection timed out"
        if node == "storage" and "storage-unreachable" in self.faults:
            return "ssh storage: connection timed out"
        self.lists[node] = set(self.fps)
        return None

    def published(self, node: str) -> frozenset[str] | None:
        return frozenset(self.lists[node]) if node in self.lists else None

    def dark_holders(self) -> set[str]:
        return {n for n, v in self.nodes.items() if v["fingerprint"] != f"sha256:{n}-1"}

    def request(self, node: str, cert_dir: Path, req: GateRequest, timeout: float) -> dict[str, Any]:
        if "holder-unreachable" in self.faults and node in self.dark_holders():
            return {"outcome": "error", "error": f"ssh {node}: connection timed out"}
        retired = "retired" in cert_dir.parts
        fp = next(r for r in self.rotated_fps(node) if r[0] == retired)[1]
        ev = {"t": time.time(), "dir": "in", "node": req.node, "service": req.service,
              "peer": self.policy.node(node).addresses[0], "peer_fingerprint": fp}  # type: ignore[union-attr]
        if req.node in self.dark:
            return {"outcome": "refused", "error": "timed out"}
        revoked = fp in self.lists.get(req.node, set())
        if revoked and "mgmt-accepts-old" in self.faults and req.node == "mgmt":
            revoked = False
        if not retired and "new-refused" in self.faults:
            self.log.append({**ev, "result": "refused", "reason": "TLS handshake failed: unknown ca"})
            return {"outcome": "closed"}
        if revoked:
            self.log.append({**ev, "result": "refused", "reason": f"certificate of x ({fp}) is revoked"})
            return {"outcome": "closed", "error": "the server closed the connection without a response"}
        self.log.append({**ev, "result": "allowed", "reason": ""})
        return {"outcome": "response", "status": 200, "body": "ok"}

    def rotated_fps(self, node: str) -> list[tuple[bool, str]]:
        cur = self.nodes[node]["fingerprint"]
        return [(True, cur[:-1] + str(int(cur[-1]) - 1)), (False, cur)]

    def events(self, since: float) -> list[dict[str, Any]]:
        return [e for e in self.log if e["t"] >= since]

    def forget(self, rotated: Rotated) -> None:
        self.forgotten.append(rotated.node)


class Progress:
    """Agent status whose counters move on each read (or not, for a stalled job)."""

    def __init__(self, stalled: Sequence[str] = ()) -> None:
        self.reads = 0
        self.stalled = set(stalled)

    def __call__(self) -> dict[str, dict[str, Any]]:
        self.reads += 1
        return {f"worker-{i}-worker": {"counters": {"steps": 0 if f"worker-{i}" in self.stalled else 3 * self.reads,
                                                    "shards_read": self.reads}} for i in range(4)}


def _run(tmp: Path, faults: Sequence[str] = (), status: Any = "default", identity: str = RANK) -> Any:
    policy = _policy()
    mesh = FakeMesh(policy, tmp, faults)
    st = Progress(["worker-3"] if "job-stalled" in faults else ()) if status == "default" else status
    store = EvidenceStore.open(tmp / "evidence")
    report = contain_identity(policy, identity, store, mesh=mesh, target="lab:unit", status=st, timeout=0.6,
                              approved_by="secops", ticket="IR-9")
    return report, mesh, store


def test_revoked_everywhere_reissued_and_training_is_a_pass(tmp_path: Path) -> None:
    report, mesh, store = _run(tmp_path)
    rev = report.revocation
    assert rev.verdict is Verdict.PASS and report.ok, rev.why()
    assert rev.certificates[0].fingerprint == "sha256:worker-2-1" and rev.certificates[0].new_fingerprint.endswith("2")
    assert rev.gates == ("worker-2 → storage-http@storage", "worker-2 → mgmt-api@mgmt")
    assert all(r.proven and "revoked" in r.reason for r in rev.refusals)
    assert all(a.proven for a in rev.accepted) and rev.recovery["ok"] is True
    assert rev.latency_s is not None and 0 <= rev.latency_s < 5
    assert rev.publish_s is not None and 0 <= rev.publish_s <= rev.latency_s
    assert all(rev.published.values()) and set(rev.published) == set(mesh.nodes)
    assert mesh.forgotten == ["worker-2"]  # the old key does not outlive the proof
    assert report.subject.nodes == ("worker-2",) and report.training["others_training"] is True
    assert any("replica-sink" in n and "no approved path" in n for n in report.notes)
    doc = report.to_json()
    parsed = ContainmentDoc.model_validate_json(json.dumps(doc))  # the facts schema takes it as written
    assert parsed.revocation is not None and parsed.revocation.verdict == "pass"
    assert doc["revocation"]["certificates"][0]["serial"] == "64" and doc["seconds"] == rev.latency_s
    assert drills(doc) == []  # no node was isolated: it is not an isolation drill
    assert all(e in {str(r.id) for r in store.records()} for e in doc["evidence"])
    assert store.verify().ok


@pytest.mark.parametrize(("fault", "verdict", "needle"), [
    ("storage-unreachable", Verdict.UNKNOWN, "storage's copy of the list could not be read back"),
    ("mgmt-silent", Verdict.UNKNOWN, "mgmt-api@mgmt: no refusal in that gate's log"),
    ("mgmt-accepts-old", Verdict.FAIL, "accepted the revoked certificate"),
    ("new-refused", Verdict.FAIL, "refused the reissued certificate"),
    ("job-stalled", Verdict.FAIL, "no recovery"),
    ("no-sidecar-on-new", Verdict.FAIL, "no recovery"),
    ("ca-forgets", Verdict.FAIL, "does not name every revoked certificate"),
])
def test_each_fact_taken_away_leaves_no_pass(tmp_path: Path, fault: str, verdict: Verdict, needle: str) -> None:
    report, _, _ = _run(tmp_path, [fault])
    rev = report.revocation
    assert rev.verdict is verdict and not report.ok, rev.why()
    assert needle in rev.why()
    assert rev.latency_s is None or fault not in ("mgmt-silent", "mgmt-accepts-old")
    assert ContainmentDoc.model_validate_json(json.dumps(report.to_json())).ok is False


def test_an_unreachable_holder_does_not_hold_the_revocation_back(tmp_path: Path) -> None:
    """The stolen key is revoked and published to every reachable gate although its holder cannot be given
    the new one; nothing is proven from the holder, so the verdict is not a pass."""
    report, mesh, _ = _run(tmp_path, ["holder-unreachable"])
    rev = report.revocation
    assert rev.verdict is Verdict.UNKNOWN and not report.ok, rev.why()
    assert rev.in_ca is True and rev.revoked_at is not None
    assert all(ok for n, ok in rev.published.items() if n != "worker-2") and rev.published["worker-2"] is None
    assert any("worker-2 could not be given its reissued certificate" in n for n in report.notes)
    assert mesh.forgotten == ["worker-2"]


def test_without_progress_counters_the_recovery_is_unknown(tmp_path: Path) -> None:
    report, _, _ = _run(tmp_path, status=None)
    assert report.revocation.verdict is Verdict.UNKNOWN and "no progress counters" in report.revocation.why()


def test_a_job_identity_revokes_every_rank(tmp_path: Path) -> None:
    report, mesh, _ = _run(tmp_path, identity="spiffe://lab/job/train-b")
    rev = report.revocation
    assert [c.node for c in rev.certificates] == ["worker-2", "worker-3"] and rev.verdict is Verdict.PASS
    assert len(rev.refusals) == 4 and sorted(mesh.forgotten) == ["worker-2", "worker-3"]


def test_the_verdict_needs_every_planned_gate() -> None:
    cert = RevokedCert("worker-2", RANK, "10.77.1.12", "sha256:a", 1, "sha256:b", 10.0)
    ok = GateCheck("worker-2", "storage", "storage-http", "GET x", "revoked", "sha256:a", True, "revoked", 10.5, 1)
    new = GateCheck("worker-2", "storage", "storage-http", "GET x", "reissued", "sha256:b", True, "ok", 10.6, 1)
    full = Revocation(RANK, (cert,), True, {"storage": True}, (ok.key,), (ok,), (new,), {"required": True, "ok": True})
    assert full.verdict is Verdict.PASS and full.latency_s == 0.5
    mgmt = "worker-2 → mgmt-api@mgmt"
    missing = Revocation(RANK, (cert,), True, {"storage": True}, (ok.key, mgmt), (ok,), (new,), full.recovery)
    assert missing.verdict is Verdict.UNKNOWN and missing.latency_s is None and mgmt in missing.why()
    gones: list[dict[str, Any]] = [{"certificates": ()}, {"in_ca": None}, {"published": {}}, {"gates": ()},
                                   {"refusals": ()}, {"accepted": ()}, {"recovery": {"required": True, "ok": None}}]
    for gone in gones:
        fields = {**full.__dict__, **gone}
        assert Revocation(**fields).verdict is not Verdict.PASS, gone
    # nothing trains on a node identity: its recovery is the gates' acceptance alone
    assert Revocation(**{**full.__dict__, "recovery": {"required": False, "ok": None}}).verdict is Verdict.PASS


def test_unknown_or_malformed_identities_are_refused() -> None:
    policy = _policy()
    tls = {"nodes": {"worker-2": {"identity": RANK}, "aux": {"identity": identity_of(policy, "aux")}}}
    assert holders(policy, tls, RANK) == ("worker-2",)
    with pytest.raises(ContainError, match="holds no certificate of this site's CA") as info:
        holders(policy, tls, "spiffe://lab/job/train-z/rank/0")
    assert RANK in info.value.diagnostics()
    with pytest.raises(ContainError, match="TLS is not enabled"):
        holders(policy, None, RANK)
    with pytest.raises(InputError):
        holders(policy, tls, "not-a-spiffe-id")
    lying = {"nodes": {"worker-1": {"identity": RANK}}}  # the CA's record and the policy disagree
    with pytest.raises(ContainError, match="does not give it that identity"):
        holders(policy, lying, RANK)


def test_gates_are_those_the_holder_may_reach() -> None:
    plan, skipped = gate_plan(_policy(), SERVICES, "worker-2")
    assert [(r.service, r.method, r.path) for r in plan] == [("storage-http", "GET", "/healthz"),
                                                              ("mgmt-api", "GET", "/healthz")]
    assert len(skipped) == 1 and "replica-sink" in skipped[0]
    own, skipped = gate_plan(_policy(), SERVICES, "storage")
    assert [r.service for r in own] == ["replica-sink"] and any("own gate" in s for s in skipped)


def test_the_reissued_credential_counts_as_accepted_only_by_the_gates_log() -> None:
    req = GateRequest("storage-http", "storage", "10.77.2.10", 8080, "GET", "/healthz")
    ok = {"outcome": "response", "status": 200}
    assert judge_reissued(ok, [{"result": "allowed"}], req)[0] is True
    assert judge_reissued(ok, [], req)[0] is None  # the service answered, the gate did not say it checked
    assert judge_reissued({"outcome": "closed"}, [{"result": "refused", "reason": "revoked"}], req)[0] is False
    binding = [{"result": "denied", "reason": "address binding: x is bound to y"}]
    assert judge_reissued({"outcome": "response", "status": 403}, binding, req)[0] is False


@pytest.mark.parametrize("flag", ["--release", "--drill"])
def test_an_identity_is_never_released(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["contain", "--identity", RANK, flag, "--name", "no-such-lab"]) == 2
    err = capsys.readouterr().err
    assert "revocation is permanent" in err and "reissued" in err
