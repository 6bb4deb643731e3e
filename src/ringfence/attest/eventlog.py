"""The measured-boot event log, its replay into PCR values, and its judgement against the allowlist.

The log is the node's claim of what was measured, in order; the quote is the TPM's word on the PCR
values. Replaying the log (``PCR = sha256(PCR ‖ digest)`` per event, from zeros) must give exactly the
quoted PCR digest, so a log that hides, adds or reorders an event does not verify; and every event
must be one the allowlist permits. An event in a PCR the policy does not quote is a failure, never
skipped (Keylime logs and skips).

The log is ringfence's JSON form (``{"format": "ringfence-eventlog-1", "events": [...]}``), written
by the lab's emulated boot; a real host's binary UEFI log (``ringfence.attest.uefi``) and IMA list
(``ringfence.attest.ima``) are translated into these events by ``ringfence.attest.measured``, which
replays them in their own forms.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ringfence.attest.interface import MalformedTpmData
from ringfence.policy.attestation import Attestation, ComponentKind

FORMAT = "ringfence-eventlog-1"
MAX_EVENTS = 10_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Event(_Strict):
    """One measurement: which PCR it was extended into, what was measured and the digest extended."""

    pcr: Annotated[int, Field(ge=0, le=23)]
    name: Annotated[str, Field(min_length=1, max_length=200)]
    kind: ComponentKind
    version: Annotated[str, Field(max_length=200)] = ""
    digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]  # sha256 of the measured bytes
    path: Annotated[str, Field(max_length=4096)] = ""  # what was measured, for the reader


class EventLog(_Strict):
    """A node's event log."""

    format: Literal["ringfence-eventlog-1"]
    events: Annotated[tuple[Event, ...], Field(max_length=MAX_EVENTS)]


def parse_event_log(data: bytes, node: str) -> EventLog:
    """The log from its JSON bytes; :class:`MalformedTpmData` naming the field when it is not one."""
    try:
        return EventLog.model_validate_json(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or "document"
        raise MalformedTpmData(f"{node}: event log: {where}: {err['msg']}") from exc


def replay(log: EventLog) -> dict[int, bytes]:
    """PCR index → its sha256 value after every event of ``log`` was extended, from the reset value."""
    pcrs: dict[int, bytes] = {}
    for ev in log.events:
        pcrs[ev.pcr] = hashlib.sha256(pcrs.get(ev.pcr, bytes(32)) + bytes.fromhex(ev.digest)).digest()
    return pcrs


def pcr_digest(values: dict[int, bytes], selection: tuple[int, ...]) -> bytes:
    """The quote's pcrDigest for ``selection``: sha256 over the PCR values in ascending index order."""
    return hashlib.sha256(b"".join(values.get(i, bytes(32)) for i in sorted(selection))).digest()


def judge_events(log: EventLog, policy: Attestation) -> list[str]:
    """Why the log's events are not what the allowlist permits (empty: every event is permitted)."""
    problems: list[str] = []
    allowed = {c.name: c for c in policy.components}
    quoted = set(policy.pcrs)
    seen: set[str] = set()
    for n, ev in enumerate(log.events):
        where = f"event {n} ({ev.name}, PCR {ev.pcr})"
        if ev.pcr not in quoted:
            problems.append(f"{where}: PCR {ev.pcr} is not in the policy's quoted PCRs {sorted(quoted)}")
            continue
        comp = allowed.get(ev.name)
        if comp is None:
            problems.append(f"{where}: no component {ev.name!r} in the allowlist")
            continue
        seen.add(ev.name)
        if comp.kind is not ev.kind or comp.pcr != ev.pcr:
            problems.append(f"{where}: the allowlist has {ev.name} as {comp.kind.value} in PCR {comp.pcr}")
        if f"sha256:{ev.digest}" not in comp.digests:
            problems.append(f"{where}: digest sha256:{ev.digest} is not an approved digest of {ev.name}")
        if comp.versions and ev.version not in comp.versions:
            problems.append(f"{where}: version {ev.version!r} is not approved (approved: {', '.join(comp.versions)})")
    problems += [f"required component {c.name} ({c.kind.value}) was not measured"
                 for c in policy.components if c.required and c.name not in seen]
    if policy.secure_boot == "required":
        states = [ev.version for ev in log.events if ev.kind is ComponentKind.SECURE_BOOT]
        if states != ["enabled"]:
            problems.append(f"Secure Boot is required; the event log shows {states or 'no secure-boot event'}")
    return problems


__all__ = ["FORMAT", "Event", "EventLog", "judge_events", "parse_event_log", "pcr_digest", "replay"]
