"""Node-attestation costs on a throwaway swtpm (no root, no lab): enrolment, one quote, one verification.

    .venv/bin/python benchmarks/bench_attest.py [--rounds N]

Prints JSON: seconds to enrol (EK, AK, credential activation), to fetch one quote through tpm2-tools, and
the verifier's pure-Python check of one quote (median over N), so a fleet's re-attestation load can be sized.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "attest"))

from swtpm_kit import boot, policy_doc, swtpm  # noqa: E402

from ringfence.attest.registry import read_registry  # noqa: E402
from ringfence.attest.verifier import enrol, judge  # noqa: E402
from ringfence.policy.attestation import Attestation  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()
    policy = Attestation.model_validate_json(json.dumps(policy_doc()))
    with tempfile.TemporaryDirectory() as tmp, swtpm(Path(tmp) / "tpm") as tpm:
        boot(tpm)
        reg = Path(tmp) / "reg.json"
        t0 = time.perf_counter()
        [outcome] = enrol([tpm], reg, "bench")
        enrol_s = time.perf_counter() - t0
        assert outcome.enrolled, outcome.reason
        entry = read_registry(reg, "bench").nodes[tpm.node]
        quote_s, verify_s = [], []
        for _ in range(args.rounds):
            nonce = os.urandom(32)
            t0 = time.perf_counter()
            ev = tpm.quote(nonce, policy.pcrs)
            quote_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            d = judge(entry, ev, nonce, policy)
            verify_s.append(time.perf_counter() - t0)
            assert d.admitted, d.reasons
    tools = subprocess.run(["tpm2_quote", "--version"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"enrol_s": round(enrol_s, 3), "quote_median_s": round(statistics.median(quote_s), 4),
                      "verify_median_ms": round(1000 * statistics.median(verify_s), 3), "rounds": args.rounds,
                      "tpm2_tools": tools, "load_average": os.getloadavg()[0]},
                     indent=1))


if __name__ == "__main__":
    main()
