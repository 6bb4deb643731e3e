"""Fuzz targets: one per parser, each a public reader fed mutated real inputs.

A target passes an input when the reader returns, or raises a :class:`RingfenceError` (a clear
error, exit 2). Anything else is a crash; an input that runs past :data:`HANG_S` is a hang. The
corpus is seeded from ``../shared`` captures and samples and the project's own examples; the
mutator knows both bytes (flips, interesting values, cuts, splices) and text (numbers, brackets,
aliases, bad UTF-8). Used by ``tests/fuzz/test_fuzz_targets.py`` (a small fixed budget, every
``make test``: the whole public readers, through a file). The long coverage-guided campaign
(``make fuzz``) calls the parsers in memory instead: see ``fuzz_entries`` and BENCHMARKS.md.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from ringfence.errors import RingfenceError

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
SAMPLES = SHARED / "samples"
CAPTURES = SHARED / "captures"
#: An input that takes longer than this is reported as a hang (inputs are at most a few hundred KB).
HANG_S = 20.0
#: Largest seed used (bytes): big seeds make each run slow without exercising more of the parser.
MAX_SEED = 256 << 10


@dataclass(frozen=True)
class Target:
    """One parser under fuzzing."""

    name: str
    seeds: tuple[bytes, ...]
    suffix: str
    run: Callable[[Path], object]


def _files(*patterns: tuple[Path, str]) -> tuple[bytes, ...]:
    out: list[bytes] = []
    for base, pattern in patterns:
        out += [p.read_bytes() for p in sorted(base.glob(pattern)) if p.is_file() and p.stat().st_size <= MAX_SEED]
    return tuple(out)


def _flow(fmt: str) -> Callable[[Path], object]:
    def run(path: Path) -> object:
        from ringfence.observe.flows.registry import reader

        return reader(fmt).read(path)

    return run


def _policy(path: Path) -> object:
    from ringfence.policy import load_policy

    return load_policy(path)


def _nccl(path: Path) -> object:
    from ringfence.bench.nccl_tests import import_nccl_tests

    report = import_nccl_tests(path)
    return report.to_run()


def _run_file(path: Path) -> object:
    from ringfence.bench.run import load_run

    return load_run(path)


def _facts(kind: str) -> Callable[[Path], object]:
    def run(path: Path) -> object:
        from ringfence.enforce import facts

        loader: Callable[[Path], object] = getattr(facts, f"load_{kind}_facts")
        return loader(path)

    return run


def _keys(path: Path) -> object:
    from ringfence.facts.keys import load_key_facts

    return load_key_facts(str(path))


def _probe_seed() -> bytes:
    probe = {
        "source": "worker-0",
        "destination": "storage",
        "proto": "tcp",
        "port": 8080,
        "expected": "allow",
        "outcome": "connected",
        "by_policy": None,
        "detail": "",
        "evidence": [],
        "rule": None,
    }
    doc = {"format": "ringfence-probes/1", "target": "lab", "taken": "2026-12-01T00:00:00+00:00", "probes": [probe]}
    return json.dumps(doc, indent=1).encode()


def _run_seed() -> tuple[bytes, ...]:
    """A bench run file, as ``bench import`` writes it, from the repository's nccl-tests asset."""
    try:
        from ringfence.bench.nccl_tests import import_nccl_tests
        from ringfence.bench.run import run_to_dict

        run = import_nccl_tests(ROOT / "tests" / "bench" / "assets" / "nccl_tests_2x2.json").to_run()
        return (json.dumps(run_to_dict(run), indent=1).encode(),)
    except (RingfenceError, OSError):
        return ()


def targets() -> dict[str, Target]:
    """Every fuzz target, by name (explicit: one entry per parser and facts kind)."""
    tcpdump = CAPTURES / "tcpdump-tests"
    return {
        "pcap": Target("pcap", _files((tcpdump, "*.pcap"), (CAPTURES / "rdma", "*.pcap"))[:40], ".pcap", _flow("pcap")),
        "pcapng": Target("pcapng", _files((tcpdump, "*.pcapng")), ".pcapng", _flow("pcap")),
        "zeek": Target("zeek", _files((SAMPLES / "zeek", "*.log")), ".log", _flow("zeek")),
        "vpc": Target("vpc", _files((SAMPLES / "vpc", "*.log")), ".log", _flow("vpc")),
        "hubble": Target("hubble", _files((SAMPLES / "hubble", "*.json")), ".json", _flow("hubble")),
        "ipfix": Target("ipfix", _files((SAMPLES / "netflow", "*.dat")), ".dat", _flow("ipfix")),
        "policy": Target("policy", _files((ROOT / "examples", "*.yaml")), ".yaml", _policy),
        "nccl-text": Target(
            "nccl-text",
            _files((SAMPLES / "nccl-tests", "*.txt"), (ROOT / "tests" / "bench" / "assets", "*.txt")),
            ".txt",
            _nccl,
        ),
        "nccl-json": Target("nccl-json", _files((ROOT / "tests" / "bench" / "assets", "*.json")), ".json", _nccl),
        "bench-run": Target("bench-run", _run_seed(), ".json", _run_file),
        "facts-probes": Target("facts-probes", (_probe_seed(),), ".json", _facts("probe")),
        "facts-ruleset": Target(
            "facts-ruleset", (b'{"format": "ringfence-ruleset/1", "target": "lab"}',), ".json", _facts("ruleset")
        ),
        "facts-changes": Target(
            "facts-changes",
            (b'{"format": "ringfence-changes/1", "target": "lab", "changes": []}',),
            ".json",
            _facts("change"),
        ),
        "facts-containment": Target(
            "facts-containment", (b'{"format": "ringfence-containment/1"}',), ".json", _facts("containment")
        ),
        "facts-keys": Target(
            "facts-keys", (b'{"keys": {"rotations": [{"at": "2026-12-01T00:00:00Z"}]}}',), ".json", _keys
        ),
    }


