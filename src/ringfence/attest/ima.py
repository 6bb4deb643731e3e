"""The IMA runtime measurement list (ASCII form), read strictly and replayed into the sha256 bank.

``/sys/kernel/security/ima/ascii_runtime_measurements``: one line per measurement,
``PCR template-hash template-name field…``, for the templates

- ``ima-ng``: ``10 <hash> ima-ng sha256:<file digest> <path>``
- ``ima-sig``: the same plus the file's signature (hex; empty when the file has none)
- ``ima`` (legacy): ``10 <hash> ima <sha1 file digest> <path>``

What the ASCII list can replay. Its template-hash column is the SHA-1 template hash (the SHA-1 bank's
extend value), or, in a per-bank list such as ``ascii_runtime_measurements_sha256`` on kernels that
offer one, that bank's hash. The sha256 bank is extended (Linux ≥ 5.10) with the *sha256* of the same
template data, which the ASCII list does not print — but the template data is fully given by the
printed fields (``ima-ng``/``ima-sig``: each field as a little-endian u32 length and its bytes, the
digest field being ``alg ‖ ':' ‖ NUL ‖ digest``, the path NUL-terminated, the kernel having already
replaced spaces in it by ``_``; legacy ``ima``: the SHA-1 digest and the path NUL-padded to 256 bytes).
So each line's template data is rebuilt, its hash is *checked against the printed template hash*, and
only then hashed with sha256 for the sha256 replay: a line whose rebuild does not reproduce the printed
hash (a path with a newline, a template this reader does not know) is an error naming the line, never a
guess. The binary list is therefore not needed for sha256 replay. What cannot be replayed from it:
kernels before 5.10 extended non-SHA-1 banks with the zero-padded SHA-1 template hash (not supported;
such a host's sha256 PCR 10 will not match and it is refused), and templates other than the three above.

A violation (the kernel could not measure a file consistently: ToMToU, open writers) is printed with an
all-zero template hash and extended as all-ones in every bank; it is replayed so and reported.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass

from ringfence.attest.interface import MalformedTpmData

MAX_LINE = 16_384  # a path of PATH_MAX and an RSA-4096 signature in hex fit comfortably
MAX_LIST_BYTES = 64 << 20
MAX_ENTRIES = 500_000
LEGACY_NAME_LEN = 256  # IMA_EVENT_NAME_LEN_MAX + 1: the legacy template hashes the name padded to this
BOOT_AGGREGATE = "boot_aggregate"
_HEX = re.compile(r"[0-9a-f]+")
_DIGEST_SIZES = {"sha1": 20, "sha256": 32, "sha384": 48, "sha512": 64, "md5": 16, "sm3": 32}


@dataclass(frozen=True)
class ImaEntry:
    """One measurement: its line number (from 1), PCR, template, file digest (algorithm and bytes),
    path, signature, the printed template hash, and the template data rebuilt from the fields."""

    line: int
    pcr: int
    template: str
    alg: str
    file_digest: bytes
    path: str
    signature: bytes
    template_hash: bytes
    template_data: bytes

    @property
    def violation(self) -> bool:
        """A measurement violation (printed as an all-zero template hash)."""
        return not any(self.template_hash)

    def extend_value(self, bank: str = "sha256") -> bytes:
        """What this entry extended into ``bank`` (sha1 or sha256): the template data's hash in that
        bank's algorithm, or all ones for a violation."""
        size = {"sha1": 20, "sha256": 32}[bank]
        if self.violation:
            return b"\xff" * size
        return hashlib.new(bank, self.template_data).digest()


