"""Import nccl-tests ``all_reduce_perf`` output — plain text or ``-J`` JSON — into the run format.

So a GPU cluster's canary is judged by the same gate as the lab's. The text reader goes by the
column header, not fixed positions, so it reads every layout we know of: the old one (``error``
column, no ``root``, ``N/A``), the current one (``root``, ``#wrong``), per-iteration timing
(``-I``: ``i_min i_max i_p99 i_cv%`` after each half), bitwise checks (``#bitdiff``) and
timestamps. Interleaved ``NCCL INFO`` lines are skipped. Exact values are kept as printed.

The JSON reader follows nccl-tests' ``-J`` report (src/util.cu, JSON_FILE_VERSION 3): a top
object with ``config`` (iterations, ``devices``), ``results`` (per size: ``out_of_place`` and
``in_place`` with ``time`` or ``cpu_time``, ``alg_bw``, ``bus_bw``, ``nwrong``, and with ``-I``
``*_per_iter`` objects holding ``p50_us``, ``p99_us``, ``cv_pct``, ``times_us``) and
``average_bus_bandwidth``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ringfence.bench.run import BenchConfig, BenchRun, Repeat, SizeResult
from ringfence.bounded import BoundedInputError, loads_json, read_bounded
from ringfence.errors import InputError

__all__ = [
    "NcclMeasurement",
    "NcclRank",
    "NcclRow",
    "NcclTestsError",
    "NcclTestsReport",
    "import_nccl_tests",
    "parse_nccl_tests_json",
    "parse_nccl_tests_text",
]

#: nccl-tests type names → torch-style names used by the run format.
_DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16", "int32": "int32",
           "int": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64", "int8": "int8", "uint8": "uint8"}

Placement = Literal["in-place", "out-of-place"]

#: The largest nccl-tests output accepted: a full sweep with -I and timestamps is well under 1 MB.
MAX_NCCL_TESTS_BYTES = 64 << 20


class NcclTestsError(InputError):
    """nccl-tests output that cannot be imported; ``where`` is ``file:line``."""


@dataclass(frozen=True)
class NcclMeasurement:
    """One half (out-of-place or in-place) of a result row, as printed."""

    time_us: float
    algbw: float
    busbw: float
    wrong: int | None  # None: "N/A" (validation off)
    i_min_us: float | None = None  # per-iteration columns (-I), when present
    i_max_us: float | None = None
    i_p99_us: float | None = None
    i_cv_pct: float | None = None
    i_p50_us: float | None = None  # JSON only
    times_us: tuple[float, ...] = ()  # JSON only


@dataclass(frozen=True)
class NcclRow:
    """One message size."""

    size: int
    count: int
    dtype: str  # as nccl-tests names it ("float")
    redop: str
    root: int | None
    out_of_place: NcclMeasurement | None
    in_place: NcclMeasurement | None
    line: int  # 1-based line in the source (0 for JSON)


@dataclass(frozen=True)
class NcclRank:
    """A ``#  Rank …`` device line."""

    rank: int
    host: str
    device: int
    pid: int
    device_name: str


