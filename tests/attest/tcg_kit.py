"""Builders of TCG2 (crypto-agile) UEFI event logs and IMA lists, written from the specs for the tests.

The bytes follow the TCG PC Client Platform Firmware Profile (TCG_PCR_EVENT with the Spec ID Event03,
then TCG_PCR_EVENT2 records) and the kernel's IMA template layout, independently of the reader under
test; ``tpm2_eventlog`` (tpm2-tools) is the oracle that checks the UEFI logs were built right.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

SHA1, SHA256, SHA384 = 0x0004, 0x000B, 0x000C
_H = {SHA1: hashlib.sha1, SHA256: hashlib.sha256, SHA384: hashlib.sha384}
_SIZE = {SHA1: 20, SHA256: 32, SHA384: 48}
GLOBAL_GUID = bytes.fromhex("61dfe48bca93d211aa0d00e098032b8c")  # 8be4df61-93ca-11d2-aa0d-00e098032b8c


def spec_id(algs: tuple[tuple[int, int], ...] = ((SHA1, 20), (SHA256, 32)), vendor: bytes = b"") -> bytes:
    """The first record: a TCG_PCR_EVENT (SHA-1 format) carrying the Spec ID Event03."""
    body = (b"Spec ID Event03\0" + struct.pack("<IBBBB", 0, 0, 2, 0, 2) + struct.pack("<I", len(algs))
            + b"".join(struct.pack("<HH", a, s) for a, s in algs) + bytes([len(vendor)]) + vendor)
    return struct.pack("<II", 0, 3) + bytes(20) + struct.pack("<I", len(body)) + body


@dataclass(frozen=True)
class Ev:
    """One TCG_PCR_EVENT2 to build: its digests are of ``measured`` (the data itself when None)."""

    pcr: int
    kind: int
    data: bytes
    measured: bytes | None = None
    algs: tuple[int, ...] = (SHA1, SHA256)

    def digests(self) -> list[tuple[int, bytes]]:
        m = self.data if self.measured is None else self.measured
        return [(a, _H[a](m).digest() if a in _H else bytes(48)) for a in self.algs]

    def encode(self) -> bytes:
        ds = self.digests()
        return (struct.pack("<III", self.pcr, self.kind, len(ds))
                + b"".join(struct.pack("<H", a) + d for a, d in ds)
                + struct.pack("<I", len(self.data)) + self.data)


def variable(name: str, data: bytes, guid: bytes = GLOBAL_GUID) -> bytes:
    """A UEFI_VARIABLE_DATA: GUID, name length (UTF-16 chars), data length, UTF-16LE name, data."""
    return guid + struct.pack("<QQ", len(name), len(data)) + name.encode("utf-16-le") + data


def image_load(path: str = "") -> bytes:
    """A UEFI_IMAGE_LOAD_EVENT with an empty device path (location, length, link address, path length)."""
    return struct.pack("<QQQQ", 0x1000, 0x2000, 0, 0)


EV_POST_CODE, EV_NO_ACTION, EV_SEPARATOR, EV_S_CRTM_VERSION, EV_IPL = 0x1, 0x3, 0x4, 0x8, 0xD
EV_DRIVER_CONFIG, EV_BS_APP, EV_EFI_ACTION, EV_FW_BLOB = 0x80000001, 0x80000003, 0x80000007, 0x80000008
EV_VARIABLE_AUTHORITY = 0x800000E0
KERNEL, SHIM, GRUB = b"vmlinuz-6.1.0-18-amd64 PE image", b"shimx64.efi PE image", b"grubx64.efi PE image"


def boot_events(secure_boot: bytes = b"\x01") -> list[Ev]:
    """A plausible Secure Boot boot: CRTM and firmware in PCR 0, shim, grub and the kernel in PCR 4,
    the Secure Boot variables in PCR 7, grub's command line and files in PCRs 8 and 9."""
    return [
        Ev(0, EV_S_CRTM_VERSION, "1.0".encode("utf-16-le") + b"\0\0"),
        Ev(0, EV_POST_CODE, struct.pack("<QQ", 0xFFC00000, 0x400000), b"firmware volume"),
        Ev(0, EV_FW_BLOB, struct.pack("<QQ", 0x820000, 0xE0000), b"PEI firmware volume"),
        Ev(7, EV_DRIVER_CONFIG, variable("SecureBoot", secure_boot)),
        Ev(7, EV_DRIVER_CONFIG, variable("PK", b"PK cert list")),
        *(Ev(p, EV_SEPARATOR, b"\0\0\0\0") for p in range(8)),
        Ev(4, EV_EFI_ACTION, b"Calling EFI Application from Boot Option"),
        Ev(4, EV_BS_APP, image_load(), SHIM),
        Ev(7, EV_VARIABLE_AUTHORITY, variable("db", b"db cert")),
        Ev(4, EV_BS_APP, image_load(), GRUB),
        Ev(8, EV_IPL, b"grub_cmd: linux /vmlinuz root=/dev/sda1\0"),
        Ev(9, EV_IPL, b"/boot/vmlinuz-6.1.0-18-amd64\0", KERNEL),
        Ev(4, EV_BS_APP, image_load(), KERNEL),
    ]


