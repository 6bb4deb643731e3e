"""Ask a running scheduler, through an executor: ``squeue --json`` on a Slurm host (lab namespace or SSH).

The command runs where the target's executor runs it, with the host's environment (the lab sets
``SLURM_CONF`` to its own controller's configuration; a real cluster uses its ``/etc/slurm``). So the
same call reads the lab's Slurm and a production cluster's login or controller node (``--target ssh``).
"""

from __future__ import annotations

from ringfence.jobs._common import JobsError
from ringfence.jobs.interface import JobSpan
from ringfence.jobs.slurm import parse_squeue_json
from ringfence.targets.interface import Host

#: squeue answers from the controller's memory; a minute means the controller is not answering.
SQUEUE_TIMEOUT = 60.0


def squeue_spans(host: Host, *, timeout: float = SQUEUE_TIMEOUT) -> tuple[JobSpan, ...]:
    """Spans of the jobs the controller knows now (``squeue --all --json`` on ``host``)."""
    result = host.executor.run(["squeue", "--all", "--json"], timeout=timeout, env=dict(host.env))
    where = f"squeue --json on {host.name}"
    if result.timed_out:
        raise JobsError(where, f"no answer within {timeout:.0f}s", hint="is slurmctld running and reachable?")
    if result.returncode != 0:
        raise JobsError(where, f"exited {result.returncode}: {result.stderr.decode(errors='replace').strip()[-300:]}",
                        hint="is Slurm's client installed there, and SLURM_CONF or /etc/slurm/slurm.conf right?")
    return parse_squeue_json(result.stdout, where)


__all__ = ["SQUEUE_TIMEOUT", "squeue_spans"]
