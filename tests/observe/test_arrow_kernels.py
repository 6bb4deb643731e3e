"""``ringfence.observe.arrow_kernels``: the capture path's kernel equals pyarrow's, and the lazy module is lazy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as real_pc
import pytest

from ringfence.observe.arrow_kernels import dictionary_encode, pc

CAPTURES = Path(__file__).resolve().parents[2] / ".." / "shared" / "captures"


@pytest.mark.parametrize(
    "values",
    [
        pa.array([b"ab", b"cd", b"ab", b"ef", b"cd"], pa.binary(2)),
        pa.array(["x", None, "y", "x", None]),
        pa.chunked_array([pa.array([3, 1]), pa.array([3, 2, 1])]),
        pa.array([], pa.binary(4)),
    ],
)
def test_dictionary_encode_is_pyarrows(values: pa.Array | pa.ChunkedArray) -> None:
    assert dictionary_encode(values).equals(real_pc.dictionary_encode(values))


def test_the_lazy_module_is_pyarrow_compute_and_dunders_do_not_import() -> None:
    assert pc.add(pa.array([1]), 2).to_pylist() == [3]
    assert pc.dictionary_encode is real_pc.dictionary_encode
    with pytest.raises(AttributeError):
        _ = pc.__wrapped__
    with pytest.raises(AttributeError):
        _ = pc.no_such_kernel_anywhere


_PROBE = r"""
import json, sys
from ringfence.observe import arrow_kernels
before = "pyarrow.compute" in sys.modules
_ = arrow_kernels.pc
after_name = "pyarrow.compute" in sys.modules
_ = arrow_kernels.pc.equal
print(json.dumps([before, after_name, "pyarrow.compute" in sys.modules]))
"""


def test_pyarrow_compute_is_imported_on_first_use_only() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == [False, False, True]


_FLOWS = r"""
import json, sys
from ringfence.cli import main
codes = []
for path, fmt, out in json.loads(sys.argv[1]):
    codes.append(main(["flows", path, "--format", fmt, "-o", out]))
print(json.dumps({"codes": codes, "compute": "pyarrow.compute" in sys.modules}))
"""


def test_the_flows_command_on_captures_never_imports_pyarrow_compute(tmp_path: Path) -> None:
    # Its ~30 ms import was a tenth of the whole command on a 1 GB capture (issue 17): every output format,
    # and captures that take the tunnel, fragment, RDMA and recogniser paths, must do without it.
    names = ["tcpdump-tests/various_gre.pcap", "tcpdump-tests/ip6_frag_asan.pcap", "rdma/roce.pcap",
             "tcpdump-tests/ppp_ip_udp_dns.pcap", "tcpdump-tests/nfs-write-verf-cookie.pcapng"]  # fmt: skip
    paths = [CAPTURES / n for n in names if (CAPTURES / n).exists()]
    assert len(paths) == len(names), "the shared captures are missing"
    jobs = [(str(p), fmt, str(tmp_path / f"{p.stem}.{fmt}")) for p in paths for fmt in ("jsonl", "table", "parquet")]
    out = subprocess.run([sys.executable, "-c", _FLOWS, json.dumps(jobs)], capture_output=True, text=True,
                         timeout=300, check=True)  # fmt: skip
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["codes"] == [0] * len(jobs)
    assert doc["compute"] is False
