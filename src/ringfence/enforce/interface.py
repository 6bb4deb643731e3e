"""The enforcement family: render a policy for a target (nftables, NetworkPolicy, Cilium), apply it, prove it.

A renderer is a pure function of the policy and options: it returns the files to deploy and, just as
important, everything the policy asks for that the target cannot express (``unsupported``) — an
encryption requirement in plain NetworkPolicy, drop counters in Kubernetes, an audit mode that a
target lacks. Those notes are part of the result, never silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ringfence.atomic import write_atomic
from ringfence.errors import RingfenceError
from ringfence.policy import Policy, Requirement, TrafficClass


class EnforceError(RingfenceError):
    """Enforcement cannot proceed: a policy that cannot be rendered, a ruleset the kernel refused."""


class UnsafePolicy(EnforceError):
    """A policy refused before anything is applied: it would lock out the admin path, approve any-to-any,
    or name nodes the target does not have."""


@dataclass(frozen=True)
class TimedPath:
    """A path a temporary exception opens: the kernel forgets it after ``timeout_s`` seconds."""

    exception: str
    source: str
    destination: str
    proto: str
    port: int
    timeout_s: int


@dataclass(frozen=True)
class RenderOptions:
    """How to render.

    ``audit``: stage the policy — log and count what *would* be dropped, but accept it, so the blast
    radius is visible before enforcing. ``log_prefix``: the prefix of every drop/audit log line.
    ``contained``/``collectors``: addresses under containment and the evidence collectors they may
    still reach (nftables only; kept across re-applies so a new policy never silently releases them).
    ``timed``: paths temporary exceptions open, each with its kernel timeout (nftables only).
    """

    audit: bool = False
    log_prefix: str = "rf"
    contained: tuple[str, ...] = ()
    collectors: tuple[str, ...] = ()
    timed: tuple[TimedPath, ...] = ()


#: The defaults (enforcing, prefix ``rf``, nothing contained).
DEFAULT_OPTIONS = RenderOptions()


@dataclass(frozen=True)
class RenderedFile:
    """One file of a rendering: a relative name and its bytes."""

    name: str
    content: bytes

    def json(self) -> Any:
        """The content decoded as JSON (every renderer here writes JSON)."""
        return json.loads(self.content)


@dataclass(frozen=True)
class Unsupported:
    """Something the policy asks for that the target cannot express, and what to do instead."""

    target: str
    subject: str  # "class:collective", "flow:admin-ssh", "option:audit"
    reason: str
    instead: str = ""

    def to_json(self) -> dict[str, str]:
        """A JSON-ready dict."""
        return {"target": self.target, "subject": self.subject, "reason": self.reason, "instead": self.instead}


@dataclass(frozen=True)
class RenderResult:
    """What a renderer produced: files to deploy, notes on what it could not express, and size figures."""

    target: str
    files: tuple[RenderedFile, ...]
    unsupported: tuple[Unsupported, ...] = ()
    stats: Mapping[str, int] = field(default_factory=dict)

    def file(self, name: str) -> RenderedFile:
        """The file called ``name``; :class:`KeyError` if there is none."""
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(name)

    def write(self, directory: str | Path) -> tuple[Path, ...]:
        """Write every file (atomically) plus ``unsupported.json`` under ``directory``; the paths written."""
        out = Path(directory)
        written = []
        for f in self.files:
            write_atomic(out / f.name, f.content)
            written.append(out / f.name)
        notes = json.dumps([u.to_json() for u in self.unsupported], indent=2).encode() + b"\n"
        write_atomic(out / "unsupported.json", notes)
        written.append(out / "unsupported.json")
        return tuple(written)


class Renderer(Protocol):
    """Renders a policy for one enforcement target."""

    name: str

    def render(self, policy: Policy, options: RenderOptions = DEFAULT_OPTIONS) -> RenderResult:
        """Files for the target, and what the target cannot express. Raises :class:`EnforceError`."""
        ...


def dump_json(value: Any) -> bytes:
    """Stable, readable JSON bytes (sorted keys, so a rendering hashes the same every time)."""
    return json.dumps(value, indent=1, sort_keys=True).encode() + b"\n"


def encryption_notes(target: str, policy: Policy) -> list[Unsupported]:
    """One note per class whose encryption requirement a reachability policy cannot express."""
    out = []
    for cls in (TrafficClass.STORAGE, TrafficClass.COLLECTIVE, TrafficClass.MANAGEMENT, TrafficClass.REPLICATION):
        cp = policy.classes.of(cls)
        if cp is not None and cp.protection is Requirement.REQUIRED:
            layers = ", ".join(layer.value for layer in cp.layers) or "any confidential layer"
            out.append(Unsupported(target, f"class:{cls.value}",
                                   f"encryption is required ({layers}); {target} only decides reachability",
                                   "deploy the encryption layer and verify it with captures (control encryption_keys)"))
    return out


__all__ = [
    "DEFAULT_OPTIONS",
    "EnforceError",
    "RenderOptions",
    "RenderResult",
    "RenderedFile",
    "Renderer",
    "TimedPath",
    "Unsupported",
    "UnsafePolicy",
    "dump_json",
    "encryption_notes",
]