# --- mutation -------------------------------------------------------------------------------------

_INTERESTING = (b"\x00", b"\xff", b"\x7f", b"\x80", b"\xff\xff", b"\x00\x00", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00")
_TOKENS = (
    b"nan",
    b"inf",
    b"-1",
    b"0",
    b"1e400",
    b"9" * 30,
    b"9" * 5000,
    b"\xff",
    b"\xc3",
    b"\r",
    b"\n",
    b"\n" * 50,
    b"\t",
    b"{",
    b"}",
    b"[",
    b"]",
    b"[" * 300,
    b'"',
    b"\\",
    b":",
    b",",
    b"&a",
    b"*a",
    b"? [a, b]\n: c",
    b"!!python/object:x",
    b"2024-02-30",
    b"::ffff:10.0.0.1",
    b"#fields\t",
    b"#separator \\x09",
    b"null",
    b"true",
    b'"\\u0000"',
    b"-",
)


def mutate(rng: random.Random, data: bytes, corpus: tuple[bytes, ...]) -> bytes:
    """One to four random mutations of ``data`` (bytes and text aware), bounded in size."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:  # flip bits
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:  # an interesting binary value
            v = rng.choice(_INTERESTING)
            buf[pos : pos + len(v)] = v
        elif op == 2:  # a hostile text token
            buf[pos:pos] = rng.choice(_TOKENS)
        elif op == 3:  # cut
            del buf[pos:]
        elif op == 4 and buf:  # delete a chunk
            del buf[pos : pos + rng.randint(1, 64)]
        elif op == 5 and buf:  # duplicate a chunk (repeated lines, records, sets)
            end = min(len(buf), pos + rng.randint(1, 512))
            buf[pos:pos] = buf[pos:end] * rng.randint(1, 8)
        elif op == 6 and corpus:  # splice in part of another seed
            other = rng.choice(corpus)
            a = rng.randrange(len(other) + 1)
            buf[pos:pos] = other[a : a + rng.randint(1, 1024)]
        elif op == 7:  # replace a number with an extreme one
            text = bytes(buf)
            digits = [i for i in range(min(len(text), 1 << 16)) if 48 <= text[i] <= 57]
            if digits:
                i = rng.choice(digits)
                buf[i : i + 1] = rng.choice((b"18446744073709551615", b"-5", b"0", b"4294967296", b"1.5", b"nan"))
        elif op == 8 and buf:  # overwrite 2/4/8 bytes with a random big-endian integer
            width = rng.choice((2, 4, 8))
            buf[pos : pos + width] = rng.getrandbits(8 * width).to_bytes(width, "big")
        if len(buf) > 4 * MAX_SEED:
            del buf[4 * MAX_SEED :]
    return bytes(buf)


# --- running ---------------------------------------------------------------------------------------


class Hang(Exception):
    """An input ran past :data:`HANG_S`."""


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    def alarm(_sig: int, _frame: FrameType | None) -> None:
        raise Hang(f"ran past {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass(frozen=True)
class Outcome:
    """What one input did: ``ok`` (read or a clear error), ``crash`` or ``hang``, and how long it took."""

    kind: str
    detail: str
    seconds: float


def run_one(target: Target, data: bytes, workdir: Path) -> Outcome:
    """Feed ``data`` to the target through a file, as a user would."""
    path = workdir / f"input{target.suffix}"
    path.write_bytes(data)
    start = time.perf_counter()
    try:
        with _deadline(HANG_S):
            target.run(path)
    except RingfenceError:
        return Outcome("ok", "", time.perf_counter() - start)
    except Hang as exc:
        return Outcome("hang", str(exc), time.perf_counter() - start)
    except Exception as exc:  # a crash is what the fuzzer looks for: every foreign exception counts
        first = (str(exc).splitlines() or [""])[0][:200]
        return Outcome("crash", f"{type(exc).__name__}: {first}", time.perf_counter() - start)
    return Outcome("ok", "", time.perf_counter() - start)


__all__ = ["HANG_S", "Outcome", "Target", "mutate", "run_one", "targets"]
