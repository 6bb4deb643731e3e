"""The UEFI (TCG2, crypto-agile) event log, as Linux exposes it, read strictly and replayed.

``/sys/kernel/security/tpm0/binary_bios_measurements``, per the TCG PC Client Platform Firmware Profile
(section 10): the first record is a ``TCG_PCR_EVENT`` (SHA-1 format: pcrIndex, eventType, 20-byte
digest, eventDataSize, data) of type ``EV_NO_ACTION`` carrying the ``Spec ID Event03`` structure, which
lists every algorithm the log carries and its digest size; every later record is a ``TCG_PCR_EVENT2``
(pcrIndex, eventType, ``TPML_DIGEST_VALUES`` — count, then per algorithm its id and digest of the size
the Spec ID event gave — eventSize, data). Everything is little-endian.

The reader is bounded: every length is checked against the bytes left, the number of events and the
size of one event's data are capped, an algorithm id the Spec ID event does not list is an error (its
digest size is unknowable, so nothing after it can be trusted). Any of that is a
:class:`MalformedTpmData` naming the byte offset of the record, never an IndexError.

Replay is the TPM's: ``PCR = H(PCR ‖ digest)`` per event but ``EV_NO_ACTION`` (never extended); PCR 0
starts at the locality of the ``StartupLocality`` event when there is one (an H-CRTM or a locality-3
start), zeros otherwise.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from ringfence.attest.interface import MalformedTpmData

#: TPM_ALG_ID of the digests this module names (any other is read by its Spec ID size and kept by id).
ALG_SHA1, ALG_SHA256, ALG_SHA384, ALG_SHA512, ALG_SM3 = 0x0004, 0x000B, 0x000C, 0x000D, 0x0012
ALG_NAMES = {ALG_SHA1: "sha1", ALG_SHA256: "sha256", ALG_SHA384: "sha384", ALG_SHA512: "sha512",
             ALG_SM3: "sm3_256"}
MAX_EVENTS = 20_000  # a real boot logs a few hundred; firmware with a runaway loop must not exhaust memory
MAX_EVENT_DATA = 1 << 20  # one event's data (the largest real ones are certificate lists in db/dbx)
MAX_ALGORITHMS = 16
SPEC_ID_SIGNATURE = b"Spec ID Event03\0"
STARTUP_LOCALITY = b"StartupLocality\0"

EV_NO_ACTION = 0x3
EV_SEPARATOR = 0x4
EV_EFI_VARIABLE_DRIVER_CONFIG = 0x80000001
EV_EFI_BOOT_SERVICES_APPLICATION = 0x80000003
#: PC Client PFP, table 9 (event types) — the names tpm2_eventlog prints.
EVENT_TYPES = {
    0x0: "EV_PREBOOT_CERT", 0x1: "EV_POST_CODE", 0x2: "EV_UNUSED", 0x3: "EV_NO_ACTION", 0x4: "EV_SEPARATOR",
    0x5: "EV_ACTION", 0x6: "EV_EVENT_TAG", 0x7: "EV_S_CRTM_CONTENTS", 0x8: "EV_S_CRTM_VERSION",
    0x9: "EV_CPU_MICROCODE", 0xA: "EV_PLATFORM_CONFIG_FLAGS", 0xB: "EV_TABLE_OF_DEVICES",
    0xC: "EV_COMPACT_HASH", 0xD: "EV_IPL", 0xE: "EV_IPL_PARTITION_DATA", 0xF: "EV_NONHOST_CODE",
    0x10: "EV_NONHOST_CONFIG", 0x11: "EV_NONHOST_INFO", 0x12: "EV_OMIT_BOOT_DEVICE_EVENTS",
    0x80000001: "EV_EFI_VARIABLE_DRIVER_CONFIG", 0x80000002: "EV_EFI_VARIABLE_BOOT",
    0x80000003: "EV_EFI_BOOT_SERVICES_APPLICATION", 0x80000004: "EV_EFI_BOOT_SERVICES_DRIVER",
    0x80000005: "EV_EFI_RUNTIME_SERVICES_DRIVER", 0x80000006: "EV_EFI_GPT_EVENT",
    0x80000007: "EV_EFI_ACTION", 0x80000008: "EV_EFI_PLATFORM_FIRMWARE_BLOB",
    0x80000009: "EV_EFI_HANDOFF_TABLES", 0x8000000A: "EV_EFI_PLATFORM_FIRMWARE_BLOB2",
    0x8000000B: "EV_EFI_HANDOFF_TABLES2", 0x8000000C: "EV_EFI_VARIABLE_BOOT2",
    0x80000010: "EV_EFI_HCRTM_EVENT", 0x800000E0: "EV_EFI_VARIABLE_AUTHORITY",
    0x800000E1: "EV_EFI_SPDM_FIRMWARE_BLOB", 0x800000E2: "EV_EFI_SPDM_FIRMWARE_CONFIG",
}
#: EFI_GLOBAL_VARIABLE, the vendor GUID of SecureBoot, PK, KEK (UEFI spec 3.3), in its on-disk byte order.
EFI_GLOBAL_VARIABLE = bytes.fromhex("61dfe48bca93d211aa0d00e098032b8c")


def event_type_name(event_type: int) -> str:
    """The PFP name of an event type (``EV_UNKNOWN_0x…`` for one the spec does not define)."""
    return EVENT_TYPES.get(event_type, f"EV_UNKNOWN_0x{event_type:08x}")


@dataclass(frozen=True)
class UefiEvent:
    """One record: where it starts in the log, its PCR, type, digests per algorithm id, and data."""

    offset: int
    pcr: int
    event_type: int
    digests: tuple[tuple[int, bytes], ...]  # (TPM_ALG_ID, digest) in the log's order
    data: bytes

    @property
    def type_name(self) -> str:
        """The event type's PFP name."""
        return event_type_name(self.event_type)

    def digest(self, alg: int = ALG_SHA256) -> bytes | None:
        """The digest of bank ``alg``, or None when the record has none."""
        return next((d for a, d in self.digests if a == alg), None)


