"""Drill reports as facts: strict, their verdict re-derived (an edited verdict is refused), judged per scenario."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flow_kit import policy_variant
from ringfence.cli import main
from ringfence.controls import containment
from ringfence.controls.interface import Facts, Verdict
from ringfence.controls.requirements import enforce_requirements
from ringfence.drill.interface import Attempt, Bystander, DrillReport
from ringfence.facts import FactsFileError
from ringfence.facts.drills import load

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def drill(name: str = "exfiltration", *, through: bool | None = False, finished: datetime = NOW - timedelta(hours=1),
          ) -> dict[str, Any]:
    return DrillReport(
        name, "lab:rft", (finished - timedelta(minutes=2)).isoformat(), finished.isoformat(),
        (Attempt("direct", "worker-0", "external (10.77.9.10:9000)", "stream a checkpoint out", through,
                 "default drop@fabric/inet" if through is False else "nothing: 4096 bytes reached external", True,
                 "NFLOG deny by worker-0", 0.5, 0 if through is False else 4096),),
        Bystander("train-b", ("worker-2", "worker-3"), 10, 30, 1.0, 10.0), True, "worker-0 at node and fabric",
        0.5, 1.2).to_json()


def write(tmp_path: Path, doc: dict[str, Any], name: str = "drill.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_a_report_loads_with_its_time_and_derived_verdict(tmp_path: Path) -> None:
    loaded = load(write(tmp_path, drill()))
    assert loaded.kind == "drills" and loaded.value["verdict"] == "pass"
    assert loaded.taken == NOW - timedelta(hours=1)


@pytest.mark.parametrize(("edit", "where"), [
    (lambda d: d.update(verdict="pass", attempts=[{**d["attempts"][0], "got_through": True}]), "verdict"),
    (lambda d: d["bystander"].update(within_budget=True, longest_stall_s=30.0), "verdict"),
    (lambda d: d.update(started=d["started"].split("+")[0]), "started"),
    (lambda d: d.update(scenario="phishing"), "scenario"),
    (lambda d: d.update(extra=1), "extra"),
    (lambda d: d["attempts"][0].update(got_through="no"), "attempts[0].got_through"),
    (lambda d: d.update(finished="2026-11-01T00:00:00+00:00"), "finished"),
])
def test_an_edited_or_malformed_report_is_refused_naming_the_field(tmp_path: Path, edit: Any, where: str) -> None:
    doc = drill()
    edit(doc)
    with pytest.raises(FactsFileError) as exc:
        load(write(tmp_path, doc))
    assert where in str(exc.value.where) + exc.value.message


POLICY = policy_variant(lambda d: d.update(incident_drills={"scenarios": ["exfiltration", "malicious-job"],
                                                            "every": "30d"}))


def judged(*reports: dict[str, Any]) -> dict[str, tuple[Verdict, str]]:
    facts = Facts(now=NOW, drills=reports, taken={"drills": NOW - timedelta(hours=1)} if reports else {})
    found = enforce_requirements(containment.meta, POLICY, facts, containment.evaluate(POLICY, facts))
    return {f.subject: (f.verdict, f.message) for f in found if f.requirement == containment.INCIDENTS}


def test_each_required_scenario_needs_its_own_recent_passing_drill() -> None:
    got = judged(drill("exfiltration"), drill("malicious-job"))
    assert {v for v, _ in got.values()} == {Verdict.PASS}, got
    missing = judged(drill("exfiltration"))
    assert missing["incident drill malicious-job"][0] is Verdict.UNKNOWN
    assert "ringfence drill run malicious-job" in missing["incident drill malicious-job"][1]
    old = judged(drill("exfiltration"), drill("malicious-job", finished=NOW - timedelta(days=40)))
    assert old["incident drill malicious-job"][0] is Verdict.UNKNOWN and "30d" in old["incident drill malicious-job"][1]
    assert judged() and all(v is Verdict.UNKNOWN for v, _ in judged().values())


def test_a_drill_that_got_through_fails_and_a_newer_pass_supersedes_it() -> None:
    failed = judged(drill("exfiltration", through=True), drill("malicious-job"))
    verdict, message = failed["incident drill exfiltration"]
    assert verdict is Verdict.FAIL and "got through: direct" in message
    fixed = judged(drill("exfiltration", through=True, finished=NOW - timedelta(hours=3)), drill("exfiltration"),
                   drill("malicious-job"))
    assert fixed["incident drill exfiltration"][0] is Verdict.PASS
    # a scenario the policy does not ask for is still judged when reported: a failure is a failure
    extra = judged(drill("exfiltration"), drill("malicious-job"), drill("credential-compromise", through=True))
    assert extra["incident drill credential-compromise"][0] is Verdict.FAIL


def test_a_policy_without_scenarios_does_not_ask_for_drills() -> None:
    plain = policy_variant(lambda d: None)
    facts = Facts(now=NOW)
    found = enforce_requirements(containment.meta, plain, facts, containment.evaluate(plain, facts))
    assert not [f for f in found if f.requirement == containment.INCIDENTS]


def test_assess_takes_drill_reports_and_refuses_a_forged_one(tmp_path: Path) -> None:
    from flow_kit import LAB_POLICY

    good = write(tmp_path, drill(finished=datetime.now(UTC) - timedelta(minutes=5)), "good.json")
    forged = drill()
    forged["attempts"][0]["got_through"] = True  # the verdict still says pass
    bad = write(tmp_path, forged, "forged.json")
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(bytes.fromhex("d4c3b2a1020004000000000000000000ffff000001000000"))
    base = ["assess", str(LAB_POLICY), "--captures", str(empty), "-q", "--format", "json"]
    assert main([*base, "-o", str(tmp_path / "bad"), "--drill", str(bad)]) == 2
    assert main([*base, "-o", str(tmp_path / "out"), "--drill", str(good)]) in (1, 3)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    subjects = [f["subject"] for c in report["controls"] if c["id"] == "containment" for f in c["findings"]]
    assert "incident drill exfiltration" in subjects


def test_an_attack_that_got_through_fails_the_control_it_tested() -> None:
    from ringfence.controls import egress, storage_flows, training_traffic

    out = drill("exfiltration", through=True)
    found = [f for f in egress.evaluate(POLICY, Facts(now=NOW, drills=(out,))) if f.subject.startswith("worker-0")]
    assert [f.verdict for f in found] == [Verdict.FAIL]
    assert "4096 bytes got out" in found[0].message and "external (10.77.9.10:9000)" in found[0].subject
    # a step names the control it tests: the dataset read fails storage_flows, not training_traffic
    read = drill("malicious-job", through=True)
    read["attempts"][0]["control"] = "storage_flows"
    facts = Facts(now=NOW, drills=(read,))
    assert any(f.verdict is Verdict.FAIL and "incident drill" in f.message
               for f in storage_flows.evaluate(POLICY, facts))
    assert not any("incident drill" in f.message for f in training_traffic.evaluate(POLICY, facts))
    # stopped, or superseded by a newer drill that stopped it: nothing added
    stopped = Facts(now=NOW, drills=(drill("exfiltration"),))
    assert not any("incident drill" in f.message for f in egress.evaluate(POLICY, stopped))
    newer = Facts(now=NOW, drills=(drill("exfiltration", through=True, finished=NOW - timedelta(hours=5)),
                                   drill("exfiltration")))
    assert not any("incident drill" in f.message for f in egress.evaluate(POLICY, newer))
