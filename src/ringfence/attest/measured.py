"""A node's measurements, whatever form they came in, as one judged :class:`EventLog` and PCR values.

The node sends its measured-boot log (ringfence's JSON form from the lab's emulated boot, or a real
host's binary UEFI log — told apart by its first bytes) and, optionally, its IMA list. This module
gives the verifier three things from them: the PCR values their replay yields (the quote must show
exactly these), an :class:`EventLog` in which every extending event is an event naming the allowlist
component it is (so :func:`judge_events` applies the same rules to all forms), and the problems found
on the way (a Secure Boot event whose digest does not match its data, an IMA violation, a
``boot_aggregate`` that is not the replay of PCRs 0–9).

Mapping. A UEFI event of the global ``SecureBoot`` variable is the policy's ``secure-boot`` component
in its PCR, its version the state read from the data (``enabled`` only for 0x01 whose sha256 digest is
the hash of the data). Any other UEFI event is the component of its PCR whose ``event_types`` name its
type — the one whose digests hold the event's sha256 digest when several do. An IMA measurement is the
component of its PCR whose ``paths`` glob matches the file path, and its digest is the file digest (so
an allowlist lists the vendor's checksums of ``nvidia*.ko``, ``libcuda.so*``, ``mlx5_*.ko``,
``libibverbs*``…), while the replay uses its template hash. An event no component claims keeps its own
name (``EV_POST_CODE at byte 1234``, or ``ima:`` and the path) and is then refused by the judgement as not in the
allowlist: nothing is dropped. ``EV_NO_ACTION`` records are never extended by the TPM and carry no
measurement (the Spec ID and StartupLocality records), so they are not events.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from ringfence.attest.eventlog import Event, EventLog, parse_event_log, pcr_digest, replay
from ringfence.attest.ima import BOOT_AGGREGATE, ImaEntry, boot_aggregate, parse_ima_list, replay_ima
from ringfence.attest.interface import MalformedTpmData
from ringfence.attest.uefi import (
    ALG_SHA256,
    EV_NO_ACTION,
    UefiEvent,
    UefiLog,
    looks_like_tcg_log,
    parse_uefi_log,
    replay_uefi,
    secure_boot_events,
)
from ringfence.policy.attestation import Attestation, Component, ComponentKind


@dataclass(frozen=True)
class Measurements:
    """What a node's logs say: the events to judge, the PCRs they replay to, and problems found reading."""

    log: EventLog
    pcrs: dict[int, bytes]
    problems: tuple[str, ...]
    source: str  # "ringfence-eventlog-1" or "uefi", plus "+ima" when an IMA list was read


def _pick(cands: list[Component], digest: str) -> Component | None:
    exact = [c for c in cands if f"sha256:{digest}" in c.digests]
    best = exact or cands
    return best[0] if best else None


def _uefi_events(log: UefiLog, policy: Attestation) -> tuple[list[Event], list[str]]:
    events: list[Event] = []
    problems: list[str] = []
    sb = {ev.offset: state for ev, state in secure_boot_events(log)}
    for ev in log.events:
        if ev.event_type == EV_NO_ACTION:
            continue
        raw = ev.digest(ALG_SHA256)
        if raw is None:  # replay_uefi refuses it too; said here so the judgement names it
            problems.append(f"UEFI event at byte {ev.offset} ({ev.type_name}) has no sha256 digest")
            continue
        digest = raw.hex()
        where = f"UEFI log byte {ev.offset}"
        if ev.offset in sb:
            state = sb[ev.offset]
            if state.startswith("unverified"):
                problems.append(f"Secure Boot event at byte {ev.offset}: {state}")
            comp = _pick([c for c in policy.components if c.kind is ComponentKind.SECURE_BOOT
                          and c.pcr == ev.pcr], digest)
            events.append(Event(pcr=ev.pcr, name=comp.name if comp else f"SecureBoot at byte {ev.offset}",
                                kind=ComponentKind.SECURE_BOOT, version=state[:200], digest=digest, path=where))
            continue
        events.append(_as_event(ev, digest, policy, where))
    return events, problems


def _as_event(ev: UefiEvent, digest: str, policy: Attestation, where: str) -> Event:
    comp = _pick([c for c in policy.components if c.pcr == ev.pcr and ev.type_name in c.event_types], digest)
    if comp is None:
        return Event(pcr=ev.pcr, name=f"{ev.type_name} at byte {ev.offset}", kind=ComponentKind.FIRMWARE,
                     digest=digest, path=where)
    return Event(pcr=ev.pcr, name=comp.name, kind=comp.kind, digest=digest, path=where)


