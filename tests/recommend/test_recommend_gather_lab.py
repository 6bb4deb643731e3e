"""``recommend --gather`` on the lab: the NIC facts read from every node's own interface, through its executor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.facts import nic
from ringfence.lab import Lab

pytestmark = [pytest.mark.privileged]


def test_nic_facts_gathered_from_every_node_feed_the_recommendation(
        lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy, out = tmp_path / "policy.yaml", tmp_path / "nic.json"
    policy.write_text(lab.policy_yaml())
    code = main(["recommend", str(policy), "--gather", "--target", "lab", "--name", lab.name, "--nic-out", str(out),
                 "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(out.read_text())
    rows = {r["node"]: r for r in doc["nodes"]}
    nodes = {n.name for n in lab.policy().nodes if n.name in lab.site().hosts}
    assert nodes <= set(rows), (nodes, sorted(rows))
    for name in nodes:
        r = rows[name]
        # each node's own veth, the one carrying its fabric address, as the kernel describes it
        assert not r.get("error") and r["interface"], r
        assert f"Features for {r['interface']}:" in r["ethtool_k"] and "veth" in r["ip_link"], r
    caps = nic.load(out).value
    assert not any(c.has(x) for c in caps.values() for x in ("macsec", "ipsec", "tls"))  # veth offloads none
    recs = json.loads(captured.out)["recommendations"]
    collective = [r for r in recs if r["class"] == "collective"]
    assert collective and all("NIC facts for" not in " ".join(r["why"]) for r in collective), collective
    assert "NIC facts gathered from" in captured.err
