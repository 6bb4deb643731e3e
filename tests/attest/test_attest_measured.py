"""A real host's UEFI log and IMA list judged by the allowlist: what passes, and each way it must not."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
from pathlib import Path

import pytest
from swtpm_kit import swtpm
from tcg_kit import (
    EV_BS_APP,
    EV_POST_CODE,
    IMA_STACK,
    SHA256,
    Ev,
    boot_aggregate_line,
    boot_events,
    build,
    ima_list,
    ima_ng_line,
    ima_template_sha256,
    image_load,
    real_host_policy,
    uefi_pcrs,
)

from ringfence.attest.eventlog import judge_events, parse_event_log, replay
from ringfence.attest.interface import MalformedTpmData
from ringfence.attest.measured import read_measurements
from ringfence.attest.node import NodeTpm
from ringfence.attest.verifier import enrol, verify
from ringfence.policy.attestation import Attestation

POLICY = Attestation.model_validate_json(json.dumps(real_host_policy()))


def _problems(log: bytes, ima: str | None, policy: Attestation = POLICY) -> list[str]:
    m = read_measurements(log, None if ima is None else ima.encode(), policy, "node-a")
    return [*m.problems, *judge_events(m.log, policy)]


def _host(events: list[Ev] | None = None, stack: tuple[tuple[str, bytes], ...] = IMA_STACK) -> tuple[bytes, str]:
    evs = boot_events() if events is None else events
    return build(evs), ima_list(uefi_pcrs(evs), stack)


def test_an_approved_host_has_no_problems_and_replays_uefi_then_ima() -> None:
    log, ima = _host()
    m = read_measurements(log, ima.encode(), POLICY, "node-a")
    assert m.problems == () and judge_events(m.log, POLICY) == []
    assert m.source == "uefi+ima"
    names = {e.name for e in m.log.events}
    assert {"kernel-image", "kernel-file", "secure-boot", "nvidia-kmod", "nvidia-userspace", "mofed",
            "rdma-core", "boot-loader-pcr4", "firmware-pcr0", "firmware-pcr7"} <= names
    pcrs = uefi_pcrs(boot_events())
    assert {i: v for i, v in m.pcrs.items() if i != 10} == pcrs
    assert 10 in m.pcrs and 10 not in pcrs


def test_a_changed_gpu_driver_is_refused() -> None:
    stack = tuple((p, c + b" patched" if p.endswith("nvidia.ko") else c) for p, c in IMA_STACK)
    log, ima = _host(stack=stack)
    assert any("not an approved digest of nvidia-kmod" in p for p in _problems(log, ima))


def test_a_file_no_component_claims_is_refused_by_its_path() -> None:
    log, ima = _host(stack=(*IMA_STACK, ("/usr/local/bin/miner", b"x")))
    assert any("no component 'ima:/usr/local/bin/miner'" in p for p in _problems(log, ima))


def test_a_required_stack_missing_from_the_ima_list_is_refused() -> None:
    log, ima = _host(stack=tuple((p, c) for p, c in IMA_STACK if "mlx5" not in p))
    assert "required component mofed (mofed) was not measured" in _problems(log, ima)


def test_without_the_ima_list_the_ima_components_are_missing() -> None:
    log, _ = _host()
    problems = _problems(log, None)
    assert "required component nvidia-kmod (nvidia-kernel-module) was not measured" in problems


def test_an_unknown_boot_application_is_refused() -> None:
    evs = [*boot_events(), Ev(4, EV_BS_APP, image_load(), b"evil bootkit PE image")]
    log, ima = _host(evs)
    assert any("not an approved digest of" in p and "PCR 4" in p for p in _problems(log, ima))


def test_a_firmware_event_of_a_type_no_component_names_is_refused() -> None:
    evs = [*boot_events(), Ev(1, EV_POST_CODE, b"\0" * 16, b"option rom")]
    log, ima = _host(evs)
    assert any("no component 'EV_POST_CODE at byte" in p for p in _problems(log, ima))


def test_an_event_in_a_pcr_the_policy_does_not_quote_is_refused_not_skipped() -> None:
    policy = Attestation.model_validate_json(json.dumps(real_host_policy(
        pcrs=[0, 1, 2, 3, 4, 5, 6, 7, 9, 10],
        components=[c for c in real_host_policy()["components"] if c["pcr"] != 8])))
    log, ima = _host()
    assert any("PCR 8 is not in the policy's quoted PCRs" in p for p in _problems(log, ima, policy))


def test_secure_boot_disabled_is_refused() -> None:
    log, ima = _host(boot_events(b"\x00"))
    problems = _problems(log, ima)
    assert any("Secure Boot is required; the event log shows ['disabled']" in p for p in problems)


def test_a_secure_boot_event_whose_data_lies_about_its_digest_is_refused() -> None:
    from tcg_kit import EV_DRIVER_CONFIG, variable

    evs = [Ev(7, EV_DRIVER_CONFIG, variable("SecureBoot", b"\x01"), variable("SecureBoot", b"\x00"))
           if e.kind == EV_DRIVER_CONFIG and b"S\0e\0c\0" in e.data else e for e in boot_events()]
    log, ima = _host(evs)
    problems = _problems(log, ima)
    assert any("Secure Boot event at byte" in p and "unverified" in p for p in problems)
    assert any("Secure Boot is required" in p for p in problems)


def test_an_ima_list_of_another_boot_is_refused_by_its_boot_aggregate() -> None:
    log, _ = _host()
    other = boot_events()[:-1]  # a boot without the kernel's PCR 4 event
    ima = ima_list(uefi_pcrs(other))
    assert any("boot_aggregate" in p and "not this boot's" in p for p in _problems(log, ima))


def test_an_ima_list_not_starting_at_boot_aggregate_is_refused() -> None:
    log, ima = _host()
    lines = ima.splitlines(keepends=True)
    assert any("first measurement is not boot_aggregate" in p for p in _problems(log, "".join(lines[1:])))
    assert any("boot_aggregate is not the first" in p
               for p in _problems(log, "".join([lines[1], lines[0], *lines[2:]])))


def test_a_violation_is_refused() -> None:
    log, ima = _host()
    ima += f"10 {'0' * 40} ima-ng sha256:{'0' * 64} /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n"
    assert any("measurement violation" in p for p in _problems(log, ima))


def test_a_sha1_file_digest_is_refused() -> None:
    log, ima = _host()
    import hashlib

    d = b"sha1:\0" + hashlib.sha1(b"x").digest()
    data = struct.pack("<I", len(d)) + d + struct.pack("<I", 11) + b"/usr/bin/x\0"
    ima += f"10 {hashlib.sha1(data).hexdigest()} ima-ng sha1:{hashlib.sha1(b'x').hexdigest()} /usr/bin/x\n"
    assert any("file digest is sha1" in p for p in _problems(log, ima))


def test_only_the_ima_entries_the_quote_covers_are_judged() -> None:
    from ringfence.attest.eventlog import pcr_digest

    log, ima = _host()
    full = read_measurements(log, ima.encode(), POLICY, "node-a")
    later = ima + ima_ng_line("/usr/local/bin/later", b"x")
    cut = read_measurements(log, later.encode(), POLICY, "node-a", pcr_digest(full.pcrs, POLICY.pcrs))
    assert cut.log == full.log and cut.pcrs == full.pcrs
    # no prefix matches (a forged or other quote): every entry is judged, and the quote check will refuse
    other = read_measurements(log, later.encode(), POLICY, "node-a", b"\0" * 32)
    assert any("ima:/usr/local/bin/later" in p for p in judge_events(other.log, POLICY))


def test_the_lab_json_log_reads_as_before() -> None:
    doc = {"format": "ringfence-eventlog-1", "events": [
        {"pcr": 9, "name": "kernel", "kind": "host-kernel", "version": "6.1", "digest": "ab" * 32}]}
    raw = json.dumps(doc).encode()
    m = read_measurements(raw, None, POLICY, "node-a")
    assert m.log == parse_event_log(raw, "node-a") and m.pcrs == replay(m.log) and m.problems == ()
    assert m.source == "ringfence-eventlog-1"
    # an IMA list beside a JSON log: its boot_aggregate cannot be bound to a boot, so it is refused
    with_ima = read_measurements(raw, boot_aggregate_line({}).encode(), POLICY, "node-a")
    assert any("cannot be checked without the node's UEFI event log" in p for p in with_ima.problems)


@pytest.mark.parametrize("data", [b"", b"\0" * 64, b"garbage"])
def test_a_log_of_neither_form_is_malformed(data: bytes) -> None:
    with pytest.raises(MalformedTpmData, match="neither ringfence's JSON log nor a crypto-agile TCG log"):
        read_measurements(data, None, POLICY, "node-a")


def test_a_malformed_ima_list_names_the_node_and_line() -> None:
    log, ima = _host()
    with pytest.raises(MalformedTpmData, match=r"node-a: IMA measurement list: line 2"):
        read_measurements(log, (ima.splitlines()[0] + "\nnot a line\n").encode(), POLICY, "node-a")


def test_ima_lines_are_built_as_the_kernel_prints_them() -> None:
    # the kit's own line must parse (the kit and the reader share no code)
    from ringfence.attest.ima import parse_ima_list

    [e] = parse_ima_list(ima_ng_line("/usr/bin/x", b"x").encode())
    assert e.path == "/usr/bin/x"


# --- through the verifier, on a real quote from a throwaway swtpm ---------------------------------------

def _boot_real_host(tpm: NodeTpm, tmp: Path, *, pcr_stack: tuple[tuple[str, bytes], ...] = IMA_STACK,
                    log_stack: tuple[tuple[str, bytes], ...] = IMA_STACK) -> NodeTpm:
    """Extend the swtpm as firmware, boot loader and IMA would, and leave the binary UEFI log and the
    IMA list where the node's quote script reads them."""
    evs = boot_events()
    pcrs = uefi_pcrs(evs)
    extend = [f"{e.pcr}:sha256={dict(e.digests())[SHA256].hex()}" for e in evs]
    extend += [f"10:sha256={ima_template_sha256(line).hex()}" for line in ima_list(pcrs, pcr_stack).splitlines()]
    env = {**os.environ, "TPM2TOOLS_TCTI": tpm.tcti}
    for i in range(0, len(extend), 8):  # tpm2_pcrextend takes a handful per call
        subprocess.run(["tpm2_pcrextend", *extend[i : i + 8]], check=True, env=env, capture_output=True)
    (tmp / "binary_bios_measurements").write_bytes(build(evs))
    (tmp / "ascii_runtime_measurements").write_text(ima_list(pcrs, log_stack))
    return dataclasses.replace(tpm, event_log=str(tmp / "binary_bios_measurements"),
                               ima_list=str(tmp / "ascii_runtime_measurements"))


