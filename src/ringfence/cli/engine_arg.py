"""``--engine duckdb|spark[=MASTER-URL]``: where a verb's flow analysis runs (shared by assess and discover)."""

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


def add_engine_argument(parser: Any) -> None:
    """Add ``--engine`` to ``parser`` (``args.engine``: an :class:`EngineSpec`; None means DuckDB, the default)."""
    parser.add_argument(
        "--engine",
        type=_engine,
        default=None,
        metavar="duckdb|spark[=URL]",
        help="where the flow analysis runs: duckdb (embedded, default) or spark, local[2] unless a master "
        "URL is given (spark=local[8], spark=spark://head:7077); needs `make install` and Java 17",
    )


__all__ = ["add_engine_argument"]