@dataclass(frozen=True)
class NcclTestsReport:
    """A parsed nccl-tests output."""

    source: str
    collective: str  # "all_reduce"
    rows: tuple[NcclRow, ...]
    ranks: tuple[NcclRank, ...]
    warmup: int
    iterations: int
    params: tuple[tuple[str, str], ...]  # nThread, nGpus, agg iters, validation, graph, …
    versions: tuple[tuple[str, str], ...] = ()
    avg_busbw: float | None = None  # the "# Avg bus bandwidth" footer
    out_of_bounds: int | None = None
    per_iteration: bool = False

    def to_run(self, placement: Placement = "out-of-place", *, layer: str = "none", backend: str = "nccl") -> BenchRun:
        """The run format, taking the ``placement`` half of every row (size-0 rows carry no bandwidth)."""
        if not self.ranks:
            raise NcclTestsError(self.source, "no '#  Rank …' device lines: the world size is unknown")
        if self.collective != "all_reduce":
            raise NcclTestsError(self.source, f"this is a {self.collective} test, not all_reduce")
        kinds = {(r.dtype, r.redop) for r in self.rows}
        if len(kinds) != 1:
            raise NcclTestsError(self.source, f"several data types/ops in one output ({sorted(kinds)}); run one")
        dtype, redop = kinds.pop()
        results: list[SizeResult] = []
        notes: list[str] = []
        seen: set[int] = set()
        for row in self.rows:
            m = row.out_of_place if placement == "out-of-place" else row.in_place
            if row.size == 0:
                notes.append(f"size-0 row at line {row.line} skipped: no bandwidth to compare")
                continue
            if m is None:
                raise NcclTestsError(f"{self.source}:{row.line}", f"no {placement} columns for {row.size} bytes")
            if row.size in seen:
                raise NcclTestsError(f"{self.source}:{row.line}", f"size {row.size} appears twice")
            seen.add(row.size)
            results.append(SizeResult(
                size=row.size, count=row.count, time_us=m.time_us, algbw=m.algbw, busbw=m.busbw,
                p50_us=m.i_p50_us, p99_us=m.i_p99_us,
                cv=None if m.i_cv_pct is None else m.i_cv_pct / 100.0,
                wrong=m.wrong, times_us=m.times_us,
            ))
        if not results:
            raise NcclTestsError(self.source, "no result rows with a non-zero size")
        config = BenchConfig(
            tool="nccl-tests",
            sizes=tuple(r.size for r in results),
            dtype=_DTYPES.get(dtype, dtype),
            world_size=len(self.ranks),
            nodes=tuple(r.host for r in sorted(self.ranks, key=lambda r: r.rank)),
            warmup=self.warmup,
            iterations=self.iterations,
            versions=self.versions,
            params=self.params,
            collective=self.collective,
            redop=redop,
            placement=placement,
            backend=backend,
            layer=layer,
        )
        return BenchRun(config, (Repeat(tuple(results), source=f"nccl-tests:{self.source}"),), tuple(notes))


# --- plain text -----------------------------------------------------------------------------------

_HEADER = re.compile(r"^#\s*nThread\s")
_KV = re.compile(r"(nThread|nGpus|minBytes|maxBytes|step:|warmup iters:|iters:|agg iters:|validation:|graph:|unalign:)"
                 r"\s*(\S+)")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)(?:\s+nccl-headers=(\d+))?(?:\s+nccl-library=(\d+))?")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)(?:\s+Group\s+\d+)?\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
                   r"\s+\[[^\]]*\]\s*(.*)$")
_FOOT_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_FOOT_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_TIME_COLS = ("time", "cputime")


def _collective_of(program: str) -> str:
    name = Path(program).name
    return name.removesuffix("_perf") if name.endswith("_perf") else name


_INT = re.compile(r"^[0-9]{1,19}$")
_FLOAT = re.compile(r"^[+-]?([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})([eE][+-]?[0-9]{1,3})?$")
#: Largest integer accepted for sizes, counts and error counts (int64, what nccl-tests prints).
_INT_MAX = 2**63 - 1


def _num(token: str, where: str, what: str) -> float:
    """A finite decimal number as printed by nccl-tests; ``nan``, ``inf`` and 400-digit values are errors."""
    if _FLOAT.match(token) is None or not math.isfinite(value := float(token)):
        raise NcclTestsError(where, f"{what}: {token[:40]!r} is not a finite number")
    return value


def _int(token: str, where: str, what: str) -> int:
    """A non-negative decimal integer of at most 19 digits (int64)."""
    if _INT.match(token) is None or (value := int(token)) > _INT_MAX:
        raise NcclTestsError(where, f"{what}: {token[:40]!r} is not a non-negative integer")
    return value


def _wrong(token: str, where: str) -> int | None:
    return None if token.upper() == "N/A" else _int(token, where, "#wrong")


