"""``storage_flows``' acceptance from traces: a dataset read traced end to end, and an unrelated workload
refused the same read.

The permitted side is a trace (``ringfence trace --object served``) whose flow the object server's access
log shows carrying a served ``GET /datasets/JOB/…``, by a reader with a workload identity (the certificate
identity the server or its TLS gate checked, or the scheduler's job on its node) that is a member of JOB.
The denied side is an unrelated workload — no member of JOB — failing to repeat that read: the object
server refusing it (its access log, or its TLS gate's), or the fabric dropping its flow to the same service
(a denied trace to the traced read's address and port). A served read to a non-member fails: the data was
handed to a workload the policy does not approve.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ringfence.controls.interface import ControlMeta, Facts, Finding, Requirement, Side, Verdict
from ringfence.policy import Policy

#: Requirement ids.
DATASET_READ, READ_REFUSED = "dataset-read-traced", "unrelated-read-refused"
READ_TRACE = "ringfence trace --sample allowed --object served --target lab -o trace-read.json"
REFUSED_TRACE = "ringfence trace --sample allowed --object refused --target lab -o trace-refused.json"
#: The other proof of the denied side: the fabric dropping the unrelated workload's flow to the same service.
DENIED_TRACE = "ringfence trace --sample denied --flow OTHER:*-{dst}:{dport}/tcp --target lab -o trace-denied.json"
_REFUSALS = ("denied", "refused")


def requirements() -> tuple[Requirement, ...]:
    """The two requirements this module judges."""
    return (
        Requirement(DATASET_READ, Side.PERMITTED, "a dataset read traced end to end: the object server's record of "
                    "it joined to its flow, read by a member of the dataset's job with a workload identity",
                    ("traces",), READ_TRACE),
        Requirement(READ_REFUSED, Side.DENIED, "an unrelated workload cannot repeat the traced read: refused by the "
                    "object server (or its TLS gate), or its flow to the same service denied by the fabric",
                    ("traces",), REFUSED_TRACE),
    )


@dataclass(frozen=True)
class _Read:
    """One served dataset read a trace shows."""

    job: str
    path: str
    dst: str
    dport: int | None
    reader: str  # who read it: node, else address
    identity: str | None
    member: bool
    bytes: Any
    joined: str


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _seq(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _dataset(path: Any) -> str | None:
    """``/datasets/JOB/…`` → JOB."""
    if not isinstance(path, str) or not path.startswith("/datasets/"):
        return None
    job = path.split("/")[2]
    return job or None


def _member(policy: Policy, job: str, end: Mapping[str, Any], identity: str | None) -> bool:
    """Whether the reader belongs to ``job``: something says so (its inventory node is a member, its
    certificate carries the job's identity, the scheduler ran the job there) and nothing says otherwise — a
    job's identity presented from a node outside the job is not a member's read."""
    spec = policy.job(job)
    if spec is None:
        return False
    votes: list[bool] = []
    if isinstance(end.get("node"), str):
        votes.append(end["node"] in spec.members)
    if identity in {j.identity for j in policy.jobs}:
        votes.append(identity == spec.identity)
    if isinstance(end.get("job"), str) and policy.job(end["job"]) is not None:
        votes.append(end["job"] == job)
    return bool(votes) and all(votes)


def _identity(obj: Mapping[str, Any], end: Mapping[str, Any]) -> str | None:
    for value in (obj.get("identity"), end.get("identity")):
        if isinstance(value, str) and value:
            return value
    job = end.get("job")
    return f"scheduler job {job}" if isinstance(job, str) and job else None


def _traces(facts: Facts) -> Iterator[Mapping[str, Any]]:
    for t in facts.traces or ():
        if isinstance(t, Mapping):
            yield t


def _reads(policy: Policy, facts: Facts) -> Iterator[tuple[Mapping[str, Any], _Read]]:
    for t in _traces(facts):
        flow, src = _map(t.get("flow")), _map(t.get("src"))
        if t.get("sample") != "allowed" or _map(t.get("decision")).get("verdict") != "accept":
            continue
        for obj in map(_map, _seq(t.get("objects"))):
            job = _dataset(obj.get("path"))
            if job is None or obj.get("method") != "GET" or obj.get("result") != "served" \
                    or obj.get("job") not in (None, job):
                continue
            ident = _identity(obj, src)
            yield t, _Read(job, str(obj.get("path")), str(flow.get("dst")), flow.get("dport"),
                           str(src.get("node") or flow.get("src")), ident, _member(policy, job, src, ident),
                           obj.get("bytes"), str(obj.get("joined")))


def _subject(read: _Read) -> str:
    return f"dataset read {read.path} by {read.reader} from {read.dst}:{read.dport}"


def _refusal(policy: Policy, facts: Facts, read: _Read) -> str | None:
    """How an unrelated workload was kept from repeating ``read``, or None."""
    prefix = f"/datasets/{read.job}/"
    for t in _traces(facts):
        flow, src, decision = _map(t.get("flow")), _map(t.get("src")), _map(t.get("decision"))
        who = str(src.get("node") or flow.get("src"))
        for obj in map(_map, _seq(t.get("objects"))):
            ident = _identity(obj, src)
            if obj.get("result") == "refused" and str(obj.get("path", "")).startswith(prefix) \
                    and not _member(policy, read.job, src, ident) and t.get("attributed") is True:
                return f"the object server refused {who} ({ident or 'no certificate'}) {obj.get('path')}"
        for rec in map(_map, _seq(t.get("tls"))):
            ident = rec.get("identity") if isinstance(rec.get("identity"), str) else None
            if rec.get("direction") == "in" and rec.get("result") in _REFUSALS \
                    and str(rec.get("path", "")).startswith(prefix) and not _member(policy, read.job, src, ident) \
                    and t.get("attributed") is True:
                return f"{rec.get('node')}'s TLS gate {rec.get('result')} {who} {rec.get('path')}: {rec.get('reason')}"
        if t.get("sample") == "denied" and decision.get("verdict") == "drop" and t.get("attributed") is True \
                and flow.get("dst") == read.dst and flow.get("dport") == read.dport \
                and not _member(policy, read.job, src, _identity({}, src)):
            rule = decision.get("rule") or "the default drop"
            return f"the fabric dropped {who}'s flow to {read.dst}:{read.dport} ({rule}, at {decision.get('point')})"
    return None


def judge(meta: ControlMeta, policy: Policy, facts: Facts) -> list[Finding]:
    """Findings for :data:`DATASET_READ` and :data:`READ_REFUSED` (missing facts: the requirement gate says so)."""
    if facts.traces is None:
        return []
    reads = list(_reads(policy, facts))
    out: list[Finding] = []
    approved = [r for _, r in reads if r.member and r.identity is not None]
    for _, r in reads:
        if not r.member:
            out.append(Finding(meta.id, Verdict.FAIL, _subject(r), f"served {r.bytes} bytes of job {r.job}'s dataset "
                               f"to {r.reader} ({r.identity or 'no workload identity'}), no member of job {r.job}",
                               requirement=READ_REFUSED))
        elif r.identity is None:
            out.append(Finding(meta.id, Verdict.UNKNOWN, _subject(r), f"the read is attributed to {r.reader} only: no "
                               "workload identity (the TLS sidecar's log, the server's certificate check, or a job "
                               "source with --jobs) says who read it", requirement=DATASET_READ))
    if approved:
        r = approved[0]
        out.append(Finding(meta.id, Verdict.PASS, _subject(r), f"traced end to end: job {r.job}'s member {r.reader} "
                           f"({r.identity}) read {r.bytes} bytes, the object server's record joined by {r.joined}",
                           requirement=DATASET_READ))
    elif not reads:
        out.append(Finding(meta.id, Verdict.UNKNOWN, "traced dataset read", "no trace shows a dataset read the "
                           f"object server served; run: {READ_TRACE}", requirement=DATASET_READ))
    for r in approved[:1]:
        how = _refusal(policy, facts, r)
        if how is not None:
            out.append(Finding(meta.id, Verdict.PASS, f"an unrelated workload repeating {r.path}", how,
                               requirement=READ_REFUSED))
        else:
            out.append(Finding(meta.id, Verdict.UNKNOWN, f"an unrelated workload repeating {r.path}",
                               f"no trace shows a non-member of job {r.job} refused this dataset or denied "
                               f"{r.dst}:{r.dport}; run: {REFUSED_TRACE} (a refusal by the object server), or "
                               f"{DENIED_TRACE.format(dst=r.dst, dport=r.dport)} (a denial by the fabric)",
                               requirement=READ_REFUSED))
    return out


__all__ = ["DATASET_READ", "DENIED_TRACE", "READ_REFUSED", "READ_TRACE", "REFUSED_TRACE", "judge", "requirements"]
