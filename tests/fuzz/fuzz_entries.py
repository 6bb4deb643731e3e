"""In-memory fuzz entry points: one per parser, each taking the input's bytes, for the coverage-guided campaign.

``fuzz_kit`` feeds whole readers through a file, which costs 1–40 ms an input (Arrow and DuckDB set-up
per file); a campaign of 10^6 inputs per parser needs the parsing layer called directly. So each
:class:`Entry` has ``one`` — the cheapest call that still runs the parser's own code on the bytes
(the pcap framing and packet decode on a ``BytesIO``; the NetFlow/IPFIX datagram walker on the
buffer; the policy, nccl-tests and facts parsers on the text) — and, where ``one`` skips part of the
public reader, ``full``: the whole reader on a reused tmpfs file, run on one input in
:data:`FULL_EVERY` so the layers above the framing are fuzzed too, at a rate the campaign can afford.

Seeds are named by path (``../shared`` captures and samples, read in place) or made here (documents
the project writes); :func:`written_seeds` puts the made ones under an ignored directory.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from fuzz_kit import CAPTURES, MAX_SEED, ROOT, SAMPLES, _run_seed

#: Where the whole-reader samples and the evidence store live: tmpfs when there is one (no disk I/O per input).
SCRATCH = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
#: One input in this many also goes through the whole public reader (``Entry.full``).
FULL_EVERY = 64


@dataclass(frozen=True)
class Entry:
    """One parser's fuzz entry: seeds and the calls that feed it bytes."""

    name: str
    seed_files: tuple[Path, ...]
    one: Callable[[bytes], object]
    full: Callable[[bytes], object] | None = None
    #: Seeds made by the project's own code, made when asked (so a child builds only its own target's).
    made: Callable[[], tuple[bytes, ...]] = field(default=tuple)

    def seeds(self) -> list[bytes]:
        """Every seed's bytes (files read now, in place)."""
        return [p.read_bytes() for p in self.seed_files] + list(self.made())


def _glob(base: Path, pattern: str, limit: int = 64) -> tuple[Path, ...]:
    found = [p for p in sorted(base.glob(pattern)) if p.is_file() and p.stat().st_size <= MAX_SEED]
    return tuple(found[:limit])


# --- the calls ---------------------------------------------------------------------------------------


def remove_scratch(pid: int) -> None:
    """Remove process ``pid``'s scratch files (run by the runner after each child: libFuzzer's exit skips atexit)."""
    for path in SCRATCH.glob(f"rf-fuzz-{pid}-*"):
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


atexit.register(remove_scratch, os.getpid())  # for the test processes, which exit normally


def _scratch_file(name: str, data: bytes) -> Path:
    """The reused tmpfs file for whole-reader calls (one per suffix and process)."""
    path = SCRATCH / f"rf-fuzz-{os.getpid()}-{name}"
    path.write_bytes(data)
    return path


def _pcap_framing(data: bytes) -> object:
    """The capture walk and packet decode on an in-memory stream (no Arrow table at the end)."""
    from ringfence.observe.flows.pcap import PcapReader, _Read

    run = _Read(PcapReader(), Path("fuzz.pcap"), io.BytesIO(data), len(data), None)
    run.run()
    return run.records


def _reader(fmt: str, suffix: str) -> Callable[[bytes], object]:
    def full(data: bytes) -> object:
        from ringfence.observe.flows.registry import reader

        return reader(fmt).read(_scratch_file(fmt + suffix, data))

    return full


def _zeek_framing(data: bytes) -> object:
    """Zeek TSV or JSON lines into typed columns, without the flow conversion after them."""
    from ringfence.observe.flows._common import WarningLog
    from ringfence.observe.flows._zeek_json import read_zeek_json
    from ringfence.observe.flows.zeek import ZeekReader

    path = _scratch_file("zeek.log", data)
    if data.lstrip().startswith(b"{"):
        return read_zeek_json(path, WarningLog(), None)
    return ZeekReader()._read_tsv(path, WarningLog(), None)


