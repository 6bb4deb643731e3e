"""``ringfence bench …`` in-process: exit codes, outputs, errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringfence.bench.driver import BenchSpec
from ringfence.bench.run import load_run
from ringfence.cli import main

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "samples" / "nccl-tests"
ASSETS = Path(__file__).resolve().parent / "assets"
needs_samples = pytest.mark.skipif(not SAMPLES.is_dir(), reason="shared nccl-tests samples not present")


@needs_samples
def test_import_then_compare_degraded_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "healthy.json", tmp_path / "degraded.json"
    assert main(["bench", "import", str(SAMPLES / "cscs_gh200_2x4_all_reduce_perf_cxi_hook.txt"), "-o", str(a)]) == 0
    assert main(["bench", "import", str(SAMPLES / "cscs_gh200_2x4_all_reduce_perf_no_cxi_hook.txt"), "-o", str(b),
                 "--layer", "degraded"]) == 0
    assert load_run(b).config.layer == "degraded"
    capsys.readouterr()
    assert main(["bench", "compare", str(a), str(b), "--json", "--charts", str(tmp_path / "charts")]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "fail" and out["candidate"]["label"] == "nccl/degraded"
    assert (tmp_path / "charts" / "busbw.svg").read_text().startswith("<svg")


@needs_samples
def test_compare_reads_nccl_tests_output_directly(capsys: pytest.CaptureFixture[str]) -> None:
    sample = str(SAMPLES / "cscs_gh200_2x4_all_reduce_perf_cxi_hook.txt")
    # same file twice: no loss, but p99 is not in this output and one repeat is too few → not a pass
    assert main(["bench", "compare", sample, sample]) == 1
    assert capsys.readouterr().out.startswith("verdict: INCONCLUSIVE")


@needs_samples
def test_different_tests_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "compare", str(SAMPLES / "cscs_gh200_2x1_all_reduce_perf_sarus.txt"),
                 str(SAMPLES / "cscs_gh200_2x4_all_reduce_perf_cxi_hook.txt")])
    assert code == 2
    err = capsys.readouterr().err
    assert "not the same test" in err and "world_size" in err and "Traceback" not in err


def test_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("hello\n")
    assert main(["bench", "import", str(bad)]) == 2
    assert f"{bad}:1" in capsys.readouterr().err
    assert main(["bench", "allreduce", "--nodes", "a,b", "--sizes", "1Q"]) == 2
    assert main(["bench", "show", str(tmp_path / "missing.json")]) == 2


def test_show_json_fixture(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "show", str(ASSETS / "nccl_tests_2x2.json")]) == 0
    assert "2 MiB" in capsys.readouterr().out


def test_allreduce_on_loopback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.json"
    args = ["bench", "allreduce", "--nodes", "x,y", "--sizes", "1M", "--warmup", "0", "--iters", "2",
            "--repeats", "1", "-o", str(out)]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "repeat 1/1  [1/1]" in err and "busbw" in err
    run = load_run(out)
    assert run.config.nodes == ("x", "y") and run.wrong_total() == 0


def test_launcher_flags_are_checked_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["bench", "allreduce", "--target", "local", "--nodes", "a,b", "--launcher", "srun"]) == 2
    err = capsys.readouterr().err
    assert "srun needs a site with a Slurm submit host" in err and "Traceback" not in err
    assert main(["bench", "allreduce", "--target", "local", "--nodes", "a,b", "--submit-host", "mgmt"]) == 2
    assert "only the srun launcher submits to Slurm" in capsys.readouterr().err
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  a: {address: 10.0.0.1, user: root, key: /k, known_hosts: /kh}\n"
                     "  b: {address: 10.0.0.2, user: root, key: /k, known_hosts: /kh}\n")
    assert main(["bench", "allreduce", "--target", "ssh", "--hosts", str(hosts), "--nodes", "a,b",
                 "--launcher", "srun"]) == 2
    assert "has no host 'mgmt' to run srun on (it has: a, b)" in capsys.readouterr().err


class _FakeLab:
    """What ``bench allreduce --target lab`` asks of a lab, without namespaces."""

    name = "rfzz00"

    def site(self) -> object:
        return object()

    def policy(self) -> object:
        from types import SimpleNamespace

        return SimpleNamespace(cluster="labzz")


def _lab_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backend: str) -> BenchSpec:
    """``bench allreduce --target lab --backend BACKEND`` up to the driver; the spec it was handed."""
    from ringfence.bench import driver, placement
    from ringfence.errors import RingfenceError
    from ringfence.lab import Lab
    from ringfence.secure.layers import tls_run

    seen: list[BenchSpec] = []

    def fake_run(ranks: object, spec: BenchSpec, **_: object) -> None:
        seen.append(spec)
        raise RingfenceError("stopped before any rank starts")

    monkeypatch.setattr(Lab, "attach", staticmethod(lambda name=None: _FakeLab()))
    monkeypatch.setattr(placement, "site_ranks", lambda site, nodes, ifaces: placement.local_ranks(nodes))
    monkeypatch.setattr(tls_run, "pki_dir", lambda site, store=None: tmp_path / site / "pki")
    monkeypatch.setattr(driver, "run_allreduce", fake_run)
    assert main(["bench", "allreduce", "--target", "lab", "--nodes", "worker-0,worker-1", "--backend", backend,
                 "--sizes", "1M"]) == 2
    return seen[0]


def test_lab_ringfence_run_issues_rank_certificates_from_the_labs_ca(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ringfence.secure.transport import config_from_env
    from ringfence.secure.transport.handshake import load_credentials

    monkeypatch.delenv("RINGFENCE_TRANSPORT_DIR", raising=False)
    monkeypatch.delenv("RINGFENCE_TRANSPORT_CERT", raising=False)
    spec = _lab_run(monkeypatch, tmp_path, "ringfence")
    assert spec.env["RINGFENCE_TRANSPORT_DIR"].startswith(str(tmp_path / "rfzz00" / "pki" / "nodes"))
    for rank in (0, 1):
        creds = load_credentials(config_from_env(dict(spec.env), rank=rank), rank)
        assert creds.identity == f"spiffe://labzz/job/bench/rank/{rank}"
    assert _lab_run(monkeypatch, tmp_path, "gloo").env == {}  # gloo needs none


def test_lab_ringfence_run_keeps_the_callers_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RINGFENCE_TRANSPORT_DIR", "/somewhere/job-x-rank-{rank}")
    assert _lab_run(monkeypatch, tmp_path, "ringfence").env == {}
    assert not (tmp_path / "rfzz00").exists()
