"""Control point ``encryption_keys``: every class that must be protected is, and keys behave.

Reads ``Facts.keys`` as ``ringfence verify keys -o`` writes it (:mod:`ringfence.facts.keys`)::

    {"rotations": [{"layer": "wireguard", "at": "2026-11-30T10:00:00+00:00", "ok": true,
                    "dropped_job": false, "detail": "…"}],
     "mismatch":  [{"layer": "wireguard", "failed_closed": true, "detail": "…"}],
     "coverage":  {"storage": {"status": "covered", "layer": "tls", "verdict": "pass", "reason": "…"}, …},
     "scope":     [{"path": "train-a-storage", "verdict": "pass", "reason": "…", …}]}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ringfence.controls._common import LIST_CAP, flow_subject, parse_time, remediation_text, unknown, volume
from ringfence.controls._flows import CAPTURE, flow_failures, routed_flows
from ringfence.controls.interface import ControlMeta, Facts, Finding, Side, Verdict
from ringfence.controls.interface import Requirement as Need
from ringfence.controls.requirements import duration
from ringfence.policy import Layer, Policy, Requirement, TrafficClass

#: Requirement ids.
PROTECTED, ROTATION, COVERAGE, CLOSED, NO_PLAINTEXT = (
    "class-protected", "rotation", "coverage-scope", "fails-closed", "no-plaintext")
VERIFY = "ringfence verify keys --target lab -o keys.json"

meta = ControlMeta(
    id="encryption_keys",
    title="Encryption per traffic class, and key management",
    objective="Storage, management and replication carry no plaintext payload (TLS); collective links are "
    "encrypted where policy says gradients are confidential; keys rotate without dropping the job and a "
    "key mismatch fails closed.",
    acceptance="Permitted: an encrypted flow of each required class is observed (handshake then ciphertext) "
    "and a rekey keeps the job running. Denied: a plaintext flow of a required class, or a peer with a "
    "mismatched key, gets no plaintext through (the connection fails closed).",
    facts=("flows", "keys"),
    requirements=(
        Need(PROTECTED, Side.PERMITTED, "an encrypted flow of each class requiring protection is observed, on a "
             "layer the policy accepts for it", ("flows",), CAPTURE),
        Need(ROTATION, Side.PERMITTED, "a key rotation rekeyed the live path without dropping the job, recently "
             "enough for the policy's rotation interval", ("keys",), VERIFY),
        Need(COVERAGE, Side.PERMITTED, "every class is covered by an accepted layer (or exempt) and each layer's "
             "scope reaches the paths it must protect (the encryption boundary matches the trust boundary)",
             ("keys",), VERIFY),
        Need(NO_PLAINTEXT, Side.DENIED, "no class requiring protection shows plaintext payload in the inspected "
             "sample", ("flows",), CAPTURE),
        Need(CLOSED, Side.DENIED, "a peer with a mismatched key gets no plaintext through (fails closed)",
             ("keys",), VERIFY),
    ),
    remediation={
        "nftables": "drop plaintext ports of protected classes (accept only the TLS/tunnel ports and interfaces)",
        "networkpolicy": "allow protected classes only on their TLS ports; pair with a mesh enforcing mTLS",
        "cilium": "enable transparent encryption (WireGuard/IPsec) and mTLS policy for the protected classes",
        "process": "`ringfence encrypt enable --class CLASS --layer LAYER --target lab` per class; or record a "
        "time-limited exception with an owner",
    },
)

_UNPROTECTED = ("plaintext", "integrity-only")
_PROTECTED = ("encrypted", "handshake-only")
_LAYER_OF = (
    (re.compile(r"^tls|^https|^dtls"), Layer.TLS),
    (re.compile(r"^wireguard|^wg\b"), Layer.WIREGUARD),
    (re.compile(r"^esp|^ipsec"), Layer.IPSEC),
    (re.compile(r"^macsec"), Layer.MACSEC),
    (re.compile(r"^nccl-tls"), Layer.NCCL_TLS),
    (re.compile(r"^ringfence"), Layer.RINGFENCE),
)


def _layer(protocol: str | None) -> Layer | None:
    text = (protocol or "").lower()
    return next((layer for rx, layer in _LAYER_OF if rx.search(text)), None)


def _sums(table: pa.Table) -> tuple[int, int]:
    return int(pc.sum(table.column("records")).as_py() or 0), int(pc.sum(table.column("bytes")).as_py() or 0)


def _accepted(cp_layers: tuple[Layer, ...], protocol: str | None, application: str | None) -> bool | None:
    """Whether a protected flow's protocol is a layer the class accepts: True, False, or None (unrecognised)."""
    layer = _layer(protocol)
    if layer is not None:
        return layer in cp_layers
    if (protocol or "").lower().startswith("ssh") and application == "ssh":
        return True  # SSH to an SSH service encrypts end to end itself (as verify's scope check says)
    return None


