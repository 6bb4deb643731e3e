"""``--engine duckdb|spark[=MASTER-URL]``, ``--memory-limit SIZE`` and ``--spill-dir DIR``: where a verb's flow
analysis runs and how much memory DuckDB may use for it (shared by assess and discover)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ringfence.analyze.engine.interface import EngineSpec


def _engine(text: str) -> EngineSpec:
    # Imported when the value is converted, not while the parser is built: the analysis package pulls in
    # DuckDB and pyarrow, which `ringfence --version` and every `--help` must not pay for.
    from ringfence.analyze.engine.interface import AnalyzeError, EngineSpec

    try:
        return EngineSpec.parse(text)
    except AnalyzeError as exc:
        raise argparse.ArgumentTypeError(exc.message) from exc


def _size(text: str) -> int:
    from ringfence.analyze.engine.limits import parse_size
    from ringfence.errors import InputError

    try:
        return parse_size(text, "--memory-limit")
    except InputError as exc:
        # argparse names the flag itself: keep the reason and the hint, exit 2 with the usage line
        reason = exc.message.removeprefix("--memory-limit: ")
        raise argparse.ArgumentTypeError(f"{reason} ({exc.hint})" if exc.hint else reason) from exc


def add_engine_argument(parser: Any) -> None:
    """Add ``--engine``, ``--memory-limit`` and ``--spill-dir`` to ``parser``; read them back with
    :func:`engine_spec`."""
    parser.add_argument(
        "--engine",
        type=_engine,
        default=None,
        metavar="duckdb|spark[=URL]",
        help="where the flow analysis runs: duckdb (embedded, default) or spark, local[2] unless a master "
        "URL is given (spark=local[8], spark=spark://head:7077); needs `make install` and Java 17",
    )
    parser.add_argument(
        "--memory-limit",
        type=_size,
        default=None,
        metavar="SIZE",
        help="the flow analysis's memory limit (64MB, 4GiB, 40%%): DuckDB's, beyond which it spills to disk, or "
        "Spark's driver heap (local mode: the whole engine). Default: $RINGFENCE_DUCKDB_MEMORY, else half of this "
        "machine's (or cgroup's) memory",
    )
    parser.add_argument(
        "--spill-dir",
        default=None,
        metavar="DIR",
        help="where DuckDB (or a local Spark, as spark.local.dir) spills what does not fit (a fresh "
        "subdirectory, removed afterwards). "
        "Default: $RINGFENCE_DUCKDB_SPILL, else the system temporary directory",
    )


def engine_spec(args: argparse.Namespace) -> EngineSpec | None:
    """The engine the flags ask for (None: DuckDB with the default limits)."""
    if args.engine is None and args.memory_limit is None and args.spill_dir is None:
        return None
    import dataclasses

    from ringfence.analyze.engine.interface import EngineSpec

    return dataclasses.replace(args.engine or EngineSpec(), memory_limit=args.memory_limit, spill_dir=args.spill_dir)


__all__ = ["add_engine_argument", "engine_spec"]
