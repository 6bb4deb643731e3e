"""The UEFI (TCG2) event log reader against tpm2_eventlog on logs built from the spec, and on bad bytes."""

from __future__ import annotations

import hashlib
import random
import struct
from pathlib import Path

import pytest
from tcg_kit import (
    EV_BS_APP,
    EV_DRIVER_CONFIG,
    EV_SEPARATOR,
    SHA1,
    SHA256,
    SHA384,
    Ev,
    boot_events,
    build,
    oracle,
    spec_id,
    startup_locality,
    variable,
)

from ringfence.attest.interface import MalformedTpmData
from ringfence.attest.uefi import (
    ALG_SHA1,
    MAX_EVENTS,
    looks_like_tcg_log,
    parse_uefi_log,
    replay_uefi,
    secure_boot_events,
)


def _agrees(log: bytes, tmp_path: Path, banks: tuple[tuple[str, int], ...] = (("sha1", SHA1), ("sha256", SHA256))
            ) -> None:
    ours = parse_uefi_log(log)
    ref = oracle(log, tmp_path)
    # tpm2_eventlog lists the Spec ID record as event 0; ours starts after it
    assert len(ref["events"]) == len(ours.events) + 1
    for ev, want in zip(ours.events, ref["events"][1:], strict=True):
        assert (ev.pcr, ev.type_name) == (want["PCRIndex"], want["EventType"])
        assert len(ev.data) == want["EventSize"]
        if ev.type_name != "EV_NO_ACTION":
            got = {a: d.hex() for a, d in ev.digests}
            assert {name: got[alg] for name, alg in banks} == {
                d["AlgorithmId"]: d["Digest"] for d in want["Digests"] if d["AlgorithmId"] in dict(banks)}
    for name, alg in banks:
        assert {i: v.hex() for i, v in replay_uefi(ours, alg).items()} == ref["pcrs"][name], name


def test_a_secure_boot_log_parses_as_tpm2_eventlog_reads_it(tmp_path: Path) -> None:
    _agrees(build(boot_events()), tmp_path)


def test_a_startup_locality_3_start_replays_pcr0_from_the_locality(tmp_path: Path) -> None:
    log = build(boot_events(), extra=startup_locality(3))
    ours = parse_uefi_log(log)
    assert ours.startup_locality == 3
    # PFP 10.4.5.3: PCR 0 starts at the locality (last byte), the EV_NO_ACTION record is never extended
    pcr0 = bytes(31) + b"\x03"
    for ev in ours.events:
        if ev.pcr == 0 and ev.type_name != "EV_NO_ACTION":
            pcr0 = hashlib.sha256(pcr0 + (ev.digest() or b"")).digest()
    assert replay_uefi(ours)[0] == pcr0
    # tpm2-tools 5.4 (installed) instead extends the record's zero digest and ignores the locality
    # (tpm2-tools issues #3224 and #3146, fixed after 5.4): it agrees on every other PCR and on PCR 0
    # only through that bug
    ref = oracle(log, tmp_path)
    got = {i: v.hex() for i, v in replay_uefi(ours).items()}
    assert {i: v for i, v in got.items() if i} == {i: v for i, v in ref["pcrs"]["sha256"].items() if i}
    buggy = bytes(32)
    for ev in ours.events:
        if ev.pcr == 0:
            buggy = hashlib.sha256(buggy + (ev.digest() or b"")).digest()
    assert ref["pcrs"]["sha256"][0] == buggy.hex() != got[0]


def test_three_banks_and_vendor_info_parse_by_the_spec_id_sizes(tmp_path: Path) -> None:
    algs = ((SHA1, 20), (SHA256, 32), (SHA384, 48))
    events = [Ev(e.pcr, e.kind, e.data, e.measured, (SHA1, SHA256, SHA384)) for e in boot_events()]
    log = build(events, head=spec_id(algs, vendor=b"vendor"))
    _agrees(log, tmp_path, (("sha1", SHA1), ("sha256", SHA256), ("sha384", SHA384)))


