"""``training_traffic`` judges a job's collective flows against its declared partition, and RDMA key hygiene."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ctl_kit import by_control, facts_for

from flow_kit import LAB_POLICY, W0, W1, lab_policy, policy_variant
from ringfence.assess import assess, assess_from_store
from ringfence.controls.interface import Verdict
from ringfence.policy import Policy, PolicyError
from ringfence.rdma import RdmaFinding, Vuln

CAPTURES = Path(__file__).resolve().parents[2].parent / "shared" / "captures" / "rdma"


def _partitioned(**partition: Any) -> Policy:
    def change(doc: dict[str, Any]) -> None:
        doc["jobs"][0]["partition"] = partition

    return policy_variant(change)


def _collective(**extra: Any) -> dict[str, Any]:
    return {"src": W0, "dst": W1, "dport": 29500, **extra}


def _training(policy: Policy, rows: list[dict[str, Any]], **extra: Any) -> list[tuple[Verdict, str]]:
    result = by_control(policy, facts_for(policy, rows, **extra))["training_traffic"]
    # the flow-judged findings (a declared partition's fabric probes are judged on their own requirements)
    return [(f.verdict, f.message) for f in result.findings if not f.requirement.startswith("job-partition")
            and ("partition" in f.message or "ReDMArk" in f.message or f.subject == "job partitions")]  # fmt: skip


def test_default_pkey_fails_when_partitions_are_declared() -> None:
    found = _training(_partitioned(pkey=0x10), [_collective(proto=17, dport=4791, pkey=0xFFFF)])
    assert [v for v, _ in found] == [Verdict.FAIL]
    assert "default partition P_Key 0xffff" in found[0][1] and "worker-0" in found[0][1]


def test_other_pkey_or_vlan_fails_and_own_partition_passes() -> None:
    policy = _partitioned(pkey=0x10, vlan=110)
    assert [v for v, _ in _training(policy, [_collective(pkey=0x8011)])] == [Verdict.FAIL]
    assert [v for v, _ in _training(policy, [_collective(vlan=120)])] == [Verdict.FAIL]
    ok = _training(policy, [_collective(pkey=0x8010, vlan=110), _collective(sport=1, pkey=0x0010)])
    assert ok == [(Verdict.PASS, "2 collective flow(s) showing a P_Key or VLAN id, all in their job's partition")]


def test_nothing_is_judged_without_declared_partitions_or_observed_tags() -> None:
    assert _training(lab_policy(), [_collective(pkey=0xFFFF)]) == []
    assert _training(_partitioned(pkey=0x10), [_collective()]) == []  # no P_Key nor VLAN seen: nothing proven


@pytest.mark.parametrize("partition", [{}, {"pkey": 0x7FFF}, {"vlan": 0}, {"pkey": 0x10, "colour": "red"}])
def test_partition_field_is_strict(partition: dict[str, Any]) -> None:
    with pytest.raises(PolicyError):
        _partitioned(**partition)


def test_rdma_findings_fail_the_control() -> None:
    finding = RdmaFinding(id=Vuln.V6, name="fixed starting PSN", src=W0, dst=W1, pattern="2 of 2 connections start "
                          "at PSN 0x0", source="pcap:x.pcap", remediation="random PSNs")  # fmt: skip
    found = _training(lab_policy(), [_collective()], rdma=(finding,))
    assert found == [(Verdict.FAIL, "ReDMArk V6: fixed starting PSN: 2 of 2 connections start at PSN 0x0")]


def test_assess_includes_rdma_findings_and_recomputes_them(tmp_path: Path) -> None:
    capture = CAPTURES / "roce.pcap"
    if not capture.exists():
        pytest.skip(f"{capture} is not here")
    first = assess(LAB_POLICY, [capture], store_dir=tmp_path / "ev", formats=())
    again = assess_from_store(LAB_POLICY, tmp_path / "ev", formats=())

    def rdma(result: Any) -> list[str]:
        (tt,) = [c for c in result.assessment.controls if c.id == "training_traffic"]
        return sorted(f.message for f in tt.findings if f.message.startswith("ReDMArk"))

    assert any(m.startswith("ReDMArk V6") for m in rdma(first))
    assert rdma(first) == rdma(again)
