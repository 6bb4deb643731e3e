"""The policy's measured-stack allowlist: what a node must prove, by a verified TPM quote, before it joins.

An optional ``attestation:`` section of ``ringfence.yaml``::

    attestation:
      interval: 60s            # re-attest this often; an admission expires after it (the gate's set timeout)
      pcrs: [7, 9, 10]          # the sha256 PCRs quoted, exactly; an event in any other PCR is a failure
      secure_boot: required     # required | not-required (the event log's secure-boot event, PCR 7)
      ek_roots: [tpm-vendor-ca.pem]   # optional: the EK certificate must chain to one of these at enrolment
      ek_crls: [tpm-vendor-ek-ca.crl] # optional: CRLs (PEM or DER) of those CAs, downloaded by you; never fetched
      components:
        - name: kernel
          kind: host-kernel
          pcr: 9
          versions: ["6.1.0-18-amd64"]
          digests: ["sha256:<hex>"]   # the vendor's signed checksums (SHA256SUMS), as digests of the measured bytes
        - {name: nvidia-kmod, kind: nvidia-kernel-module, pcr: 10, digests: ["sha256:…"]}
        - {name: libcuda, kind: nvidia-user-library, pcr: 10, digests: ["sha256:…"]}
        - {name: mofed, kind: mofed, pcr: 10, versions: ["24.10-1.1.4.0"], digests: ["sha256:…"]}

Every event of a node's log must match a listed component (name, kind, PCR, digest, version when
listed); every ``required`` component must appear. Strict and frozen like the rest of the policy.

A real host's UEFI event log and IMA list (``ringfence.attest.measured``) are matched by two more keys:
``event_types`` (the UEFI events of those types in the component's PCR are the component) and ``paths``
(the IMA measurements of files matching those globs are the component)::

        - {name: shim-grub-kernel, kind: boot-loader, pcr: 4, event_types: [EV_EFI_BOOT_SERVICES_APPLICATION,
           EV_EFI_ACTION, EV_SEPARATOR], digests: ["sha256:…"]}   # UEFI: Authenticode hashes of the images
        - {name: secure-boot, kind: secure-boot, pcr: 7, versions: [enabled], digests: ["sha256:…"]}
        - {name: nvidia-kmod, kind: nvidia-kernel-module, pcr: 10,
           paths: ["/lib/modules/*/nvidia*.ko*", "/usr/lib/modules/*/nvidia*.ko*"], digests: ["sha256:…"]}
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_DIGEST = r"^sha256:[0-9a-f]{64}$"
_NAME = r"^[a-z0-9]([a-z0-9._+-]{0,62}[a-z0-9])?$"
_EVENT_TYPE = r"^EV_[A-Z0-9_]{1,60}$"


class ComponentKind(StrEnum):
    """What a measured component is: the parts a joining node of an AI training fabric must prove."""

    HOST_KERNEL = "host-kernel"
    NVIDIA_KERNEL_MODULE = "nvidia-kernel-module"
    NVIDIA_USER_LIBRARY = "nvidia-user-library"
    MOFED = "mofed"  # Mellanox/NVIDIA OFED
    RDMA_CORE = "rdma-core"
    SECURE_BOOT = "secure-boot"  # the firmware's Secure Boot state (version: enabled | disabled)
    FIRMWARE = "firmware"  # UEFI log events of the platform: CRTM, firmware blobs, variables, separators
    BOOT_LOADER = "boot-loader"  # UEFI log events of what booted the kernel: shim, grub
    BINARY = "binary"  # an executable: python, sshd, wireguard-go
    PYTHON_PACKAGE = "python-package"  # torch, ringfence


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Component(_Strict):
    """One measured part of the approved stack and the digests (and versions) it may have."""

    name: Annotated[str, Field(pattern=_NAME)]
    kind: ComponentKind
    pcr: Annotated[int, Field(ge=0, le=23)]
    digests: Annotated[tuple[Annotated[str, Field(pattern=_DIGEST)], ...], Field(min_length=1)]
    versions: tuple[Annotated[str, Field(min_length=1, max_length=200)], ...] = ()  # empty: any version
    required: bool = True
    # UEFI event log: the event types (PFP names) in this PCR that are this component
    event_types: tuple[Annotated[str, Field(pattern=_EVENT_TYPE)], ...] = ()
    # IMA list: the file paths (fnmatch globs; ``*`` also crosses ``/``) that are this component
    paths: tuple[Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^/")], ...] = ()


class Attestation(_Strict):
    """The ``attestation`` section: the PCRs quoted, the re-attestation interval and the allowlist."""

    interval: Annotated[str, Field(pattern=r"^[1-9][0-9]{0,6}[smh]$")] = "60s"
    pcr_bank: Literal["sha256"] = "sha256"
    pcrs: Annotated[tuple[Annotated[int, Field(ge=0, le=23)], ...], Field(min_length=1)]
    secure_boot: Literal["required", "not-required"] = "required"
    components: Annotated[tuple[Component, ...], Field(min_length=1)]
    # PEM files of the TPM manufacturers' CAs (relative: from the policy's folder); when listed, enrolment
    # requires the node's EK certificate to chain to one of them (ringfence.attest.ekcert)
    ek_roots: tuple[Annotated[str, Field(min_length=1, max_length=4096)], ...] = ()
    # CRL files (PEM or DER) of those CAs, as their CRL distribution points publish them; ringfence never
    # fetches one. When listed, every certificate below the root must be covered by a current CRL of its
    # issuer and not revoked (ringfence.attest.ekcrl)
    ek_crls: tuple[Annotated[str, Field(min_length=1, max_length=4096)], ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Attestation:
        if len(set(self.pcrs)) != len(self.pcrs) or list(self.pcrs) != sorted(self.pcrs):
            raise ValueError("pcrs must be listed once each, in ascending order")
        names = [c.name for c in self.components]
        if len(set(names)) != len(names):
            raise ValueError("each component name may appear only once")
        outside = sorted({c.pcr for c in self.components} - set(self.pcrs))
        if outside:
            raise ValueError(f"components measured into PCR(s) {outside}, which pcrs does not quote")
        if self.ek_crls and not self.ek_roots:
            raise ValueError("ek_crls needs ek_roots: a CRL is checked only on a chain to a listed root")
        return self

    def interval_seconds(self) -> int:
        """The interval in seconds (admissions expire after it)."""
        unit = {"s": 1, "m": 60, "h": 3600}[self.interval[-1]]
        return int(self.interval[:-1]) * unit


__all__ = ["Attestation", "Component", "ComponentKind"]
