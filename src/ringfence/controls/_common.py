"""Helpers every control uses: subjects, capped findings, exceptions, probe verdicts, missing facts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ringfence.controls.interface import ControlMeta, Facts, Finding, ProbeResult, Verdict
from ringfence.policy import ExceptionEntry, Policy
from ringfence.policy.model import CONTROL_POINTS

#: The ten stable control ids, in report order; each is also its module's name. Defined once, with the
#: policy (which validates exception and owner entries against it); the registry checks its modules match.
CONTROL_IDS = CONTROL_POINTS

#: Findings kept per control; beyond it the rest is summarised, one finding per verdict.
CAP = 200
#: Flows listed one by one per kind of finding (unapproved, plaintext …) before a summary finding;
#: below CAP so that a control's summaries and its other findings survive the final cap.
LIST_CAP = 150

#: How to gather each fact a control may lack (named in ``unknown`` findings).
GATHER: Mapping[str, str] = {
    "flows": "no flow observations: pass captures or flow logs to `ringfence assess POLICY --captures FILE`",
    "traces": (
        "no reconstructed flows: run `ringfence trace --sample allowed --target lab -o trace-allowed.json` (and "
        "`--sample denied`), then pass `--trace trace-allowed.json --trace trace-denied.json`"
    ),
    "probes": (
        "no probe results: run `ringfence probe POLICY --target lab -o probes.json` and pass `--probes probes.json`"
    ),
    "partitions": (
        "no job-partition facts: run `ringfence partition prove POLICY --target lab -o partitions.json` and pass "
        "`--partitions partitions.json`"
    ),
    "attestation": (
        "no node-attestation facts: run `ringfence attest verify --target lab --probe --drill NODE -o attest.json` "
        "and pass `--attestation attest.json`"
    ),
    "keys": (
        "no key-management evidence (rotation, fail-closed on mismatch): run "
        "`ringfence verify keys --target lab -o keys.json` and pass `--keys keys.json`"
    ),
    "ruleset": (
        "no live ruleset facts: run `ringfence probe POLICY --target lab -o probes.json --ruleset ruleset.json` "
        "and pass `--ruleset ruleset.json`"
    ),
    "changes": (
        "no change history: apply rulesets with `ringfence apply POLICY --target lab --approved-by WHO`, which "
        "records each version, then `ringfence probe POLICY --target lab -o probes.json --changes changes.json`"
    ),
    "containment": (
        "no containment drill results: run `ringfence contain --node NODE --drill --target lab -o containment.json` "
        "and pass `--containment containment.json`"
    ),
    "identity": (
        "no flow carries a workload identity: import identity-aware flows (e.g. Hubble JSON) "
        "with `ringfence assess POLICY --captures FILE`"
    ),
}

_PROTO_NAMES = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6", 50: "esp", 132: "sctp"}


def proto_name(proto: int | None) -> str:
    """``tcp``, ``udp`` … or the number."""
    return _PROTO_NAMES.get(proto or 0, str(proto))


def _endpoint(addr: str, port: int | None) -> str:
    host = f"[{addr}]" if ":" in addr else addr
    return host if port is None else f"{host}:{port}"


def _named(row: Mapping[str, Any], side: str) -> str:
    # Inventory names beside the address: an investigation starts from names, not bare IPs.
    names = [n for n in (row.get(f"{side}_node"), row.get("service") if side == "dst" else None) if n]
    return f" [{' · '.join(str(n) for n in names)}]" if names else ""


def flow_subject(row: Mapping[str, Any]) -> str:
    """``flow 10.77.1.50:41234 [aux] → 10.77.2.10:8080 [storage · storage-http] (storage)``: inventory
    names beside addresses (none for an address outside the inventory); ``(udp, storage)`` if not TCP."""
    proto = row.get("proto")
    kind = row.get("class") or "unclassified"
    label = kind if proto == 6 else f"{proto_name(proto)}, {kind}"
    src = _endpoint(row["src"], row.get("sport")) + _named(row, "src")
    dst = _endpoint(row["dst"], row.get("dport")) + _named(row, "dst")
    return f"flow {src} → {dst} ({label})"


def who(row: Mapping[str, Any], side: str) -> str:
    """``node aux (zone workload)`` or ``address 8.8.8.8 (not in the inventory)``."""
    node, zone = row.get(f"{side}_node"), row.get(f"{side}_zone")
    user = row.get(f"{side}_user")  # present when a scheduler attributed the flow (assess --jobs)
    if node and user:
        return f"node {node} (zone {zone}, {row.get(f'{side}_job')}, user {user})"
    if node:
        return f"node {node} (zone {zone})"
    ident = row.get(f"{side}_identity")
    if ident:
        return f"identity {ident}"
    return f"address {row[side]} (not in the inventory)"


def volume(records: int, nbytes: int) -> str:
    """``3 records, 1.2 MB``."""
    size = float(nbytes)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            text = f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
            break
        size /= 1000
    return f"{records} record{'s' if records != 1 else ''}, {text}"


def remediation_text(meta: ControlMeta) -> str:
    """All targets' remediation in one line, for findings."""
    return "; ".join(f"{target}: {text}" for target, text in meta.remediation.items())


