"""Run every ringfence benchmark in turn (``make bench``); each prints its own markdown table.

Each script is also runnable on its own; see BENCHMARKS.md for what each measures against which
named alternative. The lab-based ones need root.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = (
    ("pcap reader vs tshark", ["bench_pcap.py", "--size", "1G"]),
    ("classification vs bare DuckDB", ["bench_classify.py"]),
    ("nftables scale", ["bench_nft_scale.py"]),
    ("encrypted collective vs plaintext gloo", ["bench_transport.py", "--target", "lab", "--up"]),
)


def main() -> int:
    """Run all; exit non-zero if any script failed."""
    failed = []
    for title, argv in SCRIPTS:
        print(f"\n## {title}\n", flush=True)
        rc = subprocess.call([sys.executable, str(HERE / argv[0]), *argv[1:]])
        if rc != 0:
            failed.append(title)
    if failed:
        print(f"\nfailed or missed a target: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
