"""The lab's policy with its Slurm: slurmctld, each slurmd and srun's fixed port range are management services,
exactly the paths the scheduler uses are approved (none from aux, user, jump, storage or external), the policy
passes ``policy check``, and the classifier calls the scheduler's flows management, never collective."""

from __future__ import annotations

from pathlib import Path

import pytest

from flow_kit import AUX, JUMP, MGMT, STORAGE, USER, W0, W1, flows
from ringfence.analyze import classify
from ringfence.cli import main
from ringfence.enforce.probe_matrix import _approved
from ringfence.lab import slurm
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.policy import Policy, parse_policy
from ringfence.policy.matrix import resolve

TOPO = build_topology("rfab12")
SRUN_LO, SRUN_HI = (int(p) for p in slurm.SRUN_PORTS.split("-"))


@pytest.fixture(scope="module")
def policy() -> Policy:
    return parse_policy(render_policy(TOPO, slurm=True), "lab with Slurm")


def test_without_slurm_the_policy_is_unchanged() -> None:
    text = render_policy(TOPO)
    assert "slurm" not in text and render_policy(TOPO, slurm=False) == text


def test_the_daemons_are_management_services_of_application_slurm(policy: Policy) -> None:
    svc = {s.name: s for s in policy.services if s.application == "slurm"}
    assert {n: (s.node, s.port_range) for n, s in svc.items()} == {
        "slurmctld": ("mgmt", (slurm.CTLD_PORT, slurm.CTLD_PORT)),
        "worker-0-slurmd": ("worker-0", (slurm.SLURMD_PORT, slurm.SLURMD_PORT)),
        "worker-1-slurmd": ("worker-1", (slurm.SLURMD_PORT, slurm.SLURMD_PORT)),
        "worker-0-srun": ("worker-0", (SRUN_LO, SRUN_HI)),  # the batch step (and its srun) runs on worker-0
        "mgmt-srun": ("mgmt", (SRUN_LO, SRUN_HI)),  # an srun on the submit host (a benchmark's)
    }
    assert all(s.traffic_class.value == "management" for s in svc.values())
    slurm_flows = [f for f in policy.approved if "-slurm-" in f.id]
    assert len(slurm_flows) == 6 and all(f.traffic_class.value == "management" and f.description
                                         for f in slurm_flows)


def test_srun_ports_sit_above_the_ephemeral_range_gloo_binds_in() -> None:
    # gloo's pair listeners take kernel-assigned ports (net.ipv4.ip_local_port_range, 32768-60999 by default)
    assert 60999 < SRUN_LO <= SRUN_HI <= 65535


def test_slurm_conf_fixes_srun_ports(tmp_path: Path) -> None:
    paths = slurm.SlurmPaths(tmp_path / "slurm")
    slurm.prepare(TOPO, paths, tmp_path / "logs")
    assert f"SrunPortRange={slurm.SRUN_PORTS}" in paths.conf.read_text().splitlines()


# (source, destination, port, approving Slurm flow or None)
PATHS = [
    ("mgmt", "worker-0", slurm.SLURMD_PORT, "train-a-slurm-ctld"),
    ("mgmt", "worker-1", slurm.SLURMD_PORT, "train-a-slurm-ctld"),
    ("worker-0", "worker-1", slurm.SLURMD_PORT, "train-a-slurm-launch"),
    ("worker-1", "mgmt", slurm.CTLD_PORT, "train-a-slurm-register"),
    ("worker-1", "worker-0", SRUN_LO, "train-a-slurm-step-io"),
    ("worker-1", "worker-0", SRUN_HI, "train-a-slurm-step-io"),
    ("mgmt", "worker-0", SRUN_LO + 3, "train-a-slurm-ctld-srun"),
    ("worker-0", "mgmt", SRUN_LO, "train-a-slurm-submit-io"),  # a step's ranks answer srun on the submit host
    ("worker-1", "mgmt", SRUN_HI, "train-a-slurm-submit-io"),
    *((src, dst, port, None) for src in ("aux", "user", "jump", "storage", "external")
      for dst, port in (("worker-0", slurm.SLURMD_PORT), ("worker-1", slurm.SLURMD_PORT), ("mgmt", slurm.CTLD_PORT),
                        ("worker-0", SRUN_LO), ("mgmt", SRUN_LO))),
    ("mgmt", "worker-1", SRUN_LO, None),  # no srun runs on worker-1: nothing is approved there
]


@pytest.mark.parametrize(("src", "dst", "port", "rule"), PATHS)
def test_exactly_the_schedulers_paths_are_approved(policy: Policy, src: str, dst: str, port: int,
                                                   rule: str | None) -> None:
    addrs = {n.name: n.addresses[0] for n in policy.nodes}
    assert _approved(resolve(policy), addrs, src, dst, port) == rule


def test_policy_check_passes(policy: Policy, tmp_path: Path) -> None:
    f = tmp_path / "lab-slurm.yaml"
    f.write_text(render_policy(TOPO, slurm=True))
    assert main(["policy", "check", str(f)]) == 0


def test_the_classifier_calls_slurm_flows_management_and_gloo_collective(policy: Policy) -> None:
    cases = [  # (src, dst, dport, class, rule)
        (W0, MGMT, slurm.CTLD_PORT, "management", "train-a-slurm-register"),  # slurmd registers
        (MGMT, W1, slurm.SLURMD_PORT, "management", "train-a-slurm-ctld"),  # slurmctld pings slurmd
        (W0, W1, slurm.SLURMD_PORT, "management", "train-a-slurm-launch"),  # srun launches the step
        # slurmstepd → srun between two ranks of one job: inside the job's collective range, still management
        (W1, W0, SRUN_LO + 1, "management", "train-a-slurm-step-io"),
        (W1, W0, 41000, "collective", "train-a-collective"),  # a gloo pair listener
        (W0, W1, 29500, "collective", "train-a-collective"),
        (AUX, W0, slurm.SLURMD_PORT, "management", None),  # a lateral RPC: its class, unapproved
        (USER, MGMT, slurm.CTLD_PORT, "management", None),
        (JUMP, W1, slurm.SLURMD_PORT, "management", None),
        (STORAGE, MGMT, slurm.CTLD_PORT, "management", None),
    ]
    out = classify(flows([{"src": s, "dst": d, "dport": p} for s, d, p, *_ in cases]), policy).to_pylist()
    assert [(r["class"], r["rule"], r["approved"]) for r in out] == [(c, r, r is not None) for *_, c, r in cases]
