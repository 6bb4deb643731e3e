"""The commit of a ruleset bundle, every point at once: checked everywhere before anything changes, primed,
loaded; a point that fails is named, and every point already changed is put back."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ringfence.enforce.apply import _commit
from ringfence.enforce.nftrun import PRIME_TABLE, NftError
from ringfence.targets.interface import RunResult, TargetError


class NftHost:
    """Answers ``nft``: remembers what was loaded (the ringfence table's marker), fails where told."""

    def __init__(self, name: str, *, fail_check: bool = False, fail_load: bool = False,
                 down: bool = False) -> None:
        self.name = name
        self.fail_check, self.fail_load, self.down = fail_check, fail_load, down
        self.loaded: list[str] = []  # what each committed transaction was: "prime", "unprime", "<marker>", "remove"
        self.lock = threading.Lock()

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        if self.down:
            raise TargetError(f"{self.name}: ssh failed: Connection refused")
        doc = json.loads(stdin or b"{}")
        if list(argv[:2]) == ["nft", "-c"]:
            return RunResult(tuple(argv), 1 if self.fail_check else 0, b"", b"bad rule" if self.fail_check else b"",
                             0.0)
        cmds = doc.get("nftables", [])
        kinds = [next(iter(c)) for c in cmds]
        tables = [c[k].get("table", {}) for c, k in zip(cmds, kinds, strict=True)]
        if any(isinstance(t, dict) and t.get("name") == PRIME_TABLE for t in tables):
            what = "unprime" if "delete" in kinds else "prime"
        elif "delete" in kinds:
            what = "remove"
        else:
            what = str(doc.get("marker"))
            if self.fail_load and what == "new":
                return RunResult(tuple(argv), 1, b"", b"Error: Could not process rule", 0.0)
        with self.lock:
            self.loaded.append(what)
        return RunResult(tuple(argv), 0, b"", b"", 0.0)

    def spawn(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("not used")

    def copy_to(self, local: Path, remote: str) -> None:
        raise AssertionError("not used")

    def copy_from(self, remote: str, local: Path) -> None:
        raise AssertionError("not used")


def _bundle(scopes: Sequence[str], marker: str) -> dict[str, Any]:
    return {s: {"nftables": [{"add": {"table": {"family": "inet", "name": "ringfence"}}}], "marker": marker}
            for s in scopes}


SCOPES = ["fabric", "worker-0", "worker-1", "worker-2", "mgmt"]


def test_every_point_is_primed_loaded_and_unprimed() -> None:
    hosts = {s: NftHost(s) for s in SCOPES}
    _commit(hosts, _bundle(SCOPES, "new"), None)
    assert all(h.loaded == ["prime", "new", "unprime"] for h in hosts.values()), {s: h.loaded for s, h in hosts.items()}


def test_a_point_that_fails_its_check_changes_nothing_anywhere() -> None:
    hosts = {s: NftHost(s, fail_check=(s == "worker-2")) for s in SCOPES}
    with pytest.raises(NftError, match="worker-2"):
        _commit(hosts, _bundle(SCOPES, "new"), _bundle(SCOPES, "old"))
    assert all(h.loaded == [] for h in hosts.values())


def test_a_point_that_fails_its_load_is_named_and_the_others_are_put_back() -> None:
    hosts = {s: NftHost(s, fail_load=(s == "worker-1")) for s in SCOPES}
    with pytest.raises(NftError, match="worker-1"):
        _commit(hosts, _bundle(SCOPES, "new"), _bundle(SCOPES, "old"))
    for s, h in hosts.items():
        # the point that failed kept its old ruleset (its transaction was all or nothing); every other point
        # got the new one, then the previous version back; all were unprimed
        want = ["prime", "unprime"] if s == "worker-1" else ["prime", "new", "old", "unprime"]
        assert h.loaded == want, (s, h.loaded)


def test_without_a_previous_version_a_changed_point_is_cleared_and_an_unreachable_one_named() -> None:
    hosts = {s: NftHost(s, down=(s == "mgmt")) for s in SCOPES}
    with pytest.raises(TargetError, match="mgmt"):
        _commit(hosts, _bundle(SCOPES, "new"), None)
    # mgmt could not even be checked: nothing changed anywhere
    assert all(h.loaded == [] for h in hosts.values())
    hosts = {s: NftHost(s, fail_load=(s == "fabric")) for s in SCOPES}
    with pytest.raises(NftError, match="fabric"):
        _commit(hosts, _bundle(SCOPES, "new"), None)
    assert hosts["fabric"].loaded == ["prime", "unprime"]
    assert all(hosts[s].loaded == ["prime", "new", "remove", "unprime"] for s in SCOPES if s != "fabric")
