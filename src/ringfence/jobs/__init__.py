"""Job identity from schedulers (Slurm, Kubernetes): which job and user held a node, and when."""

from ringfence.jobs._common import JobsError, JobTable
from ringfence.jobs.interface import JobSource, JobSpan
from ringfence.jobs.registry import JobFormat, load_jobs

__all__ = ["JobFormat", "JobSource", "JobSpan", "JobTable", "JobsError", "load_jobs"]
