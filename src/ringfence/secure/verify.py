"""Verify the confidentiality side from facts: bytes per class and protection, coverage, scope.

Everything here is a pure function of a classified flow table, the policy and what is enabled —
no lab, no capture tool — so it serves the lab and a real cluster alike. The lab drills (rotation,
fail-closed) live in :mod:`ringfence.secure.drills`; both feed one
:class:`ConfidentialityReport`, whose :meth:`~ConfidentialityReport.facts_keys` is the mapping the
``encryption_keys`` control reads from ``Facts.keys`` (documented in ``docs/encryption.md``).

Judgement rules:

* a class whose policy requires protection passes only with **zero plaintext payload bytes**;
  handshake-only bytes are excepted, unknown bytes are reported (and make the class ``unknown``
  only when nothing of it was seen encrypted); no traffic of the class at all is ``unknown``;
* every class is **covered** (by an enabled layer the policy accepts for it) or **exempt** (by an
  unexpired exception naming its owner, trusted boundary and compensating controls); an expired
  exception fails, and so does a class that is neither;
* every approved path of a protected class between two hosts must be covered by a layer whose
  **scope** reaches it: the transport it carries (RDMA is outside every host-stack layer and NCCL's
  TLS), and — for link-layer MACsec — no router on the way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa

from ringfence.controls.interface import Facts, Verdict
from ringfence.policy import ExceptionEntry, Policy, Requirement, TrafficClass
from ringfence.policy.model import Endpoint as PolicyEndpoint
from ringfence.secure.layers.interface import Transport
from ringfence.secure.layers.registry import scope_of
from ringfence.secure.verify_types import CredentialCheck, FailClosedResult, RotationResult

_PROTECTIONS = ("encrypted", "plaintext", "handshake-only", "integrity-only", "unknown")
_CLASSES = (TrafficClass.STORAGE, TrafficClass.COLLECTIVE, TrafficClass.MANAGEMENT, TrafficClass.REPLICATION)


@dataclass(frozen=True)
class ClassBytes:
    """Payload bytes of one class per protection verdict, and the judgement."""

    traffic_class: str
    required: bool
    flows: int
    bytes: int  # IP bytes, both directions
    payload: Mapping[str, int]  # protection -> L4 payload bytes
    protocols: tuple[str, ...]  # what was recognised (tls1.3, wireguard, http, gloo, …)
    plaintext_flows: tuple[str, ...]  # up to ten, named
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class Coverage:
    """How a class is protected: covered by a layer, exempt by an exception, or neither."""

    traffic_class: str
    status: str  # covered | exempt | uncovered | not-required
    layer: str | None
    verdict: Verdict
    reason: str
    exception: Mapping[str, Any] | None = None
    seen_on_wire: bool | None = None  # the layer's wire protocol appears in the class's flows


@dataclass(frozen=True)
class ScopeCheck:
    """One approved path of a protected class and whether its layer's scope reaches it."""

    path: str  # approved-flow id
    traffic_class: str
    boundary: str  # what it crosses, in words
    transport: str
    routed: bool
    layer: str | None
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class ConfidentialityReport:
    """Everything ``ringfence verify confidentiality|keys`` found."""

    generated: datetime
    classes: tuple[ClassBytes, ...]
    coverage: tuple[Coverage, ...]
    scope: tuple[ScopeCheck, ...]
    rotation: tuple[RotationResult, ...] = ()
    fail_closed: tuple[FailClosedResult, ...] = ()
    credentials: tuple[CredentialCheck, ...] = ()
    inventory: tuple[Mapping[str, Any], ...] = ()  # certificates and tunnel keys by fingerprint / public key
    before: tuple[ClassBytes, ...] = ()  # the as-found breakdown, when a before capture was given
    evidence: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def verdict(self) -> Verdict:
        """fail if anything failed; unknown if anything required is unknown; else pass."""
        verdicts = [c.verdict for c in self.classes] + [c.verdict for c in self.coverage]
        verdicts += [s.verdict for s in self.scope] + [r.verdict for r in self.rotation]
        verdicts += [f.verdict for f in self.fail_closed] + [c.verdict for c in self.credentials]
        if Verdict.FAIL in verdicts:
            return Verdict.FAIL
        if Verdict.UNKNOWN in verdicts or not verdicts:
            return Verdict.UNKNOWN
        return Verdict.PASS

    def facts_keys(self) -> dict[str, Any]:
        """The JSON-ready mapping for ``Facts.keys`` (see docs/encryption.md for the keys)."""

        def rows(items: Iterable[Any]) -> list[dict[str, Any]]:
            return [_plain(asdict(i)) for i in items]

        return {
            "source": "ringfence verify",
            "generated": self.generated.isoformat(),
            "verdict": self.verdict.value,
            "classes": {c.traffic_class: _plain(asdict(c)) for c in self.classes},
            "before": {c.traffic_class: _plain(asdict(c)) for c in self.before},
            "coverage": {c.traffic_class: _plain(asdict(c)) for c in self.coverage},
            "scope": rows(self.scope),
            "rotation": rows(self.rotation),
            "fail_closed": rows(self.fail_closed),
            "credentials": rows(self.credentials),
            "inventory": [dict(i) for i in self.inventory],
            # the shape the encryption_keys control reads (controls/encryption_keys.py)
            "rotations": [
                {
                    "layer": r.layer,
                    "at": r.at,
                    "ok": r.verdict is Verdict.PASS,
                    "dropped_job": not r.job_survived,
                    "detail": r.detail,
                }
                for r in self.rotation
            ],
            "mismatch": [
                {"layer": f.layer, "failed_closed": f.verdict is Verdict.PASS, "detail": f"{f.error}; {f.detail}"}
                for f in self.fail_closed
            ],
            "evidence": list(self.evidence),
        }

    def to_facts(self, base: Facts | None = None) -> Facts:
        """``base`` (or empty facts) with ``keys`` set to :meth:`facts_keys`, dated when it was generated."""
        from dataclasses import replace

        facts = base or Facts()
        return replace(facts, keys=self.facts_keys(), taken={**facts.taken, "keys": self.generated})


