"""The words of the verdicts for key-value stores and coordination services: Redis, memcached, ZooKeeper and
Cassandra. Each is plaintext unless it runs inside TLS (which the TLS rules then judge): none of them has a
cleartext mode that protects its data, and each names the authentication it saw and what that sends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ringfence.observe.recognise.labels import Label
from ringfence.observe.recognise.reasons import PLAIN, Family, Row, Verdict
from ringfence.observe.recognise.reasons import plural as _n

_TLS_NOTE: Final = "with TLS the flow would show TLS records"


def _redis(r: Row) -> Verdict:
    commands, auth, replies = r.c(Label.REDIS), r.c(Label.REDIS_AUTH), r.c(Label.REDIS_REPLY)
    cluster = r.c(Label.REDIS_CLUSTER)
    if not commands + auth:
        return (
            PLAIN,
            "redis",
            f"Redis Cluster bus: {_n(cluster, 'message')} in clear — node ids, addresses, slot maps and failover "
            "votes readable; the bus authenticates nothing (only the network keeps a forged node out); with TLS "
            "(tls-cluster) the flow would show TLS records",
        )
    answered = f" and {replies} {'reply' if replies == 1 else 'replies'}" if replies else ""
    sends = "sends" if auth == 1 else "send"
    how = (
        f"; {_n(auth, 'AUTH')} {sends} the password itself in clear (requirepass/ACL)" if auth else "; no AUTH sampled"
    )
    return (
        PLAIN,
        "redis",
        f"Redis: {_n(commands + auth, 'RESP command')}{answered} in clear — keys and values readable{how}; {_TLS_NOTE}",
    )


def _memcached(r: Row) -> Verdict:
    binary, sasl, text = r.c(Label.MEMCACHED), r.c(Label.MEMCACHED_SASL), r.c(Label.MEMCACHED_TEXT)
    udp = r.c(Label.MEMCACHED_UDP)
    parts = ([f"{_n(binary + sasl, 'binary protocol message')}"] if binary + sasl else []) + (
        [f"{_n(text, 'text protocol command/VALUE line')}"] if text else []
    )
    if udp:
        parts.append(
            f"{_n(udp, 'UDP datagram')} (memcached's UDP port answers a small forged request with a large reply: "
            "the reflection vector of CVE-2018-1000115; disable it with -U 0)"
        )
    how = (
        f"; {_n(sasl, 'SASL auth message')} (PLAIN, memcached's mechanism, carries the password)"
        if sasl
        else "; memcached authenticates nothing by default"
    )
    return PLAIN, "memcached", f"memcached: {' and '.join(parts)} in clear — keys and values readable{how}"


def _zookeeper(r: Row) -> Verdict:
    session, digest, auth = r.c(Label.ZOOKEEPER), r.c(Label.ZK_DIGEST), r.c(Label.ZK_AUTH)
    messages, words = r.c(Label.ZK_MESSAGE), r.c(Label.ZK_WORD)
    parts = []
    if session:
        parts.append(f"{_n(session, 'session connect/ping')}")
    if messages:
        parts.append(f"{_n(messages, 'message')}")
    if words:
        parts.append(f"{_n(words, 'four-letter admin command')}")
    how = ""
    if digest:
        how = f"; {_n(digest, 'digest AuthPacket')} {'sends' if digest == 1 else 'send'} user:password in clear"
    elif auth:
        how = f"; {_n(auth, 'AuthPacket')} of another scheme (authentication only)"
    return (
        PLAIN,
        "zookeeper",
        f"ZooKeeper: {', '.join(parts) or 'an AuthPacket'} in clear — znode data and ACLs readable{how}; {_TLS_NOTE} "
        "(secureClientPort)",
    )


def _cassandra(r: Row) -> Verdict:
    frames, auth = r.c(Label.CQL), r.c(Label.CQL_AUTH)
    how = (
        f"; {_n(auth, 'AUTH_RESPONSE')} (PasswordAuthenticator's SASL PLAIN token: the password itself)" if auth else ""
    )
    return (
        PLAIN,
        "cassandra",
        f"Cassandra CQL native protocol: {_n(frames + auth, 'frame')} in clear — queries and rows readable (frame "
        f"compression is not encryption){how}; {_TLS_NOTE} (client_encryption_options)",
    )


#: Handlers of the families worded here; :mod:`.verdict` joins them with the others.
DATASTORE_HANDLERS: Final[dict[Family, Callable[[Row], Verdict]]] = {
    Family.REDIS: _redis,
    Family.MEMCACHED: _memcached,
    Family.ZOOKEEPER: _zookeeper,
    Family.CASSANDRA: _cassandra,
}

__all__ = ["DATASTORE_HANDLERS"]