def test_an_algorithm_unknown_to_this_reader_is_read_by_its_spec_id_size() -> None:
    odd = 0x0099  # no such TPM_ALG_ID here: its digests are skipped by the 48 bytes the Spec ID gives
    events = [Ev(0, EV_SEPARATOR, b"\0\0\0\0", algs=(SHA256, odd)), Ev(4, EV_BS_APP, b"x" * 32, b"k", (SHA256, odd))]
    log = parse_uefi_log(build(events, head=spec_id(((SHA256, 32), (odd, 48)))))
    assert [e.type_name for e in log.events] == ["EV_SEPARATOR", "EV_EFI_BOOT_SERVICES_APPLICATION"]
    assert len(dict(log.events[0].digests)[odd]) == 48
    with pytest.raises(MalformedTpmData, match="no sha1 digests"):
        replay_uefi(log, ALG_SHA1)


def test_secure_boot_state_is_read_from_the_variable_and_checked_against_its_digest() -> None:
    for data, state in ((b"\x01", "enabled"), (b"\x00", "disabled")):
        [(_, got)] = secure_boot_events(parse_uefi_log(build(boot_events(data))))
        assert got == state
    # data says enabled, the digest extended is the disabled variable's: not believed
    forged = Ev(7, EV_DRIVER_CONFIG, variable("SecureBoot", b"\x01"), variable("SecureBoot", b"\x00"))
    [(_, got)] = secure_boot_events(parse_uefi_log(build([forged])))
    assert got.startswith("unverified")
    # the same name under another vendor GUID is not the Secure Boot state
    other = Ev(7, EV_DRIVER_CONFIG, variable("SecureBoot", b"\x01", guid=bytes(16)))
    assert secure_boot_events(parse_uefi_log(build([other]))) == []


def test_every_truncation_is_malformed_naming_a_byte_offset() -> None:
    log = build(boot_events()[:6])
    assert looks_like_tcg_log(log)
    for n in range(len(log)):
        if n and n == len(build([])):  # exactly the Spec ID record: a valid, empty log
            assert parse_uefi_log(log[:n]).events == ()
            continue
        if n in _record_ends(log):
            parse_uefi_log(log[:n])  # a cut between records is a shorter, well-formed log
            continue
        with pytest.raises(MalformedTpmData, match=r"byte \d+"):
            parse_uefi_log(log[:n])


def _record_ends(log: bytes) -> set[int]:
    parsed = parse_uefi_log(log)
    return {e.offset for e in parsed.events[1:]} | {len(log)}


def test_random_corruption_never_raises_anything_but_malformed() -> None:
    log = bytearray(build(boot_events()))
    rng = random.Random(16)
    for _ in range(3000):
        bad = bytearray(log)
        for _ in range(rng.randint(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        try:
            parse_uefi_log(bytes(bad))
        except MalformedTpmData as exc:
            assert "byte" in exc.message


@pytest.mark.parametrize(("tail", "why"), [
    (struct.pack("<III", 0, EV_SEPARATOR, 1) + struct.pack("<H", 0x0004) + bytes(20), "does not list"),
    (struct.pack("<III", 24, EV_SEPARATOR, 0) + struct.pack("<I", 0), "PCR index 24"),
    (struct.pack("<III", 0, EV_SEPARATOR, 5), "5 digests"),
    (struct.pack("<III", 0, EV_SEPARATOR, 0) + struct.pack("<I", 0xFFFFFFF0), "over the limit"),
    (struct.pack("<III", 0, EV_SEPARATOR, 0) + struct.pack("<I", 4000), "needs 4000 bytes"),
])
def test_bad_records_are_refused_with_their_offset(tail: bytes, why: str) -> None:
    head = spec_id(((SHA256, 32),))
    with pytest.raises(MalformedTpmData, match=why) as exc:
        parse_uefi_log(head + tail)
    assert f"record at byte {len(head)}" in exc.value.message


def test_the_first_record_must_be_the_spec_id_event() -> None:
    sha1_only = struct.pack("<II", 0, 8) + bytes(20) + struct.pack("<I", 3) + b"1.0"
    with pytest.raises(MalformedTpmData, match="Spec ID"):
        parse_uefi_log(sha1_only)
    assert not looks_like_tcg_log(sha1_only)
    assert not looks_like_tcg_log(b'{"format": "ringfence-eventlog-1"}')


def test_the_event_count_is_bounded() -> None:
    one = Ev(10, EV_SEPARATOR, b"", algs=(SHA256,)).encode()
    with pytest.raises(MalformedTpmData, match=f"more than {MAX_EVENTS} events"):
        parse_uefi_log(spec_id(((SHA256, 32),)) + one * (MAX_EVENTS + 1))