def _field(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data


def _fail(line: int, why: str) -> MalformedTpmData:
    return MalformedTpmData(f"IMA measurement list: line {line}: {why}")


def _hexbytes(text: str, line: int, what: str) -> bytes:
    if len(text) % 2 or (text and not _HEX.fullmatch(text)):
        raise _fail(line, f"{what} {text[:80]!r} is not lowercase hex")
    return bytes.fromhex(text)


def _entry(n: int, text: str) -> ImaEntry:
    parts = text.split(" ")
    if len(parts) < 5:
        raise _fail(n, f"{len(parts)} fields; a measurement has PCR, template hash, template, digest, path")
    pcr_s, thash_s, template = parts[0], parts[1], parts[2]
    if not pcr_s.isdigit() or int(pcr_s) > 23:
        raise _fail(n, f"PCR {pcr_s[:20]!r} is not 0..23")
    thash = _hexbytes(thash_s, n, "template hash")
    if len(thash) not in (20, 32):
        raise _fail(n, f"template hash of {len(thash)} bytes (SHA-1: 20, sha256: 32)")
    path = parts[4]
    if not path:
        raise _fail(n, "empty path")
    if template == "ima":
        if len(parts) != 5:
            raise _fail(n, f"the ima template has 5 fields, this line {len(parts)}")
        alg, digest = "sha1", _hexbytes(parts[3], n, "file digest")
        name = path.encode()
        if len(digest) != 20 or len(name) >= LEGACY_NAME_LEN:
            raise _fail(n, "the ima template holds a SHA-1 digest and a name under 256 bytes")
        data = digest + name.ljust(LEGACY_NAME_LEN, b"\0")
        sig = b""
    elif template in ("ima-ng", "ima-sig"):
        want = 5 if template == "ima-ng" else 6
        if len(parts) != want and not (template == "ima-sig" and len(parts) == 5):
            raise _fail(n, f"the {template} template has {want} fields, this line {len(parts)}")
        alg, sep, hexd = parts[3].partition(":")
        if not sep or alg not in _DIGEST_SIZES:
            raise _fail(n, f"file digest {parts[3][:80]!r} is not ALG:HEX with a known algorithm")
        digest = _hexbytes(hexd, n, "file digest")
        if len(digest) != _DIGEST_SIZES[alg]:
            raise _fail(n, f"{alg} file digest of {len(digest)} bytes")
        sig = _hexbytes(parts[5], n, "signature") if len(parts) == 6 else b""
        data = _field(alg.encode() + b":\0" + digest) + _field(path.encode() + b"\0")
        if template == "ima-sig":
            data += _field(sig)
    else:
        raise _fail(n, f"template {template[:40]!r} (read: ima-ng, ima-sig, ima)")
    entry = ImaEntry(n, int(pcr_s), template, alg, digest, path, sig, thash, data)
    if not entry.violation:
        bank = "sha1" if len(thash) == 20 else "sha256"
        if entry.extend_value(bank) != thash:
            raise _fail(n, f"the template hash is not the {bank} of the template data its fields give "
                        "(the line was altered, or it holds what this reader cannot rebuild)")
    return entry


def parse_ima_list(data: bytes) -> tuple[ImaEntry, ...]:
    """Every measurement of an ASCII list; :class:`MalformedTpmData` naming the first bad line."""
    if len(data) > MAX_LIST_BYTES:
        raise MalformedTpmData(f"IMA measurement list: {len(data)} bytes, over the limit of {MAX_LIST_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _fail(line, "not UTF-8") from exc
    if text and not text.endswith("\n"):
        raise _fail(text.count("\n") + 1, "the list does not end with a newline (truncated?)")
    out: list[ImaEntry] = []
    # split on "\n" only, as the kernel ends lines: str.splitlines would also split a path at \r, \f, \u2028…
    for n, raw in enumerate(text.split("\n")[:-1] if text else [], start=1):
        if len(raw) > MAX_LINE:
            raise _fail(n, f"{len(raw)} characters, over the limit of {MAX_LINE}")
        if len(out) >= MAX_ENTRIES:
            raise _fail(n, f"more than {MAX_ENTRIES} measurements")
        out.append(_entry(n, raw))
    return tuple(out)


def replay_ima(entries: tuple[ImaEntry, ...], start: dict[int, bytes] | None = None,
               bank: str = "sha256") -> dict[int, bytes]:
    """PCR → value after extending every entry into ``bank``, from ``start`` (zeros where absent)."""
    size = {"sha1": 20, "sha256": 32}[bank]
    pcrs = dict(start or {})
    for e in entries:
        pcrs[e.pcr] = hashlib.new(bank, pcrs.get(e.pcr, bytes(size)) + e.extend_value(bank)).digest()
    return pcrs


def boot_aggregate(pcrs: dict[int, bytes]) -> bytes:
    """The sha256 boot_aggregate IMA computes from the sha256 bank: sha256 over PCRs 0–9 (Linux ≥ 5.8
    includes 8 and 9 in non-SHA-1 aggregates)."""
    return hashlib.sha256(b"".join(pcrs.get(i, bytes(32)) for i in range(10))).digest()


__all__ = ["BOOT_AGGREGATE", "MAX_LINE", "ImaEntry", "boot_aggregate", "parse_ima_list", "replay_ima"]
