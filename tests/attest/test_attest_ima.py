"""The IMA ASCII measurement list: real lines verify, the sha256 replay, and bad lines named."""

from __future__ import annotations

import hashlib

import pytest
from tcg_kit import ima_ng_line, ima_template_sha256

from ringfence.attest.ima import MAX_LINE, boot_aggregate, parse_ima_list, replay_ima
from ringfence.attest.interface import MalformedTpmData

#: Lines from real hosts, as published: rust-keylime's IMA parser tests (keylime/rust-keylime,
#: keylime/src/ima/) — legacy ``ima``, ``ima-ng`` with sha1, sha256 and sha512 file digests — and a
#: TPM-less boot's boot_aggregate quoted on the linux-integrity list. Each one's printed SHA-1 template
#: hash must be what this reader rebuilds from its fields.
REAL = (
    "10 2c7020ad8cab6b7419e4973171cb704bdbf52f77 ima e09e048c48301268ff38645f4c006137e42951d0 /init",
    "10 a84ff12e903a050abff2f336292d8318e7430a89 ima-ng sha1:f4107171a62db56e4949c30fca97d09f7550aac5 "
    "/usr/lib/modules/6.2.0-1018-gcp/kernel/fs/autofs/autofs4.ko",
    "10 ab6cd51adcff9f5ca04ff9e23f35099125073bae ima-ng "
    "sha256:0e340b558513b76fbe6e5a6b2a03f3e8f42257b95e6ed980697baf4680e8eeeb boot_aggregate",
    "10 0b800bc9073bea5973484e047a12b66fcf78b616 ima-ng sha512:d47b283c5f72fcd3d0655c9cbb0e7a175bb0d424d7b56b0a"
    "437f29ed4915fd4ec1d6712346a5ede957de265bee36792dc4660b2cac1161f471dd8f7ec27785bd "
    "/usr/lib/modules/6.2.0-1018-gcp/kernel/fs/autofs/autofs4.ko",
    "10 0adefe762c149c7cec19da62f0da1297fcfbffff ima-ng sha256:" + "0" * 64 + " boot_aggregate",
)


@pytest.mark.parametrize("line", REAL)
def test_real_lines_rebuild_to_their_printed_template_hash(line: str) -> None:
    [e] = parse_ima_list((line + "\n").encode())
    assert e.extend_value("sha1") == e.template_hash
    assert e.path == line.split(" ")[4]


@pytest.mark.parametrize("line", REAL)
def test_a_changed_character_in_a_real_line_is_refused(line: str) -> None:
    i = line.rindex("/") + 1 if "/" in line else len(line) - 1
    altered = line[:i] + ("x" if line[i] != "x" else "y") + line[i + 1 :]
    with pytest.raises(MalformedTpmData, match="line 1: the template hash"):
        parse_ima_list((altered + "\n").encode())


def test_the_sha256_replay_extends_the_sha256_of_each_template_data() -> None:
    lines = [ima_ng_line("/usr/bin/python3", b"py"),
             ima_ng_line("/usr/lib/libcuda.so.1", b"cuda", template="ima-sig", sig=b"\x03\x02sig"),
             ima_ng_line("/usr/lib/nosig.so", b"x", template="ima-sig")]
    entries = parse_ima_list("".join(lines).encode())
    pcr = bytes(32)
    for line in lines:
        pcr = hashlib.sha256(pcr + ima_template_sha256(line)).digest()
    assert replay_ima(entries) == {10: pcr}
    assert entries[1].signature == b"\x03\x02sig" and entries[2].signature == b""
    sha1 = bytes(20)
    for e in entries:
        sha1 = hashlib.sha1(sha1 + e.template_hash).digest()
    assert replay_ima(entries, bank="sha1") == {10: sha1}


def test_a_violation_is_replayed_as_all_ones() -> None:
    line = f"10 {'0' * 40} ima-ng sha256:{'0' * 64} /var/log/written-while-read\n"
    [e] = parse_ima_list(line.encode())
    assert e.violation
    assert replay_ima((e,)) == {10: hashlib.sha256(bytes(32) + b"\xff" * 32).digest()}


def test_a_per_bank_sha256_list_is_checked_with_sha256() -> None:
    good = ima_ng_line("/usr/bin/x", b"x").split(" ")
    good[1] = ima_template_sha256(" ".join(good)).hex()
    [e] = parse_ima_list(" ".join(good).encode())
    assert e.template_hash == e.extend_value("sha256")


@pytest.mark.parametrize(("text", "why"), [
    ("10 abc ima-ng sha256:00 /x\n", "template hash"),
    ("99 " + "0" * 40 + " ima-ng sha256:" + "0" * 64 + " /x\n", "PCR '99'"),
    ("10 " + "1" * 40 + " ima-ng sha256:" + "0" * 64 + "\n", "4 fields"),
    ("10 " + "1" * 40 + " ima-ng md4:00 /x\n", "known algorithm"),
    ("10 " + "1" * 40 + " ima-ng sha256:00 /x\n", "sha256 file digest of 1 bytes"),
    ("10 " + "1" * 40 + " ima-buf sha256:" + "0" * 64 + " kexec-cmdline 00\n", "template 'ima-buf'"),
    ("10 " + "1" * 40 + " ima-ng sha256:" + "0" * 64 + " /x extra\n", "has 5 fields"),
    ("10 " + "1" * 40 + " ima-ng sha256:" + "0" * 64 + " /x", "does not end with a newline"),
])
def test_a_malformed_line_is_named(text: str, why: str) -> None:
    ok = ima_ng_line("/usr/bin/ok", b"ok")
    with pytest.raises(MalformedTpmData, match="line 2") as exc:
        parse_ima_list((ok + text).encode())
    assert why in exc.value.message


def test_only_a_newline_ends_a_line() -> None:
    # a path holding a form feed or U+2028 is one line to the kernel; its template hash still rebuilds
    for path in ("/tmp/a\x0cb", "/tmp/a\u2028b"):
        [e] = parse_ima_list(ima_ng_line(path, b"x").encode())
        assert e.path == path


def test_lines_and_lists_are_bounded() -> None:
    with pytest.raises(MalformedTpmData, match="over the limit"):
        parse_ima_list(b"10 " + b"a" * MAX_LINE + b"\n")
    with pytest.raises(MalformedTpmData, match="line 1: not UTF-8"):
        parse_ima_list(b"10 \xff\n")


def test_boot_aggregate_is_sha256_over_pcrs_0_to_9() -> None:
    pcrs = {i: bytes([i]) * 32 for i in range(12)}
    assert boot_aggregate(pcrs) == hashlib.sha256(b"".join(bytes([i]) * 32 for i in range(10))).digest()