def _judge_class(policy: Policy, facts: Facts, cls: TrafficClass, part: pa.Table) -> list[Finding]:
    cp = policy.classes.of(cls)
    assert cp is not None
    subject = f"class {cls.value}"
    prot = part.column("protection")
    unprotected = part.filter(pc.is_in(prot, pa.array(_UNPROTECTED)))
    if cp.protection is Requirement.OPTIONAL or not cp.confidential:
        why = "protection optional" if cp.protection is Requirement.OPTIONAL else "not confidential"
        text = (
            f"class {cls.value}: {why} by policy decision ({cp.rationale or 'no rationale given'}); "
            f"{volume(*_sums(part))} observed, {volume(*_sums(unprotected))} of it unprotected"
        )
        if cp.decision_owner:
            return [Finding(meta.id, Verdict.EXEMPT, subject, f"{text}; decision owner {cp.decision_owner}",
                            requirement=PROTECTED)]
        return [
            Finding(
                meta.id,
                Verdict.FAIL,
                subject,
                f"{text}, but no decision owner is named",
                remediation="name `decision_owner` for the class in the policy, or require protection",
                requirement=PROTECTED,
            )
        ]
    if part.num_rows == 0:
        return [Finding(meta.id, Verdict.UNKNOWN, subject,
                        f"no {cls.value} flow observed: its protection on the wire is unproven — capture while the "
                        f"class carries traffic (`{CAPTURE}`)", facts.flow_evidence, requirement=PROTECTED)]
    layers = ", ".join(layer.value for layer in cp.layers) or "any confidential layer"

    def plain(row: Mapping[str, Any]) -> str:
        return (
            f"{row['protection']} payload on class {cls.value}, which requires protection ({layers}): "
            f"{volume(row['records'], row['bytes'])} readable on the wire ({row.get('reason') or 'no reason given'})"
        )

    out = flow_failures(meta, policy, facts, unprotected, plain, f"unprotected {cls.value} flows", NO_PLAINTEXT)

    protected = part.filter(pc.is_in(prot, pa.array(_PROTECTED)))
    if cp.layers and protected.num_rows:
        apps = {s.name: s.application for s in policy.services}
        verdicts = [
            _accepted(cp.layers, p, apps.get(svc or ""))
            for p, svc in zip(protected.column("protocol").to_pylist(), protected.column("service").to_pylist(),
                              strict=True)
        ]
        wrong = pa.array([v is False for v in verdicts], pa.bool_())
        unrecognised = pa.array([v is None for v in verdicts], pa.bool_())
        off_layer = protected.filter(wrong)

        def layer_msg(row: Mapping[str, Any]) -> str:
            return f"encrypted with {row.get('protocol')}, but class {cls.value} requires {layers}"

        out += flow_failures(meta, policy, facts, off_layer, layer_msg, f"{cls.value} flows on the wrong layer",
                             PROTECTED)
        odd = protected.filter(unrecognised)
        out += [
            Finding(meta.id, Verdict.UNKNOWN, flow_subject(r),
                    f"protected by an unrecognised protocol ({r.get('protocol') or 'none named'}): cannot show it is "
                    f"one of the layers class {cls.value} requires ({layers})", facts.flow_evidence,
                    volume=(int(r["records"] or 0), int(r["bytes"] or 0)))
            for r in odd.slice(0, LIST_CAP).to_pylist()
        ]
        if odd.num_rows > LIST_CAP:
            out.append(Finding(meta.id, Verdict.UNKNOWN, f"{odd.num_rows - LIST_CAP} more {cls.value} flows",
                               f"{odd.num_rows - LIST_CAP} more flows on an unrecognised protocol not listed"))
        protected = protected.filter(pc.invert(pc.or_(wrong, unrecognised)))
    if protected.num_rows:
        protos = sorted({p for p in protected.column("protocol").to_pylist() if p})
        out.append(
            Finding(
                meta.id,
                Verdict.PASS,
                subject,
                f"{protected.num_rows} flow(s), {volume(*_sums(protected))}: no plaintext found in the payload "
                "sample inspected per flow (its first packets), on an accepted layer"
                + (f" ({', '.join(protos)})" if protos else ""),
                facts.flow_evidence,
                requirement=PROTECTED,
            )
        )
    unknown_rows = part.filter(pc.equal(prot, "unknown"))
    out += [
        Finding(
            meta.id,
            Verdict.UNKNOWN,
            flow_subject(r),
            f"cannot prove confidentiality of class {cls.value}: {r.get('reason') or 'payload not inspected'}",
            facts.flow_evidence,
        )
        for r in unknown_rows.slice(0, LIST_CAP).to_pylist()
    ]
    if unknown_rows.num_rows > LIST_CAP:
        rest = unknown_rows.slice(LIST_CAP)
        out.append(
            Finding(
                meta.id,
                Verdict.UNKNOWN,
                f"{rest.num_rows} more {cls.value} flows",
                f"cannot prove confidentiality of {rest.num_rows} more flows ({volume(*_sums(rest))})",
            )
        )
    return out