def _half(cols: Sequence[str], vals: Sequence[str], where: str) -> NcclMeasurement:
    if len(cols) != len(vals):
        raise NcclTestsError(where, f"expected {len(cols)} values ({' '.join(cols)}), found {len(vals)}")
    got = dict(zip(cols, vals, strict=True))
    missing = [c for c in ("algbw", "busbw") if c not in got]
    if missing:
        raise NcclTestsError(where, f"the column header has no {'/'.join(missing)} column")

    def opt(name: str) -> float | None:
        return _num(got[name], where, name) if name in got else None

    time_col = "time" if "time" in got else "cputime"
    wrong_col = "#wrong" if "#wrong" in got else "error"
    return NcclMeasurement(
        time_us=_num(got[time_col], where, time_col),
        algbw=_num(got["algbw"], where, "algbw"),
        busbw=_num(got["busbw"], where, "busbw"),
        wrong=_wrong(got[wrong_col], where) if wrong_col in got else None,
        i_min_us=opt("i_min"),
        i_max_us=opt("i_max"),
        i_p99_us=opt("i_p99"),
        i_cv_pct=opt("i_cv%"),
    )


def parse_nccl_tests_text(text: str, source: str = "<nccl-tests>") -> NcclTestsReport:
    """Parse ``all_reduce_perf`` stdout. Errors name ``source:line``."""
    params: dict[str, str] = {}
    versions: dict[str, str] = {}
    collective = "all_reduce"
    ranks: list[NcclRank] = []
    rows: list[NcclRow] = []
    columns: list[str] | None = None
    avg: float | None = None
    oob: int | None = None
    per_iter = False
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        where = f"{source}:{n}"
        if line.startswith("#"):
            if _HEADER.match(line):
                params.update((k.rstrip(":"), v) for k, v in _KV.findall(line))
            elif m := _VERSION.match(line):
                versions["nccl-tests"] = m.group(1)
                if m.group(3):
                    versions["nccl"] = m.group(3)
            elif m := _STARTING.match(line):
                collective = _collective_of(m.group(1))
            elif m := _RANK.match(line):
                rank, pid, host, dev, name = m.groups()
                ranks.append(NcclRank(_int(rank, where, "rank"), host, _int(dev, where, "device"),
                                      _int(pid, where, "pid"), name.strip()))
            elif m := _FOOT_OOB.match(line):
                oob = _int(m.group(1), where, "Out of bounds values")
            elif m := _FOOT_AVG.match(line):
                avg = _num(m.group(1), where, "Avg bus bandwidth")
            elif "Per-Iteration Report" in line:
                per_iter = True
            else:
                tokens = line.lstrip("#").split()
                if "size" in tokens[:1] and "count" in tokens and any(t in _TIME_COLS for t in tokens):
                    columns = tokens
            continue
        tokens = line.split()
        if not tokens or not tokens[0].isdigit():
            continue  # NCCL INFO/WARN lines and other chatter interleaved with the table
        if columns is None:
            raise NcclTestsError(where, "a result row before the column header line ('#  size  count …')")
        rows.append(_row(columns, tokens, where, n))
    if columns is None:
        raise NcclTestsError(f"{source}:1", "no nccl-tests column header found: is this all_reduce_perf output?")
    if not rows:
        raise NcclTestsError(f"{source}:1", "no result rows")
    if "warmup iters" not in params or "iters" not in params:
        raise NcclTestsError(f"{source}:1", "no '# nThread … warmup iters: … iters: …' header line")
    warmup = _int(params.pop("warmup iters"), f"{source}:1", "warmup iters")
    iters = _int(params.pop("iters"), f"{source}:1", "iters")
    for k in ("minBytes", "maxBytes", "step"):
        params.pop(k, None)  # the sizes themselves are part of the configuration
    return NcclTestsReport(
        source=source, collective=collective, rows=tuple(rows), ranks=tuple(ranks), warmup=warmup, iterations=iters,
        params=tuple(sorted(params.items())), versions=tuple(sorted(versions.items())), avg_busbw=avg,
        out_of_bounds=oob, per_iteration=per_iter or any("i_p99" in c for c in columns),
    )


