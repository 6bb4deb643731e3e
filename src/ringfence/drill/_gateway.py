"""The exfiltration drill's path through the egress gateway: the node asks the site's forward proxy to tunnel to
the unapproved outside address, and the attempt is judged at both layers.

* **At the gateway**: a ``403`` from the gateway is a stop only when the gateway's own log (tinyproxy's, read
  through the gateway host's executor by :class:`~ringfence.observe.flows.events.tinyproxy.TinyproxyReader`)
  holds a ``deny`` for that very client address, logged after the attempt began — the client's identity is
  the inventory's name for that address. A ``200`` (tunnel established) or an ``allow`` logged for the client
  is *got through*.
* **At the fabric**: a try that timed out or was reset on the gateway's listening port, whose own ``denied``
  element (node → gateway, its source port) grew, was dropped by policy before the gateway saw it — as a deny
  probe is proven.

With the policy applied, the fabric stops the node first (it is no approved client of the gateway), so the
gateway's log has nothing from it: the gateway's layer is then shown by its rendered configuration (which
clients it admits) and by the absence of any ``allow`` for the node. Without the fabric (before ``apply``) the
request reaches the gateway and its logged refusal is the proof and the detection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ringfence.drill._attack import Conn, Outcome, combine, judge_connection, telemetry_dirs, who
from ringfence.drill.interface import DrillContext
from ringfence.enforce.egress_gateway import LOG_FILE
from ringfence.policy.egress import Gateway
from ringfence.targets.interface import Executor, TargetError

#: bytes of the gateway's log read per look (the attempt is among the newest lines)
GATEWAY_TAIL = 4 << 20
_TAIL = '[ -e "$0" ] || exit 3; tail -c "$1" "$0"'


def gateway_conn(gw: Gateway, address: str, port: int, mark: int) -> Conn:
    """``CONNECT address:port`` asked of the gateway (a tunnel: what a checkpoint upload through it needs)."""
    return Conn(gw.node, gw.address, gw.port, "CONNECT", f"{address}:{port}", 0, mark)


def read_gateway_log(ctx: DrillContext, points: Mapping[str, Executor], gw: Gateway,
                     tag: str) -> list[dict[str, Any]] | None:
    """The gateway's recent decisions (None when its log could not be read: nothing is then known of it)."""
    from ringfence.observe.flows.events.tinyproxy import TinyproxyReader

    if gw.node not in points:
        return None
    path = f"{telemetry_dirs(ctx, [gw.node])[gw.node]}/{LOG_FILE}"
    try:
        res = points[gw.node].run(["sh", "-c", _TAIL, path, str(GATEWAY_TAIL)], timeout=30)
    except TargetError as exc:
        ctx.progress(f"{gw.node}: the gateway's log was not read: {exc.message}")
        return None
    if res.returncode != 0 or res.timed_out:
        return None
    local = ctx.workdir / f"gateway-{tag}.log"
    local.write_bytes(res.stdout)
    return list(TinyproxyReader().read(local, node=gw.node).events.to_pylist())


@dataclass(frozen=True)
class GatewayVerdict:
    """How the gateway attempt went at each layer."""

    got_through: bool | None
    stopped_by: str
    denies: int  # the gateway's logged refusals of the client during the attempt
    allows: int  # the gateway's logged forwards for the client during the attempt (any: got through)
    first_deny: dict[str, Any] | None


def judge_gateway(outcomes: Sequence[Outcome], grew: Sequence[Mapping[str, int]], listening: bool | None,
                  log: list[dict[str, Any]] | None, client: str, since: float, gw: Gateway,
                  to_gateway: int | None, capture_flows: int) -> GatewayVerdict:
    """(see the module docstring) ``to_gateway``: payload bytes the capture saw between the node and the gateway
    (0 when the fabric dropped every try; the request and the refusal when the gateway refused it). Bytes the
    gateway relayed for the node are not told apart in a capture (its connections out carry approved egress
    too): the gateway's own log says whether it relayed anything for the node — any ``allow`` is got through."""
    mine = [r for r in (log or []) if r.get("client") == client and r["time"].timestamp() >= since - 1.0]
    denies = [r for r in mine if r["decision"] == "deny"]
    allows = [r for r in mine if r["decision"] == "allow"]
    verdicts: list[tuple[bool | None, str]] = []
    for o, g in zip(outcomes, grew, strict=True):
        if o.outcome == "connected" and o.status == 200:
            verdicts.append((True, f"the gateway {o.conn.describe()} opened a tunnel to {o.conn.path}"))
        elif o.outcome == "connected" and o.status == 403 and denies:
            verdicts.append((False, f"refused by the gateway {o.conn.describe()} "
                                    f"({o.reply.splitlines()[0][:40]!r}; its log: {denies[0]['reason']})"))
        elif o.outcome == "connected":
            first = o.reply.splitlines()[0][:60] if o.reply.strip() else "no answer"
            why = "" if log is not None else "; the gateway's log could not be read"
            verdicts.append((None, f"the gateway {o.conn.describe()} answered {first!r} and logged no refusal of "
                                   f"{client}{why} — proves nothing"))
        else:
            verdicts.append(judge_connection(o, listening, g))
    got, why = combine(verdicts)
    if allows:
        got, why = True, f"the gateway's log shows {len(allows)} forward(s) for {client}; " + why
    elif got is False:
        if log is None:
            got, why = None, f"{why}; the gateway's log could not be read, so no forward is excluded"
        elif to_gateway is None or capture_flows == 0:
            got, why = None, f"{why}; no live independent capture counted what reached the gateway"
        else:
            admitted = ", ".join(f"{n} ({a})" for n, a in gw.clients)
            why += (f"; the gateway's log shows no forward for {client} and its configuration admits only "
                    f"{admitted}; the independent capture ({capture_flows} flows) saw {to_gateway} payload bytes "
                    f"between the node and the gateway's port{' (the requests and their refusals)' if denies else ''}, "
                    "none relayed out")
    return GatewayVerdict(got, why, len(denies), len(allows), denies[0] if denies else None)


def gateway_detection(v: GatewayVerdict, ctx: DrillContext, node: str, started: float,
                      seen_at: float) -> tuple[bool, str, float | None]:
    """(found, text, seconds): the gateway's own logged refusal of the client, attributed by the inventory."""
    if v.first_deny is None:
        return False, "no refusal of it in the gateway's log", None
    r = v.first_deny
    return True, (f"{v.denies} refusal(s) in the egress gateway's log at {r.get('node')} ({r['reason']}, client "
                  f"{r['client']}), attributed to {who(ctx.policy, node)} by the inventory; first logged "
                  f"{r['time'].isoformat()}"), round(seen_at - started, 3)


__all__ = ["GATEWAY_TAIL", "GatewayVerdict", "gateway_conn", "gateway_detection", "judge_gateway",
           "read_gateway_log"]
