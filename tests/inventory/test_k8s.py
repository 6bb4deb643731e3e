"""Kubernetes inventory: real kubelet PodList and API NodeList samples, a mixed kubectl List, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringfence.inventory import InventoryError, build_skeleton
from ringfence.inventory.k8s import K8sOptions, parse_kubectl


def test_real_pods_and_nodes(samples: Path) -> None:
    docs = [
        (p.read_text(), str(p))
        for p in (samples / "k8s" / "honeycomb_nodes.json", samples / "k8s" / "honeycomb_pods.json")
    ]
    hosts, jobs = parse_kubectl(docs)
    by_name = {h.name: h for h in hosts}
    assert by_name["duckboat-01"].addresses == ("10.9.150.105",) and by_name["duckboat-01"].zone == "us-east-1a"
    pods = [h for h in hosts if "k8s:node" not in h.roles]
    # hostNetwork pods (speaker, kube-proxy, calico-node, the ingress controller) are their node's traffic
    assert not any(h.name.startswith(("metallb-system.speaker", "kube-system.kube-proxy")) for h in pods)
    assert all(h.zone == h.name.split(".", 1)[0] for h in pods)  # zone = namespace
    backend = next(h for h in pods if h.name.startswith("nginx.nginx-ingress-default-backend"))
    assert backend.identity == "spiffe://cluster.local/ns/nginx/sa/nginx-ingress-backend"
    assert "k8s:pod-on:duckboat-01" in backend.roles
    skeleton = build_skeleton("home", hosts, jobs)
    # the second node is an edited copy of the first with the same address: reported, not dropped silently
    assert any("duckboat-02" in u and "10.9.150.105" in u for u in skeleton.unresolved)
    assert {n.zone for n in skeleton.policy.nodes} >= {"nginx", "mysql", "us-east-1a"}
    assert not jobs


def _pod(name: str, ns: str, ip: str, labels: dict[str, str], sa: str = "trainer") -> dict[str, object]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": "n1", "serviceAccountName": sa},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
    }


def test_mixed_list_with_namespace_zones_and_training_jobs() -> None:
    job = {"training.kubeflow.org/job-name": "llama"}
    doc = {
        "kind": "List",
        "items": [
            {"kind": "Namespace", "metadata": {"name": "team-a", "labels": {"ringfence.io/zone": "workload"}}},
            {"kind": "ServiceAccount", "metadata": {"name": "trainer", "namespace": "team-a"}},
            _pod("llama-worker-0", "team-a", "10.4.0.10", job),
            _pod("llama-worker-1", "team-a", "10.4.0.11", job),
            _pod("minio-0", "storage", "10.4.1.5", {}, sa="minio"),
            {"kind": "Pod", "metadata": {"name": "done", "namespace": "team-a"}, "spec": {},
             "status": {"phase": "Succeeded", "podIP": "10.4.0.99"}},
        ],
    }  # fmt: skip
    hosts, jobs = parse_kubectl(
        [(json.dumps(doc), "all.json")], K8sOptions(trust_domain="prod", zone_label="ringfence.io/zone")
    )
    skeleton = build_skeleton("prod", hosts, jobs)
    p = skeleton.policy
    assert {n.name: n.zone for n in p.nodes} == {
        "team-a.llama-worker-0": "workload",
        "team-a.llama-worker-1": "workload",
        "storage.minio-0": "storage",
    }
    assert [(j.name, j.identity, j.members) for j in p.jobs] == [
        ("team-a.llama", "spiffe://prod/ns/team-a/sa/trainer", ("team-a.llama-worker-0", "team-a.llama-worker-1"))
    ]


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ('{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": 3}}]}', "k.json: items[0].metadata.name"),
        ('{"kind": "List"}', "k.json: items"),
        ('{"kind": "PodList", "items": [\n7]}', "k.json: items[0]"),
        ("{\n\n  nope", "k.json:3:"),
    ],
)
def test_malformed_kubectl_output_names_the_place(doc: str, where: str) -> None:
    with pytest.raises(InventoryError) as exc:
        parse_kubectl([(doc, "k.json")])
    assert exc.value.where.startswith(where)