def startup_locality(locality: int) -> bytes:
    """The EV_NO_ACTION StartupLocality record (PCR 0 starts at this locality)."""
    body = b"StartupLocality\0" + bytes([locality])
    return struct.pack("<III", 0, EV_NO_ACTION, 2) + struct.pack("<H", SHA1) + bytes(20) + struct.pack(
        "<H", SHA256) + bytes(32) + struct.pack("<I", len(body)) + body


def build(events: list[Ev], *, head: bytes | None = None, extra: bytes = b"") -> bytes:
    """The whole log: the Spec ID record (``head``), ``extra`` raw records, then ``events``."""
    return (spec_id() if head is None else head) + extra + b"".join(e.encode() for e in events)


def oracle(log: bytes, tmp: Path) -> dict[str, Any]:
    """What tpm2_eventlog reads from ``log``: its events and the final PCRs it computes (bank → pcr → hex)."""
    if shutil.which("tpm2_eventlog") is None:
        pytest.skip("tpm2_eventlog (tpm2-tools) not installed")
    path = tmp / "log.bin"
    path.write_bytes(log)
    res = subprocess.run(["tpm2_eventlog", str(path)], capture_output=True, timeout=30, check=False)
    assert res.returncode == 0, res.stderr.decode()
    text = res.stdout.decode()
    head, _, tail = text.partition("\npcrs:\n")
    doc = yaml.safe_load(head)
    pcrs: dict[str, dict[int, str]] = {}
    bank = ""
    for line in tail.splitlines():
        if m := re.match(r"^  (\w+):$", line):
            bank = m.group(1)
        elif m := re.match(r"^\s+(\d+)\s*:\s*0x([0-9a-fA-F]+)$", line):
            pcrs.setdefault(bank, {})[int(m.group(1))] = m.group(2).lower()
    return {"events": doc["events"], "pcrs": pcrs}


# --- IMA ---------------------------------------------------------------------------------------------

def ima_ng_line(path: str, content: bytes, pcr: int = 10, template: str = "ima-ng", sig: bytes = b"") -> str:
    """An ASCII list line as the kernel prints it, with its SHA-1 template hash over the template data
    (each field: u32 little-endian length, then ``sha256:\\0<digest>``, the NUL-terminated path, the sig)."""
    digest = hashlib.sha256(content).digest()
    fields = [b"sha256:\0" + digest, path.encode() + b"\0"] + ([sig] if template == "ima-sig" else [])
    data = b"".join(struct.pack("<I", len(f)) + f for f in fields)
    tail = f" {sig.hex()}" if template == "ima-sig" else ""
    return f"{pcr} {hashlib.sha1(data).hexdigest()} {template} sha256:{digest.hex()} {path}{tail}\n"


def ima_template_sha256(line: str) -> bytes:
    """The sha256 of a built line's template data (what the sha256 bank was extended with)."""
    parts = line.split(" ")
    digest = bytes.fromhex(parts[3].split(":")[1])
    fields = [b"sha256:\0" + digest, parts[4].rstrip("\n").encode() + b"\0"]
    if parts[2] == "ima-sig":
        fields.append(bytes.fromhex(parts[5].strip()))
    return hashlib.sha256(b"".join(struct.pack("<I", len(f)) + f for f in fields)).digest()


def boot_aggregate_line(pcrs: dict[int, bytes]) -> str:
    """The first line: the sha256 boot_aggregate over PCRs 0-9 as IMA computes it."""
    agg = hashlib.sha256(b"".join(pcrs.get(i, bytes(32)) for i in range(10))).digest()
    fields = [b"sha256:\0" + agg, b"boot_aggregate\0"]
    data = b"".join(struct.pack("<I", len(f)) + f for f in fields)
    return f"10 {hashlib.sha1(data).hexdigest()} ima-ng sha256:{agg.hex()} boot_aggregate\n"


#: the stack a GPU/RDMA node's IMA list measures: (path, content)
IMA_STACK = (
    ("/usr/lib/modules/6.1.0-18-amd64/updates/dkms/nvidia.ko", b"nvidia.ko 550.54.15"),
    ("/usr/lib/modules/6.1.0-18-amd64/updates/dkms/nvidia-uvm.ko", b"nvidia-uvm.ko 550.54.15"),
    ("/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", b"libcuda 550.54.15"),
    ("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", b"libnvidia-ml 550.54.15"),
    ("/usr/lib/modules/6.1.0-18-amd64/updates/mlx5_core.ko", b"mlx5_core MLNX_OFED 24.10"),
    ("/usr/lib/modules/6.1.0-18-amd64/updates/mlx5_ib.ko", b"mlx5_ib MLNX_OFED 24.10"),
    ("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0", b"libibverbs rdma-core 50"),
    ("/usr/lib/x86_64-linux-gnu/librdmacm.so.1.3.50.0", b"librdmacm rdma-core 50"),
)


