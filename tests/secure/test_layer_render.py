"""Encryption layers without a lab: scopes, rendered configurations, the support probes' honesty."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.policy.model import Layer
from ringfence.secure.layers import ipsec, macsec, nccl_tls, registry, wireguard
from ringfence.secure.layers.interface import Endpoint, LayerError, RenderOptions, Transport
from ringfence.targets.interface import RunResult
from ringfence.targets.local import LocalExecutor

REPO = Path(__file__).resolve().parents[2]
A = Endpoint("worker-0", "10.77.1.10", "eth0", "02:00:00:00:00:0a", "spiffe://lab/node/worker-0")
B = Endpoint("worker-1", "10.77.1.11", "eth0", "02:00:00:00:00:0b", "spiffe://lab/node/worker-1")


class FailingExecutor:
    """An executor whose every command fails like a kernel without the module."""

    name = "fake"

    def __init__(self, stderr: bytes, code: int = 2) -> None:
        self.stderr, self.code = stderr, code
        self.calls: list[list[str]] = []

    def run(
        self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None, env: object = None
    ) -> RunResult:
        self.calls.append(list(argv))
        return RunResult(tuple(argv), self.code, b"", self.stderr, 0.01)


def test_scopes_say_what_they_do_not_cover() -> None:
    nccl = registry.scope_of("nccl-tls")
    assert nccl.covers(Transport.RDMA, routed=False)[0] is False
    assert "not rdma" in nccl.covers(Transport.RDMA, routed=False)[1]
    assert nccl.rotates_live is False
    assert nccl.covers(Transport.TCP, routed=True)[0] is True
    ms = registry.scope_of(Layer.MACSEC)
    assert ms.covers(Transport.TCP, routed=False)[0] is True
    ok, why = ms.covers(Transport.TCP, routed=True)
    assert not ok and "routed" in why
    assert registry.scope_of("wireguard").covers(Transport.RDMA, routed=False)[0] is False
    assert registry.scope_of("ipsec").covers(Transport.UDP, routed=True)[0] is True
    with pytest.raises(LayerError, match="unknown layer"):
        registry.layer("rot13")
    with pytest.raises(LayerError, match="no configuration renderer"):
        registry.renderer("tls")


def test_macsec_render_keys_match_across_the_link() -> None:
    out = {r.node: r for r in macsec.LAYER.render(((A, B),), RenderOptions(offload="mac"))}
    a_files = {f.path: f for f in out["worker-0"].files}
    b_files = {f.path: f for f in out["worker-1"].files}
    # A's transmit key is the key B receives A with: the same file content on both sides
    assert a_files["macsec/tx-worker-0.key"].content == b_files["macsec/tx-worker-0.key"].content
    assert a_files["macsec/tx-worker-0.key"].content != a_files["macsec/tx-worker-1.key"].content
    assert all(f.secret for p, f in a_files.items() if p.endswith(".key"))
    script = a_files["macsec/apply.sh"].content
    assert "type macsec port 1 encrypt on cipher gcm-aes-256" in script and "offload mac" in script
    assert f"rx port 1 address {B.mac}" in script
    assert a_files["macsec/tx-worker-0.key"].content.strip() not in script  # keys never in the commands
    with pytest.raises(LayerError, match="MAC address"):
        macsec.LAYER.render(((A, Endpoint("x", "10.0.0.1")),), RenderOptions())
    with pytest.raises(LayerError, match="offload"):
        macsec.LAYER.render(((A, B),), RenderOptions(offload="gpu"))


def test_ipsec_render_uses_workload_identities_and_traps() -> None:
    out = {r.node: r for r in ipsec.LAYER.render(((A, B),), RenderOptions(rekey="30m"))}
    conf = out["worker-0"].files[0].content
    # the subject DN carries the SPIFFE URI: a bare URI would be parsed by strongSwan as an FQDN no cert holds
    assert 'id = "CN=spiffe://lab/node/worker-0"' in conf and 'id = "CN=spiffe://lab/node/worker-1"' in conf
    assert "revocation = strict" in conf
    assert "mode = transport" in conf and "start_action = trap" in conf and "rekey_time = 30m" in conf
    assert "esp_proposals = aes256gcm16-x25519" in conf
    with pytest.raises(LayerError, match="identities"):
        ipsec.LAYER.render(((A, Endpoint("x", "10.0.0.1")),), RenderOptions())


def test_nccl_tls_one_key_per_job_for_every_rank() -> None:
    out = nccl_tls.LAYER.render(((A, B),), RenderOptions(extra={"job": "train-a"}))
    keys = {r.node: next(f for f in r.files if f.path == "nccl/train-a.psk") for r in out}
    assert keys["worker-0"].content == keys["worker-1"].content and keys["worker-0"].secret
    assert len(keys["worker-0"].content.strip()) >= 32
    snippet = next(f for f in out[0].files if f.path.endswith(".c")).content
    assert "ncclSetEncryption" in snippet and "NCCL_ENCRYPTION_MODE_PSK" in snippet
    assert any("NOT encrypted" in n for n in out[0].notes)


def test_wireguard_render_strict_rules() -> None:
    out = {r.node: r for r in wireguard.LAYER.render(((A, B),), RenderOptions())}
    files = {f.path: f for f in out["worker-0"].files}
    assert files["wireguard/wg0.conf"].secret
    assert "AllowedIPs = 10.77.1.11/32" in files["wireguard/wg0.conf"].content
    nft = files["wireguard/strict.nft"].content
    assert 'oifname != "wg0" counter name plaintext_out drop' in nft


def test_support_probe_reports_a_missing_module_plainly() -> None:
    fake = FailingExecutor(b"Error: Unknown device type.\n")
    res = macsec.LAYER.support(fake)  # type: ignore[arg-type]
    assert not res.available
    assert "lacks the macsec link type" in res.reason and "Unknown device type" in res.reason
    assert "ip netns del" in fake.calls[0][-1]  # the throwaway namespace is always removed
    res = ipsec.LAYER.support(FailingExecutor(b"Error: Requested AEAD algorithm not found.\n"))  # type: ignore[arg-type]
    assert not res.available and "AEAD algorithm not found" in res.reason


def _can_make_namespaces() -> bool:
    return os.geteuid() == 0 and subprocess.run(["ip", "netns", "list"], capture_output=True).returncode == 0


@pytest.mark.privileged
def test_support_probe_agrees_with_the_kernel() -> None:
    if not _can_make_namespaces():
        pytest.skip("needs root and iproute2 to make a throwaway namespace")
    before = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    res = macsec.LAYER.support(LocalExecutor())
    # ask the kernel the same question directly, in our own throwaway namespace
    ns = "rfprobetest"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "rfta", "type", "veth", "peer", "name", "rftb"], check=True)
        direct = (
            subprocess.run(
                ["ip", "-n", ns, "link", "add", "link", "rfta", "name", "rftm", "type", "macsec"], capture_output=True
            ).returncode
            == 0
        )
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    assert res.available == direct, res.reason
    after = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    assert not {n for n in after - before if n.startswith("rfprobe")}


def test_cli_render_writes_secret_files_0600(tmp_path: Path) -> None:
    code = main(
        [
            "encrypt",
            "render",
            "--layer",
            "macsec",
            "--policy",
            str(REPO / "examples" / "lab-policy.yaml"),
            "--nodes",
            "worker-0,worker-1",
            "--mac",
            "worker-0=02:00:00:00:00:0a",
            "--mac",
            "worker-1=02:00:00:00:00:0b",
            "-o",
            str(tmp_path),
        ]
    )
    assert code == 0
    key = tmp_path / "worker-0" / "macsec" / "tx-worker-0.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "worker-0" / "macsec" / "apply.sh").stat().st_mode) == 0o644
    assert (
        main(
            [
                "encrypt",
                "render",
                "--layer",
                "macsec",
                "--policy",
                str(REPO / "examples" / "lab-policy.yaml"),
                "--nodes",
                "worker-0,nowhere",
                "-o",
                str(tmp_path),
            ]
        )
        == 2
    )
