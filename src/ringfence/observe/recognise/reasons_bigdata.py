"""The words of the verdicts for Hadoop IPC, HDFS data transfer and Spark's transport.

Each protects its traffic by configuration (hadoop.rpc.protection, dfs.data.transfer.protection,
spark.network.crypto.enabled / spark.authenticate.enableSaslEncryption): a message in clear proves the weakest
setting; a wrapping or key exchange alone is named with what it could have set up, never assumed stronger.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ringfence.observe.recognise.labels import Kind, Label
from ringfence.observe.recognise.reasons import ENC, HANDSHAKE, PLAIN, UNKNOWN, Family, Row, Verdict
from ringfence.observe.recognise.reasons import plural as _n


def _hadoop(r: Row) -> Verdict:
    simple, sasl = r.c(Label.HRPC_SIMPLE), r.c(Label.HRPC_SASL)
    negotiation, wrap, calls = r.c(Label.HRPC_SASL_MSG), r.c(Label.HRPC_WRAP), r.c(Label.HRPC_CALL)
    if simple:
        return (
            PLAIN,
            "hadoop-rpc",
            f"Hadoop IPC (HDFS NameNode, YARN): SIMPLE authentication — the user name is asserted, not proven — and "
            f"{_n(calls, 'call')} in clear",
        )
    if calls:
        after = " after SASL authentication (hadoop.rpc.protection=authentication)" if sasl or negotiation else ""
        what = f"Hadoop IPC: {_n(calls, 'call')} in clear{after}: paths, blocks and tokens readable"
        return PLAIN, "hadoop-rpc", what
    if wrap:
        return (
            UNKNOWN,
            "hadoop-rpc",
            f"Hadoop IPC over SASL: {_n(wrap, 'wrapped call')} (hadoop.rpc.protection integrity or privacy; which one "
            "was negotiated is inside the SASL exchange, not visible)",
        )
    return HANDSHAKE, "hadoop-rpc", f"Hadoop IPC: SASL negotiation only; no call sampled{r.sample_note()}"


def _hdfs(r: Row) -> Verdict:
    ops, sasl, packets = r.c(Label.HDFS_OP), r.c(Label.HDFS_SASL), r.c(Label.HDFS_PACKET)
    if ops or packets:
        parts = ([f"{_n(ops, 'op')} (READ_BLOCK/WRITE_BLOCK …)"] if ops else []) + (
            [f"{_n(packets, 'block data packet')}"] if packets else []
        )
        after = " after SASL (dfs.data.transfer.protection=authentication)" if sasl else ""
        return (
            PLAIN,
            "hdfs",
            f"HDFS data transfer: {' and '.join(parts)} in clear{after}: the blocks' bytes are readable",
        )
    return (
        UNKNOWN,
        "hdfs",
        "HDFS data transfer: SASL data-transfer protection negotiated (magic 0xDEADBEEF); authentication would "
        "leave the ops in clear (none sampled), integrity or privacy (AES with cipher suites) protects them — "
        "which one is not visible",
    )


def _spark(r: Row) -> Verdict:
    frames, auth, sasl = r.c(Label.SPARK), r.c(Label.SPARK_AUTH), r.c(Label.SPARK_SASL)
    if frames:
        before = ""
        if auth:
            before = " although an AuthEngine key exchange was seen"
        elif sasl:
            before = " after SASL authentication without SASL encryption"
        return (
            PLAIN,
            "spark",
            f"Spark transport: {_n(frames, 'frame')} in clear{before} (RPCs, shuffle and broadcast blocks readable; "
            "spark.network.crypto.enabled would encrypt them)",
        )
    high = r.generic[Kind.HIGH]
    if auth and high:
        return (
            ENC,
            "spark",
            f"Spark transport: spark.network.crypto key exchange ({_n(auth, 'AuthMessage')}), then "
            f"{_n(high, 'packet')} of ciphertext without frame structure (TransportCipher, AES)",
        )
    if auth:
        return HANDSHAKE, "spark", f"Spark transport: AuthEngine key exchange only{r.sample_note()}"
    return (
        UNKNOWN,
        "spark",
        f"Spark transport: SASL authentication ({_n(sasl, 'message')}); with spark.authenticate."
        "enableSaslEncryption the frames after are wrapped (DIGEST-MD5's ciphers), without it they would be in "
        "clear — none sampled either way",
    )


#: Handlers of the families worded here; :mod:`.verdict` joins them with the others.
BIGDATA_HANDLERS: Final[dict[Family, Callable[[Row], Verdict]]] = {
    Family.HADOOP_RPC: _hadoop,
    Family.HDFS: _hdfs,
    Family.SPARK: _spark,
}

__all__ = ["BIGDATA_HANDLERS"]
