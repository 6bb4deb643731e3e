"""``ringfence partition prove``: bad input is exit 2 with a one-line reason, before any lab is touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology


def test_a_policy_without_partitions_or_a_bad_timeout_is_refused(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(render_policy(build_topology("rfcl", 4, 2)))
    assert main(["partition", "prove", str(policy), "--name", "rfnone"]) == 2
    err = capsys.readouterr().err
    assert "no job declares a partition" in err and "Traceback" not in err
    assert main(["partition", "prove", str(policy), "--timeout", "0"]) == 2
    assert "--timeout" in capsys.readouterr().err
    assert main(["partition", "prove", str(tmp_path / "missing.yaml")]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["partition", "prove", str(policy), "--target", "ssh"])
    assert exc.value.code == 2
