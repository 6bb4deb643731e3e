"""The attestation family's shared types: its errors and the frozen records its parts hand each other.

A refusal (a quote that does not verify, a node that does not answer) is a :class:`Decision` with
its reasons, never an exception: the gate must see every node's outcome. Exceptions are for what the
user must fix (a missing tool, an unreadable record) and for the enrolment refusal of an identity.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringfence.errors import RingfenceError


class AttestError(RingfenceError):
    """Attestation could not be carried out (a tool missing, a record unreadable): exit 2."""


class TpmUnreachable(AttestError):
    """A node's TPM (or the node itself) did not answer a tpm2-tools command."""


class MalformedTpmData(AttestError):
    """Bytes claimed to be a TPM structure (TPMS_ATTEST, TPMT_SIGNATURE, TPM2B_PUBLIC) do not parse."""


class EnrolmentRefused(AttestError):
    """Enrolment refused: the name is bound to another TPM's EK, or the credential was not activated."""


#: The persistent handles ringfence uses on a node's TPM (owner hierarchy, TCG's range for platform keys).
EK_HANDLE = "0x81010001"
AK_HANDLE = "0x81010002"


@dataclass(frozen=True)
class Evidence:
    """What a node returned for one attestation request: the quote, its signature and its event log."""

    node: str
    nonce: bytes
    quote: bytes  # TPMS_ATTEST as the TPM signed it
    signature: bytes  # TPMT_SIGNATURE
    event_log: bytes  # the node's measured-boot log (ringfence's JSON form, or a binary UEFI TCG2 log)
    ima_list: bytes | None = None  # the node's IMA ASCII measurement list; None: none was asked for


@dataclass(frozen=True)
class Decision:
    """The verifier's judgement of one node: admitted only when ``reasons`` is empty."""

    node: str
    admitted: bool
    reasons: tuple[str, ...]
    addresses: tuple[str, ...] = ()
    clock: tuple[int, int, int] | None = None  # (reset, restart, clock) of the verified quote
    quote: bytes = b""  # what was judged, kept in the evidence so the verdict can be re-checked offline
    signature: bytes = b""
    nonce: bytes = b""


__all__ = [
    "AK_HANDLE",
    "EK_HANDLE",
    "AttestError",
    "Decision",
    "EnrolmentRefused",
    "Evidence",
    "MalformedTpmData",
    "TpmUnreachable",
]