def unknown(meta: ControlMeta, subject: str, fact: str, detail: str = "") -> Finding:
    """An ``unknown`` finding naming the missing fact and the command that gathers it."""
    reason = GATHER[fact]
    return Finding(meta.id, Verdict.UNKNOWN, subject, f"{detail}{': ' if detail else ''}{reason}")


# --- exceptions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExceptionMatch:
    """An exception that covers a subject, and whether it is still in force."""

    entry: ExceptionEntry
    active: bool

    def describe(self) -> str:
        """``exception exc-1 (owner x, expires 2026-12-01)``."""
        state = "expires" if self.active else "EXPIRED"
        return f"exception {self.entry.id} (owner {self.entry.owner}, {state} {self.entry.expires.isoformat()})"


def flow_keys(row: Mapping[str, Any]) -> list[str]:
    """The exception subjects a flow falls under: ``class:``, ``flow:<approved id>``, ``node:``,
    ``zone:``, ``job:``, ``service:``, ``address:``."""
    keys = [f"class:{row.get('class') or 'unclassified'}"]
    if row.get("rule"):
        keys.append(f"flow:{row['rule']}")
    for side in ("src", "dst"):
        keys += [f"{kind}:{row[f'{side}_{kind}']}" for kind in ("node", "zone", "job") if row.get(f"{side}_{kind}")]
        keys.append(f"address:{row[side]}")
    if row.get("service"):
        keys.append(f"service:{row['service']}")
    return keys


def find_exception(policy: Policy, control: str, subjects: Iterable[str], now: datetime) -> ExceptionMatch | None:
    """The exception of ``control`` covering any of ``subjects``: an active one if there is one,
    else an expired one (which must fail, not exempt)."""
    wanted = set(subjects)
    found = [e for e in policy.exceptions if e.control == control and e.subject in wanted]
    today = now.date()
    active = [e for e in found if e.expires >= today]
    if active:
        return ExceptionMatch(min(active, key=lambda e: e.expires), True)
    if found:
        return ExceptionMatch(max(found, key=lambda e: e.expires), False)
    return None


def failing(
    meta: ControlMeta,
    policy: Policy,
    facts: Facts,
    subject: str,
    message: str,
    keys: Iterable[str],
    evidence: tuple[str, ...] = (),
    volume: tuple[int, int] | None = None,
) -> Finding:
    """A failing finding — unless an active exception covers it (then ``exempt``, naming owner and
    expiry); an expired exception is named in the failure."""
    match = find_exception(policy, meta.id, keys, facts.now)
    if match is not None and match.active:
        reason = match.entry.reason
        return Finding(
            meta.id, Verdict.EXEMPT, subject, f"{message}; exempt under {match.describe()}: {reason}", evidence,
            volume=volume,
        )
    if match is not None:
        message = f"{message}; {match.describe()} no longer covers it"
    return Finding(meta.id, Verdict.FAIL, subject, message, evidence, remediation_text(meta), volume)


# --- many findings ------------------------------------------------------------------------------


