"""The git boundary: which committed version of a policy file is proposed.

Only committed content can be proposed — an uncommitted edit would be a change nobody can point to
afterwards — so a file with local modifications is refused. Every git failure becomes
:class:`~ringfence.change.interface.ChangeError` naming the file.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ringfence.change.interface import ChangeError


@dataclass(frozen=True)
class Committed:
    """A policy file as committed: repository top level, path inside it, commit id and content."""

    repository: Path
    path: str
    commit: str
    text: str


def _git(cwd: Path, *args: str) -> str:
    try:
        res = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ChangeError(f"cannot run git in {cwd}: {exc}") from exc
    if res.returncode != 0:
        why = res.stderr.decode(errors="replace").strip().splitlines()
        raise ChangeError(f"git {' '.join(args)} in {cwd} failed: {why[-1] if why else res.returncode}")
    return res.stdout.decode(errors="replace")


def committed(policy: Path) -> Committed:
    """The committed version of ``policy`` at HEAD; refused when the file is outside git or modified."""
    path = policy.resolve()
    if not path.is_file():
        raise ChangeError(f"{policy}: no such policy file")
    top = Path(_git(path.parent, "rev-parse", "--show-toplevel").strip())
    rel = path.relative_to(top).as_posix()
    if _git(top, "status", "--porcelain", "--", rel).strip():
        raise ChangeError(f"{policy}: has uncommitted changes; only a committed version can be proposed",
                          hint=f"git -C {top} commit {rel}")
    commit = _git(top, "rev-parse", "HEAD").strip()
    try:
        text = _git(top, "show", f"{commit}:{rel}")
    except ChangeError as exc:
        raise ChangeError(f"{policy}: not committed in {top}", hint=f"git -C {top} add {rel} && git commit") from exc
    return Committed(top, rel, commit, text)


__all__ = ["Committed", "committed"]