def _sha(b: bytes) -> str:
    return f"sha256:{hashlib.sha256(b).hexdigest()}"


def real_host_policy(events: list[Ev] | None = None, stack: tuple[tuple[str, bytes], ...] = IMA_STACK,
                     **over: object) -> dict[str, Any]:
    """An attestation section approving :func:`boot_events` and :data:`IMA_STACK` as a real host's
    allowlist would: firmware per PCR by event type, shim and grub, the kernel (PE image in PCR 4, file in
    PCR 9), Secure Boot, and the GPU and RDMA stacks by IMA path."""
    evs = boot_events() if events is None else events
    names = {"EV_S_CRTM_VERSION": 0x8, "EV_POST_CODE": 0x1, "EV_EFI_PLATFORM_FIRMWARE_BLOB": 0x80000008,
             "EV_SEPARATOR": 0x4, "EV_EFI_VARIABLE_DRIVER_CONFIG": 0x80000001, "EV_EFI_ACTION": 0x80000007,
             "EV_EFI_BOOT_SERVICES_APPLICATION": 0x80000003, "EV_EFI_VARIABLE_AUTHORITY": 0x800000E0,
             "EV_IPL": 0xD}
    by_code = {v: k for k, v in names.items()}
    comps: list[dict[str, Any]] = [
        {"name": "kernel-image", "kind": "host-kernel", "pcr": 4, "event_types": ["EV_EFI_BOOT_SERVICES_APPLICATION"],
         "digests": [_sha(KERNEL)]},
        {"name": "kernel-file", "kind": "host-kernel", "pcr": 9, "event_types": ["EV_IPL"], "digests": [_sha(KERNEL)]},
        {"name": "secure-boot", "kind": "secure-boot", "pcr": 7, "versions": ["enabled"],
         "digests": [_sha(variable("SecureBoot", b"\x01"))]},
    ]
    rest: dict[int, list[Ev]] = {}
    for e in evs:
        m = e.data if e.measured is None else e.measured
        if m in (KERNEL, variable("SecureBoot", b"\x01"), variable("SecureBoot", b"\x00")):
            continue
        rest.setdefault(e.pcr, []).append(e)
    for pcr, group in sorted(rest.items()):
        kind = "boot-loader" if pcr in (4, 8) else "firmware"
        comps.append({"name": f"{kind}-pcr{pcr}", "kind": kind, "pcr": pcr,
                      "event_types": sorted({by_code[e.kind] for e in group}),
                      "digests": sorted({_sha(e.data if e.measured is None else e.measured) for e in group})})
    ima = {"nvidia-kmod": ("nvidia-kernel-module", ["/usr/lib/modules/*/nvidia*.ko*", "/lib/modules/*/nvidia*.ko*"]),
           "nvidia-userspace": ("nvidia-user-library", ["/usr/lib/*/libcuda.so*", "/usr/lib/*/libnvidia-*"]),
           "mofed": ("mofed", ["/usr/lib/modules/*/mlx5_*.ko*"]),
           "rdma-core": ("rdma-core", ["/usr/lib/*/libibverbs*", "/usr/lib/*/librdmacm*"])}
    for name, (kind, globs) in ima.items():
        digests = sorted({_sha(c) for p, c in stack if any(fnmatch.fnmatchcase(p, g) for g in globs)})
        comps.append({"name": name, "kind": kind, "pcr": 10, "paths": globs, "digests": digests or [_sha(b"-")]})
    doc: dict[str, Any] = {"interval": "60s", "pcrs": list(range(11)), "secure_boot": "required",
                           "components": comps}
    doc.update(over)
    return doc


def uefi_pcrs(events: list[Ev]) -> dict[int, bytes]:
    """The sha256 PCRs the events extend (independent of the reader under test)."""
    pcrs: dict[int, bytes] = {}
    for e in events:
        d = dict(e.digests())[SHA256]
        pcrs[e.pcr] = hashlib.sha256(pcrs.get(e.pcr, bytes(32)) + d).digest()
    return pcrs


def ima_list(pcrs: dict[int, bytes], stack: tuple[tuple[str, bytes], ...] = IMA_STACK) -> str:
    """A node's ASCII list: boot_aggregate over ``pcrs``, then each file of ``stack``."""
    return boot_aggregate_line(pcrs) + "".join(ima_ng_line(p, c) for p, c in stack)
