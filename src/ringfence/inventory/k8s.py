"""Inventory from Kubernetes: ``kubectl get nodes,pods,namespaces,serviceaccounts -o json``.

* **Nodes** become hosts at their ``InternalIP``/``ExternalIP``, zoned by a node label (default
  ``topology.kubernetes.io/zone``; without it, zone ``k8s-nodes``).
* **Pods** on the pod network (not ``hostNetwork``: those share their node's address and are the node's
  traffic) become hosts named ``NAMESPACE.POD`` at their pod IPs; their zone is the namespace — or the
  value of ``zone_label`` on the namespace, so several namespaces can form one zone; their identity is
  the SPIFFE ID of their service account, ``spiffe://TRUST-DOMAIN/ns/NS/sa/SA`` (the convention of
  Istio and SPIRE); roles name their node and owning workload.
* **Training jobs**: pods sharing a ``job_label`` value (default ``training.kubeflow.org/job-name``,
  the Kubeflow training operator's) are one job, with the service account's identity.

Accepts a ``List`` of mixed kinds (what ``kubectl get a,b -o json`` prints) or ``PodList``/``NodeList``
files; several files may be given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ringfence.inventory.interface import Host, InventoryError, Workload, expect, read_json

DEFAULT_NODE_ZONE_LABEL = "topology.kubernetes.io/zone"
DEFAULT_JOB_LABEL = "training.kubeflow.org/job-name"
NODE_ZONE = "k8s-nodes"


@dataclass(frozen=True)
class K8sOptions:
    """Which labels give zones and jobs, and the SPIFFE trust domain of service-account identities."""

    trust_domain: str = "cluster.local"
    node_zone_label: str = DEFAULT_NODE_ZONE_LABEL
    zone_label: str | None = None  # a namespace label naming the zone of its pods
    job_label: str = DEFAULT_JOB_LABEL


def _items(doc: Any, source: str) -> list[tuple[str, dict[str, Any], str]]:
    doc = expect(doc, dict, source, "kubectl JSON output")
    list_kind = expect(doc.get("kind", ""), str, f"{source}: kind", "kind")
    implied = list_kind.removesuffix("List") if list_kind.endswith("List") and list_kind != "List" else None
    out = []
    for i, item in enumerate(expect(doc.get("items"), list, f"{source}: items", "items")):
        where = f"{source}: items[{i}]"
        item = expect(item, dict, where, "an object")
        kind = item.get("kind", implied)
        if not isinstance(kind, str):
            raise InventoryError(where, "an object without a kind")
        out.append((kind, item, where))
    return out


def _meta(item: dict[str, Any], where: str) -> tuple[str, str, dict[str, str]]:
    meta = expect(item.get("metadata"), dict, f"{where}.metadata", "metadata")
    name = expect(meta.get("name"), str, f"{where}.metadata.name", "name")
    ns = meta.get("namespace", "")
    labels = meta.get("labels") or {}
    expect(labels, dict, f"{where}.metadata.labels", "labels")
    return name, ns if isinstance(ns, str) else "", {str(k): str(v) for k, v in labels.items()}


def parse_kubectl(docs: list[tuple[str, str]], options: K8sOptions | None = None) -> tuple[list[Host], list[Workload]]:
    """``(text, source)`` of each kubectl JSON file → hosts and training jobs."""
    opt = options or K8sOptions()
    items = [it for text, source in docs for it in _items(read_json(text, source), source)]
    ns_zone: dict[str, str] = {}
    for kind, item, where in items:
        if kind == "Namespace":
            name, _, labels = _meta(item, where)
            if opt.zone_label and opt.zone_label in labels:
                ns_zone[name] = labels[opt.zone_label]
    hosts: list[Host] = []
    jobs: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for kind, item, where in items:
        if kind == "Node":
            name, _, labels = _meta(item, where)
            status = expect(item.get("status", {}), dict, f"{where}.status", "status")
            addrs = expect(status.get("addresses", []), list, f"{where}.status.addresses", "addresses")
            kinds = ("InternalIP", "ExternalIP")
            ips = [
                a["address"]
                for a in addrs
                if isinstance(a, dict) and a.get("type") in kinds and isinstance(a.get("address"), str)
            ]
            hosts.append(Host(name, labels.get(opt.node_zone_label, NODE_ZONE), tuple(ips), where, ("k8s:node",)))
        elif kind == "Pod":
            pod = _pod(item, where, opt, ns_zone)
            if pod is None:
                continue
            hosts.append(pod)
            name, ns, labels = _meta(item, where)
            if opt.job_label in labels:
                jobs.setdefault((ns, labels[opt.job_label]), []).append((pod.name, pod.identity or "", where))
    workloads = [
        Workload(f"{ns}.{job}", members[0][1], tuple(m for m, _, _ in members), members[0][2])
        for (ns, job), members in jobs.items()
    ]
    return hosts, workloads


def _pod(item: dict[str, Any], where: str, opt: K8sOptions, ns_zone: dict[str, str]) -> Host | None:
    name, ns, _ = _meta(item, where)
    spec = expect(item.get("spec", {}), dict, f"{where}.spec", "spec")
    status = expect(item.get("status", {}), dict, f"{where}.status", "status")
    if spec.get("hostNetwork") is True:
        return None  # the node's own address: its traffic is the node's
    if status.get("phase") in ("Succeeded", "Failed"):
        return None  # finished pods hold no address any more
    ips = [p["ip"] for p in status.get("podIPs") or [] if isinstance(p, dict) and isinstance(p.get("ip"), str)]
    if not ips and isinstance(status.get("podIP"), str):
        ips = [status["podIP"]]
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    ns = ns or "default"
    roles = [f"k8s:pod-on:{spec['nodeName']}"] if isinstance(spec.get("nodeName"), str) else []
    meta = item.get("metadata") or {}
    roles += [
        f"k8s:owner:{ref.get('kind', '')}/{ref['name']}"
        for ref in meta.get("ownerReferences") or []
        if isinstance(ref, dict) and ref.get("controller") and isinstance(ref.get("name"), str)
    ]
    identity = f"spiffe://{opt.trust_domain}/ns/{ns}/sa/{sa}"
    return Host(f"{ns}.{name}", ns_zone.get(ns, ns), tuple(ips), where, tuple(roles), identity)


__all__ = ["DEFAULT_JOB_LABEL", "DEFAULT_NODE_ZONE_LABEL", "NODE_ZONE", "K8sOptions", "parse_kubectl"]
