"""Who ran what, where and when: the job-identity interface shared by schedulers and ``trace``."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from pydantic import BaseModel, ConfigDict


class JobSpan(BaseModel):
    """One job's allocation: its id, user, nodes (inventory names) and time interval (end None = running)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: str
    user: str
    nodes: tuple[str, ...]
    start: datetime
    end: datetime | None = None
    name: str | None = None


class JobSource(Protocol):
    """A scheduler's record of jobs (Slurm, Kubernetes)."""

    def spans(self) -> tuple[JobSpan, ...]:
        """Every job span known, oldest first."""
        ...

    def job_at(self, node: str, when: datetime) -> JobSpan | None:
        """The job holding ``node`` at ``when``, or None."""
        ...


__all__ = ["JobSource", "JobSpan"]