def _row(columns: list[str], tokens: list[str], where: str, line: int) -> NcclRow:
    cols = list(columns)
    vals = list(tokens)
    if cols[-1] == "timestamp":
        cols.pop()
        vals = vals[:-2]  # "%Y-%m-%d %H:%M:%S" prints as two tokens
    first = next(i for i, c in enumerate(cols) if c in _TIME_COLS)
    second = next((i for i in range(first + 1, len(cols)) if cols[i] in _TIME_COLS), len(cols))
    prefix, half = cols[:first], cols[first:second]
    if len(vals) == len(cols):
        oop_vals, ip_vals = vals[first:second], vals[second:]
    elif len(vals) == len(prefix) + len(half):
        oop_vals, ip_vals = [], vals[first:]  # in-place only (nccl-tests leaves out-of-place blank)
    else:
        raise NcclTestsError(where, f"expected {len(cols)} columns ({' '.join(cols)}), found {len(vals)}")
    head = dict(zip(prefix, vals[:first], strict=True))
    if "size" not in head or "count" not in head:
        raise NcclTestsError(where, "the column header has no size/count columns")
    root_text = head.get("root", "")
    root = int(root_text) if _INT.match(root_text.removeprefix("-")) else None
    return NcclRow(
        size=_int(head["size"], where, "size"),
        count=_int(head["count"], where, "count"),
        dtype=head.get("type", "float"),
        redop=head.get("redop", "sum"),
        root=root,
        out_of_place=_half(half, oop_vals, where) if oop_vals else None,
        in_place=_half(cols[second:], ip_vals, where) if ip_vals else None,
        line=line,
    )


# --- JSON (-J) ------------------------------------------------------------------------------------


def _jnum(obj: Mapping[str, Any], key: str, where: str) -> float | None:
    v = obj.get(key)
    if v is None or v == "nan":
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise NcclTestsError(where, f"{key}: {str(v)[:40]!r} is not a finite number")
    return float(v)


def _jint(v: Any, where: str, what: str) -> int:
    """A non-negative int64 from JSON: an integer, or the decimal text nccl-tests sometimes writes."""
    if isinstance(v, str):
        return _int(v.strip(), where, what)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _INT_MAX:
        raise NcclTestsError(where, f"{what}: {str(v)[:40]!r} is not a non-negative integer")
    return v


def _jcount(v: float | None, where: str, what: str) -> int | None:
    """An error count read as a JSON number: it must be a whole number in int64."""
    if v is None:
        return None
    if v != int(v) or not 0 <= v <= _INT_MAX:
        raise NcclTestsError(where, f"{what}: {v!r} is not a count")
    return int(v)


def _jhalf(result: Mapping[str, Any], key: str, where: str) -> NcclMeasurement | None:
    half = result.get(key)
    if half is None:
        return None
    if not isinstance(half, dict):
        raise NcclTestsError(where, f"{key} is not an object")
    t = _jnum(half, "time", where) if "time" in half else _jnum(half, "cpu_time", where)
    alg, bus = _jnum(half, "alg_bw", where), _jnum(half, "bus_bw", where)
    if t is None or alg is None or bus is None:
        raise NcclTestsError(where, f"{key} lacks time/alg_bw/bus_bw")
    wrong = _jcount(_jnum(half, "nwrong", where), where, f"{key}.nwrong")
    per = result.get(f"{key}_per_iter")
    per_d: Mapping[str, Any] = per if isinstance(per, dict) else {}
    times = per_d.get("times_us", [])
    if not isinstance(times, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in times
    ):
        raise NcclTestsError(where, f"{key}_per_iter.times_us is not a list of finite numbers")
    return NcclMeasurement(
        time_us=t, algbw=alg, busbw=bus, wrong=wrong,
        i_min_us=_jnum(per_d, "min_us", where), i_max_us=_jnum(per_d, "max_us", where),
        i_p99_us=_jnum(per_d, "p99_us", where), i_cv_pct=_jnum(per_d, "cv_pct", where),
        i_p50_us=_jnum(per_d, "p50_us", where), times_us=tuple(float(x) for x in times),
    )