def capped(
    meta: ControlMeta,
    rows: Sequence[Mapping[str, Any]],
    total: int,
    make: Callable[[Mapping[str, Any]], Finding],
    rest: tuple[int, int],
    what: str,
    verdict: Verdict,
    cap: int = LIST_CAP,
) -> list[Finding]:
    """Findings for the first rows (at most ``cap``) and one summary for the ``total - len`` others.

    ``rest`` is (records, bytes) of the rows not listed; ``what`` names them ("unapproved flows").
    """
    out = [make(r) for r in rows[:cap]]
    left = total - len(out)
    if left > 0:
        out.append(
            Finding(
                meta.id,
                verdict,
                f"{left} more {what}",
                f"{left} more {what} not listed ({volume(*rest)}); see the flow report for all of them",
                remediation=remediation_text(meta) if verdict is Verdict.FAIL else "",
            )
        )
    return out


_ORDER = {Verdict.FAIL: 0, Verdict.UNKNOWN: 1, Verdict.EXEMPT: 2, Verdict.PASS: 3}


def cap_findings(control: str, findings: Sequence[Finding], cap: int = CAP) -> list[Finding]:
    """At most ``cap`` findings, most urgent first; the others summarised per verdict (so the
    control's aggregate verdict does not change)."""
    if len(findings) <= cap:
        return list(findings)
    ordered = sorted(findings, key=lambda f: _ORDER[f.verdict])
    kept, dropped = ordered[: cap - 4], ordered[cap - 4 :]
    for verdict in Verdict:
        n = sum(1 for f in dropped if f.verdict is verdict)
        if n:
            kept.append(
                Finding(
                    control, verdict, f"{n} more {verdict.value} findings", "not listed to keep the report readable"
                )
            )
    return kept


# --- probes -------------------------------------------------------------------------------------


def judge_probe(meta: ControlMeta, probe: ProbeResult) -> Finding:
    """A permitted path must connect; a denied one passes only on a timeout or reset *caused by
    policy* — a refused connection (closed port) proves nothing."""
    subject = f"probe {probe.source} → {probe.destination} ({probe.proto})"
    detail = f" ({probe.detail})" if probe.detail else ""
    if probe.expected == "allow":
        if probe.outcome == "connected":
            return Finding(meta.id, Verdict.PASS, subject, f"permitted path connects{detail}", probe.evidence)
        if probe.outcome in ("unreachable", "error"):  # the probe never ran from its source: nothing shown
            return Finding(meta.id, Verdict.UNKNOWN, subject,
                           f"the probe could not run ({probe.outcome}): the permitted path is not shown{detail}",
                           probe.evidence)
        return Finding(
            meta.id,
            Verdict.FAIL,
            subject,
            f"permitted path does not connect: {probe.outcome}{detail}",
            probe.evidence,
            remediation_text(meta),
        )
    if probe.outcome == "connected":
        return Finding(
            meta.id, Verdict.FAIL, subject, f"denied path is open{detail}", probe.evidence, remediation_text(meta)
        )
    if probe.outcome in ("timeout", "reset"):
        if probe.by_policy is True:
            return Finding(
                meta.id,
                Verdict.PASS,
                subject,
                f"denied path blocked by policy ({probe.outcome}){detail}",
                probe.evidence,
            )
        return Finding(
            meta.id,
            Verdict.UNKNOWN,
            subject,
            f"{probe.outcome}, but not shown to be caused by policy "
            f"(no drop counter moved, not lifted and retried){detail}",
            probe.evidence,
        )
    if probe.outcome == "refused":
        return Finding(
            meta.id,
            Verdict.UNKNOWN,
            subject,
            f"connection refused: a closed port proves nothing about policy{detail}",
            probe.evidence,
        )
    return Finding(
        meta.id, Verdict.UNKNOWN, subject, f"probe did not complete: {probe.outcome}{detail}", probe.evidence
    )


def parse_time(value: object) -> datetime | None:
    """An aware datetime from a fact value (datetime or ISO text); None if absent, unreadable or naive.

    A naive time cannot be compared with the assessment's aware clock, and guessing its zone could
    make a stale fact look fresh: it proves nothing (the facts schemas reject it at the edge).
    """
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(value, datetime) and value.tzinfo is not None and value.utcoffset() is not None:
        return value
    return None


__all__ = [
    "CAP",
    "CONTROL_IDS",
    "LIST_CAP",
    "GATHER",
    "ExceptionMatch",
    "cap_findings",
    "capped",
    "failing",
    "find_exception",
    "flow_keys",
    "flow_subject",
    "judge_probe",
    "parse_time",
    "proto_name",
    "remediation_text",
    "unknown",
    "volume",
    "who",
]
