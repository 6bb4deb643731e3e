"""The ``ringfence`` torch.distributed backend in real rank processes: every collective, and DDP vs gloo."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).with_name("ranks_torch.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(mode: str, pki_home: Any, tmp: Path, world: int = 2, extra_env: dict[str, str] | None = None) -> list[Any]:
    port = _free_port()
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "RINGFENCE_TRANSPORT_DIR": str(pki_home.rank_dirs[rank]),
            "RINGFENCE_TRANSPORT_CHUNK_BYTES": str(64 << 10),
            "OMP_NUM_THREADS": "1",
            **(extra_env or {}),
        }
        out = tmp / f"{mode}-{rank}.json"
        procs.append(
            (out, subprocess.Popen([sys.executable, str(SCRIPT), mode, str(rank), str(world), str(port), str(out)],
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        )  # fmt: skip
    # Reap every rank before judging any: a failed rank must not leave its peer running unwaited.
    logs = []
    for _, p in procs:
        try:
            log, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            log, _ = p.communicate()
        logs.append(log.decode(errors="replace")[-3000:])
    for rank, ((_, p), log) in enumerate(zip(procs, logs, strict=True)):
        assert p.returncode == 0, f"rank {rank} ({mode}) exited {p.returncode}:\n{log}"
    return [json.loads(out.read_text()) for out, _ in procs]


@pytest.fixture(scope="module")
def ops_results(pki_home: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], Path]:
    tmp = tmp_path_factory.mktemp("torch-ops")
    events = tmp / "events.jsonl"
    return _run("ops", pki_home, tmp, extra_env={"RINGFENCE_TRANSPORT_EVENTS": str(events)}), events


@pytest.mark.slow  # two torch processes: ~8 s of start-up on two cores
def test_every_collective_is_correct(ops_results: tuple[list[Any], Path]) -> None:
    results, _ = ops_results
    for rank, res in enumerate(results):
        assert res["failures"] == [], f"rank {rank}: {res['failures']}"
        assert res["checked"] > 100


@pytest.mark.slow
def test_handshake_and_close_are_recorded(ops_results: tuple[list[Any], Path]) -> None:
    _, events = ops_results
    lines = [json.loads(x) for x in events.read_text().splitlines()]
    kinds = {(e["rank"], e["event"]) for e in lines}
    assert {(0, "handshake"), (1, "handshake"), (0, "close"), (1, "close")} <= kinds
    assert all("sha256:" in e["detail"] for e in lines if e["event"] == "handshake")


@pytest.mark.slow
def test_ddp_over_ringfence_matches_gloo(pki_home: Any, tmp_path: Path) -> None:
    import torch

    ours = _run("ddp-ringfence", pki_home, tmp_path)
    gloo = _run("ddp-gloo", pki_home, tmp_path)
    assert ours[0]["params"] == ours[1]["params"]  # the ranks agree
    for a, b in zip(ours[0]["params"], gloo[0]["params"], strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=1e-6, atol=1e-7)
