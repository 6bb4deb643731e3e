"""drift over an executor per host, as on a real cluster: one unreachable host is unknown by name, the rest
judged; the version in force, its approval and its recorded baseline all take part in the verdict."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from test_change_drift import LISTING

from ringfence.change.drift import drift
from ringfence.change.live import record_live
from ringfence.enforce.apply import SOURCE as APPLY
from ringfence.enforce.apply import AppliedVersion
from ringfence.enforce.facts import change_facts
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.policy import Policy, load_policy, policy_digest
from ringfence.targets.interface import RunResult, TargetError

POLICY = load_policy(Path(__file__).resolve().parents[2] / "examples" / "lab-policy.yaml")
T = "ssh:site"


class ListingExecutor:
    """Answers ``nft -j list ruleset`` with a fixed listing; ``down`` hosts cannot be reached."""

    def __init__(self, name: str, listing: Mapping[str, Any] | None) -> None:
        self.name = name
        self.listing = listing

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        if self.listing is None:
            raise TargetError(f"{self.name}: ssh: connect to host: No route to host")
        assert list(argv) == ["nft", "-j", "list", "ruleset"]
        return RunResult(tuple(argv), 0, json.dumps(self.listing).encode(), b"", 0.0)

    def spawn(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("not used")

    def copy_to(self, local: Path, remote: str) -> None:
        raise AssertionError("not used")

    def copy_from(self, remote: str, local: Path) -> None:
        raise AssertionError("not used")


def _deployed(tmp_path: Path, policy: Policy, **extra: Any) -> EvidenceStore:
    store = EvidenceStore.open(tmp_path / "ev", key=tmp_path / "k")
    ev = store.append(RecordKind.ACTION, APPLY, f"target {T}", {"action": "apply", "target": T, "version": "v1",
                                                                "policy_sha256": policy_digest(policy), **extra})
    points = {n: ListingExecutor(n, LISTING) for n in ("fabric", "w0", "w1")}
    record_live(store, points, AppliedVersion(T, "v1", None, str(ev), ("fabric", "w0", "w1"), False))
    return store


def test_one_unreachable_host_is_unknown_by_name_and_the_others_are_judged(tmp_path: Path) -> None:
    store = _deployed(tmp_path, POLICY, approved_by="bob", requested_by="alice")
    points = {"fabric": ListingExecutor("fabric", LISTING), "w0": ListingExecutor("w0", LISTING),
              "w1": ListingExecutor("w1", None)}
    report = drift(POLICY, points, store, target=T)
    assert report["verdict"] == "unknown"
    assert report["nodes"]["w1"]["status"] == "unknown" and "No route to host" in report["nodes"]["w1"]["reason"]
    assert report["nodes"]["w0"]["status"] == "match" and report["nodes"]["fabric"]["status"] == "match"
    # every host back: pass
    points["w1"] = ListingExecutor("w1", LISTING)
    assert drift(POLICY, points, store, target=T)["verdict"] == "pass"
    # the live record is folded into the change facts
    (change,) = change_facts(store, T)
    assert change["live"]


def test_another_policy_an_unapproved_version_or_no_baseline_is_not_a_pass(tmp_path: Path) -> None:
    points = {n: ListingExecutor(n, LISTING) for n in ("fabric", "w0", "w1")}
    store = _deployed(tmp_path, POLICY)  # deployed without approval
    required = POLICY.model_copy(update={"change_control": POLICY.change_control.model_copy(
        update={"required": True})})
    report = drift(required, points, store, target=T)
    assert report["verdict"] == "fail"
    details = " | ".join(f["detail"] for f in report["findings"])
    assert "is not POLICY's" in details and "without an approval" in details
    empty = EvidenceStore.open(tmp_path / "empty", key=tmp_path / "k")
    assert drift(POLICY, points, empty, target=T)["verdict"] == "unknown"
    no_baseline = EvidenceStore.open(tmp_path / "nb", key=tmp_path / "k")
    no_baseline.append(RecordKind.ACTION, APPLY, f"target {T}", {"action": "apply", "target": T,
                                                                 "policy_sha256": policy_digest(POLICY)})
    report = drift(POLICY, points, no_baseline, target=T)
    assert report["verdict"] == "unknown" and "no live ruleset was recorded" in report["findings"][0]["detail"]


def test_an_emergency_change_and_its_review_become_change_facts(tmp_path: Path) -> None:
    from ringfence.change.decide import review

    store = _deployed(tmp_path, POLICY, emergency=True, deployed_by="oncall")
    (change,) = change_facts(store, T)
    assert change["emergency"] is True and change["reviewed_by"] is None
    review(store, change["evidence"], by="cab")
    (change,) = change_facts(store, T)
    assert change["reviewed_by"] == "cab" and change["reviewed_at"] is not None
