"""The verifier on real quotes from a throwaway swtpm: each Keylime failure mode is refused, the good quote admitted."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from swtpm_kit import STACK, boot, policy_doc, swtpm

from ringfence.attest.interface import Evidence
from ringfence.attest.node import NodeTpm
from ringfence.attest.registry import read_registry
from ringfence.attest.verifier import enrol, judge, verify
from ringfence.policy.attestation import Attestation

POLICY = Attestation.model_validate_json(__import__("json").dumps(policy_doc()))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeTpm]:
    with swtpm(tmp_path / "a", "node-a") as tpm:
        boot(tpm)
        yield tpm


def _enrolled(tpm: NodeTpm, registry: Path) -> None:
    [outcome] = enrol([tpm], registry, "site")
    assert outcome.enrolled, outcome.reason


def test_an_approved_node_verifies_and_its_clock_is_recorded(node: NodeTpm, tmp_path: Path) -> None:
    reg = tmp_path / "reg.json"
    _enrolled(node, reg)
    [d] = verify([node], POLICY, reg, "site", addresses={"node-a": ("10.0.0.1",)})
    assert d.admitted, d.reasons
    assert read_registry(reg, "site").nodes["node-a"].last_clock == d.clock
    [again] = verify([node], POLICY, reg, "site", addresses={})  # a later quote: the clock moved on
    assert again.admitted, again.reasons


def test_a_replayed_old_quote_is_refused(node: NodeTpm, tmp_path: Path) -> None:
    reg = tmp_path / "reg.json"
    _enrolled(node, reg)
    old = node.quote(b"\x01" * 32, POLICY.pcrs)
    [d] = verify([node], POLICY, reg, "site", addresses={})
    assert d.admitted
    entry = read_registry(reg, "site").nodes["node-a"]
    fresh = judge(entry, old, b"\x02" * 32, POLICY)  # the verifier's new nonce, answered by the old quote
    assert not fresh.admitted and any("nonce" in r for r in fresh.reasons)
    same_nonce = judge(entry, old, b"\x01" * 32, POLICY)  # even with its own nonce: the clock went back
    assert not same_nonce.admitted and any("clock went back" in r for r in same_nonce.reasons)


def test_a_bad_signature_is_refused_cve_2023_3674(node: NodeTpm, tmp_path: Path) -> None:
    reg = tmp_path / "reg.json"
    _enrolled(node, reg)

    def flip(tpm: NodeTpm, nonce: bytes, pcrs: tuple[int, ...]) -> Evidence:
        ev = tpm.quote(nonce, pcrs)
        sig = bytearray(ev.signature)
        sig[-1] ^= 1
        return dataclasses.replace(ev, signature=bytes(sig))

    [d] = verify([node], POLICY, reg, "site", addresses={}, collector=flip)
    assert not d.admitted and any("does not verify" in r for r in d.reasons)


def test_a_quote_from_another_tpms_ak_is_refused(node: NodeTpm, tmp_path: Path) -> None:
    reg = tmp_path / "reg.json"
    _enrolled(node, reg)
    with swtpm(tmp_path / "b", "node-b") as other:
        boot(other)
        _enrolled(other, tmp_path / "other.json")

        def foreign(tpm: NodeTpm, nonce: bytes, pcrs: tuple[int, ...]) -> Evidence:
            return dataclasses.replace(other.quote(nonce, pcrs), node=tpm.node)  # same stack, same nonce

        [d] = verify([node], POLICY, reg, "site", addresses={}, collector=foreign)
    assert not d.admitted and any("does not verify under the enrolled AK" in r for r in d.reasons)


def test_a_second_tpm_claiming_an_enrolled_name_is_refused_cve_2025_13609(node: NodeTpm, tmp_path: Path) -> None:
    reg = tmp_path / "reg.json"
    _enrolled(node, reg)
    with swtpm(tmp_path / "b", "node-a") as impostor:  # claims node-a
        [outcome] = enrol([impostor], reg, "site")
    assert not outcome.enrolled and "bound to another TPM" in outcome.reason
    assert read_registry(reg, "site").nodes["node-a"].ek_sha256 != outcome.ek_sha256
    [again] = enrol([node], reg, "site")  # the genuine TPM may re-enrol (a fresh AK)
    assert again.enrolled, again.reason


def test_a_changed_binary_is_refused(tmp_path: Path) -> None:
    changed = tuple((p, n, k, v, b + b" patched" if n == "libcuda" else b) for p, n, k, v, b in STACK)
    with swtpm(tmp_path / "a") as tpm:
        boot(tpm, changed)
        reg = tmp_path / "reg.json"
        _enrolled(tpm, reg)
        [d] = verify([tpm], POLICY, reg, "site", addresses={})
    assert not d.admitted and any("not an approved digest of libcuda" in r for r in d.reasons)


def test_a_measurement_missing_from_the_log_is_refused(tmp_path: Path) -> None:
    hidden = ((10, "rootkit", "binary", "", b"evil"),)
    with swtpm(tmp_path / "a") as tpm:
        boot(tpm, pcr_only=hidden)
        reg = tmp_path / "reg.json"
        _enrolled(tpm, reg)
        [d] = verify([tpm], POLICY, reg, "site", addresses={})
    assert not d.admitted and any("differs from the event log's replay" in r for r in d.reasons)


def test_an_event_in_a_pcr_outside_the_policy_is_refused_not_skipped(tmp_path: Path) -> None:
    outside = ((11, "kernel", "host-kernel", "6.1.0-test", b"Linux 6.1.0-test"),)
    with swtpm(tmp_path / "a") as tpm:
        boot(tpm, (*STACK, *outside))
        reg = tmp_path / "reg.json"
        _enrolled(tpm, reg)
        [d] = verify([tpm], POLICY, reg, "site", addresses={})
    assert not d.admitted and any("PCR 11 is not in the policy" in r for r in d.reasons)


def test_secure_boot_disabled_is_refused_when_required(tmp_path: Path) -> None:
    off = tuple((p, n, k, "disabled", b"SecureBoot=disabled") if n == "secure-boot" else (p, n, k, v, b)
                for p, n, k, v, b in STACK)
    with swtpm(tmp_path / "a") as tpm:
        boot(tpm, off)
        reg = tmp_path / "reg.json"
        _enrolled(tpm, reg)
        [d] = verify([tpm], POLICY, reg, "site", addresses={})
    assert not d.admitted and any("Secure Boot is required" in r for r in d.reasons)


def test_an_unreachable_tpm_or_an_unenrolled_node_is_refused(node: NodeTpm, tmp_path: Path) -> None:
    reg = tmp_path / "reg.json"
    [d] = verify([node], POLICY, reg, "site", addresses={})
    assert not d.admitted and "not enrolled" in d.reasons[0]
    _enrolled(node, reg)
    gone = dataclasses.replace(node, tcti=f"swtpm:path={tmp_path}/no-such.sock")
    [d] = verify([gone], POLICY, reg, "site", addresses={})
    assert not d.admitted and d.reasons[0].startswith("no quote")