def _netflow(data: bytes) -> object:
    """The NetFlow v5/v9/IPFIX datagram walker on the buffer, as the reader runs it on its mmap."""
    from ringfence.observe.flows._common import WarningLog
    from ringfence.observe.flows._netflow_raw import RawDatagramParser

    return RawDatagramParser(Path("fuzz.dat"), WarningLog()).parse(data)


def _policy(data: bytes) -> object:
    from ringfence.policy.load import parse_policy

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None  # load_policy reports this as a PolicyError before parsing
    return parse_policy(text, "fuzz.yaml")


def _nccl(json_form: bool) -> Callable[[bytes], object]:
    def one(data: bytes) -> object:
        from ringfence.bench.nccl_tests import parse_nccl_tests_json, parse_nccl_tests_text

        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None  # import_nccl_tests reports this as an NcclTestsError before parsing
        parse = parse_nccl_tests_json if json_form else parse_nccl_tests_text
        return parse(text, "fuzz").to_run()

    return one


def _bench_run(data: bytes) -> object:
    from ringfence.bench.run import RunFileError, run_from_dict
    from ringfence.bounded import loads_json

    doc = loads_json(data, "fuzz.json")
    if not isinstance(doc, dict):
        raise RunFileError("fuzz.json", "a run file is a JSON object")  # as load_run does
    return run_from_dict(doc, "fuzz.json")


def _facts(kind: str) -> Callable[[bytes], object]:
    def one(data: bytes) -> object:
        from ringfence.facts import load_many

        return load_many(kind, ["fuzz.json"], [data])

    return one


@cache
def _store() -> Path:
    """A small real evidence store in scratch space; its log is the seed and its head stays fixed."""
    from ringfence.evidence.store import EvidenceStore

    where = SCRATCH / f"rf-fuzz-{os.getpid()}-store"
    shutil.rmtree(where, ignore_errors=True)
    store = EvidenceStore.open(where / "ev", key=where / "key")
    store.append("observation", "fuzz", "lab", {"flows": 3, "nodes": ["a", "b"]}, {"in": "0" * 64})
    store.append("observation", "fuzz", "lab", {"ok": True, "n": [1.5, -2, None]})
    store.append("observation", "fuzz", "lab", "text ✓")
    return where / "ev"


def _evidence(data: bytes) -> object:
    """``verify`` of a store whose log is ``data`` (head and signing key as committed)."""
    from ringfence.evidence.verify import verify_store

    store = _store()
    log = SCRATCH / f"rf-fuzz-{os.getpid()}-evidence.jsonl"
    log.write_bytes(data)
    # The signed checkpoint is its own file, not this input: the chain, head and record checks are fuzzed.
    return verify_store(log, store / "head", store / "blobs", None, False, None, require_signature=False)


def _evidence_seed() -> bytes:
    return (_store() / "evidence.jsonl").read_bytes()


_ZEEK_JSON = (
    b'{"ts":1700000000.5,"uid":"C1","id.orig_h":"10.77.1.10","id.orig_p":40000,"id.resp_h":"10.77.2.20",'
    b'"id.resp_p":443,"proto":"tcp","service":"ssl","duration":1.5,"orig_bytes":100,"resp_bytes":2000,'
    b'"conn_state":"SF","orig_pkts":5,"resp_pkts":6,"orig_ip_bytes":400,"resp_ip_bytes":2400}\n'
    b'{"ts":1700000001.0,"uid":"C2","id.orig_h":"fe80::1","id.orig_p":5353,"id.resp_h":"ff02::fb",'
    b'"id.resp_p":5353,"proto":"udp","tunnel_parents":["C1"],"vlan":7}\n'
)