def _rotations(policy: Policy, facts: Facts, keys: Mapping[str, Any]) -> list[Finding]:
    rotations = keys.get("rotations")
    if not isinstance(rotations, list) or not rotations:
        return [unknown(meta, "key rotation", "keys", "no rotation event in the key facts")]
    out: list[Finding] = []
    interval = duration(policy.keys.rotation)
    for i, ev in enumerate(rotations):
        if not isinstance(ev, Mapping):
            out.append(Finding(meta.id, Verdict.UNKNOWN, f"key rotation #{i}", "the rotation record is not an object"))
            continue
        layer = str(ev.get("layer", "?"))
        at = parse_time(ev.get("at"))
        subject = f"key rotation ({layer})"
        if ev.get("ok") is False or ev.get("dropped_job") is True:
            detail = ev.get("detail") or ("the job dropped" if ev.get("dropped_job") else "rotation failed")
            when = f" at {at.isoformat()}" if at else ""
            out.append(Finding(meta.id, Verdict.FAIL, subject, f"rotation{when} failed: {detail}",
                               remediation=remediation_text(meta), requirement=ROTATION))
        elif ev.get("ok") is not True or ev.get("dropped_job") is not False:
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject,
                               f"rotation outcome not recorded (ok: {ev.get('ok')!r}, dropped_job: "
                               f"{ev.get('dropped_job')!r})", requirement=ROTATION))
        elif at is None:
            # Without a time a rotation proves nothing about the policy's rotation interval.
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject,
                               "rekeyed the live path without dropping the job, but the rotation has no timezone-aware "
                               "time: whether it is recent enough cannot be shown", requirement=ROTATION))
        elif interval is not None and facts.now - at > interval * 2:
            out.append(Finding(meta.id, Verdict.FAIL, subject,
                               f"last successful rotation {at.isoformat()} is overdue (policy rotates every "
                               f"{policy.keys.rotation})", remediation=remediation_text(meta), requirement=ROTATION))
        else:
            out.append(Finding(meta.id, Verdict.PASS, subject,
                               f"rekeyed the live path without dropping the job at {at.isoformat()}",
                               requirement=ROTATION))
    return out


