"""The run format shared by measured and imported all-reduce benchmarks, and its configuration hash.

A :class:`BenchRun` is one benchmark configuration and one or more *repeats* of the whole size
sweep. Two runs are the same test — comparable by the gate — exactly when their configuration
hashes match. The hash covers every field of :class:`BenchConfig` except the arm label
(:data:`LABEL_FIELDS`: ``backend``, ``layer``, ``interfaces``), which is what a canary changes on
purpose: gloo vs. an encrypting backend, plaintext vs. a tunnel, ``eth0`` vs. ``wg0``.

On disk a run is JSON (``format: ringfence.bench.run/1``); it is validated strictly at load and
errors name the file and the field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ringfence.atomic import write_atomic
from ringfence.bench.stats import algbw_gbps, busbw_gbps, coefficient_of_variation, nearest_rank
from ringfence.bounded import BoundedInputError, loads_json, read_bounded
from ringfence.errors import InputError

__all__ = [
    "FORMAT",
    "LABEL_FIELDS",
    "BenchConfig",
    "BenchRun",
    "Repeat",
    "RunFileError",
    "SizeResult",
    "config_differences",
    "load_run",
    "run_from_dict",
    "run_to_dict",
    "save_run",
    "size_result_from_times",
]

FORMAT = "ringfence.bench.run/1"

#: Fields that label the arm of a comparison and are left out of the configuration hash.
LABEL_FIELDS: tuple[str, ...] = ("backend", "layer", "interfaces")


class RunFileError(InputError):
    """A run file that cannot be read or does not follow the run format."""


@dataclass(frozen=True)
class BenchConfig:
    """Everything that defines one all-reduce test (hashed) plus the arm label (not hashed)."""

    tool: str  # "ringfence" (measured here) or "nccl-tests" (imported)
    sizes: tuple[int, ...]  # bytes, in sweep order
    dtype: str
    world_size: int
    nodes: tuple[str, ...]  # the node (host) of each rank, in rank order
    warmup: int
    iterations: int
    versions: tuple[tuple[str, str], ...] = ()  # sorted (name, version) pairs
    params: tuple[tuple[str, str], ...] = ()  # sorted tool-specific settings (agg iters, device, …)
    collective: str = "all_reduce"
    redop: str = "sum"
    placement: Literal["in-place", "out-of-place"] = "in-place"
    # The arm label: what a canary changes on purpose. Not hashed.
    backend: str = "gloo"
    layer: str = "none"
    interfaces: tuple[str, ...] = ()

    def hashed(self) -> dict[str, Any]:
        """The fields that make "the same test", as plain JSON-able values."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in LABEL_FIELDS:
                continue
            value = getattr(self, f.name)
            out[f.name] = [list(v) for v in value] if f.name in ("versions", "params") else value
        return out

    @property
    def config_hash(self) -> str:
        """sha256 over the canonical JSON of :meth:`hashed` (sorted keys, no spaces)."""
        text = json.dumps(self.hashed(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def config_differences(a: BenchConfig, b: BenchConfig) -> list[str]:
    """Names of the hashed fields that differ, each with both values, for an error message."""
    ha, hb = a.hashed(), b.hashed()
    return [f"{k}: {ha[k]!r} vs {hb[k]!r}" for k in ha if ha[k] != hb[k]]


@dataclass(frozen=True)
class SizeResult:
    """One message size of one repeat. Times in µs, bandwidths in GB/s; None = not measured."""

    size: int
    count: int
    time_us: float  # mean iteration time (nccl-tests' "time"); algbw = size / time_us
    algbw: float
    busbw: float
    p50_us: float | None = None
    p99_us: float | None = None
    cv: float | None = None  # coefficient of variation of the iteration times
    wrong: int | None = None  # elements with a wrong sum; None = not checked
    times_us: tuple[float, ...] = ()  # per-iteration times (slowest rank of each iteration)


def size_result_from_times(
    size: int, count: int, times_us: Sequence[float], world_size: int, wrong: int | None
) -> SizeResult:
    """Statistics of one size from its per-iteration times (each already the slowest rank's)."""
    if not times_us:
        raise ValueError(f"no timed iterations for size {size}")
    mean = sum(times_us) / len(times_us)
    alg = algbw_gbps(size, mean)
    return SizeResult(
        size=size,
        count=count,
        time_us=mean,
        algbw=alg,
        busbw=busbw_gbps(alg, world_size),
        p50_us=nearest_rank(times_us, 50),
        p99_us=nearest_rank(times_us, 99),
        cv=coefficient_of_variation(times_us),
        wrong=wrong,
        times_us=tuple(times_us),
    )


@dataclass(frozen=True)
class Repeat:
    """One pass over the whole size sweep."""

    results: tuple[SizeResult, ...]
    started: str = ""  # ISO 8601 UTC
    source: str = ""  # where it came from: "ringfence bench", "nccl-tests:FILE"

    def result(self, size: int) -> SizeResult | None:
        """The result for ``size`` bytes, if this repeat has one."""
        return next((r for r in self.results if r.size == size), None)


@dataclass(frozen=True)
class BenchRun:
    """A configuration and its repeats: the unit the comparison gate reads."""

    config: BenchConfig
    repeats: tuple[Repeat, ...]
    notes: tuple[str, ...] = ()
    # how the ranks were started (launcher, and under srun the Slurm job id and submit host): who ran the
    # measurement, for attribution; not part of the test, so not hashed
    launch: tuple[tuple[str, str], ...] = ()

    @property
    def config_hash(self) -> str:
        """The configuration hash (see :class:`BenchConfig`)."""
        return self.config.config_hash

    def per_repeat(self, size: int) -> list[SizeResult]:
        """The results of ``size`` in each repeat that has it, in repeat order."""
        return [r for rep in self.repeats if (r := rep.result(size)) is not None]

    def wrong_total(self) -> int | None:
        """Wrong elements over all sizes and repeats; None when nothing was checked."""
        checked = [r.wrong for rep in self.repeats for r in rep.results if r.wrong is not None]
        return sum(checked) if checked else None

    def merged(self, other: BenchRun) -> BenchRun:
        """This run with ``other``'s repeats appended; refuses a different test."""
        if other.config_hash != self.config_hash:
            diff = "; ".join(config_differences(self.config, other.config))
            raise RunFileError("<merge>", f"cannot add repeats of a different test ({diff})")
        return replace(self, repeats=self.repeats + other.repeats, notes=self.notes + other.notes)


# --- the file format (pydantic at the edge only) -------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _SizeModel(_Strict):
    size: int = Field(ge=0)
    count: int = Field(ge=0)
    time_us: float = Field(ge=0)
    algbw: float = Field(ge=0)
    busbw: float = Field(ge=0)
    p50_us: float | None = None
    p99_us: float | None = None
    cv: float | None = None
    wrong: int | None = None
    times_us: list[float] = []


class _RepeatModel(_Strict):
    started: str = ""
    source: str = ""
    results: list[_SizeModel]


class _ConfigModel(_Strict):
    tool: str
    sizes: list[int]
    dtype: str
    world_size: int = Field(ge=1)
    nodes: list[str]
    warmup: int = Field(ge=0)
    iterations: int = Field(ge=0)
    versions: dict[str, str] = {}
    params: dict[str, str] = {}
    collective: str = "all_reduce"
    redop: str = "sum"
    placement: Literal["in-place", "out-of-place"] = "in-place"
    backend: str = "gloo"
    layer: str = "none"
    interfaces: list[str] = []


class _RunModel(_Strict):
    format: Literal["ringfence.bench.run/1"]
    config: _ConfigModel
    config_hash: str
    repeats: list[_RepeatModel]
    notes: list[str] = []
    launch: dict[str, str] = {}


def run_to_dict(run: BenchRun) -> dict[str, Any]:
    """The JSON-able form of a run (the hash is written for people and checked on load)."""
    c = run.config
    return {
        "format": FORMAT,
        "config": {
            "tool": c.tool,
            "sizes": list(c.sizes),
            "dtype": c.dtype,
            "world_size": c.world_size,
            "nodes": list(c.nodes),
            "warmup": c.warmup,
            "iterations": c.iterations,
            "versions": dict(c.versions),
            "params": dict(c.params),
            "collective": c.collective,
            "redop": c.redop,
            "placement": c.placement,
            "backend": c.backend,
            "layer": c.layer,
            "interfaces": list(c.interfaces),
        },
        "config_hash": run.config_hash,
        "repeats": [
            {
                "started": rep.started,
                "source": rep.source,
                "results": [
                    {
                        "size": r.size,
                        "count": r.count,
                        "time_us": r.time_us,
                        "algbw": r.algbw,
                        "busbw": r.busbw,
                        "p50_us": r.p50_us,
                        "p99_us": r.p99_us,
                        "cv": r.cv,
                        "wrong": r.wrong,
                        "times_us": list(r.times_us),
                    }
                    for r in rep.results
                ],
            }
            for rep in run.repeats
        ],
        "notes": list(run.notes),
        **({"launch": dict(run.launch)} if run.launch else {}),
    }


def run_from_dict(data: Mapping[str, Any], where: str = "<run>") -> BenchRun:
    """Validate and convert a run's JSON form; errors name ``where`` and the field."""
    try:
        m = _RunModel.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise RunFileError(where, f"{loc}: {first['msg']}", hint="is this a ringfence bench run file?") from exc
    cfg = BenchConfig(
        tool=m.config.tool,
        sizes=tuple(m.config.sizes),
        dtype=m.config.dtype,
        world_size=m.config.world_size,
        nodes=tuple(m.config.nodes),
        warmup=m.config.warmup,
        iterations=m.config.iterations,
        versions=tuple(sorted(m.config.versions.items())),
        params=tuple(sorted(m.config.params.items())),
        collective=m.config.collective,
        redop=m.config.redop,
        placement=m.config.placement,
        backend=m.config.backend,
        layer=m.config.layer,
        interfaces=tuple(m.config.interfaces),
    )
    if cfg.config_hash != m.config_hash:
        raise RunFileError(
            where,
            f"config_hash {m.config_hash} does not match the configuration ({cfg.config_hash})",
            hint="the file was edited by hand; re-run or re-import it",
        )
    repeats = tuple(
        Repeat(
            started=rep.started,
            source=rep.source,
            results=tuple(
                SizeResult(
                    size=r.size,
                    count=r.count,
                    time_us=r.time_us,
                    algbw=r.algbw,
                    busbw=r.busbw,
                    p50_us=r.p50_us,
                    p99_us=r.p99_us,
                    cv=r.cv,
                    wrong=r.wrong,
                    times_us=tuple(r.times_us),
                )
                for r in rep.results
            ),
        )
        for rep in m.repeats
    )
    if not repeats:
        raise RunFileError(where, "repeats: the run has no repeats")
    return BenchRun(config=cfg, repeats=repeats, notes=tuple(m.notes), launch=tuple(sorted(m.launch.items())))


def save_run(run: BenchRun, path: str | Path) -> None:
    """Write a run file atomically."""
    write_atomic(path, (json.dumps(run_to_dict(run), indent=1) + "\n").encode())


def load_run(path: str | Path) -> BenchRun:
    """Read a run file; a missing, non-JSON or malformed file is a :class:`RunFileError`."""
    p = Path(path)
    try:
        # Bounded: size, nesting depth, NaN and duplicate keys are refused with file:line@offset.
        data = loads_json(read_bounded(p), str(p))
    except BoundedInputError as exc:
        raise RunFileError(exc.where, exc.message.removeprefix(f"{exc.where}: ")) from exc
    if not isinstance(data, dict):
        raise RunFileError(str(p), "a run file is a JSON object")
    return run_from_dict(data, str(p))
