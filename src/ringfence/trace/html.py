"""The trace as one self-contained HTML page: the timeline, the decision, both ends, the objects, the change.

Everything in a trace comes from logs an attacker may write into (a path, a DNS name, a certificate's
identity, a log prefix), so every value is escaped, nothing is fetched (no scripts, fonts, images or links
to anywhere) and the page's own Content-Security-Policy forbids loading anything even if a value slipped
through. It is meant to be attached to a ticket and opened offline.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from ringfence.trace.model import Endpoint, Trace

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#1a1a1a}
h1{font-size:1.3em}h2{font-size:1.05em;margin-top:1.6em}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;
vertical-align:top}th{background:#f2f2f2}code,td.t{font-family:ui-monospace,monospace;font-size:.92em}
.accept,.served,.allowed{color:#0a6b2d}.drop,.refused,.denied{color:#a11a1a}.note{color:#6b4f00}
"""
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; form-action 'none'; base-uri 'none'"


def _e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _table(head: Sequence[str], rows: Iterable[Sequence[object]], classes: Sequence[str | None] = ()) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for i, row in enumerate(rows):
        cls = classes[i] if i < len(classes) else None
        attr = f' class="{_e(cls)}"' if cls else ""
        out.append(f"<tr{attr}>" + "".join(f"<td>{_e(v)}</td>" for v in row) + "</tr>")
    return "".join(out) + "</table>"


def _end(label: str, e: Endpoint) -> list[object]:
    return [label, e.address, e.node or "?", e.zone, e.job, e.user, e.identity, e.dns]


def render_html(trace: Trace) -> str:
    """The page (UTF-8 text); every value escaped, nothing loaded from anywhere."""
    f, d = trace.flow, trace.decision
    tuple_text = f"{f.src}:{f.sport if f.sport is not None else '*'} → {f.dst}:{f.dport} proto {f.proto}"
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        f"<title>ringfence trace: {_e(trace.sample)} {_e(tuple_text)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(trace.sample)} flow <code>{_e(tuple_text)}</code></h1>",
        f"<p>Community ID <code>{_e(f.community_id)}</code>; first seen {_e(f.first_seen)}, last seen "
        f"{_e(f.last_seen)}; reconstructed {_e(trace.generated)}; "
        f"{'both ends attributed' if trace.attributed else '<b>an end cannot be attributed</b>'}.</p>",
        "<h2>Decision</h2>",
        f'<p class="{_e(d.verdict)}">{_e(d.explanation)}</p>',
        _table(["rule", "verdict", "state", "policy version", "point", "time"],
               [[d.rule or "none", d.verdict, d.state, d.policy_version or "unknown", d.point, d.time]]),
        "<h2>Endpoints</h2>",
        _table(["side", "address", "node", "zone", "job", "user", "identity", "dns"],
               [_end("src", trace.src), _end("dst", trace.dst)]),
    ]
    if trace.change is not None:
        c = trace.change
        parts += ["<h2>Change that introduced the rule</h2>",
                  _table(["action", "version", "time", "approved by", "ticket", "evidence"],
                         [[c.action, c.version, c.time, c.approved_by or "nobody", c.ticket, c.evidence]])]
    parts += ["<h2>Timeline</h2>",
              _table(["time", "where", "what"], [[e.time, e.where, e.what] for e in trace.timeline])]
    if trace.objects:
        parts += ["<h2>Object requests on this flow</h2>",
                  _table(["time", "server", "method", "path", "job", "result", "bytes", "identity", "joined by",
                          "source"],
                         [[o.time, o.node, o.method, o.path, o.job, o.result, o.bytes, o.identity, o.joined,
                           f"{o.source}:{o.line}"] for o in trace.objects],
                         [o.result for o in trace.objects])]
    if trace.tls:
        parts += ["<h2>TLS sidecars</h2>",
                  _table(["time", "node", "side", "peer", "identity", "request", "result", "reason", "source"],
                         [[t.time, t.node, "gate" if t.direction == "in" else "client", t.peer, t.identity,
                           f"{t.method or ''} {t.path or ''}".strip(), t.result, t.reason, f"{t.source}:{t.line}"]
                          for t in trace.tls], [t.result for t in trace.tls])]
    parts += ["<h2>Firewall log lines</h2>",
              _table(["point", "time", "rule", "verdict", "prefix", "source"],
                     [[p.point, p.time, p.rule, p.verdict, p.prefix, f"{p.source}:{p.line}"]
                      for p in trace.decisions], [p.verdict for p in trace.decisions])]
    if trace.notes:
        parts += ["<h2>Notes</h2><ul>", *(f'<li class="note">{_e(n)}</li>' for n in trace.notes), "</ul>"]
    parts.append("</body></html>\n")
    return "\n".join(parts)


__all__ = ["render_html"]