@cache
def _facts_seeds() -> dict[str, bytes]:
    """A valid document of each facts kind: the ones tests/facts proves its verbs write, and a bench comparison.

    Borrowed from that test module (not copied) so the seeds follow the schemas when they change.
    """
    import importlib.util

    from ringfence.bench.compare import compare_runs
    from ringfence.bench.nccl_tests import import_nccl_tests

    spec = importlib.util.spec_from_file_location("_rf_facts_docs", ROOT / "tests" / "facts" / "test_facts_schemas.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seeds = {kind: json.dumps(make(), indent=1).encode() for kind, make in module.DOCS.items()}
    run = import_nccl_tests(ROOT / "tests" / "bench" / "assets" / "nccl_tests_2x2.json").to_run()
    bench = {"format": "ringfence-bench-compare/1", "taken": "2026-12-01T00:00:00+00:00",
             **compare_runs(run, run).to_dict()}
    seeds["bench"] = json.dumps(bench, indent=1).encode()
    return seeds


_FACTS_KINDS = ("bench", "changes", "containment", "drills", "keys", "probes", "ruleset")


def _facts_seed(kind: str) -> Callable[[], tuple[bytes, ...]]:
    return lambda: (_facts_seeds()[kind],)


@cache
def entries() -> dict[str, Entry]:
    """Every entry, by name (explicit: one per parser, flow format and facts kind)."""
    tcpdump, netflow = CAPTURES / "tcpdump-tests", SAMPLES / "netflow"
    # the project's own real-traffic captures (SSH, WireGuard, Spark, Redis, OpenVPN, PTP, BFD …) seed the
    # recognisers that the tcpdump captures do not reach
    own = _glob(ROOT / "tests" / "assets", "*.pcap")
    pcaps = _glob(tcpdump, "*.pcap", 40) + _glob(CAPTURES / "rdma", "*.pcap") + own
    assets = ROOT / "tests" / "bench" / "assets"
    found = [
        Entry("pcap", pcaps, _pcap_framing, _reader("pcap", ".pcap")),
        Entry("pcapng", _glob(tcpdump, "*.pcapng"), _pcap_framing, _reader("pcap", ".pcapng")),
        Entry("zeek-tsv", _glob(SAMPLES / "zeek", "*.log"), _zeek_framing, _reader("zeek", ".log")),
        Entry("zeek-json", (), _zeek_framing, _reader("zeek", ".json"), lambda: (_ZEEK_JSON,)),
        Entry("vpc", _glob(SAMPLES / "vpc", "*.log"), _reader("vpc", ".log")),
        Entry("hubble", _glob(SAMPLES / "hubble", "*.json"), _reader("hubble", ".json")),
        Entry("netflow-v5", _glob(netflow, "netflow5*.dat"), _netflow, _reader("ipfix", ".dat")),
        Entry("netflow-v9", _glob(netflow, "netflow9*.dat"), _netflow, _reader("ipfix", ".dat")),
        Entry("ipfix", _glob(netflow, "ipfix*.dat"), _netflow, _reader("ipfix", ".dat")),
        Entry("policy", _glob(ROOT / "examples", "*.yaml"), _policy),
        Entry("nccl-text", _glob(SAMPLES / "nccl-tests", "*.txt") + _glob(assets, "*.txt"), _nccl(False)),
        Entry("nccl-json", _glob(assets, "*.json"), _nccl(True)),
        Entry("bench-run", (), _bench_run, None, _run_seed),
        *(Entry(f"facts-{kind}", (), _facts(kind), None, _facts_seed(kind)) for kind in _FACTS_KINDS),
        Entry("evidence-verify", (), _evidence, None, lambda: (_evidence_seed(),)),
    ]
    return {e.name: e for e in found}


def written_seeds(entry: Entry, directory: Path) -> list[Path]:
    """The entry's seed files: its shared files in place, its made seeds written under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    made = []
    for i, data in enumerate(entry.made()):
        path = directory / f"made-{i}"
        path.write_bytes(data)
        made.append(path)
    return [*entry.seed_files, *made]


def tokens_dictionary() -> str:
    """fuzz_kit's hostile tokens as a libFuzzer dictionary (``"..."`` lines with ``\\xNN`` escapes)."""
    from fuzz_kit import _INTERESTING, _TOKENS

    def quote(token: bytes) -> str:
        return '"' + "".join(chr(b) if 32 <= b < 127 and b not in b'"\\' else f"\\x{b:02x}" for b in token) + '"'

    keep = [t for t in (*_TOKENS, *_INTERESTING) if len(t) <= 64]  # libFuzzer ignores longer entries
    return "\n".join(quote(t) for t in keep) + "\n"


__all__ = ["FULL_EVERY", "SCRATCH", "Entry", "entries", "remove_scratch", "tokens_dictionary", "written_seeds"]
