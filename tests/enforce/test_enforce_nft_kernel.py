"""nftables rulesets in the real kernel: every rendering passes ``nft -c``, and a loaded node ruleset
admits its approved flow, drops the rest with a moved per-probe counter, audits, and contains."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringfence.enforce import RenderOptions, resolve
from ringfence.enforce.nftables import NftablesRenderer, render_fabric, render_node
from ringfence.enforce.nftrun import NftError, Throwaway, check, list_ruleset, load, throwaway_namespace
from ringfence.enforce.probe import denied_packets, tcp_probe
from ringfence.enforce.synth import synthetic_policy
from ringfence.policy import Policy, load_policy

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nft") is None, reason="needs root and nft"),
]
ROOT = Path(__file__).resolve().parents[2]
USER, MGMT = "10.77.4.10", "10.77.3.10"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(ROOT / "examples" / "lab-policy.yaml")


def test_every_rendering_passes_the_kernel_check(policy: Policy) -> None:
    with throwaway_namespace("chk") as ns:
        for audit in (False, True):
            for f in NftablesRenderer().render(policy, RenderOptions(audit=audit)).files:
                check(ns.executor, f.json())
        check(ns.executor, render_fabric(resolve(synthetic_policy(300, 30)), hook="input"))
        broken = render_node(resolve(policy), "mgmt")
        broken["nftables"].append({"add": {"rule": {"family": "inet", "table": "ringfence", "chain": "input",
                                                    "expr": [{"jump": {"target": "no-such-chain"}}]}}})
        with pytest.raises(NftError, match="no-such-chain|No such file"):
            check(ns.executor, broken)
        assert list_ruleset(ns.executor)["nftables"][1:] == []  # checks never commit


def _sh(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Throwaway, Throwaway]]:
    """``user`` and ``mgmt`` (addresses as in the lab policy) joined by a veth; mgmt listens on 8000 and 22."""
    with throwaway_namespace("usr") as cli, throwaway_namespace("mgt") as srv:
        veth = f"{cli.name[:8]}v"
        _sh("ip", "-n", cli.name, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", srv.name)
        for ns, dev, addr in ((cli, veth, USER), (srv, "eth0", MGMT)):
            _sh("ip", "-n", ns.name, "link", "set", "lo", "up")
            _sh("ip", "-n", ns.name, "addr", "add", f"{addr}/16", "dev", dev)
            _sh("ip", "-n", ns.name, "link", "set", dev, "up")
        server = subprocess.Popen(
            ["ip", "netns", "exec", srv.name, "python3", "-c",
             "import socket,threading\n"
             "def serve(p):\n"
             " s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(('0.0.0.0',p));"
             " s.listen()\n"
             " while True:\n"
             "  c,_=s.accept(); c.recv(64); c.sendall(b'HTTP/1.0 200 OK\\r\\n\\r\\n'); c.close()\n"
             "[threading.Thread(target=serve,args=(p,)).start() for p in (8000,22)]\n"],
            start_new_session=True)
        try:
            deadline = time.monotonic() + 10
            while tcp_probe(cli.executor, MGMT, 8000, timeout=1).outcome != "connected":
                assert time.monotonic() < deadline, "test server did not start"
                time.sleep(0.1)
            yield cli, srv
        finally:
            server.kill()
            server.wait()


def test_loaded_ruleset_allows_approved_and_proves_denials(policy: Policy,
                                                           pair: tuple[Throwaway, Throwaway]) -> None:
    cli, srv = pair
    m = resolve(policy)
    before = tcp_probe(cli.executor, MGMT, 22, timeout=1)
    assert before.outcome == "connected"  # the path exists: so a later failure is the policy's doing
    load(srv.executor, render_node(m, "mgmt"))
    try:
        ok = tcp_probe(cli.executor, MGMT, 8000, app="http", timeout=2)
        assert ok.outcome == "connected" and ok.app_ok  # user-submit is approved
        denied = tcp_probe(cli.executor, MGMT, 22, timeout=1)
        assert denied.outcome == "timeout"  # dropped, not refused
        packets, where = denied_packets([srv.executor], USER, MGMT, denied.sport, 22)
        assert packets >= 1 and where == [f"{srv.name}/inet"]
        again, _ = denied_packets([srv.executor], USER, MGMT, ok.sport, 8000)
        assert again == 0  # the approved probe left no denial behind

        # containment: the same approved flow is cut once USER is contained (no collector)
        load(srv.executor, render_node(m, "mgmt", RenderOptions(contained=(USER,))))
        assert tcp_probe(cli.executor, MGMT, 8000, timeout=1).outcome == "timeout"

        # audit: would-be drops are counted but accepted
        load(srv.executor, render_node(m, "mgmt", RenderOptions(audit=True)))
        audited = tcp_probe(cli.executor, MGMT, 22, timeout=2)
        assert audited.outcome == "connected"
        assert denied_packets([srv.executor], USER, MGMT, audited.sport, 22)[0] >= 1

        # a failing transaction changes nothing: the audit ruleset stays in force
        bad = render_node(m, "mgmt")
        bad["nftables"].append({"add": {"rule": {"family": "inet", "table": "ringfence", "chain": "nope",
                                                 "expr": [{"accept": None}]}}})
        with pytest.raises(NftError):
            load(srv.executor, bad)
        assert tcp_probe(cli.executor, MGMT, 22, timeout=2).outcome == "connected"
    finally:
        load(srv.executor, {"nftables": [{"add": {"table": {"family": "inet", "name": "ringfence"}}},
                                         {"delete": {"table": {"family": "inet", "name": "ringfence"}}}]})
