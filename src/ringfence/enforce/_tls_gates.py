"""The TLS gates of a site as ``contain --identity`` uses them (:mod:`ringfence.enforce.revoke`): the
:class:`Mesh` interface, and :class:`TlsMesh`, the TLS layer's sidecars reached through the site's executors
(the lab's namespaces or SSH hosts alike). Unit tests pass a fake :class:`Mesh`.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ringfence.evidence import EvidenceStore
from ringfence.policy import Policy
from ringfence.secure import pki
from ringfence.secure.layers import tls_run
from ringfence.secure.layers.interface import LayerError
from ringfence.secure.layers.runtime import Runtime, StateStore
from ringfence.targets import ops
from ringfence.targets.interface import Site, TargetError


@dataclass(frozen=True)
class GateRequest:
    """One request through a TLS gate: the service, its node (the gate), where it listens, what is asked."""

    service: str
    node: str
    address: str
    port: int
    method: str
    path: str
    body: str = ""

    @property
    def url(self) -> str:
        """``https://10.77.2.10:8080/datasets/train-b/shard-0``."""
        return f"https://{self.address}:{self.port}{self.path}"



class Mesh(Protocol):
    """The TLS gates of a site as :func:`contain_identity` uses them (:class:`TlsMesh`; a fake in tests)."""

    def info(self) -> Mapping[str, Any] | None:
        """The TLS layer's record: ``pki``, ``services``, ``nodes`` (node → identity, fingerprint); None if off."""
        ...

    def reissue(self, nodes: Sequence[str], evidence: EvidenceStore) -> Sequence[tls_run.Rotated]:
        """New key and certificate on each node, then the old ones revoked at the CA (not yet published) — also
        where the new one could not be installed (:attr:`Rotated.unpushed` says why)."""
        ...

    def ca_lists(self) -> tuple[frozenset[str], frozenset[int]]:
        """The CA's revoked fingerprints and serials, read back."""
        ...

    def publish(self, node: str) -> str | None:
        """Push the CA's revocation list to ``node``'s sidecar; the error, or None when it was written."""
        ...

    def published(self, node: str) -> frozenset[str] | None:
        """``node``'s copy of the list, read back (None: unreadable)."""
        ...

    def request(self, node: str, cert_dir: Path, req: GateRequest, timeout: float) -> dict[str, Any]:
        """One request from ``node``'s address with the credential in ``cert_dir`` (``probe_request``'s answer)."""
        ...

    def events(self, since: float) -> list[dict[str, Any]]:
        """Every sidecar's connection events at or after ``since``, read from each node's own log."""
        ...

    def forget(self, rotated: tls_run.Rotated) -> None:
        """Delete the retired (revoked) credential, on the controller and on its holder."""
        ...


class TlsMesh:
    """The TLS layer's sidecars on ``site`` (:mod:`ringfence.secure.layers.tls_run`), through its executors."""

    def __init__(self, site: Site, policy: Policy, state: StateStore | None = None) -> None:
        self.site, self.policy = site, policy
        self.state = state or StateStore(site.name)
        self.rt = Runtime(site, self.state)
        self._lock = threading.Lock()
        self._pushed: set[tuple[str, Path]] = set()

    def info(self) -> Mapping[str, Any] | None:
        """See :class:`Mesh`."""
        tls: Mapping[str, Any] | None = self.state.read().info.get("tls")
        return tls

    def _revoked_path(self) -> Path:
        return tls_run.pki_dir(self.site.name, self.state) / "ca" / "revoked.txt"

    def reissue(self, nodes: Sequence[str], evidence: EvidenceStore) -> Sequence[tls_run.Rotated]:
        """See :class:`Mesh`."""
        return tls_run.reissue_tls(self.site, self.policy, evidence=evidence, nodes=nodes, reason="revoked",
                                   revoke_unreachable=True)

    def ca_lists(self) -> tuple[frozenset[str], frozenset[int]]:
        """See :class:`Mesh`."""
        pdir = tls_run.pki_dir(self.site.name, self.state)
        return pki.load_revocations(self._revoked_path()), pki.revoked_serials(pdir)

    def publish(self, node: str) -> str | None:
        """See :class:`Mesh`."""
        try:
            tls_run.publish_revocations(self.rt, [node])
        except LayerError as exc:
            return exc.message
        return None

    def published(self, node: str) -> frozenset[str] | None:
        """See :class:`Mesh`."""
        try:
            data = self.rt.get(node, str(self._revoked_path()))
        except LayerError:
            return None
        if data is None:
            return None
        return frozenset(w.strip().lower() for w in data.decode(errors="replace").splitlines() if w.strip())

    def request(self, node: str, cert_dir: Path, req: GateRequest, timeout: float) -> dict[str, Any]:
        """See :class:`Mesh`. The credential goes to ``node`` once: replays run at once from one holder, and
        two writers of the same file on one host would race (one's rename finds the other's gone)."""
        try:
            with self._lock:
                if (node, cert_dir) not in self._pushed:
                    tls_run.push_credential(self.rt, node, cert_dir)
                    tls_run.publish_revocations(self.rt, [node])
                    self._pushed.add((node, cert_dir))
            return tls_run.probe_request(self.site, node, cert_dir, req.url, method=req.method, body=req.body,
                                         timeout=timeout, push=False)
        except LayerError as exc:
            return {"outcome": "error", "error": exc.message}

    def events(self, since: float) -> list[dict[str, Any]]:
        """See :class:`Mesh`."""
        return tls_run.read_events(self.site, since=since)

    def forget(self, rotated: tls_run.Rotated) -> None:
        """See :class:`Mesh`."""
        try:  # the probe wrote the old credential to the same path on its holder
            ops.remove_tree(self.site.executor(rotated.node), str(rotated.retired))
        except TargetError:
            pass  # the controller's copy goes below either way; the holder had this key before the revocation
        shutil.rmtree(rotated.retired, ignore_errors=True)


__all__ = ["GateRequest", "Mesh", "TlsMesh"]