@dataclass(frozen=True)
class UefiLog:
    """A parsed log: the Spec ID event's algorithms (id → digest size), the locality PCR 0 started at,
    and every ``TCG_PCR_EVENT2`` in order (``EV_NO_ACTION`` ones included: they are part of the log)."""

    algorithms: tuple[tuple[int, int], ...]
    startup_locality: int
    events: tuple[UefiEvent, ...]


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what, self.record = data, 0, what, 0

    def fail(self, why: str) -> MalformedTpmData:
        return MalformedTpmData(f"{self.what}: record at byte {self.record}: {why}")

    def take(self, n: int, field: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"truncated at byte {self.pos}: {field} needs {n} bytes, "
                            f"{len(self.data) - self.pos} left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self, field: str) -> int:
        return self.take(1, field)[0]

    def u16(self, field: str) -> int:
        return int(struct.unpack("<H", self.take(2, field))[0])

    def u32(self, field: str) -> int:
        return int(struct.unpack("<I", self.take(4, field))[0])

    def sized(self, field: str) -> bytes:
        size = self.u32(f"{field} size")
        if size > MAX_EVENT_DATA:
            raise self.fail(f"{field} of {size} bytes is over the limit of {MAX_EVENT_DATA}")
        return self.take(size, field)


def looks_like_tcg_log(data: bytes) -> bool:
    """True when ``data`` starts as a crypto-agile TCG log does (EV_NO_ACTION, then the Spec ID signature)."""
    return len(data) >= 48 and data[4:8] == struct.pack("<I", EV_NO_ACTION) and data[32:48] == SPEC_ID_SIGNATURE


def _spec_id(r: _Reader) -> tuple[tuple[int, int], ...]:
    r.record = r.pos
    pcr, kind = r.u32("pcrIndex"), r.u32("eventType")
    r.take(20, "SHA-1 digest")
    data = r.sized("event data")
    if pcr != 0 or kind != EV_NO_ACTION or not data.startswith(SPEC_ID_SIGNATURE):
        raise r.fail("the first event is not the EV_NO_ACTION 'Spec ID Event03' of a crypto-agile log "
                     "(a SHA-1-only log is not read: its digests cannot be replayed into a sha256 bank)")
    s = _Reader(data, r.what)
    s.record = r.record
    s.take(16 + 4 + 4, "Spec ID header")  # signature, platformClass, versions, errata, uintnSize
    count = s.u32("numberOfAlgorithms")
    if not 1 <= count <= MAX_ALGORITHMS:
        raise s.fail(f"Spec ID event lists {count} algorithms (1..{MAX_ALGORITHMS} allowed)")
    algs: list[tuple[int, int]] = []
    for _ in range(count):
        alg, size = s.u16("algorithmId"), s.u16("digestSize")
        if not 1 <= size <= 64 or any(a == alg for a, _ in algs):
            raise s.fail(f"Spec ID event: algorithm 0x{alg:04x} with digest size {size} (repeated, or not 1..64)")
        algs.append((alg, size))
    vendor = s.u8("vendorInfoSize")
    s.take(vendor, "vendorInfo")
    if s.pos != len(data):
        raise s.fail(f"Spec ID event has {len(data) - s.pos} trailing bytes")
    return tuple(algs)


def parse_uefi_log(data: bytes, what: str = "UEFI event log") -> UefiLog:
    """The log from its bytes; :class:`MalformedTpmData` naming the offset where it does not parse."""
    r = _Reader(data, what)
    algs = _spec_id(r)
    sizes = dict(algs)
    events: list[UefiEvent] = []
    locality = 0
    while r.pos < len(data):
        if len(events) >= MAX_EVENTS:
            raise r.fail(f"more than {MAX_EVENTS} events")
        r.record = r.pos
        pcr, kind = r.u32("pcrIndex"), r.u32("eventType")
        if pcr > 23:
            raise r.fail(f"PCR index {pcr} (a PC Client TPM has 0..23)")
        count = r.u32("digest count")
        if count > len(algs):
            raise r.fail(f"{count} digests, but the Spec ID event lists {len(algs)} algorithms")
        digests: list[tuple[int, bytes]] = []
        for _ in range(count):
            alg = r.u16("hashAlg")
            if alg not in sizes or any(a == alg for a, _ in digests):
                raise r.fail(f"digest of algorithm 0x{alg:04x}, which the Spec ID event does not list "
                             "(or listed twice in one record)")
            digests.append((alg, r.take(sizes[alg], f"digest 0x{alg:04x}")))
        body = r.sized("event data")
        if kind == EV_NO_ACTION and pcr == 0 and body.startswith(STARTUP_LOCALITY) and len(body) == 17:
            locality = body[16]
        events.append(UefiEvent(r.record, pcr, kind, tuple(digests), body))
    return UefiLog(algs, locality, tuple(events))


def replay_uefi(log: UefiLog, alg: int = ALG_SHA256) -> dict[int, bytes]:
    """PCR → its value in bank ``alg`` after every extending event; MalformedTpmData when one lacks it."""
    if alg not in dict(log.algorithms):
        raise MalformedTpmData(f"UEFI event log: the log carries no {ALG_NAMES.get(alg, hex(alg))} digests")
    size = dict(log.algorithms)[alg]
    h = {ALG_SHA1: hashlib.sha1, ALG_SHA256: hashlib.sha256, ALG_SHA384: hashlib.sha384,
         ALG_SHA512: hashlib.sha512}.get(alg)
    if h is None:
        raise MalformedTpmData(f"UEFI event log: no replay for algorithm 0x{alg:04x}")
    pcrs: dict[int, bytes] = {}
    if log.startup_locality:
        pcrs[0] = bytes(size - 1) + bytes([log.startup_locality])
    for ev in log.events:
        if ev.event_type == EV_NO_ACTION:
            continue
        d = ev.digest(alg)
        if d is None:
            raise MalformedTpmData(f"UEFI event log: record at byte {ev.offset} ({ev.type_name}, PCR {ev.pcr}) "
                                   f"has no {ALG_NAMES.get(alg, hex(alg))} digest")
        pcrs[ev.pcr] = h(pcrs.get(ev.pcr, bytes(size)) + d).digest()
    return pcrs


@dataclass(frozen=True)
class UefiVariable:
    """A ``UEFI_VARIABLE_DATA``: the variable's vendor GUID (16 bytes as logged), name and data."""

    guid: bytes
    name: str
    data: bytes


def parse_variable(ev: UefiEvent) -> UefiVariable:
    """The ``UEFI_VARIABLE_DATA`` an EV_EFI_VARIABLE_* event carries (VariableName GUID, name length in
    UTF-16 characters, data length, the UTF-16LE name, the data), exactly, no trailing bytes."""
    r = _Reader(ev.data, "UEFI event log")
    r.record = ev.offset
    guid = r.take(16, "VariableName GUID")
    nlen, dlen = struct.unpack("<QQ", r.take(16, "UnicodeNameLength, VariableDataLength"))
    if nlen > 1024 or dlen > MAX_EVENT_DATA:
        raise r.fail(f"UEFI_VARIABLE_DATA name of {nlen} characters or data of {dlen} bytes is implausible")
    try:
        name = r.take(2 * nlen, "UnicodeName").decode("utf-16-le")
    except UnicodeDecodeError as exc:
        raise r.fail("UEFI_VARIABLE_DATA name is not UTF-16") from exc
    data = r.take(dlen, "VariableData")
    if r.pos != len(ev.data):
        raise r.fail(f"UEFI_VARIABLE_DATA has {len(ev.data) - r.pos} trailing bytes")
    return UefiVariable(guid, name, data)


def secure_boot_events(log: UefiLog) -> list[tuple[UefiEvent, str]]:
    """Each EV_EFI_VARIABLE_DRIVER_CONFIG event of the global ``SecureBoot`` variable and the state its
    data says: ``enabled`` (0x01), ``disabled`` (0x00), or ``unverified: …`` when the event's sha256
    digest is not the hash of the data it shows (the state read would not be the state measured)."""
    out: list[tuple[UefiEvent, str]] = []
    for ev in log.events:
        if ev.event_type != EV_EFI_VARIABLE_DRIVER_CONFIG:
            continue
        var = parse_variable(ev)
        if var.name != "SecureBoot" or var.guid != EFI_GLOBAL_VARIABLE:
            continue
        if ev.digest(ALG_SHA256) != hashlib.sha256(ev.data).digest():
            state = "unverified: its sha256 digest is not the hash of its UEFI_VARIABLE_DATA"
        elif var.data == b"\x01":
            state = "enabled"
        elif var.data in (b"\x00", b""):
            state = "disabled"
        else:
            state = f"unverified: SecureBoot data {var.data.hex()!r}"
        out.append((ev, state))
    return out


__all__ = [
    "ALG_SHA1",
    "ALG_SHA256",
    "EFI_GLOBAL_VARIABLE",
    "EVENT_TYPES",
    "MAX_EVENTS",
    "UefiEvent",
    "UefiLog",
    "UefiVariable",
    "event_type_name",
    "looks_like_tcg_log",
    "parse_uefi_log",
    "parse_variable",
    "replay_uefi",
    "secure_boot_events",
]