def test_a_real_host_log_is_admitted_on_its_quote_and_a_hidden_driver_change_is_not(tmp_path: Path) -> None:
    with swtpm(tmp_path / "a", "node-a") as raw:
        tpm = _boot_real_host(raw, tmp_path / "a")
        reg = tmp_path / "reg.json"
        [outcome] = enrol([tpm], reg, "site")
        assert outcome.enrolled, outcome.reason
        [d] = verify([tpm], POLICY, reg, "site", addresses={})
        assert d.admitted, d.reasons
        # a file measured between the quote and the list's read: not covered by this quote, not judged by
        # it (the next quote covers it); a node is not cut off by that race
        with open(tpm.ima_list, "a") as f:
            f.write(ima_ng_line("/usr/local/bin/after-the-quote", b"x"))
        [d] = verify([tpm], POLICY, reg, "site", addresses={})
        assert d.admitted, d.reasons
        # ... but once the TPM has it, it is judged, and refused
        env = {**os.environ, "TPM2TOOLS_TCTI": tpm.tcti}
        line = ima_ng_line("/usr/local/bin/after-the-quote", b"x")
        subprocess.run(["tpm2_pcrextend", f"10:sha256={ima_template_sha256(line).hex()}"], check=True, env=env,
                       capture_output=True)
        [d] = verify([tpm], POLICY, reg, "site", addresses={})
        assert not d.admitted and any("no component 'ima:/usr/local/bin/after-the-quote'" in r for r in d.reasons)
        # the IMA list read from elsewhere: the quote's evidence must carry it, not an empty list
        gone = dataclasses.replace(tpm, ima_list=str(tmp_path / "nowhere"))
        [d] = verify([gone], POLICY, reg, "site", addresses={})
        assert not d.admitted and "cannot read the IMA list" in d.reasons[0]
    patched = tuple((p, c + b" patched" if p.endswith("nvidia.ko") else c) for p, c in IMA_STACK)
    with swtpm(tmp_path / "b", "node-b") as raw:
        tpm = _boot_real_host(raw, tmp_path / "b", pcr_stack=patched)  # the list shows the approved module
        reg = tmp_path / "reg-b.json"
        [outcome] = enrol([tpm], reg, "site")
        assert outcome.enrolled, outcome.reason
        [d] = verify([tpm], POLICY, reg, "site", addresses={})
    assert not d.admitted and any("differs from the event log's replay" in r for r in d.reasons), d.reasons


def test_corrupted_logs_are_refusals_never_crashes() -> None:
    import random

    log, ima = _host()
    rng = random.Random(1609)
    for _ in range(150):
        bad_log, bad_ima = bytearray(log), bytearray(ima.encode())
        for buf in (bad_log, bad_ima):
            for _ in range(rng.randint(0, 2)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        try:
            m = read_measurements(bytes(bad_log), bytes(bad_ima), POLICY, "node-a")
        except MalformedTpmData:
            continue
        judge_events(m.log, POLICY)  # whatever parsed is judged; nothing else may be raised
