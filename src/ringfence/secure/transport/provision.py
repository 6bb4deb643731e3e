"""Issue the transport certificates of a job's ranks from a cluster PKI, and the environment that uses them.

What docs/transport.md's manual steps do (``pki init`` once, ``pki issue --job J --rank R`` per rank,
``RINGFENCE_TRANSPORT_DIR=…/job-J-rank-{rank}``), as one call, for a launcher that starts the ranks
itself (``ringfence bench allreduce --target lab --backend ringfence``). Every call issues fresh keys:
a rank never reuses another run's key, and the certificates expire with ``lifetime``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from ringfence.errors import InputError
from ringfence.secure import pki

__all__ = ["TRANSPORT_ENV_KEYS", "provisioned", "rank_credentials"]

#: Variables that already point a rank at credentials: when one is set, nothing is issued.
TRANSPORT_ENV_KEYS = ("RINGFENCE_TRANSPORT_DIR", "RINGFENCE_TRANSPORT_CERT")


def provisioned(env: dict[str, str]) -> bool:
    """Whether ``env`` already names the ranks' transport credentials."""
    return any(env.get(k) for k in TRANSPORT_ENV_KEYS)


def rank_credentials(
    pki_dir: Path, cluster: str, job: str, world: int, *, lifetime: timedelta = timedelta(hours=12)
) -> dict[str, str]:
    """Issue ``spiffe://<cluster>/job/<job>/rank/<r>`` for every rank from the CA in ``pki_dir``.

    The CA is created (for ``cluster``, 30 days, as the lab's TLS and IPsec layers do) when the
    directory has none; an existing CA of another trust domain is refused, not replaced. Returns the
    environment every rank is given: ``RINGFENCE_TRANSPORT_DIR`` with ``{rank}`` in it, and the CA's
    revocation list, so a certificate the cluster revoked is refused by the ranks.
    """
    if world < 1:
        raise InputError("world", f"needs at least one rank, not {world}")
    pki.ensure_ca(pki_dir, cluster)
    have = pki.ca_cluster(pki.load_certificate(pki_dir / "ca" / "ca.pem"))
    if have != cluster:
        raise InputError("cluster", f"the CA in {pki_dir / 'ca'} is for spiffe://{have}, not spiffe://{cluster}")
    issued = [pki.issue(pki_dir, pki.job_rank_identity(cluster, job, r), lifetime=lifetime) for r in range(world)]
    template = str(issued[0].directory).removesuffix("-rank-0") + "-rank-{rank}"
    env = {"RINGFENCE_TRANSPORT_DIR": template}
    revoked = pki_dir / "ca" / "revoked.txt"
    if revoked.exists():
        env["RINGFENCE_TRANSPORT_REVOKED"] = str(revoked)
    return env
