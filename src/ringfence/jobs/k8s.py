"""Kubernetes' record of workloads: ``kubectl get pods -o json`` exports → job spans.

A pod is a job span: ``job`` is ``NAMESPACE/POD``, ``user`` the identity it runs as
(``system:serviceaccount:NAMESPACE:ACCOUNT``, what the API server calls it), ``nodes`` its one
``spec.nodeName``, ``start`` its ``status.startTime`` and ``end`` the last container's finish time once
the pod has ``Succeeded`` or ``Failed``. ``name`` is the value of the first job label it carries
(``job-name`` of a batch Job, ``training.kubeflow.org/job-name`` of a Kubeflow job, ``app``…), so the
ranks of one training job share it. Pods not yet scheduled or not started hold no node and are skipped.
Both ``kind: List`` (``kubectl``) and ``kind: PodList`` (the API/kubelet) are read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ringfence.bounded import BoundedInputError, loads_json
from ringfence.jobs._common import JobsError, expect, iso, make_span
from ringfence.jobs.interface import JobSpan

#: Labels naming the job a pod belongs to, most specific first.
JOB_LABELS = ("training.kubeflow.org/job-name", "batch.kubernetes.io/job-name", "job-name",
              "app.kubernetes.io/instance", "app.kubernetes.io/name", "app")
_DONE = frozenset({"Succeeded", "Failed"})


def _finished(status: dict[str, Any], where: str) -> datetime | None:
    """The latest ``finishedAt`` of the pod's terminated containers, or None."""
    ends: list[datetime] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for k, cs in enumerate(status.get(key) or []):
            term = (cs.get("state") or {}).get("terminated") if isinstance(cs, dict) else None
            if isinstance(term, dict) and isinstance(term.get("finishedAt"), str):
                ends.append(iso(term["finishedAt"], f"{where}.status.{key}[{k}].state.terminated.finishedAt"))
    return max(ends) if ends else None


def _span(item: dict[str, Any], where: str) -> JobSpan | None:
    meta = expect(item.get("metadata"), dict, f"{where}.metadata", "metadata")
    spec = expect(item.get("spec", {}), dict, f"{where}.spec", "spec")
    status = expect(item.get("status", {}), dict, f"{where}.status", "status")
    name = expect(meta.get("name"), str, f"{where}.metadata.name", "pod name")
    namespace = expect(meta.get("namespace", "default"), str, f"{where}.metadata.namespace", "namespace")
    labels = expect(meta.get("labels") or {}, dict, f"{where}.metadata.labels", "labels")
    node, started = spec.get("nodeName"), status.get("startTime")
    if not node or not started:
        return None  # not scheduled, or not started: it holds no node
    node = expect(node, str, f"{where}.spec.nodeName", "node name")
    start = iso(expect(started, str, f"{where}.status.startTime", "startTime"), f"{where}.status.startTime")
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    account = expect(account, str, f"{where}.spec.serviceAccountName", "service account")
    end = _finished(status, where) if status.get("phase") in _DONE else None
    job_name = next((str(labels[k]) for k in JOB_LABELS if isinstance(labels.get(k), str)), None)
    return make_span(where, job=f"{namespace}/{name}", user=f"system:serviceaccount:{namespace}:{account}",
                     nodes=(node,), start=start, end=end, name=job_name)


def parse_pods_json(text: str | bytes, source: str) -> tuple[JobSpan, ...]:
    """A pod list (``kubectl get pods -A -o json``) → one span per started pod."""
    try:
        doc = loads_json(text, source)
    except BoundedInputError as exc:
        raise JobsError(exc.where, exc.message.removeprefix(f"{exc.where}: ")) from None
    doc = expect(doc, dict, source, "kubectl JSON output")
    kind = doc.get("kind")
    if kind not in ("List", "PodList"):
        raise JobsError(f"{source}: kind", f"kind {kind!r}: expected a List or PodList of pods")
    spans: list[JobSpan] = []
    for i, item in enumerate(expect(doc.get("items"), list, f"{source}: items", "items")):
        where = f"{source}: items[{i}]"
        item = expect(item, dict, where, "an object")
        if item.get("kind", "Pod") != "Pod":
            raise JobsError(f"{where}.kind", f"a {item.get('kind')!r} in a pod list")
        span = _span(item, where)
        if span is not None:
            spans.append(span)
    return tuple(spans)


__all__ = ["JOB_LABELS", "parse_pods_json"]
