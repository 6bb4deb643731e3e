"""The ``nft`` boundary: check, load and read rulesets through an executor; throwaway namespaces.

Everything goes through :class:`ringfence.targets.interface.Executor`, so the same calls load a lab
node's namespace or an SSH host. A rejected ruleset becomes :class:`NftError` with nft's own message;
because every rendered file is one transaction, a rejected load leaves the previous ruleset in force.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ringfence.enforce.interface import EnforceError
from ringfence.targets.interface import Executor
from ringfence.targets.local import LocalExecutor


class NftError(EnforceError):
    """``nft`` refused a ruleset or could not be run."""


def _nft(executor: Executor, args: list[str], stdin: bytes | None = None, timeout: float = 60.0) -> bytes:
    res = executor.run(["nft", *args], stdin=stdin, timeout=timeout)
    if res.timed_out:
        raise NftError(f"{executor.name}: nft {' '.join(args)} timed out after {timeout:.0f}s")
    if res.returncode != 0:
        msg = res.stderr.decode(errors="replace").strip()[:2000]
        raise NftError(f"{executor.name}: nft {' '.join(args)} failed: {msg}")
    return res.stdout


def check(executor: Executor, doc: dict[str, Any]) -> None:
    """``nft -c -j -f -``: the kernel checks the whole transaction without committing it."""
    _nft(executor, ["-c", "-j", "-f", "-"], json.dumps(doc).encode())


def load(executor: Executor, doc: dict[str, Any]) -> None:
    """``nft -j -f -``: commit the transaction (all or nothing)."""
    _nft(executor, ["-j", "-f", "-"], json.dumps(doc).encode())


#: a table whose only job is to make the kernel track connections in a network namespace (see prime_conntrack)
PRIME_TABLE = "ringfence_ct"


def prime_conntrack(executor: Executor) -> None:
    """Start connection tracking on the point before its ruleset lands (a table with one ``ct`` rule).

    A namespace tracks connections only once a rule uses ``ct``. A connection open before then (the
    SSH session an executor reaches the host by) is picked up mid-stream, oriented by whichever packet
    comes first — often the server's reply — and a stateful ruleset then drops it as an unapproved
    flow from port 22: the ruleset would cut the very session that loads it. Primed first, in a
    session of its own, the next session's SYN is tracked and the ruleset sees it the right way round.
    """
    ct_rule = {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["invalid"]}}
    chain = {"family": "inet", "table": PRIME_TABLE, "name": "track", "type": "filter", "hook": "prerouting",
             "prio": -300, "policy": "accept"}
    load(executor, {"nftables": [
        {"add": {"table": {"family": "inet", "name": PRIME_TABLE}}},
        {"add": {"chain": chain}},
        {"add": {"rule": {"family": "inet", "table": PRIME_TABLE, "chain": "track",
                          "expr": [ct_rule, {"counter": None}]}}},
    ]})


def unprime_conntrack(executor: Executor) -> None:
    """Remove :func:`prime_conntrack`'s table (the ruleset's own ``ct`` rules keep tracking on)."""
    delete_table(executor, "inet", PRIME_TABLE)


def list_ruleset(executor: Executor, *, family: str | None = None, table: str | None = None) -> dict[str, Any]:
    """``nft -j list ruleset`` (or one table); an absent table reads as an empty ruleset."""
    args = ["-j", "list", "table", family or "inet", table] if table else ["-j", "list", "ruleset"]
    res = executor.run(["nft", *args], timeout=60.0)
    if res.returncode != 0:
        err = res.stderr.decode(errors="replace")
        if table and "No such file or directory" in err:
            return {"nftables": []}
        raise NftError(f"{executor.name}: nft {' '.join(args)} failed: {err.strip()[:2000]}")
    try:
        parsed: dict[str, Any] = json.loads(res.stdout)
    except ValueError as exc:
        raise NftError(f"{executor.name}: nft printed JSON that does not parse: {exc}") from exc
    return parsed


def delete_table(executor: Executor, family: str, table: str) -> None:
    """Remove our table if it is there (nothing else is touched)."""
    doc = {"nftables": [{"add": {"table": {"family": family, "name": table}}},
                        {"delete": {"table": {"family": family, "name": table}}}]}
    load(executor, doc)


@dataclass(frozen=True)
class Throwaway:
    """A scratch network namespace and an executor inside it."""

    name: str
    executor: LocalExecutor


def _ip(*args: str) -> None:
    try:
        proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnforceError(f"cannot run ip {' '.join(args)}: {exc}") from exc
    if proc.returncode != 0:
        raise EnforceError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")


@contextmanager
def throwaway_namespace(tag: str = "nft") -> Iterator[Throwaway]:
    """A fresh namespace ``rf<hex>-<tag>`` for checks and benchmarks, always deleted afterwards."""
    name = f"rf{secrets.token_hex(3)}-{tag}"
    _ip("netns", "add", name)
    try:
        yield Throwaway(name, LocalExecutor(name=name, prefix=("ip", "netns", "exec", name)))
    finally:
        _ip("netns", "delete", name)


def check_in_throwaway(doc: dict[str, Any]) -> None:
    """Syntax- and kernel-check a ruleset in a scratch namespace (needs root)."""
    with throwaway_namespace() as ns:
        check(ns.executor, doc)


__all__ = [
    "NftError",
    "Throwaway",
    "check",
    "check_in_throwaway",
    "delete_table",
    "list_ruleset",
    "load",
    "throwaway_namespace",
]
