"""propose → approve on real git and real Ed25519 keys: separation of duties, tampering, malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from change_kit import commit_policy, key, policy_doc

from ringfence.change.decide import Refused, approve, deploy_approval
from ringfence.change.request import load_request, propose
from ringfence.cli import main
from ringfence.evidence import EvidenceStore
from ringfence.policy import load_policy


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, EvidenceStore, dict[str, Path]]:
    monkeypatch.setenv("RINGFENCE_EVIDENCE_KEY", str(tmp_path / "store.key"))  # the CLI's and ours: one key
    (alice_key, alice), (bob_key, bob) = key(tmp_path, "alice"), key(tmp_path, "bob")
    policy = commit_policy(tmp_path / "repo", policy_doc({"alice": alice, "bob": bob}))
    store_dir = tmp_path / "evidence"
    return policy, store_dir, EvidenceStore.open(store_dir), {"alice": alice_key, "bob": bob_key}


def _cli(*argv: str) -> int:
    return main(list(argv))


def test_propose_records_both_diffs_and_hashes(setup: tuple[Path, Path, EvidenceStore, dict[str, Path]],
                                               tmp_path: Path) -> None:
    policy, store_dir, _, _ = setup
    req = tmp_path / "req.json"
    assert _cli("change", "propose", str(policy), "--by", "alice", "--ticket", "CHG-1", "-o", str(req),
                "--evidence", str(store_dir)) == 0
    doc = load_request(req)
    assert doc.request.requested_by == "alice" and doc.request.ticket == "CHG-1"
    assert doc.request.base_sha256 is None  # nothing approved yet: the diff is against nothing
    assert "+cluster:" in doc.request.policy_diff
    assert '"comment": "flow ' in doc.request.ruleset_diff  # the rendered rules, not only the YAML
    assert len(doc.request.commit) == 40 and len(doc.request_sha256) == 64


def test_self_approval_is_refused(setup: tuple[Path, Path, EvidenceStore, dict[str, Path]], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    policy, store_dir, _, keys = setup
    req = tmp_path / "req.json"
    assert _cli("change", "propose", str(policy), "--by", "alice", "--ticket", "CHG-1", "-o", str(req),
                "--evidence", str(store_dir)) == 0
    before = req.read_bytes()
    assert _cli("change", "approve", str(req), "--by", "alice", "--key", str(keys["alice"]),
                "--evidence", str(store_dir)) == 1
    assert "separation of duties" in capsys.readouterr().err
    assert req.read_bytes() == before  # nothing was added
    assert _cli("change", "approve", str(req), "--by", "bob", "--key", str(keys["bob"]),
                "--evidence", str(store_dir)) == 0
    doc = load_request(req)
    assert [a.by for a in doc.approvals] == ["bob"]
    # the approved request deploys exactly this policy
    change = deploy_approval(doc, load_policy(policy), EvidenceStore.open(store_dir))
    assert change["approved_by"] == "bob" and change["requested_by"] == "alice"


def test_an_approval_with_a_key_the_policy_does_not_list_is_refused(
        setup: tuple[Path, Path, EvidenceStore, dict[str, Path]], tmp_path: Path) -> None:
    policy, _, store, _ = setup
    _, mallory = key(tmp_path, "mallory")
    doc = propose(policy, by="alice", ticket="CHG-1", store=store)
    with pytest.raises(Refused, match="bob's key"):
        approve(doc, by="bob", signer=mallory, store=store)  # bob's name, another key


def test_a_request_edited_after_approval_is_refused(setup: tuple[Path, Path, EvidenceStore, dict[str, Path]],
                                                    tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy, store_dir, store, keys = setup
    _, bob = key(tmp_path, "bob")
    doc, _ = approve(propose(policy, by="alice", ticket="CHG-1", store=store), by="bob", signer=bob, store=store)
    # 1. the body edited (the ticket): its hash no longer matches
    raw = doc.model_dump(mode="json")
    raw["request"]["ticket"] = "CHG-2"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(raw))
    with pytest.raises(Refused, match="edited after it was proposed"):
        deploy_approval(load_request(edited), load_policy(policy), store)
    # 2. body and hash re-computed together: the signature no longer verifies
    from ringfence.change.interface import ChangeRequest, request_hash

    req = ChangeRequest.model_validate_json(json.dumps(raw["request"]))
    raw["request_sha256"] = request_hash(req)
    edited.write_text(json.dumps(raw))
    with pytest.raises(Refused, match="another request|does not verify"):
        deploy_approval(load_request(edited), load_policy(policy), store)
    # 3. an approval by the requester slipped into the file does not count
    raw = doc.model_dump(mode="json")
    raw["approvals"][0]["by"] = "alice"
    edited.write_text(json.dumps(raw))
    with pytest.raises(Refused, match="by the requester"):
        deploy_approval(load_request(edited), load_policy(policy), store)
    # approve through the CLI refuses a tampered request too (exit 1)
    raw = doc.model_dump(mode="json")
    raw["request"]["policy_diff"] = ""
    edited.write_text(json.dumps(raw))
    assert _cli("change", "approve", str(edited), "--by", "carol", "--key", str(keys["bob"]),
                "--evidence", str(store_dir)) == 1
    assert "edited after" in capsys.readouterr().err


def test_a_different_policy_is_not_deployed_on_an_approval(
        setup: tuple[Path, Path, EvidenceStore, dict[str, Path]], tmp_path: Path) -> None:
    policy, _, store, _ = setup
    _, bob = key(tmp_path, "bob")
    doc, _ = approve(propose(policy, by="alice", ticket="CHG-1", store=store), by="bob", signer=bob, store=store)
    other = load_policy(policy).model_copy(update={"cluster": "other"})
    with pytest.raises(Refused, match="not the version this request names"):
        deploy_approval(doc, other, store)


def test_the_next_request_diffs_against_the_approved_version(
        setup: tuple[Path, Path, EvidenceStore, dict[str, Path]], tmp_path: Path) -> None:
    policy, _, store, _ = setup
    (_, alice), (_, bob) = key(tmp_path, "alice"), key(tmp_path, "bob")
    first, _ = approve(propose(policy, by="alice", ticket="CHG-1", store=store), by="bob", signer=bob, store=store)
    doc = policy_doc({"alice": alice, "bob": bob})
    doc["approved"] = [f for f in doc["approved"] if f["id"] != "monitoring"] if any(
        f["id"] == "monitoring" for f in doc["approved"]) else doc["approved"][1:]
    commit_policy(policy.parent, doc, "drop a flow")
    second = propose(policy, by="alice", ticket="CHG-2", store=store)
    assert second.request.base_sha256 == first.request.policy_sha256
    assert second.request.policy_diff.count("\n-") >= 1 and "+cluster" not in second.request.policy_diff
    assert any(line.startswith("-") for line in second.request.ruleset_diff.splitlines()[2:])


def test_an_uncommitted_policy_cannot_be_proposed(setup: tuple[Path, Path, EvidenceStore, dict[str, Path]],
                                                  tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy, store_dir, _, _ = setup
    policy.write_text(policy.read_text() + "\n# an edit nobody committed\n")
    assert _cli("change", "propose", str(policy), "--by", "alice", "--ticket", "T", "-o", str(tmp_path / "r.json"),
                "--evidence", str(store_dir)) == 2
    assert "uncommitted changes" in capsys.readouterr().err
    outside = tmp_path / "loose.yaml"
    outside.write_text(policy.read_text())
    assert _cli("change", "propose", str(outside), "--by", "alice", "--ticket", "T", "-o", str(tmp_path / "r.json"),
                "--evidence", str(store_dir)) == 2


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"request": {}, "request_sha256": "x"}',
                                     b'{"request": 1, "request_sha256": "' + b"0" * 64 + b'", "extra": 1}',
                                     b"\xff\xfe", b'{"a": NaN}'])
def test_malformed_request_files_exit_2_naming_the_file(content: bytes, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad-request.json"
    bad.write_bytes(content)
    assert _cli("change", "approve", str(bad), "--by", "bob", "--key", str(tmp_path / "k"),
                "--evidence", str(tmp_path / "ev")) == 2
    err = capsys.readouterr().err
    assert "bad-request.json" in err and "Traceback" not in err and err.startswith("error:")


def test_review_of_an_emergency_change_is_refused_for_its_deployer(tmp_path: Path) -> None:
    from ringfence.change.decide import review
    from ringfence.evidence import RecordKind

    store = EvidenceStore.open(tmp_path / "ev", key=tmp_path / "k")
    ev = store.append(RecordKind.ACTION, "enforce.apply", "target lab:x",
                      {"action": "apply", "target": "lab:x", "emergency": True, "deployed_by": "alice"})
    with pytest.raises(Refused, match="cannot review"):
        review(store, str(ev), by="alice")
    rid = review(store, str(ev), by="bob", note="ok")
    assert store.get(rid).data["change"] == str(ev)