def _plain(value: Any) -> Any:
    if isinstance(value, Verdict):
        return value.value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _flow_name(row: Mapping[str, Any]) -> str:
    sp = f":{row['sport']}" if row.get("sport") is not None else ""
    dp = f":{row['dport']}" if row.get("dport") is not None else ""
    return (
        f"flow {row['src']}{sp} → {row['dst']}{dp} ({row.get('class')}) carried "
        f"{row.get('payload_bytes') or 0} plaintext payload bytes: {row.get('reason') or row.get('protocol')}"
    )


def class_breakdown(flows: pa.Table, policy: Policy) -> tuple[ClassBytes, ...]:
    """Per class: payload bytes per protection verdict and the zero-plaintext judgement.

    ``flows`` must be classified (``ringfence.analyze.classify``).
    """
    if "class" not in flows.column_names:
        raise ValueError("class_breakdown needs classified flows (ringfence.analyze.classify)")
    rows = flows.select(
        ["src", "dst", "sport", "dport", "class", "protection", "protocol", "reason", "bytes", "payload_bytes"]
    ).to_pylist()
    out: list[ClassBytes] = []
    for cls in (*_CLASSES, TrafficClass.UNCLASSIFIED):
        mine = [r for r in rows if r["class"] == cls.value]
        cp = policy.classes.of(cls) if cls is not TrafficClass.UNCLASSIFIED else None
        required = cp is not None and cp.protection is Requirement.REQUIRED
        payload = dict.fromkeys(_PROTECTIONS, 0)
        for r in mine:
            payload[r["protection"] if r["protection"] in payload else "unknown"] += int(r["payload_bytes"] or 0)
        plain = sorted(
            (r for r in mine if r["protection"] == "plaintext" and (r["payload_bytes"] or 0) > 0),
            key=lambda r: -int(r["payload_bytes"] or 0),
        )
        protocols = tuple(sorted({str(r["protocol"]) for r in mine if r["protocol"]}))
        total = int(sum(int(r["bytes"] or 0) for r in mine))
        if cls is TrafficClass.UNCLASSIFIED:
            verdict, reason = (
                (Verdict.FAIL, f"{payload['plaintext']} plaintext payload bytes in unclassified flows")
                if payload["plaintext"]
                else (Verdict.PASS, "no plaintext in unclassified flows")
            )
        elif not mine:
            verdict, reason = Verdict.UNKNOWN, f"no {cls.value} traffic in the capture: nothing to judge"
        elif not required:
            verdict, reason = Verdict.PASS, f"protection of {cls.value} is optional by policy"
        elif payload["plaintext"]:
            verdict = Verdict.FAIL
            reason = (
                f"{payload['plaintext']} plaintext payload bytes in {len(plain)} flow(s); "
                f"policy requires protection of {cls.value}"
            )
        elif payload["encrypted"] == 0 and payload["unknown"] > 0:
            verdict, reason = Verdict.UNKNOWN, f"{payload['unknown']} payload bytes could not be judged, none encrypted"
        else:
            reason = f"0 plaintext payload bytes; {payload['encrypted']} encrypted"
            if payload["handshake-only"]:
                reason += f", {payload['handshake-only']} handshake-only (excepted)"
            if payload["unknown"]:
                reason += f", {payload['unknown']} unknown"
            verdict = Verdict.PASS
        out.append(
            ClassBytes(
                cls.value,
                required,
                len(mine),
                total,
                payload,
                protocols,
                tuple(_flow_name(r) for r in plain[:10]),
                verdict,
                reason,
            )
        )
    return tuple(out)


