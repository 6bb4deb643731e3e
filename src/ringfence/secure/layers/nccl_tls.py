"""NCCL's own TLS: encryption of the TCP sockets NCCL itself opens, recorded with its documented scope.

NCCL 2.32 built with ``TLS_BACKEND=OPENSSL3`` encrypts the TCP traffic it carries over ``ncclSocket``
once the application calls ``ncclSetEncryption`` with a pre-shared key (mode
``NCCL_ENCRYPTION_MODE_PSK``, at least 32 bytes, the same in every process of the job) *before*
``ncclGetUniqueId`` or any NCCL networking. Its scope, as NCCL documents it:

* only NCCL-owned sockets (bootstrap and the socket network transport);
* not the InfiniBand/RoCE verbs transport, NVLink, PCIe P2P or shared memory ("non-Socket transports
  remain outside that protection boundary") — on an RDMA fabric the gradients stay plaintext;
* one key for the whole job, fixed at start: no rotation while the job runs.

The scope check therefore never counts NCCL TLS as covering an RDMA path, and the rotation check
reports it as not rotatable. This module renders the per-job PSK (0600) and the call the
application makes; it cannot enable anything in the lab (which runs gloo, not NCCL).
"""

from __future__ import annotations

import secrets

from ringfence.policy.model import Layer
from ringfence.secure.layers.interface import (
    Endpoint,
    LayerScope,
    Reach,
    Rendered,
    RenderedFile,
    RenderOptions,
    Support,
    Transport,
)
from ringfence.targets.interface import Executor, TargetError

SCOPE = LayerScope(
    layer=Layer.NCCL_TLS,
    reach=Reach.SOCKET,
    transports=frozenset({Transport.TCP}),
    crosses_routers=True,
    rotates_live=False,
    key_model="one pre-shared key per job, set with ncclSetEncryption before NCCL starts; fixed for the job",
    wire_protocols=("tls1.2", "tls1.3", "tls"),
    notes="NCCL-owned TCP sockets (ncclSocket) only; not IB/RDMA verbs, NVLink, P2P or SHM; "
    "needs a TLS_BACKEND=OPENSSL3 build of NCCL >= 2.32",
)

_SNIPPET = """\
/* Before ncclGetUniqueId() or any communicator: every rank of job {job} uses the same key. */
#include <nccl.h>
static void ringfence_nccl_encryption(const char *psk) {{
  ncclEncryptionConfig_t encryption = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  encryption.mode = NCCL_ENCRYPTION_MODE_PSK;
  encryption.psk = psk; /* read from {psk_path} (0600), at least 32 bytes */
  ncclSetEncryption(&encryption);
}}
"""


class NcclTlsLayer:
    """Renderer for NCCL's socket TLS; its support probe checks the NCCL library build for the TLS API."""

    name = Layer.NCCL_TLS
    scope = SCOPE

    def render(self, pairs: tuple[tuple[Endpoint, Endpoint], ...], options: RenderOptions) -> tuple[Rendered, ...]:
        """The job's PSK file and the initialisation snippet, identical for every rank (one key per job)."""
        job = options.extra.get("job", "job")
        psk = secrets.token_urlsafe(48)  # 64 characters of URL-safe base64: > 32 bytes of entropy
        nodes = sorted({e.node for pair in pairs for e in pair})
        psk_path = f"nccl/{job}.psk"
        return tuple(
            Rendered(
                layer=Layer.NCCL_TLS,
                node=node,
                files=(
                    RenderedFile(psk_path, psk + "\n", secret=True),
                    RenderedFile("nccl/encryption.c", _SNIPPET.format(job=job, psk_path=psk_path)),
                ),
                apply=(),
                notes=(
                    "the application must call ncclSetEncryption itself; an environment variable cannot do it",
                    "covers NCCL-owned TCP sockets only: with NCCL_IB/RoCE the collective is NOT encrypted",
                    "the key is fixed for the job: rotate by restarting the job with a new PSK",
                ),
            )
            for node in nodes
        )

    def support(self, executor: Executor) -> Support:
        """Look for ``ncclSetEncryption`` in the node's libnccl (present only in TLS-capable builds)."""
        script = (
            "for f in $(ldconfig -p 2>/dev/null | awk '/libnccl\\.so/ {print $NF}'); do "
            'grep -q ncclSetEncryption "$f" && { echo "$f"; exit 0; }; done; exit 1'
        )
        argv = ("sh", "-c", script)
        try:
            res = executor.run(list(argv), timeout=20.0)
        except TargetError as exc:
            return Support(Layer.NCCL_TLS, executor.name, False, f"could not run the probe: {exc.message}", argv)
        if res.returncode == 0:
            lib = res.stdout.decode(errors="replace").strip()
            return Support(Layer.NCCL_TLS, executor.name, True, f"{lib} exports ncclSetEncryption", argv)
        why = "no libnccl with ncclSetEncryption on this node (NCCL absent or built without TLS_BACKEND)"
        return Support(Layer.NCCL_TLS, executor.name, False, why, argv)


LAYER = NcclTlsLayer()

__all__ = ["LAYER", "SCOPE", "NcclTlsLayer"]
