"""Shared fixtures for every ringfence test. Two, both session-scoped, both about the namespace lab.

``lab`` — a running :class:`ringfence.lab.Lab` with the default shape (2 workers, 1 job ``train-a``,
addresses as in ``examples/lab-policy.yaml``), its servers up and traffic of all four classes
flowing, "as found": plaintext everywhere, no filtering. Skips (with the reason) when the machine
cannot run a lab: not root, or iproute2/tcpdump/mergecap/openssh missing. Torn down at session end.
Use ``lab.executor("storage")`` to run commands in a node, ``lab.ssh_executor()`` for OpenSSH from
``jump`` to ``mgmt``, ``lab.status()`` for names/addresses/ports, ``lab.policy_yaml()`` for its
policy, ``lab.agent_status()`` for traffic counters, ``lab.capture(seconds, path)`` for a new capture.
A test that changes the shared lab (nftables rules, TLS on the services, stopped traffic) must undo
the change before it ends; a test that needs a lab of another shape brings up its own with
``with Lab.up(...) as other:``.

``lab_capture`` — the ``Path`` of a pcap of about 8 seconds of that lab's traffic, taken right after
the traffic started (so it is the as-found state, whatever later tests do to the lab). It holds TCP
flows of all four classes: collective (gloo between worker-0 and worker-1, ports 1024-65535),
storage (workers → storage:8080), management (workers/aux/user → mgmt:8000, jump → mgmt:22 ssh)
and replication (storage → external:9000), plus the aux node's lateral attempts (aux → storage:8080,
aux → mgmt:22). Every packet appears once (captured where it entered the fabric); at most 256 bytes
of each packet are kept. Classic pcap, Ethernet link type. Read it in place; do not modify it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ringfence.errors import EnvironmentProblem
from ringfence.lab import Lab
from ringfence.lab.netns import require_privileges

_CAPTURE = pytest.StashKey[Path]()


@pytest.fixture(scope="session")
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A running default lab with traffic (see the module docstring); skipped where no lab can run."""
    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    # The ranks start directly, not under Slurm: tests here enforce policies learned from a short capture
    # (discover), which cannot know the scheduler's rare RPCs, then restart the job under them. The Slurm
    # lab has tests of its own (tests/lab/test_lab_slurm.py).
    running = Lab.up(workers=2, jobs=1, traffic=True, wait=True, scheduler=False)
    try:
        # captured now, before any test can change the lab, so lab_capture is the as-found state
        out = tmp_path_factory.mktemp("lab-capture") / "lab-as-found.pcap"
        running.capture(8.0, out)
        request.config.stash[_CAPTURE] = out
        yield running
    finally:
        running.down()


@pytest.fixture(scope="session")
def lab_capture(lab: Lab, request: pytest.FixtureRequest) -> Path:
    """Path of an ~8 s capture of the ``lab`` fixture's traffic, all four classes (see the module docstring)."""
    return request.config.stash[_CAPTURE]