def _class_exception(policy: Policy, cls: str) -> ExceptionEntry | None:
    for exc in policy.exceptions:
        if exc.subject == f"class:{cls}" and exc.control in ("encryption_keys", "encryption-keys", "*"):
            return exc
    return None


def coverage(
    policy: Policy, enabled: Mapping[str, str], *, now: datetime | None = None, breakdown: Sequence[ClassBytes] = ()
) -> tuple[Coverage, ...]:
    """Covered (with layer) or exempt (with the exception) for every class; see the module docstring."""
    today = (now or datetime.now(UTC)).date()
    seen = {b.traffic_class: set(b.protocols) for b in breakdown if b.flows}  # no flows: nothing to see
    out: list[Coverage] = []
    for cls in _CLASSES:
        cp = policy.classes.of(cls)
        assert cp is not None  # the four classes are always stated
        layer = enabled.get(cls.value)
        exc = _class_exception(policy, cls.value)
        if layer is not None:
            allowed = {x.value for x in cp.layers}
            on_wire = bool(set(scope_of(layer).wire_protocols) & seen[cls.value]) if cls.value in seen else None
            if allowed and layer not in allowed:
                out.append(
                    Coverage(
                        cls.value,
                        "covered",
                        layer,
                        Verdict.FAIL,
                        f"{layer} is not a layer the policy accepts for {cls.value} ({', '.join(sorted(allowed))})",
                        seen_on_wire=on_wire,
                    )
                )
            elif on_wire is False:
                out.append(
                    Coverage(
                        cls.value,
                        "covered",
                        layer,
                        Verdict.FAIL,
                        f"{layer} is enabled for {cls.value} but none of its traffic shows it on the wire "
                        f"(seen: {', '.join(sorted(seen[cls.value])) or 'nothing'})",
                        seen_on_wire=False,
                    )
                )
            else:
                out.append(
                    Coverage(cls.value, "covered", layer, Verdict.PASS, f"covered by {layer}", seen_on_wire=on_wire)
                )
            continue
        if exc is not None:
            info = {
                "id": exc.id,
                "owner": exc.owner,
                "reason": exc.reason,
                "expires": exc.expires.isoformat(),
                "trusted_boundary": exc.trusted_boundary,
                "compensating": list(exc.compensating),
            }
            missing = [k for k in ("owner", "trusted_boundary") if not info[k]] + (
                ["compensating"] if not exc.compensating else []
            )
            if exc.expires < today:
                out.append(
                    Coverage(
                        cls.value,
                        "exempt",
                        None,
                        Verdict.FAIL,
                        f"exception {exc.id} expired on {exc.expires.isoformat()}",
                        info,
                    )
                )
            elif missing:
                out.append(
                    Coverage(
                        cls.value, "exempt", None, Verdict.FAIL, f"exception {exc.id} lacks {', '.join(missing)}", info
                    )
                )
            else:
                out.append(
                    Coverage(
                        cls.value,
                        "exempt",
                        None,
                        Verdict.EXEMPT,
                        f"exempt by {exc.id} (owner {exc.owner}) until {exc.expires.isoformat()}",
                        info,
                    )
                )
            continue
        if cp.protection is Requirement.REQUIRED:
            out.append(
                Coverage(
                    cls.value,
                    "uncovered",
                    None,
                    Verdict.FAIL,
                    f"{cls.value} requires protection but no layer is enabled and no exception applies",
                )
            )
        else:
            out.append(Coverage(cls.value, "not-required", None, Verdict.PASS, "protection optional by policy"))
    return tuple(out)


