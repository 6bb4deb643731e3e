"""Group near-identical findings so a report shows a handful of problems, not hundreds of rows.

A capture of an unprotected cluster yields one finding per flow: 190 "plaintext on class storage"
findings that differ only in the client's ephemeral port. A reviewer needs the *pairs*: which
service, reached from which hosts, how many flows, how many bytes. :func:`group_findings` folds
findings whose subject is a flow (``flow SRC:SPORT → DST:DPORT (CLASS)``) by verdict, destination,
class and remediation; any other subject is folded only with exact duplicates. Every finding stays
in its group, so renderers can still list each one.

The byte and record totals are read back from the ``N records, X.Y MB`` volume text the controls
write into their messages, so they are sums of rounded figures: renderers mark them approximate.
A group whose messages do not all carry a volume has no total rather than a partial one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from ringfence.controls.interface import Finding, Verdict
from ringfence.evidence.report.interface import VERDICT_ORDER

# The subject format of controls/_common.py flow_subject(); IPv6 hosts are bracketed there.
# Inventory names follow an endpoint in brackets: "10.77.2.10:8080 [storage · storage-http]".
_FLOW_SUBJECT: Final = re.compile(
    r"^flow (?P<src>\[[^\]]+\]|[^\s:]+)(?::\d+)?(?: \[[^\]]*\])? → (?P<dst>\S+(?: \[[^\]]*\])?) "
    r"\((?P<label>[^()]*)\)$"
)
# The volume format of controls/_common.py volume(): "3 records, 1.2 MB".
_VOLUME: Final = re.compile(r"\b(\d+) records?, (\d+(?:\.\d+)?) (B|kB|MB|GB|TB)\b")
_UNIT: Final = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_CUT: Final = " ,;:("
# A shared prefix shorter than this says nothing; the group then shows an example message instead.
_MIN_COMMON: Final = 20


@dataclass(frozen=True)
class FindingGroup:
    """Findings of one verdict about one destination (or one identical subject) of one control."""

    verdict: Verdict
    subject: str  # "10.77.2.10:8080 (storage)" for flow groups, else the findings' shared subject
    sources: tuple[tuple[str, int], ...]  # (source host, findings) for flow groups, most first; else ()
    message: str  # the text every finding's message starts with, or the first message when they differ
    messages_differ: bool  # True when ``message`` is only a shared prefix (or an example)
    findings: tuple[Finding, ...]
    records: int | None  # summed over the findings; None unless every finding states a volume
    bytes: int | None  # likewise
    exact: bool  # every volume came from the control's own counts, not from rounded message text
    evidence: tuple[str, ...]  # distinct evidence ids, in first-seen order
    remediation: str

    @property
    def flow_group(self) -> bool:
        """Whether the findings are about flows, so ``sources`` names their source hosts."""
        return bool(self.sources)

    @property
    def count(self) -> int:
        """How many findings the group holds."""
        return len(self.findings)

    def headline(self, max_sources: int = 3) -> str:
        """One plain line: ``86 flows 10.77.1.10 +3 more → 10.77.2.10:8080 (storage)``."""
        if not self.flow_group:
            return self.subject if self.count == 1 else f"{self.subject} (×{self.count})"
        shown = [host for host, _ in self.sources[:max_sources]]
        more = len(self.sources) - len(shown)
        src = ", ".join(shown) + (f" +{more} more" if more else "")
        noun = "flow" if self.count == 1 else "flows"
        return f"{self.count} {noun} {src} → {self.subject}"


def parse_volume(message: str) -> tuple[int, int] | None:
    """``(records, bytes)`` from the first ``N records, X.Y MB`` in ``message``, or None."""
    m = _VOLUME.search(message)
    if m is None:
        return None
    return int(m.group(1)), round(float(m.group(2)) * _UNIT[m.group(3)])


def common_message(messages: Sequence[str]) -> tuple[str, bool]:
    """What all ``messages`` say in common (cut at a word boundary) and whether they differ at all."""
    first = messages[0]
    if all(m == first for m in messages):
        return first, False
    prefix = os.path.commonprefix(list(messages))
    volume = _VOLUME.search(first)
    if volume is not None:  # "… (tls): 1 record, 264.2 kB" and "… (tls): 1 record, 1.1 kB" share "1 record"
        prefix = prefix[: volume.start()]
    cut = max(prefix.rfind(c) for c in _CUT)
    prefix = prefix[:cut].rstrip(_CUT) if cut > 0 else ""
    return (prefix, True) if len(prefix) >= _MIN_COMMON else (first, True)


def _key(f: Finding) -> tuple[str, ...]:
    m = _FLOW_SUBJECT.match(f.subject)
    if m is None:
        return (f.verdict.value, "other", f.subject, f.message, f.remediation)
    return (f.verdict.value, "flow", m.group("dst"), m.group("label"), f.remediation)


def _group(members: list[Finding]) -> FindingGroup:
    first = members[0]
    sources: dict[str, int] = {}
    subject = first.subject
    m = _FLOW_SUBJECT.match(first.subject)
    if m is not None:
        subject = f"{m.group('dst')} ({m.group('label')})"
        for f in members:
            fm = _FLOW_SUBJECT.match(f.subject)
            host = fm.group("src") if fm is not None else f.subject
            sources[host] = sources.get(host, 0) + 1
    # The exact (records, bytes) a control attached; the rounded figures of the message text otherwise.
    volumes = [f.volume if f.volume is not None else parse_volume(f.message) for f in members]
    complete = [v for v in volumes if v is not None]
    whole = len(complete) == len(volumes)
    message, differ = common_message([f.message for f in members])
    return FindingGroup(
        verdict=first.verdict,
        subject=subject,
        sources=tuple(sorted(sources.items(), key=lambda kv: (-kv[1], kv[0]))),
        message=message,
        messages_differ=differ,
        findings=tuple(members),
        records=sum(r for r, _ in complete) if whole else None,
        bytes=sum(b for _, b in complete) if whole else None,
        exact=all(f.volume is not None for f in members),
        evidence=tuple(dict.fromkeys(ev for f in members for ev in f.evidence)),
        remediation=first.remediation,
    )


def group_findings(findings: Iterable[Finding]) -> tuple[FindingGroup, ...]:
    """Fold ``findings`` into groups: verdicts in report order, then the most bytes/findings first."""
    buckets: dict[tuple[str, ...], list[Finding]] = {}
    for f in findings:
        buckets.setdefault(_key(f), []).append(f)
    groups = [_group(members) for members in buckets.values()]
    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}
    # Stable sort: groups of equal weight keep the order the control reported them in.
    groups.sort(key=lambda g: (rank[g.verdict], -(g.bytes or 0), -g.count))
    return tuple(groups)


def split_remediation(text: str) -> tuple[tuple[str, str], ...]:
    """``"nftables: a; cilium: b"`` → ``(("nftables", "a"), ("cilium", "b"))``; unlabelled → ``(("", text),)``.

    Controls join their per-target remediations with ``; `` (controls/_common.py remediation_text);
    a ``;`` inside one target's text is kept because the next part does not start with ``word:``.
    """
    parts = re.split(r";\s+(?=[a-z][\w-]*:\s)", text.strip())
    out: list[tuple[str, str]] = []
    for part in parts:
        m = re.match(r"^([a-z][\w-]*):\s+(.*)$", part, re.DOTALL)
        if m is None:
            out.append(("", part))
        else:
            out.append((m.group(1), m.group(2)))
    return tuple(out) if text.strip() else ()


__all__ = ["FindingGroup", "common_message", "group_findings", "parse_volume", "split_remediation"]