def _ima_events(entries: tuple[ImaEntry, ...], policy: Attestation, base: dict[int, bytes] | None
                ) -> tuple[list[Event], list[str]]:
    events: list[Event] = []
    problems: list[str] = []
    for i, e in enumerate(entries):
        where = f"IMA list line {e.line}"
        if e.violation:
            problems.append(f"{where}: a measurement violation ({e.path}): the kernel could not measure the "
                            "file consistently (open for write, or changed while measured)")
            continue
        if e.path == BOOT_AGGREGATE:
            problems += _check_aggregate(e, i, base, where)
            continue
        if e.alg != "sha256":
            problems.append(f"{where}: {e.path}: file digest is {e.alg}; the allowlist holds sha256 digests "
                            "(boot with ima_hash=sha256)")
            continue
        cands = [c for c in policy.components if c.pcr == e.pcr
                 and any(fnmatch.fnmatchcase(e.path, g) for g in c.paths)]
        comp = _pick(cands, e.file_digest.hex())
        if comp is None:
            # "ima:" cannot begin a component name, so an unclaimed file can never pass as one by name
            events.append(Event(pcr=e.pcr, name=f"ima:{e.path[-196:]}", kind=ComponentKind.BINARY,
                                digest=e.file_digest.hex(), path=e.path[:4096]))
        else:
            events.append(Event(pcr=e.pcr, name=comp.name, kind=comp.kind, digest=e.file_digest.hex(),
                                path=e.path))
    if not entries or entries[0].path != BOOT_AGGREGATE:
        problems.append("IMA list: the first measurement is not boot_aggregate (the list does not start at "
                        "this boot)")
    return events, problems


def _check_aggregate(e: ImaEntry, index: int, base: dict[int, bytes] | None, where: str) -> list[str]:
    if index != 0:
        return [f"{where}: boot_aggregate is not the first measurement"]
    if base is None:
        return [f"{where}: boot_aggregate cannot be checked without the node's UEFI event log"]
    if e.alg != "sha256":
        return [f"{where}: boot_aggregate is {e.alg}; only a sha256 aggregate is checked against the sha256 bank"]
    want = boot_aggregate(base)
    if e.file_digest != want:
        return [f"{where}: boot_aggregate {e.file_digest.hex()[:16]}… is not the sha256 of PCRs 0-9 as the UEFI "
                f"log replays them ({want.hex()[:16]}…): the IMA list is not this boot's"]
    return []


def _quoted_prefix(entries: tuple[ImaEntry, ...], start: dict[int, bytes], policy: Attestation,
                   quoted: bytes) -> tuple[ImaEntry, ...]:
    """The first prefix of ``entries`` whose replay gives the quoted PCR digest, or all.

    The list is read just after the quote, so it may end with measurements made in between, which this
    quote does not cover (the next one will). Only entries the signed digest covers are judged; when no
    prefix matches, every entry is kept and the quote check reports the mismatch."""
    pcrs = dict(start)
    if pcr_digest(pcrs, policy.pcrs) == quoted:
        return ()
    for n, e in enumerate(entries, start=1):
        pcrs = replay_ima((e,), pcrs)
        if pcr_digest(pcrs, policy.pcrs) == quoted:
            return entries[:n]
    return entries


def read_measurements(event_log: bytes, ima_list: bytes | None, policy: Attestation, node: str,
                      quoted: bytes | None = None) -> Measurements:
    """A node's logs read, translated and replayed; :class:`MalformedTpmData` when one does not parse.
    ``quoted``: the quote's PCR digest, to judge only the IMA entries it covers (see _quoted_prefix)."""
    problems: list[str] = []
    uefi_pcrs: dict[int, bytes] | None = None
    if event_log.lstrip()[:1] == b"{":
        log = parse_event_log(event_log, node)
        events, pcrs, source = list(log.events), replay(log), "ringfence-eventlog-1"
    elif looks_like_tcg_log(event_log):
        uefi = parse_uefi_log(event_log, f"{node}: UEFI event log")
        events, problems = _uefi_events(uefi, policy)
        pcrs = replay_uefi(uefi)
        uefi_pcrs, source = dict(pcrs), "uefi"
    else:
        raise MalformedTpmData(f"{node}: event log: neither ringfence's JSON log nor a crypto-agile TCG log "
                               f"(first bytes {event_log[:8].hex() or 'none: empty'})")
    if ima_list is not None:
        try:
            entries = parse_ima_list(ima_list)
        except MalformedTpmData as exc:
            raise MalformedTpmData(f"{node}: {exc.message}") from exc
        if quoted is not None:
            entries = _quoted_prefix(entries, pcrs, policy, quoted)
        ima_events, ima_problems = _ima_events(entries, policy, uefi_pcrs)
        events += ima_events
        problems += ima_problems
        pcrs = replay_ima(entries, pcrs)
        source += "+ima"
    # model_construct: each Event was validated as it was made; the count is bounded by the readers'
    # limits (a real IMA list outgrows the JSON form's 10,000 events)
    return Measurements(EventLog.model_construct(format="ringfence-eventlog-1", events=tuple(events)), pcrs,
                        tuple(problems), source)


__all__ = ["Measurements", "read_measurements"]
