"""The trace as a terminal timeline: what happened to one flow, oldest first, then who the ends are."""

from __future__ import annotations

from ringfence.trace.model import Endpoint, Trace


def _side(label: str, e: Endpoint) -> str:
    parts = [f"{label} {e.address}", f"node {e.node or '?'}"]
    parts += [f"job {e.job or 'null'}", f"user {e.user or 'null'}"]
    parts += [f"identity {e.identity or 'null'}", f"dns {e.dns or 'null'}"]
    return "  ".join(parts)


def render(trace: Trace) -> str:
    """Plain text for a terminal (no colours: it is also pasted into tickets)."""
    f, d = trace.flow, trace.decision
    ports = f":{f.sport}" if f.sport is not None else ""
    dports = f":{f.dport}" if f.dport is not None else ""
    lines = [f"{trace.sample} flow {f.src}{ports} → {f.dst}{dports} proto {f.proto}  community id {f.community_id}",
             f"decision: {d.explanation}",
             f"rule {d.rule or 'none (default drop)' if d.state == 'default-drop' else d.rule}  verdict {d.verdict}  "
             f"policy version {(d.policy_version or 'unknown')[:16]}"]
    if trace.change is not None:
        c = trace.change
        lines.append(f"change: {c.action} {c.version[:16]} at {c.time} (evidence {c.evidence}, "
                     f"approved by {c.approved_by or 'nobody'}, ticket {c.ticket or 'none'})")
    lines += [_side("src", trace.src), _side("dst", trace.dst)]
    lines += [f"object: {o.method} {o.path} {o.result} {o.bytes if o.bytes is not None else '?'} bytes, job "
              f"{o.job or '?'}, identity {o.identity or 'none'} (joined by {o.joined})" for o in trace.objects]
    lines.append("timeline:")
    lines += [f"  {e.time}  {e.where:>10}  {e.what}" for e in trace.timeline]
    lines += [f"note: {n}" for n in trace.notes]
    # the values come from logs anyone on a node can write into: no terminal control sequence gets through
    return "\n".join("".join(ch if ch.isprintable() else "?" for ch in line) for line in lines)


__all__ = ["render"]
