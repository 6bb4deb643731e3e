"""Builders for the change-control tests: a git repository holding the lab policy, approver keys."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from ringfence.evidence.checkpoint import Signer, load_signer, public_bytes

ROOT = Path(__file__).resolve().parents[2]
LAB_POLICY = ROOT / "examples" / "lab-policy.yaml"


def key(tmp: Path, name: str) -> tuple[Path, Signer]:
    """An approver key file (created) and its signer."""
    path = tmp / "keys" / f"{name}.key"
    return path, load_signer(path)


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` (identity fixed, so commits work anywhere)."""
    res = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@lab", *args],
                         capture_output=True, check=True, timeout=60)
    return res.stdout.decode()


def policy_doc(approvers: dict[str, Signer], *, required: bool = True) -> dict[str, Any]:
    """The lab policy with change control (required) and these approvers' public keys."""
    doc: dict[str, Any] = yaml.safe_load(LAB_POLICY.read_text())
    doc["change_control"] = {"required": required,
                             "approvers": {who: public_bytes(s.public_key).hex() for who, s in approvers.items()}}
    return doc


def commit_policy(repo: Path, doc: dict[str, Any], message: str = "policy") -> Path:
    """Write ``doc`` as ``repo/policy.yaml`` and commit it (the repository is created when missing)."""
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        git(repo, "init", "-q")
    path = repo / "policy.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    git(repo, "add", "policy.yaml")
    git(repo, "commit", "-q", "-m", message)
    return path
