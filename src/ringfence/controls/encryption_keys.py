"""Control point ``encryption_keys``: every class that must be protected is, and keys behave.

Reads ``Facts.keys`` when gathered, in this shape (other keys are ignored)::

    {"rotations": [{"layer": "wireguard", "at": "2026-11-30T10:00:00+00:00", "ok": true,
                    "dropped_job": false, "detail": "…"}],
     "mismatch":  [{"layer": "wireguard", "failed_closed": true, "detail": "…"}]}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ringfence.controls._common import LIST_CAP, flow_subject, parse_time, remediation_text, unknown, volume
from ringfence.controls._flows import flow_failures, routed_flows
from ringfence.controls.interface import ControlMeta, Facts, Finding, Verdict
from ringfence.policy import Layer, Policy, Requirement, TrafficClass

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
    remediation={
        "nftables": "drop plaintext ports of protected classes (accept only the TLS/tunnel ports and interfaces)",
        "networkpolicy": "allow protected classes only on their TLS ports; pair with a mesh enforcing mTLS",
        "cilium": "enable transparent encryption (WireGuard/IPsec) and mTLS policy for the protected classes",
        "process": "`ringfence secure` per class; or record a time-limited exception with an owner",
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


def _judge_class(policy: Policy, facts: Facts, cls: TrafficClass, part: pa.Table) -> list[Finding]:
    cp = policy.classes.of(cls)
    assert cp is not None
    prot = part.column("protection")
    unprotected = part.filter(pc.is_in(prot, pa.array(_UNPROTECTED)))
    if cp.protection is Requirement.OPTIONAL or not cp.confidential:
        why = "protection optional" if cp.protection is Requirement.OPTIONAL else "not confidential"
        text = (
            f"class {cls.value}: {why} by policy decision ({cp.rationale or 'no rationale given'}); "
            f"{volume(*_sums(part))} observed, {volume(*_sums(unprotected))} of it unprotected"
        )
        if cp.decision_owner:
            return [
                Finding(meta.id, Verdict.EXEMPT, f"class {cls.value}", f"{text}; decision owner {cp.decision_owner}")
            ]
        return [
            Finding(
                meta.id,
                Verdict.FAIL,
                f"class {cls.value}",
                f"{text}, but no decision owner is named",
                remediation="name `decision_owner` for the class in the policy, or require protection",
            )
        ]
    layers = ", ".join(layer.value for layer in cp.layers) or "any confidential layer"

    def plain(row: Mapping[str, Any]) -> str:
        return (
            f"{row['protection']} payload on class {cls.value}, which requires protection ({layers}): "
            f"{volume(row['records'], row['bytes'])} readable on the wire ({row.get('reason') or 'no reason given'})"
        )

    out = flow_failures(meta, policy, facts, unprotected, plain, f"unprotected {cls.value} flows")

    protected = part.filter(pc.is_in(prot, pa.array(_PROTECTED)))
    if cp.layers and protected.num_rows:
        protocols = protected.column("protocol").to_pylist()
        wrong = pa.array([(_layer(p) is not None and _layer(p) not in cp.layers) for p in protocols], pa.bool_())
        off_layer = protected.filter(wrong)
        protected = protected.filter(pc.invert(wrong))

        def layer_msg(row: Mapping[str, Any]) -> str:
            return f"encrypted with {row.get('protocol')}, but class {cls.value} requires {layers}"

        out += flow_failures(meta, policy, facts, off_layer, layer_msg, f"{cls.value} flows on the wrong layer")
    if protected.num_rows:
        protos = sorted({p for p in protected.column("protocol").to_pylist() if p})
        out.append(
            Finding(
                meta.id,
                Verdict.PASS,
                f"class {cls.value}",
                f"{protected.num_rows} flow(s), {volume(*_sums(protected))}, carried no plaintext payload"
                + (f" ({', '.join(protos)})" if protos else ""),
                facts.flow_evidence,
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


_DURATION = re.compile(r"^(\d+)([smhd])$")


def _duration(text: str) -> timedelta | None:
    m = _DURATION.match(text.strip())
    if not m:
        return None
    return timedelta(seconds=int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])


def _judge_keys(policy: Policy, facts: Facts, keys: Mapping[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    rotations = keys.get("rotations")
    if not isinstance(rotations, list) or not rotations:
        out.append(unknown(meta, "key rotation", "keys", "no rotation event in the key facts"))
    else:
        latest: dict[str, Any] = {}
        for ev in rotations:
            if not isinstance(ev, Mapping):
                continue
            layer = str(ev.get("layer", "?"))
            at = parse_time(ev.get("at"))
            subject = f"key rotation ({layer})"
            if ev.get("ok") is True and ev.get("dropped_job") is False:
                out.append(
                    Finding(meta.id, Verdict.PASS, subject, f"rekeyed the live path without dropping the job at {at}")
                )
                if at is not None and (layer not in latest or at > latest[layer]):
                    latest[layer] = at
            else:
                detail = ev.get("detail") or ("the job dropped" if ev.get("dropped_job") else "rotation failed")
                out.append(
                    Finding(
                        meta.id,
                        Verdict.FAIL,
                        subject,
                        f"rotation at {at} failed: {detail}",
                        remediation=remediation_text(meta),
                    )
                )
        interval = _duration(policy.keys.rotation)
        for layer, at in latest.items():
            if interval is not None and facts.now - at > interval * 2:
                out.append(
                    Finding(
                        meta.id,
                        Verdict.FAIL,
                        f"key rotation ({layer})",
                        f"last successful rotation {at} is overdue (policy rotates every {policy.keys.rotation})",
                        remediation=remediation_text(meta),
                    )
                )
    mismatch = keys.get("mismatch")
    if not isinstance(mismatch, list) or not mismatch:
        out.append(unknown(meta, "key mismatch", "keys", "no key-mismatch test in the key facts"))
    else:
        for ev in mismatch:
            if not isinstance(ev, Mapping):
                continue
            subject = f"key mismatch ({ev.get('layer', '?')})"
            if ev.get("failed_closed") is True:
                out.append(Finding(meta.id, Verdict.PASS, subject, "a peer with the wrong key got no traffic through"))
            else:
                detail = ev.get("detail") or "traffic flowed without the right key"
                out.append(
                    Finding(
                        meta.id,
                        Verdict.FAIL,
                        subject,
                        f"did not fail closed: {detail}",
                        remediation=remediation_text(meta),
                    )
                )
    return out


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Per class: plaintext on a required class fails (unless excepted), protected flows pass,
    unknown payloads are unknown; key rotation and fail-closed behaviour judged from key facts."""
    out: list[Finding] = []
    table = routed_flows(policy, facts)
    if table is None:
        out.append(unknown(meta, "flows", "flows"))
    else:
        for cls in (TrafficClass.STORAGE, TrafficClass.COLLECTIVE, TrafficClass.MANAGEMENT, TrafficClass.REPLICATION):
            part = table.filter(pc.equal(table.column("class"), cls.value))
            if part.num_rows:
                out += _judge_class(policy, facts, cls, part)
    if facts.keys is None:
        out.append(unknown(meta, "key management", "keys"))
    else:
        out += _judge_keys(policy, facts, facts.keys)
    return out
