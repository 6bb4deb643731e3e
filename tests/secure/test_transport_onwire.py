"""On the wire: a capture of the transport is what ringfence's own flow verdicts call encrypted ringfence-transport."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ringfence.secure.transport import Group
from ringfence.secure.transport.engine import ring_allreduce
from ringfence.secure.transport.reduce import make_reducer

pcap = pytest.importorskip("ringfence.observe.flows.pcap")


@pytest.mark.privileged
def test_capture_is_classified_encrypted_ringfence_transport(pki_home: Any, ranks: Any, tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("tcpdump") is None:
        pytest.skip("needs root and tcpdump")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "rft.pcap"
    dump = subprocess.Popen(
        ["tcpdump", "-i", "lo", "--immediate-mode", "-U", "-s", "256", "-w", str(out), f"tcp port {port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert dump.stderr is not None
        dump.stderr.readline()  # "listening on lo …": the capture is armed
        secret = np.full(300_000, 1.5, dtype=np.float32)  # readable float32 if it were sent in clear
        red = make_reducer("float32", "SUM")

        def fn(rank: int, g: Group) -> object:
            a = secret.copy()
            g.run(*ring_allreduce(a.data.cast("B"), 4, rank, 2, g.chunk), red)
            return a

        res = ranks([pki_home.config(0, port=port), pki_home.config(1)], fn)
        assert all(isinstance(r, np.ndarray) and r[0] == 3.0 for r in res), res
        time.sleep(0.5)  # let tcpdump write the last packets before it is stopped
    finally:
        dump.terminate()
        dump.wait(5)
        if dump.stderr is not None:
            dump.stderr.close()
    flows = pcap.PcapReader().read(out).flows.to_pylist()
    ours = [f for f in flows if port in (f.get("sport"), f.get("dport"))]
    assert ours, flows
    for f in ours:
        assert (f["protocol"], f["protection"]) == ("ringfence-transport", "encrypted"), f