def parse_nccl_tests_json(text: str, source: str = "<nccl-tests.json>") -> NcclTestsReport:
    """Parse an nccl-tests ``-J`` report. Errors name ``source`` and the result index."""
    try:
        doc = loads_json(text, source)
    except BoundedInputError as exc:
        raise NcclTestsError(exc.where, exc.message.removeprefix(f"{exc.where}: ")) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict) or not isinstance(doc.get("results"), list):
        raise NcclTestsError(source, "not an nccl-tests -J report (needs 'config' and 'results')")
    cfg: dict[str, Any] = doc["config"]
    args = doc.get("args") or []
    if not isinstance(args, list):
        raise NcclTestsError(f"{source}: args", "is not a list of the command's arguments")
    collective = _collective_of(str(args[0])) if args else "all_reduce"
    ranks = []
    devices = cfg.get("devices") or []
    if not isinstance(devices, list):
        raise NcclTestsError(f"{source}: config.devices", "is not a list")
    for i, d in enumerate(devices):
        at = f"{source}: config.devices[{i}]"
        if not isinstance(d, dict) or not all(k in d for k in ("rank", "hostname", "device", "pid")):
            raise NcclTestsError(at, "malformed device entry: needs rank, hostname, device and pid")
        ranks.append(NcclRank(_jint(d["rank"], at, "rank"), str(d["hostname"]), _jint(d["device"], at, "device"),
                              _jint(d["pid"], at, "pid"), str(d.get("device_info", ""))))
    rows: list[NcclRow] = []
    for i, r in enumerate(doc["results"]):
        where = f"{source}: results[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("size"), int) or not isinstance(r.get("count"), int):
            raise NcclTestsError(where, "a result needs integer 'size' and 'count'")
        root_s = str(r.get("root", "")).strip()
        rows.append(NcclRow(
            size=_jint(r["size"], where, "size"), count=_jint(r["count"], where, "count"),
            dtype=str(r.get("type", "float")), redop=str(r.get("redop", "sum")),
            root=int(root_s) if _INT.match(root_s.removeprefix("-")) else None,
            out_of_place=_jhalf(r, "out_of_place", where), in_place=_jhalf(r, "in_place", where), line=0,
        ))
    if not rows:
        raise NcclTestsError(source, "no results")
    if "warmup_iters" not in cfg or "iterations" not in cfg:
        raise NcclTestsError(f"{source}: config", "needs integer warmup_iters and iterations")
    warmup = _jint(cfg["warmup_iters"], f"{source}: config", "warmup_iters")
    iters = _jint(cfg["iterations"], f"{source}: config", "iterations")
    params = {k: str(cfg[k]) for k in ("nthreads", "ngpus", "aggregated_iterations", "validation", "graph",
                                       "blocking_collectives", "per_iter_skip") if k in cfg}
    versions = {"nccl": str(doc["nccl_version"])} if "nccl_version" in doc else {}
    avg_obj = doc.get("average_bus_bandwidth")
    oob_obj = doc.get("out_of_bounds")
    return NcclTestsReport(
        source=source, collective=collective, rows=tuple(rows), ranks=tuple(ranks), warmup=warmup, iterations=iters,
        params=tuple(sorted(params.items())), versions=tuple(sorted(versions.items())),
        avg_busbw=_jnum(avg_obj, "bandwidth", source) if isinstance(avg_obj, dict) else None,
        out_of_bounds=(
            _jint(oob_obj["count"], f"{source}: out_of_bounds", "count")
            if isinstance(oob_obj, dict) and "count" in oob_obj
            else None
        ),
        per_iteration=str(cfg.get("per_iter_timing", "false")) == "true",
    )


def import_nccl_tests(path: str | Path) -> NcclTestsReport:
    """Read a file of nccl-tests output, JSON (``-J``) or text, deciding by its first character."""
    p = Path(path)
    try:
        data = read_bounded(p, MAX_NCCL_TESTS_BYTES)
    except BoundedInputError as exc:
        raise NcclTestsError(exc.where, exc.message.removeprefix(f"{exc.where}: ")) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NcclTestsError(f"{p}@{exc.start}", "not UTF-8 text") from exc
    if text.lstrip().startswith("{"):
        return parse_nccl_tests_json(text, str(p))
    return parse_nccl_tests_text(text, str(p))
