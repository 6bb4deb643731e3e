"""``ringfence inventory …`` in-process: a skeleton that loads and that discover completes; bad input → exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from flow_kit import flows
from ringfence.analyze.discover import discover
from ringfence.cli import main
from ringfence.policy import load_policy

INI = """[workload]
w0 ansible_host=10.9.1.10
w1 ansible_host=10.9.1.11

[storage]
st0 ansible_host=10.9.2.10
"""


def test_from_hosts_writes_a_skeleton_discover_completes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(INI)
    out = tmp_path / "skeleton.yaml"
    assert main(["inventory", "from-hosts", str(inv), "--cluster", "dc1", "-o", str(out)]) == 0
    assert "3 nodes in 2 zones" in capsys.readouterr().err
    skeleton = load_policy(out)
    assert [n.name for n in skeleton.nodes] == ["w0", "w1", "st0"] and not skeleton.approved
    seen = flows(
        [
            {"src": "10.9.1.10", "dst": "10.9.2.10", "dport": 8080},
            {"src": "10.9.1.11", "dst": "10.9.2.10", "dport": 8080},
        ]
    )
    proposal = discover(seen, skeleton)
    assert proposal.flows == 2 and (proposal.rules or proposal.flagged)


def test_from_slurm_and_k8s_on_the_real_samples(
    samples: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"10.0.0.{i} cs{i}.example.company.com\n" for i in (2, 3, 4)))
    sinfo = samples / "slurm" / "rivos_sinfo_out.json"
    out = tmp_path / "slurm.yaml"
    assert main(["inventory", "from-slurm", "--sinfo", str(sinfo), "--etc-hosts", str(hosts), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "cs5.example.company.com" in err and "no IP address" in err  # reported, not silently skipped
    assert len(load_policy(out).nodes) == 3
    assert "NOT INCLUDED" in out.read_text()
    k8s = [str(samples / "k8s" / n) for n in ("honeycomb_nodes.json", "honeycomb_pods.json")]
    assert main(["inventory", "from-k8s", *k8s, "-o", str(tmp_path / "k8s.yaml")]) == 0
    assert any(n.identity for n in load_policy(tmp_path / "k8s.yaml").nodes)


def test_malformed_input_exits_2_naming_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.ini"
    bad.write_text("[gpu]\nh1 ansible_host\n")
    out = tmp_path / "never.yaml"
    assert main(["inventory", "from-hosts", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2" in err and "Traceback" not in err and not out.exists()
    assert main(["inventory", "from-slurm"]) == 2
    assert main(["inventory", "from-k8s", str(tmp_path / "missing.json")]) == 2
    binary = tmp_path / "b.json"
    binary.write_bytes(b'{"items": [\xff]}')
    assert main(["inventory", "from-k8s", str(binary)]) == 2
    assert f"{binary}@11" in capsys.readouterr().err
