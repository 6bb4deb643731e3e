"""``ringfence recommend``: the layer per traffic class and link, its expected cost, why, and the rollout it implies.

Inputs: the policy (classes and their accepted layers, the collective confidentiality decision and its
owner, the fabric's tenancy, the budget), NIC capability facts per node (:mod:`ringfence.facts.nic`) and
measured canary comparisons (``bench compare --json`` facts). Rules, in the order DESIGN.md gives:

* storage, management — mutual TLS (with the NIC's TLS offload where every node of the link has it);
  replication — TLS always: it crosses the trust boundary.
* collective — nothing when the policy decided gradients are not confidential *and* named the owner of
  that decision; a dedicated single-tenant fabric (cost 0) when the policy says the links are dedicated,
  carried as a time-limited exception with that compensating control; otherwise the cheapest accepted
  layer the NICs of every member can run: MACsec offload, IPsec offload, else host software (WireGuard,
  IPsec) — a measured canary's cost beats the prior for its layer.

A NIC capability is used only when the facts show it for every node of the link: no facts, no offload.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ringfence.facts.nic import NicCaps
from ringfence.policy import Policy, Requirement, TrafficClass
from ringfence.recommend.priors import PRIORS, Cost, Option

__all__ = ["Recommendation", "measured_costs", "recommend"]


@dataclass(frozen=True)
class Recommendation:
    """One class on one link: the option chosen, its cost, why, what else was weighed, and the plan."""

    traffic_class: str
    link: str
    nodes: tuple[str, ...]
    option: str
    layer: str | None
    cost: Cost
    within_budget: bool | None  # None: the cost range straddles the budget (a canary decides)
    why: tuple[str, ...]
    considered: tuple[str, ...] = ()
    plan: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"class": self.traffic_class, "link": self.link, "nodes": list(self.nodes), "recommended": self.option,
                "layer": self.layer, "cost": {"busbw_loss_pct": list(self.cost.loss_pct),
                                              "latency_us": list(self.cost.latency_us) if self.cost.latency_us
                                              else None, "source": self.cost.source, "basis": self.cost.basis},
                "within_budget": self.within_budget, "why": list(self.why), "considered": list(self.considered),
                "plan": list(self.plan)}


def measured_costs(comparisons: Sequence[Mapping[str, Any]]) -> dict[str, Cost]:
    """layer → its measured cost, from canary comparisons (the worst size's busbw loss interval)."""
    out: dict[str, Cost] = {}
    for c in comparisons:
        layer = str(c.get("candidate", {}).get("label", "")).rpartition("/")[2]
        losses = [s["busbw"]["change_pct"] for s in c.get("sizes", []) if s.get("busbw", {}).get("change_pct")]
        if not layer or not losses:
            continue
        worst = max(losses, key=lambda iv: float(iv["estimate"]))
        out[layer] = Cost((round(max(float(worst["low"]), 0.0), 1), round(max(float(worst["high"]), 0.0), 1)), None,
                          "measured", f"canary {c.get('baseline', {}).get('label', '?')} vs "
                                      f"{c.get('candidate', {}).get('label', '?')}: busbw loss "
                                      f"{float(worst['estimate']):.1f} % (gate {c.get('verdict', '?')})")
    return out


def _budget_fit(cost: Cost, budget: float) -> bool | None:
    lo, hi = cost.loss_pct
    return True if hi <= budget else False if lo > budget else None


def _cost(opt: Option, measured: Mapping[str, Cost]) -> Cost | None:
    return measured.get(opt.name) or (measured.get(opt.layer) if opt.layer and opt.needs is None else None) \
        or opt.prior


def _offload(nodes: Sequence[str], nics: Mapping[str, NicCaps], what: str) -> tuple[bool, str]:
    missing = [n for n in nodes if n not in nics]
    lacking = [n for n in nodes if n in nics and not nics[n].has(what)]
    if not missing and not lacking:
        return True, f"{what} offload on every node ({'; '.join(f'{n}: {getattr(nics[n], what)}' for n in nodes)})"
    why = []
    if lacking:
        why.append(f"no {what} offload on {', '.join(lacking)}")
    if missing:
        why.append(f"no NIC facts for {', '.join(missing)} (offload not assumed)")
    return False, "; ".join(why)


def _tls_class(policy: Policy, cls: str, nics: Mapping[str, NicCaps], measured: Mapping[str, Cost],
               budget: float) -> list[Recommendation]:
    cp = policy.classes.of(TrafficClass(cls))
    assert cp is not None
    out = []
    for svc in (s for s in policy.services if s.traffic_class.value == cls):
        nodes = (svc.node,)
        ok, offload_why = _offload(nodes, nics, "tls")
        opt = PRIORS["tls-offload" if ok else "tls"]
        cost = _cost(opt, measured)
        assert cost is not None
        reason = ("always encrypted — it crosses the trust boundary" if cls == "replication"
                  else "mutual TLS, the lowest-risk layer for it (DESIGN step 2)")
        why = [f"class {cls}: {reason}", offload_why if ok else f"host TLS ({offload_why})"]
        if cp.protection is Requirement.OPTIONAL and cls != "replication":
            why.append("the policy makes protection optional here; TLS is still the recommendation")
        out.append(Recommendation(cls, f"{svc.name} on {svc.node}:{svc.port}", nodes, opt.name, "tls", cost,
                                  _budget_fit(cost, budget), tuple(why), (),
                                  ("ringfence encrypt enable --class storage,management,replication --layer tls "
                                   "--target lab|ssh  (rollout step 1)",)))
    return out


def _collective(policy: Policy, nics: Mapping[str, NicCaps], measured: Mapping[str, Cost],
                budget: float) -> list[Recommendation]:
    cp = policy.classes.collective
    accepted = {layer.value for layer in cp.layers}
    out = []
    for job in policy.jobs:
        nodes = tuple(job.members)
        link = f"job {job.name}: {', '.join(nodes)}"
        pair = ",".join(nodes[:2])
        fleet = ",".join(nodes)
        optional = cp.protection is Requirement.OPTIONAL or not cp.confidential
        if optional and cp.decision_owner:
            zero = Cost((0, 0), (0, 0), "prior", "nothing on the path")
            out.append(Recommendation("collective", link, nodes, "none", None, zero, True, (
                f"the policy decided gradients are not confidential (owner {cp.decision_owner}: "
                f"{cp.rationale or 'no rationale given'})",), (), ("nothing to roll out; the decision is "
                                                                   "recorded with its owner",)))
            continue
        why: list[str] = []
        if optional:
            why.append("the policy marks the collective optional but names no decision owner: treated as "
                       "confidential")
        else:
            why.append(f"gradients are confidential by decision of {cp.decision_owner or 'an unnamed owner'}")
        if policy.fabric.links == "dedicated":
            opt = PRIORS["dedicated-fabric"]
            assert opt.prior is not None
            why.append(f"the collective runs on a dedicated single-tenant fabric inside the trust boundary "
                       f"({policy.fabric.owner or 'no owner named'}: {policy.fabric.rationale or 'no rationale'})")
            out.append(Recommendation("collective", link, nodes, opt.name, None, opt.prior, True, tuple(why),
                                      ("encryption on top: not needed while the fabric stays single-tenant",),
                                      ("record a time-limited exception for class:collective (control "
                                       "encryption_keys) with compensating: [dedicated-fabric] and the trusted "
                                       "boundary; review it when the fabric is shared",)))
            continue
        considered: list[str] = []
        best: tuple[float, Option, Cost, str] | None = None
        for name in ("macsec", "ipsec-offload", "ringfence-transport", "wireguard", "ipsec"):
            opt = PRIORS[name]
            assert opt.layer is not None
            if accepted and opt.layer not in accepted:
                considered.append(f"{name}: not a layer the policy accepts for the collective")
                continue
            note = ""
            if opt.needs is not None:
                ok, note = _offload(nodes, nics, opt.needs)
                if not ok:
                    considered.append(f"{name}: {note}")
                    continue
            cost = _cost(opt, measured)
            if cost is None:
                considered.append(f"{name}: no prior cost; only a canary on this cluster can say")
                continue
            considered.append(f"{name}: {cost.text()}")
            if best is None or cost.loss_pct[1] < best[0]:
                best = (cost.loss_pct[1], opt, cost, note)
        if best is None:
            out.append(Recommendation("collective", link, nodes, "none-possible", None,
                                      Cost((0, 0), None, "prior", "no accepted layer can run"), None,
                                      (*why, "no layer the policy accepts can run on these NICs"),
                                      tuple(considered), ("widen classes.collective.layers, or record an "
                                                          "exception with an owner",)))
            continue
        _, opt, cost, note = best
        fit = _budget_fit(cost, budget)
        why.append(f"{opt.name}: the cheapest accepted option here ({note or 'no NIC offload needed'}); cost from "
                   f"the {cost.source}")
        plan = [f"ringfence rollout plan --state ro.json --pair {pair} --layer {opt.layer} --fleet {fleet} "
                f"--policy POLICY  (budget: busbw loss ≤ {budget:g} %)"]
        if fit is False:
            plan.append(f"expect the canary gate to fail: {cost.loss_pct[0]:g} % > {budget:g} % — offload NICs, "
                        "a dedicated fabric, or a budget/confidentiality decision by its owner would change this")
        elif fit is None:
            plan.append("the cost range straddles the budget: the canary gate decides")
        out.append(Recommendation("collective", link, nodes, opt.name, opt.layer, cost, fit, tuple(why),
                                  tuple(considered), tuple(plan)))
    return out


def recommend(policy: Policy, nics: Mapping[str, NicCaps] | None = None,
              measured: Mapping[str, Cost] | None = None) -> list[Recommendation]:
    """Per class and link, what to run and what it will cost (see the module docstring)."""
    nics, measured = nics or {}, measured or {}
    budget = policy.budget.busbw_loss_pct
    out: list[Recommendation] = []
    for cls in ("storage", "management", "replication"):
        out += _tls_class(policy, cls, nics, measured, budget)
    return out + _collective(policy, nics, measured, budget)
