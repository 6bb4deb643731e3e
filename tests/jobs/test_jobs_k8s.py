"""Kubernetes pods as job spans: the real kubelet PodList sample, kubectl's List, finished pods, hostile input."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ringfence.jobs import JobFormat, JobsError
from ringfence.jobs.k8s import parse_pods_json
from ringfence.jobs.registry import detect


def test_sample_pods_give_node_service_account_and_job_label(samples: Path) -> None:
    data = (samples / "k8s" / "honeycomb_pods.json").read_bytes()
    assert detect(data, "pods.json") is JobFormat.KUBECTL
    spans = parse_pods_json(data, "pods.json")
    assert len(spans) == 11 and {s.nodes for s in spans} == {("duckboat-01",)}
    speaker = next(s for s in spans if s.job.startswith("metallb-system/speaker"))
    assert speaker.user == "system:serviceaccount:metallb-system:speaker"
    assert speaker.name == "metallb" and speaker.end is None  # label app=metallb; still running


def _pod(phase: str, **status: object) -> dict[str, object]:
    return {"kind": "Pod", "metadata": {"name": "rank-0", "namespace": "train",
                                        "labels": {"training.kubeflow.org/job-name": "llm", "app": "x"}},
            "spec": {"nodeName": "gpu01", "serviceAccountName": "trainer"},
            "status": {"phase": phase, "startTime": "2026-12-01T10:00:00Z", **status}}


def test_kubectl_list_with_a_finished_and_an_unscheduled_pod() -> None:
    done = _pod("Succeeded", containerStatuses=[{"state": {"terminated": {"finishedAt": "2026-12-01T11:00:00Z"}}}])
    pending = {"metadata": {"name": "p", "namespace": "train"}, "spec": {}, "status": {"phase": "Pending"}}
    (span,) = parse_pods_json(json.dumps({"kind": "List", "items": [done, pending]}), "pods.json")
    assert (span.job, span.user, span.name) == ("train/rank-0", "system:serviceaccount:train:trainer", "llm")
    assert span.end == datetime(2026, 12, 1, 11, tzinfo=UTC)


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"kind": "NodeList", "items": []}, "pods.json: kind"),
        ({"kind": "List", "items": [{"kind": "Node"}]}, "pods.json: items[0].kind"),
        ({"kind": "List", "items": [{"metadata": {"name": 5}}]}, "pods.json: items[0].metadata.name"),
        ({"kind": "List", "items": [_pod("Running", startTime="soon")]}, "pods.json: items[0].status.startTime"),
        ({"kind": "List", "items": [_pod("Failed", containerStatuses=[
            {"state": {"terminated": {"finishedAt": "2026-12-01T09:00:00Z"}}}])]}, "pods.json: items[0]"),
    ],
)
def test_hostile_pod_lists_name_the_item(doc: dict[str, object], where: str) -> None:
    with pytest.raises(JobsError) as err:
        parse_pods_json(json.dumps(doc), "pods.json")
    assert err.value.where == where
