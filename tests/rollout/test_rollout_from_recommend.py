"""``rollout plan --from-recommend``: the rollout takes its layer and nodes from what ``recommend`` wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.evidence import EvidenceStore
from ringfence.rollout.machine import Rollout

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lab-policy.yaml"


def _recommend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    capsys.readouterr()
    assert main(["recommend", str(EXAMPLE), "--format", "json"]) == 0
    out = tmp_path / "rec.json"
    out.write_text(capsys.readouterr().out)
    return out


def test_the_plan_is_the_recommendations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = _recommend(tmp_path, capsys)
    (row,) = [r for r in json.loads(rec.read_text())["recommendations"] if r["class"] == "collective"]
    state, evidence = tmp_path / "ro.json", tmp_path / "ev"
    assert main(["rollout", "plan", "--state", str(state), "--evidence", str(evidence), "--from-recommend", str(rec),
                 "--target", "local"]) == 0
    store = EvidenceStore.open(evidence)
    ro = Rollout.open(state, store)
    assert ro.state.layer == row["layer"] and list(ro.state.pair) == row["nodes"][:2]
    assert list(ro.state.fleet) == row["nodes"]
    plan = next(r for r in store.records() if r.data.get("event") == "plan")
    assert plan.data["recommendation"]["link"] == row["link"] and plan.data["recommendation"]["option"] == \
        row["recommended"]
    # the example's collective path has no offload facts: host WireGuard, over the 5 % budget — said up front
    assert row["within_budget"] is False and "expects the canary gate to fail" in capsys.readouterr().err


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["recommendations"][0].update(surprise=1), "Extra inputs are not permitted"),
    (lambda d: d.update(recommendations=[r for r in d["recommendations"] if r["class"] != "collective"]),
     "no collective recommendation|0 collective recommendations"),
    (lambda d: [r.update(layer=None, recommended="none-possible") for r in d["recommendations"]
                if r["class"] == "collective"], "no layer to roll out"),
    (lambda d: [r.update(nodes=r["nodes"][:1]) for r in d["recommendations"] if r["class"] == "collective"],
     "a canary needs a pair"),
])
def test_a_recommendation_that_cannot_be_rolled_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               change: object, message: str) -> None:
    rec = _recommend(tmp_path, capsys)
    doc = json.loads(rec.read_text())
    change(doc)  # type: ignore[operator]
    rec.write_text(json.dumps(doc))
    code = main(["rollout", "plan", "--state", str(tmp_path / "ro.json"), "--evidence", str(tmp_path / "ev"),
                 "--from-recommend", str(rec), "--target", "local"])
    err = capsys.readouterr().err
    assert code == 2 and any(m in err for m in message.split("|")), err
    assert not (tmp_path / "ro.json").exists()


def test_flags_and_a_recommendation_together_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = _recommend(tmp_path, capsys)
    code = main(["rollout", "plan", "--state", str(tmp_path / "ro.json"), "--evidence", str(tmp_path / "ev"),
                 "--from-recommend", str(rec), "--layer", "noop", "--target", "local"])
    assert code == 2 and "not both" in capsys.readouterr().err
    code = main(["rollout", "plan", "--state", str(tmp_path / "ro.json"), "--evidence", str(tmp_path / "ev"),
                 "--target", "local"])
    assert code == 2 and "--from-recommend" in capsys.readouterr().err
