"""Both questions, one verdict: ``assess --bench`` adds the performance side per layer to the report,
and the headline joins it with the security side (done / compliance gap / regression / not proven)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.evidence import EvidenceStore

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "examples" / "lab-policy.yaml"
SHIPPED = ROOT / "examples" / "lab-as-found.pcap"
SAMPLES = ROOT.parent / "shared" / "samples" / "nccl-tests"
needs_samples = pytest.mark.skipif(not SAMPLES.is_dir(), reason="shared nccl-tests samples not present")


@needs_samples
def test_bench_facts_give_the_performance_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, cmp = tmp_path / "healthy.json", tmp_path / "degraded.json", tmp_path / "cmp.json"
    assert main(["bench", "import", str(SAMPLES / "cscs_gh200_2x4_all_reduce_perf_cxi_hook.txt"), "-o", str(a)]) == 0
    assert main(["bench", "import", str(SAMPLES / "cscs_gh200_2x4_all_reduce_perf_no_cxi_hook.txt"), "-o", str(b),
                 "--layer", "degraded"]) == 0
    store = tmp_path / "bench-evidence"
    assert main(["bench", "compare", str(a), str(b), "--json", "-o", str(cmp), "--evidence", str(store)]) == 1
    assert [r.source for r in EvidenceStore.open(store, create=False).records()] == ["bench.compare"]
    out = tmp_path / "out"
    code = main(["assess", str(POLICY), "--captures", str(SHIPPED), "--bench", str(cmp), "-o", str(out), "-q"])
    assert code == 1
    report = json.loads((out / "report.json").read_text())
    (layer,) = report["performance"]
    assert layer["layer"] == "nccl/degraded" and layer["verdict"] == "fail" and layer["sizes"]
    size = layer["sizes"][-1]
    assert size["busbw_baseline"] > size["busbw_candidate"] and size["busbw_limit_pct"] == 5.0
    assert report["headline"]["verdict"] == "compliance gap"
    assert report["headline"]["performance"] == "regression"
    assert layer["evidence"] and all(main(["evidence", "show", ev, "--store", str(out / "evidence")]) == 0
                                     for ev in layer["evidence"])
    html = (out / "report.html").read_text()
    assert "Both questions" in html and "nccl/degraded vs" in html and 'aria-label="busbw per size' in html
    capsys.readouterr()


def test_a_bench_file_that_is_not_a_comparison_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "cmp.json"
    bad.write_text(json.dumps({"format": "ringfence-bench-compare/1", "taken": "2026-11-30T10:00:00+00:00",
                               "verdict": "maybe"}))
    code = main(["assess", str(POLICY), "--captures", str(SHIPPED), "--bench", str(bad), "-o", str(tmp_path), "-q"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{bad}: verdict:" in err and "Traceback" not in err
