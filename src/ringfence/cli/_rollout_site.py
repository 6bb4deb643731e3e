"""``rollout --target ssh``: the rollout's actions, layer and benchmark bound to an SSH cluster.

The actions are the executor-generic ones of :mod:`ringfence.rollout.site_actions` — the very code the
lab runs — handed a :class:`~ringfence.targets.cluster.SiteCluster` over the plan's hosts inventory and
policy instead of the lab. The cluster is resolved when a step first runs, so a refused step touches
nothing and an unreachable host stops the step before it changes anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ringfence.errors import InputError

if TYPE_CHECKING:
    from ringfence.bench.driver import BenchSpec
    from ringfence.evidence import EvidenceStore
    from ringfence.rollout.interface import CollectiveLayer, StepAction
    from ringfence.rollout.site_actions import Benchmarker, ClusterRef


def ssh_ref(bench: Mapping[str, Any]) -> ClusterRef:
    """The cluster of the plan's ``hosts`` and ``policy`` (recorded by ``rollout plan --target ssh``)."""
    from ringfence.rollout.site_actions import ClusterRef

    hosts, policy = bench.get("hosts"), bench.get("policy")
    if not isinstance(hosts, str) or not isinstance(policy, str):
        raise InputError("rollout", "this rollout was planned for --target ssh without --hosts and --policy")

    def resolve() -> Any:
        from ringfence.policy import load_policy
        from ringfence.targets.cluster import SiteCluster
        from ringfence.targets.fanout import require_reachable
        from ringfence.targets.hosts import load_hosts, ssh_site

        site = ssh_site(load_hosts(hosts))
        require_reachable(site, fanout=site.fanout, timeout=min(30.0, site.timeout))
        return SiteCluster(site, load_policy(policy))

    return ClusterRef(resolve=resolve)


def ssh_tools(bench: Mapping[str, Any], layer_name: str, spec: BenchSpec, evidence: EvidenceStore | None
              ) -> tuple[StepAction, StepAction, CollectiveLayer | None, Benchmarker]:
    """(step-1 action, step-2 action, the collective layer if it runs on a site, the benchmark) over SSH."""
    from ringfence.rollout.site_actions import Benchmarker, WireguardLayer, step_actions

    ref = ssh_ref(bench)
    actions = step_actions(ref, evidence=evidence)
    layer = WireguardLayer(ref, evidence=evidence) if layer_name == WireguardLayer.name else None
    return actions.tls, actions.keys, layer, Benchmarker(spec, ref)


__all__ = ["ssh_ref", "ssh_tools"]