def _zones_of(policy: Policy, ep: PolicyEndpoint) -> set[str]:
    nodes = {n.name: n for n in policy.nodes}
    if ep.zone:
        return {ep.zone}
    if ep.node and ep.node in nodes:
        return {nodes[ep.node].zone}
    if ep.job:
        job = next((j for j in policy.jobs if j.name == ep.job), None)
        return {nodes[m].zone for m in job.members if m in nodes} if job else set()
    if ep.service:
        svc = next((s for s in policy.services if s.name == ep.service), None)
        return {nodes[svc.node].zone} if svc and svc.node in nodes else set()
    return {"(outside)"} if ep.cidr else set()


def _transport(policy: Policy, job_name: str | None, proto: str) -> Transport:
    job = next((j for j in policy.jobs if j.name == job_name), None)
    if job is not None and any(k in job.backend.lower() for k in ("rdma", "ib", "roce", "verbs")):
        return Transport.RDMA
    return Transport.UDP if proto == "udp" else Transport.TCP


def scope_check(policy: Policy, enabled: Mapping[str, str]) -> tuple[ScopeCheck, ...]:
    """Every approved path of a class requiring protection against the scope of the layer covering it."""
    trust = {z.name: z.trust.value for z in policy.zones}
    out: list[ScopeCheck] = []
    for flow in policy.approved:
        cls = flow.traffic_class.value
        cp = policy.classes.of(flow.traffic_class)
        if cp is None or cp.protection is not Requirement.REQUIRED:
            continue
        src, dst = _zones_of(policy, flow.source), _zones_of(policy, flow.destination)
        routed = bool(src and dst and src != dst)
        trusts = {trust.get(z, "external") for z in src | dst}
        boundary = (
            f"zones {'/'.join(sorted(src)) or '?'} → {'/'.join(sorted(dst)) or '?'}"
            + (" (internal → external trust)" if len(trusts) > 1 else "")
            + ("" if routed else " (between hosts of one zone)")
        )
        transport = _transport(policy, flow.source.job or flow.destination.job, flow.proto)
        service = policy.service(flow.destination.service) if flow.destination.service else None
        if service is not None and service.application == "ssh":
            # SSH encrypts its own transport end to end; a class layer (the TLS sidecar) does not carry it,
            # so naming that layer here would claim coverage it does not give. The wire verdict checks SSH.
            out.append(
                ScopeCheck(flow.id, cls, boundary, transport.value, routed, "ssh", Verdict.PASS,
                           "SSH encrypts this path itself (application-level transport security, end to end)")
            )
            continue
        layer = enabled.get(cls)
        if layer is None:
            exempt = _class_exception(policy, cls) is not None
            out.append(
                ScopeCheck(
                    flow.id,
                    cls,
                    boundary,
                    transport.value,
                    routed,
                    None,
                    Verdict.EXEMPT if exempt else Verdict.FAIL,
                    "class exempt by exception" if exempt else "no layer covers this path",
                )
            )
            continue
        ok, why = scope_of(layer).covers(transport, routed=routed)
        out.append(
            ScopeCheck(
                flow.id, cls, boundary, transport.value, routed, layer, Verdict.PASS if ok else Verdict.FAIL, why
            )
        )
    return tuple(out)


def judge(
    flows: pa.Table,
    policy: Policy,
    enabled: Mapping[str, str],
    *,
    now: datetime | None = None,
    before: pa.Table | None = None,
    rotation: Sequence[RotationResult] = (),
    fail_closed: Sequence[FailClosedResult] = (),
    credentials: Sequence[CredentialCheck] = (),
    inventory: Sequence[Mapping[str, Any]] = (),
    evidence: Sequence[str] = (),
) -> ConfidentialityReport:
    """The whole confidentiality judgement from classified ``flows`` (and optional drills)."""
    t = now or datetime.now(UTC)
    breakdown = class_breakdown(flows, policy)
    return ConfidentialityReport(
        generated=t,
        classes=breakdown,
        coverage=coverage(policy, enabled, now=t, breakdown=breakdown),
        scope=scope_check(policy, enabled),
        rotation=tuple(rotation),
        fail_closed=tuple(fail_closed),
        credentials=tuple(credentials),
        inventory=tuple(inventory),
        before=class_breakdown(before, policy) if before is not None else (),
        evidence=tuple(evidence),
    )


__all__ = [
    "ClassBytes",
    "ConfidentialityReport",
    "Coverage",
    "CredentialCheck",
    "FailClosedResult",
    "RotationResult",
    "ScopeCheck",
    "class_breakdown",
    "coverage",
    "judge",
    "scope_check",
]
