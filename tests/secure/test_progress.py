"""Counters read at a moment the drill chose: never from a rank's document written before it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from ringfence.lab.agents.common import HEARTBEAT_S, Status
from ringfence.secure import progress
from ringfence.secure.progress import plaintext_from, settled_counter, wait_progress


class Scripted:
    """A rank whose document changes on the n-th read: ``writes[n]`` is (steps, updated), the last one stays."""

    def __init__(self, writes: list[tuple[int, float]]) -> None:
        self.writes, self.reads = writes, 0

    def agent_status(self) -> dict[str, dict[str, Any]]:
        steps, updated = self.writes[min(self.reads, len(self.writes) - 1)]
        self.reads += 1
        return {"worker-0-worker": {"counters": {"steps": steps}, "updated": updated, "ready": True}}


def test_steps_taken_before_the_moment_but_written_after_it_are_counted_in_the_baseline(monkeypatch: Any) -> None:
    # the CI failure: the document read as the SA went said 10; the write under way said 12 (two steps taken
    # before); only the next write is known to be made after the moment
    monkeypatch.setattr(progress, "POLL_S", 0.0)
    src = Scripted([(10, 1.0), (10, 1.0), (12, 1.5), (12, 1.5), (12, 2.5)])
    got = settled_counter(src, "worker-0", "steps")
    assert got.value == 12 and got.settled


def test_a_first_change_alone_is_not_enough(monkeypatch: Any) -> None:
    # a write already under way when the call began may hold a snapshot from before it: wait for the second
    monkeypatch.setattr(progress, "POLL_S", 0.0)
    src = Scripted([(10, 1.0), (11, 1.5), (11, 1.5), (13, 2.5)])
    assert settled_counter(src, "worker-0", "steps").value == 13


def test_a_rank_that_writes_nothing_new_gives_its_latest_value_marked_unsettled() -> None:
    src = Scripted([(7, 1.0)])
    got = settled_counter(src, "worker-0", "steps", timeout=0.3)
    assert got.value == 7 and not got.settled and got.waited_s >= 0.3


def test_an_absent_or_malformed_document_counts_nothing(monkeypatch: Any) -> None:
    monkeypatch.setattr(progress, "POLL_S", 0.0)

    class Odd:
        def agent_status(self) -> dict[str, dict[str, Any]]:
            return {"worker-0-worker": {"counters": {"steps": "many"}, "updated": True}}

    assert settled_counter(Odd(), "worker-0", "steps", timeout=0.05).value == 0
    missing = settled_counter(Scripted([(1, 1.0)]), "worker-9", "steps", timeout=0.05)
    assert missing.value == 0 and not missing.settled


def test_wait_progress_sees_growth_and_gives_up_at_its_bound() -> None:
    assert wait_progress(Scripted([(1, 1.0), (2, 2.0)]), "worker-0", "steps", 2.0)
    t0 = time.monotonic()
    assert not wait_progress(Scripted([(1, 1.0)]), "worker-0", "steps", 0.3)
    assert time.monotonic() - t0 >= 0.3


def test_plaintext_from_counts_only_the_class_and_the_addresses() -> None:
    flows = pa.table({"src": ["a", "a", "b", "x"], "dst": ["b", "b", "a", "y"],
                      "class": ["collective", "collective", "storage", "collective"],
                      "protection": ["plaintext", "encrypted", "plaintext", "plaintext"],
                      "payload_bytes": [5, 7, 11, None]})
    assert plaintext_from(flows, "collective", {"a"}) == (5, 2)
    assert plaintext_from(flows, "collective", {"y"}) == (0, 1)


def test_an_idle_agent_rewrites_its_status_so_a_settled_read_ends(tmp_path: Path) -> None:
    path = tmp_path / "worker-0-worker.json"
    status = Status(path, "worker")
    status.count("steps", 3)

    class File:
        def agent_status(self) -> dict[str, dict[str, Any]]:
            try:
                return {"worker-0-worker": json.loads(path.read_text())}
            except (OSError, ValueError):
                return {}

    # nothing counts from here on; the heartbeat alone must give two writes after the call
    got = settled_counter(File(), "worker-0", "steps", timeout=20 * HEARTBEAT_S)
    assert got.settled and got.value == 3
