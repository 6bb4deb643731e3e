"""Enforcement over SSH only, on the lab's nodes with its job training, and the job's progress read over SSH.

``ringfence lab hosts`` gives every node and the fabric an sshd; from then on ``apply`` and ``probe``
drive them only through SSH sessions from the jump node, as they would a Slurm cluster's hosts and
its firewall — the rulesets land through the very sessions they then govern. The job's progress
(what ``contain`` and the drills watch) is read from the ranks' progress files over SSH.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ringfence.cli import main
from ringfence.errors import EnvironmentProblem
from ringfence.lab import Lab
from ringfence.lab.netns import require_privileges
from ringfence.lab.points import lab_points
from ringfence.policy import load_policy
from ringfence.targets.cluster import SiteCluster, steps_of
from ringfence.targets.hosts import load_hosts, ssh_site

pytestmark = [pytest.mark.privileged, pytest.mark.slow]


@pytest.fixture(scope="module")
def ssh_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Path, Path]]:
    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    work = tmp_path_factory.mktemp("ssh-contain")
    lab = Lab.up(workers=2, jobs=1, traffic=True, wait=True)
    try:
        hosts = work / "hosts.yaml"
        assert main(["lab", "hosts", "--name", lab.name, "-o", str(hosts)]) == 0
        policy = work / "policy.yaml"
        policy.write_text(lab.policy_yaml())
        yield lab, hosts, policy
    finally:
        lab.down()


def test_the_inventory_names_the_fabric_and_each_ranks_progress(ssh_lab: tuple[Lab, Path, Path]) -> None:
    lab, hosts, policy = ssh_lab
    doc = yaml.safe_load(hosts.read_text())
    assert "fabric" in doc["hosts"] and "interface" not in doc["hosts"]["fabric"]
    assert {n for n, h in doc["hosts"].items() if "progress" in h} == {"worker-0", "worker-1"}
    # the policy approves the administrators' path to every sshd, from the jump host only
    approved = {a.id for a in load_policy(policy).approved}
    assert {"admin-ssh-worker-0", "admin-ssh-storage", "admin-ssh-aux"} <= approved
    cluster = SiteCluster(ssh_site(load_hosts(hosts)), load_policy(policy))
    first = steps_of(cluster.agent_status())
    assert set(first) == {"worker-0", "worker-1"}
    assert cluster.workers_alive()


def test_enforcement_applied_over_ssh_keeps_the_ssh_paths_and_proves_itself(
    ssh_lab: tuple[Lab, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab, hosts, policy = ssh_lab
    ssh = ["--target", "ssh", "--hosts", str(hosts)]
    store = tmp_path / "ev"
    # the rulesets land on every node and the fabric through the very SSH sessions they then govern
    code = main(["apply", str(policy), *ssh, "--evidence", str(store), "--approved-by", "cab"])
    assert code == 0, capsys.readouterr().err
    for node in ("fabric", "worker-0", "jump"):
        live = lab_points(lab)[node].run(["nft", "list", "table", "inet", "ringfence"], timeout=30)
        assert live.returncode == 0, node
    # and the probes over SSH prove the enforced matrix both ways
    out = tmp_path / "probes.json"
    code = main(["probe", str(policy), *ssh, "--store", str(store), "-o", str(out)])
    doc = json.loads(out.read_text())
    rows = doc.get("probes", doc.get("results", []))
    assert code == 0, [r for r in rows if r.get("outcome") not in ("connected", "refused", "timeout")][:5]
    assert {r["expected"] for r in rows} == {"allow", "deny"}
    assert SiteCluster(ssh_site(load_hosts(hosts)), load_policy(policy)).workers_alive()


def test_a_rank_whose_progress_cannot_be_read_is_unobserved_not_stopped(ssh_lab: tuple[Lab, Path, Path]) -> None:
    lab, hosts, policy = ssh_lab
    inv = load_hosts(hosts)
    broken = inv.model_copy(update={"hosts": {
        n: (h.model_copy(update={"progress": "/nonexistent/rank.json"}) if n == "worker-1" else h)
        for n, h in inv.hosts.items()}})
    cluster = SiteCluster(ssh_site(broken), load_policy(policy))
    assert set(steps_of(cluster.agent_status())) == {"worker-0"}
    assert not cluster.workers_alive()
    from ringfence.enforce.contain import training_progress

    before = steps_of(cluster.agent_status())
    got = training_progress(lambda: steps_of(cluster.agent_status()), ["worker-0", "worker-1"], [], before,
                            wait=5.0)  # worker-1 is never read: the wait always runs out, its length proves nothing
    assert got["others_training"] is None and got["unobserved"] == ["worker-1"]


def test_containment_over_ssh_proves_the_node_and_the_fabric_and_releases(
    ssh_lab: tuple[Lab, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab, hosts, policy = ssh_lab
    ssh = ["--target", "ssh", "--hosts", str(hosts), "--policy", str(policy)]
    store = tmp_path / "ev"
    if lab_points(lab)["fabric"].run(["nft", "list", "table", "inet", "ringfence"], timeout=30).returncode != 0:
        assert main(["apply", str(policy), "--target", "ssh", "--hosts", str(hosts), "--evidence", str(store),
                     "--approved-by", "cab"]) == 0
    out = tmp_path / "containment.json"
    # a rank with approved peers: its inbound denial is shown at the fabric (the peer's own rules let the
    # probe out), the fabric alone drops its approved paths once its own containment is lifted, and the
    # control host driving the containment over SSH stays reachable without being probed
    code = main(["contain", "--node", "worker-1", "--drill", *ssh, "--store", str(store), "--seconds", "2",
                 "-o", str(out)])
    doc = json.loads(out.read_text())
    summary = {k: v for k, v in doc.items() if k not in ("probes", "release_probes", "snapshot")}
    assert code == 0, (summary, capsys.readouterr().err[-2000:])
    assert doc["points"] == {"node": True, "fabric": True} and doc["isolated"] is True
    assert doc["released"] and doc["release_verified"]
    assert doc["others_training"] is None  # the lab's one job is the contained rank's: nobody else to watch
    assert not [p for p in doc["probes"] if p["destination"].startswith("jump")], "the control host was probed"
