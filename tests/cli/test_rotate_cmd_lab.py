"""``ringfence encrypt rotate`` on a lab: credentials rotated under the running job, the old one refused by a
probe, the result recorded as key facts that ``encryption_keys`` finds in the store and judges ``pass``.
One private lab for the module (the shared ``lab`` fixture stays untouched)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.controls.encryption_keys import evaluate
from ringfence.controls.interface import Facts, Verdict
from ringfence.errors import EnvironmentProblem
from ringfence.evidence import EvidenceStore
from ringfence.lab import Lab
from ringfence.lab.netns import require_privileges
from ringfence.secure.layers import tls_run, wireguard_run
from ringfence.secure.layers.runtime import StateStore
from ringfence.secure.rotation_facts import latest_keys_facts

pytestmark = [pytest.mark.privileged, pytest.mark.slow, pytest.mark.alone]


@pytest.fixture(scope="module")
def secured() -> Iterator[Lab]:
    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    lab = Lab.up(workers=2, jobs=1)
    try:
        with lab:
            try:
                tls_run.enable_tls(lab.site(), lab.policy(), ["storage", "management", "replication"])
                wireguard_run.enable_wireguard(lab.site(), [m for j in lab.topology.jobs for m in j.members])
                wireguard_run.set_collective_class(lab.site(), ["collective"])
                yield lab
            finally:
                try:
                    wireguard_run.disable_wireguard(lab.site())
                finally:
                    tls_run.disable_tls(lab.site())
    finally:
        StateStore(lab.name).forget()


@pytest.mark.parametrize("layer", ["wireguard", "tls"])
def test_rotate_records_key_facts_that_encryption_keys_judges(secured: Lab, tmp_path: Path, layer: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    lab = secured
    before = StateStore(lab.name).read().info[layer]
    out, store_dir = tmp_path / "keys.json", tmp_path / "evidence"
    code = main(["encrypt", "rotate", "--layer", layer, "--target", "lab", "--name", lab.name,
                 "--evidence", str(store_dir), "-o", str(out)])
    err = capsys.readouterr().err
    print(err, file=sys.__stderr__)
    doc = json.loads(out.read_text())
    row = doc["rotation"][0]
    assert code == 0, (err, row)
    assert row["layer"] == layer and row["verdict"] == "pass" and row["job_survived"], row
    assert row["old_refused"] and row["new_in_use"] and row["request_failures"] == 0 and row["failed_steps"] == 0
    assert row["stall_s"] > 0 and set(row["old_ids"]).isdisjoint(row["new_ids"])
    after = StateStore(lab.name).read().info[layer]
    if layer == "wireguard":
        assert set(after["public_keys"].values()).isdisjoint(before["public_keys"].values())
    # found in the store, validated again from its recorded bytes, and judged by the control
    loaded = latest_keys_facts(EvidenceStore.open(store_dir, create=False))
    assert loaded is not None and loaded.value["rotation"] == doc["rotation"]
    found = evaluate(lab.policy(), Facts(now=datetime.now(UTC), keys=loaded.value,
                                         taken={"keys": loaded.taken or datetime.now(UTC)}))
    rotation = [f for f in found if f.subject == f"key rotation ({layer})"]
    assert [f.verdict for f in rotation] == [Verdict.PASS], [f.message for f in found]


def test_rotate_refuses_a_layer_without_rotation_or_not_enabled(secured: Lab, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--target", "lab", "--name", secured.name, "--evidence", str(tmp_path / "ev")]
    assert main(["encrypt", "rotate", "--layer", "macsec", *common]) == 2  # rendered only: nothing runs to rotate
    assert "no live rotation" in capsys.readouterr().err
    assert main(["encrypt", "rotate", "--layer", "ipsec", *common]) == 2  # rotatable, but not enabled here
    assert "ipsec is not enabled" in capsys.readouterr().err
    assert main(["encrypt", "rotate", "--layer", "wireguard", "--nodes", "storage", *common]) == 2
    assert "not in the WireGuard tunnel" in capsys.readouterr().err