def _mismatch(keys: Mapping[str, Any]) -> list[Finding]:
    mismatch = keys.get("mismatch")
    if not isinstance(mismatch, list) or not mismatch:
        return [unknown(meta, "key mismatch", "keys", "no key-mismatch test in the key facts")]
    out: list[Finding] = []
    for i, ev in enumerate(mismatch):
        if not isinstance(ev, Mapping):
            out.append(Finding(meta.id, Verdict.UNKNOWN, f"key mismatch #{i}", "the drill record is not an object"))
            continue
        subject = f"key mismatch ({ev.get('layer', '?')})"
        closed = ev.get("failed_closed")
        if closed is True:
            out.append(Finding(meta.id, Verdict.PASS, subject, "a peer with the wrong key got no traffic through",
                               requirement=CLOSED))
        elif closed is False:
            detail = ev.get("detail") or "traffic flowed without the right key"
            out.append(Finding(meta.id, Verdict.FAIL, subject, f"did not fail closed: {detail}",
                               remediation=remediation_text(meta), requirement=CLOSED))
        else:
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject, f"outcome not recorded (failed_closed: {closed!r})",
                               requirement=CLOSED))
    return out


def _coverage_scope(keys: Mapping[str, Any]) -> list[Finding]:
    """verify's coverage (per class) and scope (per approved path) verdicts, taken as recorded."""
    coverage, scope = keys.get("coverage"), keys.get("scope")
    if not isinstance(coverage, Mapping) or not coverage or not isinstance(scope, list):
        return [unknown(meta, "coverage and scope", "keys", "the key facts hold no coverage/scope check")]
    verdicts = {v.value: v for v in Verdict}
    out: list[Finding] = []
    items = [(f"coverage of class {k}", v) for k, v in sorted(coverage.items())]
    items += [(f"scope of path {v.get('path', '?') if isinstance(v, Mapping) else '?'}", v) for v in scope]
    for subject, item in items:
        verdict = verdicts.get(str(item.get("verdict"))) if isinstance(item, Mapping) else None
        reason = str(item.get("reason", "")) if isinstance(item, Mapping) else ""
        if verdict is None:
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject, "no readable verdict in the key facts",
                               requirement=COVERAGE))
        else:
            out.append(Finding(meta.id, verdict, subject, reason or verdict.value,
                               remediation=remediation_text(meta) if verdict is Verdict.FAIL else "",
                               requirement=COVERAGE))
    return out


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Per class: plaintext on a required class fails (unless excepted), protected flows on an accepted
    layer pass, unknown payloads and unrecognised protocols are unknown, a required class never seen is
    unknown; rotation, fail-closed, coverage and scope judged from ``verify keys``' facts."""
    out: list[Finding] = []
    table = routed_flows(policy, facts)
    if table is None:
        out.append(unknown(meta, "flows", "flows"))
    else:
        for cls in (TrafficClass.STORAGE, TrafficClass.COLLECTIVE, TrafficClass.MANAGEMENT, TrafficClass.REPLICATION):
            out += _judge_class(policy, facts, cls, table.filter(pc.equal(table.column("class"), cls.value)))
        if table.num_rows and not any(f.requirement == NO_PLAINTEXT and f.verdict is Verdict.FAIL for f in out):
            out.append(Finding(meta.id, Verdict.PASS, "plaintext on protected classes",
                               "no plaintext payload on a class requiring protection in the inspected sample",
                               facts.flow_evidence, requirement=NO_PLAINTEXT))
    if facts.keys is None:
        out.append(unknown(meta, "key management", "keys"))
    else:
        out += _rotations(policy, facts, facts.keys) + _mismatch(facts.keys) + _coverage_scope(facts.keys)
    return out
