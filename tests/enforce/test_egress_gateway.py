"""The egress gateway's tinyproxy configuration, rendered from the policy: approved clients only, approved
destinations and ports only, and never an open proxy (no client, destination or port is an error)."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import time
from pathlib import Path

import pytest

from ringfence.enforce.egress_gateway import TINYPROXY, filter_text, tinyproxy_argv, tinyproxy_config
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.observe.flows.events.tinyproxy import TinyproxyReader
from ringfence.policy import Policy, parse_policy
from ringfence.policy.egress import GatewayError, find_gateway

TOPO = build_topology("rfunit", 4, 2)


def _policy(text: str) -> Policy:
    return parse_policy(text, "gateway")


def test_the_lab_policy_names_its_gateway_only_when_it_runs() -> None:
    assert find_gateway(_policy(render_policy(TOPO))) is None
    gw = find_gateway(_policy(render_policy(TOPO, egress_gateway=True)))
    assert gw is not None
    assert (gw.node, gw.address, gw.port, gw.service) == ("mgmt", "10.77.3.10", 8888, "egress-gateway")
    # replication: storage asks the gateway, the gateway reaches the replica sink — nothing else
    assert gw.clients == (("storage", "10.77.2.10"),) and gw.client_node("10.77.1.13") is None
    assert gw.destinations == (("external", "10.77.9.10"),) and gw.ports == (9000,)


def test_the_config_admits_approved_clients_destinations_and_ports_only() -> None:
    gw = find_gateway(_policy(render_policy(TOPO, egress_gateway=True)))
    assert gw is not None
    conf = tinyproxy_config(gw, log="/run/rf/t.log", pidfile="/run/rf/t.pid", filter_file="/run/rf/t.filter")
    lines = [ln for ln in conf.splitlines() if ln and not ln.startswith("#")]
    assert "Listen 10.77.3.10" in lines and "Port 8888" in lines
    assert [ln for ln in lines if ln.startswith(("Allow", "Deny"))] == ["Allow 10.77.2.10"]
    assert [ln for ln in lines if ln.startswith("ConnectPort")] == ["ConnectPort 9000"]
    assert {"FilterDefaultDeny Yes", "FilterType ere", "FilterURLs No", 'Filter "/run/rf/t.filter"',
            "LogLevel Info", 'LogFile "/run/rf/t.log"'} <= set(lines)
    assert filter_text(gw) == "^10\\.77\\.9\\.10$\n"
    assert tinyproxy_argv("/run/rf/t.conf") == ["/usr/bin/tinyproxy", "-d", "-c", "/run/rf/t.conf"]


def _without(text: str, flow_id: str) -> str:
    out = text.splitlines()
    i = next(k for k, ln in enumerate(out) if f'id: "{flow_id}"' in ln)
    del out[i:i + 2]  # the flow and its description line
    return "\n".join(out) + "\n"


def test_no_client_or_no_destination_is_an_error_never_an_open_proxy() -> None:
    text = render_policy(TOPO, egress_gateway=True)
    with pytest.raises(GatewayError, match="serves everyone"):
        find_gateway(_policy(_without(text, "checkpoint-replication")))
    with pytest.raises(GatewayError, match="tunnels to every port"):
        find_gateway(_policy(_without(text, "egress-gateway-replication")))
    gw = find_gateway(_policy(text))
    assert gw is not None
    with pytest.raises(GatewayError, match="never an open"):
        tinyproxy_config(type(gw)(gw.node, gw.address, gw.port, gw.service, (), gw.destinations, gw.ports),
                         log="/a", pidfile="/b", filter_file="/c")
    with pytest.raises(GatewayError, match="unsafe path"):
        tinyproxy_config(gw, log='/a"\nAllow 0.0.0.0/0', pidfile="/b", filter_file="/c")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(not Path(TINYPROXY).exists(), reason="tinyproxy-bin is not installed")
def test_the_rendered_config_really_enforces_in_tinyproxy_and_its_log_reads_back(tmp_path: Path) -> None:
    """The real tinyproxy on loopback, with the lab's rendered config moved to loopback addresses: an unapproved
    client, an unapproved destination and an unapproved port are refused; the approved tunnel opens."""
    gw = find_gateway(_policy(render_policy(TOPO, egress_gateway=True)))
    assert gw is not None
    sink_port, proxy_port = _free_port(), _free_port()
    gw = dataclasses.replace(gw, address="127.0.0.1", port=proxy_port, clients=(("storage", "127.0.0.2"),),
                             destinations=(("external", "127.0.0.1"),), ports=(sink_port,))
    (tmp_path / "filter").write_text(filter_text(gw))
    (tmp_path / "t.conf").write_text(tinyproxy_config(gw, log=str(tmp_path / "t.log"), pidfile=str(tmp_path / "t.pid"),
                                                      filter_file=str(tmp_path / "filter")))
    sink = socket.socket()
    sink.bind(("127.0.0.1", sink_port))
    sink.listen()
    proc = subprocess.Popen(tinyproxy_argv(str(tmp_path / "t.conf")), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        log = tmp_path / "t.log"
        while not log.exists() or b"Accepting connections" not in log.read_bytes():
            assert time.monotonic() < deadline and proc.poll() is None, "tinyproxy did not start"
            time.sleep(0.05)
        answers = []
        for src, target in (("127.0.0.3", f"127.0.0.1:{sink_port}"), ("127.0.0.2", f"127.0.0.5:{sink_port}"),
                            ("127.0.0.2", "127.0.0.1:22"), ("127.0.0.2", f"127.0.0.1:{sink_port}")):
            with socket.socket() as s:
                s.bind((src, 0))
                s.settimeout(5)
                s.connect(("127.0.0.1", proxy_port))
                s.sendall(f"CONNECT {target} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
                answers.append(s.recv(200).split(b"\r\n")[0].decode())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        sink.close()
    assert [a.split(" ", 1)[1] for a in answers] == ["403 Access denied", "403 Filtered", "403 Access violation",
                                                    "200 Connection established"]
    rows = TinyproxyReader().read(tmp_path / "t.log", node="mgmt").events.to_pylist()
    assert [(r["client"], r["host"], r["port"], r["decision"], r["reason"]) for r in rows] == [
        ("127.0.0.3", None, None, "deny", "unauthorized client"),
        ("127.0.0.2", "127.0.0.5", sink_port, "deny", "filtered destination"),
        ("127.0.0.2", "127.0.0.1", 22, "deny", "port not allowed"),
        ("127.0.0.2", "127.0.0.1", sink_port, "allow", "established"),
    ]
