"""Mutual authentication and key agreement between two ranks, and the full mesh of a group.

Protocol (initiator I = the higher rank, responder R = the lower one)::

    I → R  HELLO  ver, rank_I, rank_R, world, group, random_I, X25519 pub_I, cert_I
    R      verifies cert_I: cluster CA, validity, revocation, identity == <job>/rank/<rank_I>
    R → I  HELLO  ver, rank_R, rank_I, world, group, random_R, X25519 pub_R, cert_R, sig_R(th)
    I      verifies cert_R the same way and sig_R over th = SHA-256(HELLO_I ‖ HELLO_R without sig)
    I → R  AUTH   sig_I(th)
    R      verifies sig_I; both derive per-direction chain keys with HKDF (salt th, ikm X25519 secret)
    R → I  FINISHED  (the first protected record: proves R holds the same keys)

A refusal is a plaintext ALERT naming the reason, then the connection is closed; the refusing rank
raises as well: a group with an impostor in it does not start.

Revocation is checked at every handshake against the list as it is *then*: the file
(``config.revoked``) is re-read for each peer, on top of the list loaded with the rank's credentials
(a list never forgets: a fingerprint once seen stays revoked). A certificate revoked while a group
forms — a rank waiting in ``accept`` for minutes — is refused at its next handshake. Links already
made are not re-authenticated (a rekey is symmetric): a revoked peer already in a group stays until
the group is formed again, where its handshake is refused.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
import time
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519

from ringfence.errors import RingfenceError
from ringfence.secure import pki
from ringfence.secure.transport.config import TransportConfig
from ringfence.secure.transport.link import Link, recv_exact, recv_plain, send_plain
from ringfence.secure.transport.wire import (
    HEADER_SIZE,
    TAG_SIZE,
    KeyEvent,
    RecordType,
    RxState,
    TransportError,
    TxState,
    derive_chains,
    unpack_header,
)

VERSION = 1
_FIXED = struct.Struct(">BIII")


@dataclass(frozen=True)
class Credentials:
    """This rank's certificate, key, the CA, the revocation list and the job it belongs to."""

    cert: x509.Certificate
    cert_der: bytes
    key: pki.PrivateKey
    ca: x509.Certificate
    revoked: frozenset[str]
    job: str  # spiffe://<cluster>/job/<job>
    identity: str

    def expected(self, rank: int) -> str:
        """The identity rank ``rank`` of this job must present."""
        return f"{self.job}/rank/{rank}"


def load_credentials(config: TransportConfig, rank: int) -> Credentials:
    """Load and check this rank's own credentials (its certificate must name this rank of the job)."""
    try:
        cert = pki.load_certificate(config.cert)
        key = pki.load_private_key(config.key)
        ca = pki.load_certificate(config.ca)
        revoked = pki.load_revocations(config.revoked)
    except RingfenceError as exc:
        raise TransportError(f"rank {rank}: cannot load transport credentials: {exc.message}") from exc
    own = pki.cert_identity(cert)
    if own is None:
        raise TransportError(f"rank {rank}: {config.cert} carries no spiffe:// identity")
    job = config.job
    if job is None:
        ident = pki.parse_identity(own)
        if ident.kind != "job-rank":
            raise TransportError(f"rank {rank}: {config.cert} is a {ident.kind} identity ({own}), not a job rank")
        job = own.rsplit("/rank/", 1)[0]
    job = job.rstrip("/")
    try:
        info = pki.verify_certificate(cert, ca, revoked=revoked, expected_identity=f"{job}/rank/{rank}")
    except pki.CertificateRejected as exc:
        raise TransportError(f"rank {rank}: own certificate unusable: {exc.message}") from exc
    pub = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if pub != cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        raise TransportError(f"rank {rank}: {config.key} is not the key of {config.cert}")
    return Credentials(cert, cert.public_bytes(serialization.Encoding.DER), key, ca, revoked, job, info.identity or own)


def _sign(key: pki.PrivateKey, data: bytes) -> bytes:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(data)
    return key.sign(data, ec.ECDSA(hashes.SHA256()))


def _verify_sig(cert: x509.Certificate, sig: bytes, data: bytes) -> bool:
    pub = cert.public_key()
    try:
        if isinstance(pub, ed25519.Ed25519PublicKey):
            pub.verify(sig, data)
        elif isinstance(pub, ec.EllipticCurvePublicKey):
            pub.verify(sig, data, ec.ECDSA(hashes.SHA256()))
        else:
            return False
    except InvalidSignature:
        return False
    return True


@dataclass(frozen=True)
class _Hello:
    rank: int
    peer: int
    world: int
    group: bytes
    random: bytes
    eph: bytes
    cert: bytes
    sig: bytes


def _blob(b: bytes) -> bytes:
    return struct.pack(">H", len(b)) + b


def _encode_hello(h: _Hello, *, with_sig: bool) -> bytes:
    out = _FIXED.pack(VERSION, h.rank, h.peer, h.world) + _blob(h.group) + h.random + h.eph + _blob(h.cert)
    return out + _blob(h.sig) if with_sig else out


def _decode_hello(body: bytes, *, peer: str) -> _Hello:
    fields: list[bytes] = []
    try:
        ver, rank, want, world = _FIXED.unpack_from(body, 0)
        off = _FIXED.size
        for size in (0, 32, 32, 0, 0):  # 0: a length-prefixed blob
            if size == 0 and len(fields) == 4 and off == len(body):
                fields.append(b"")  # the initiator's HELLO has no signature
                break
            if size == 0:
                (size,) = struct.unpack_from(">H", body, off)
                off += 2
            if off + size > len(body):
                raise ValueError("short")
            fields.append(body[off : off + size])
            off += size
        if off != len(body):
            raise ValueError("trailing bytes")
    except (struct.error, ValueError):
        raise TransportError(f"malformed HELLO from {peer}") from None
    if ver != VERSION:
        raise TransportError(f"{peer} speaks ringfence-transport version {ver}, this rank {VERSION}")
    return _Hello(rank, want, world, *fields)


def current_revocations(creds: Credentials, config: TransportConfig) -> frozenset[str]:
    """The revocation list for a handshake now: what was loaded at start plus the file read again (so a
    certificate revoked since is refused). An unreadable list refuses the handshake (fail closed)."""
    try:
        return creds.revoked | pki.load_revocations(config.revoked)
    except RingfenceError as exc:
        raise TransportError(f"cannot read the revocation list again: {exc.message}") from exc


def _check_peer(
    creds: Credentials,
    hello: _Hello,
    *,
    rank: int,
    world: int,
    group: bytes,
    who: str,
    revoked: frozenset[str] | None = None,
) -> x509.Certificate:
    """Verify a peer's HELLO: same group and world, addressed to us, certificate of the claimed rank."""
    if hello.world != world or hello.group != group or hello.peer != rank:
        raise TransportError(
            f"{who} is in another group (world {hello.world}, group {hello.group!r}, wants rank {hello.peer}); "
            f"this is rank {rank} of {world} in group {group!r}"
        )
    if not 0 <= hello.rank < world or hello.rank == rank:
        raise TransportError(f"{who} claims rank {hello.rank}, which is not a peer rank of this group")
    try:
        cert = x509.load_der_x509_certificate(hello.cert)
    except ValueError as exc:
        raise TransportError(f"{who} sent an unreadable certificate") from exc
    try:
        pki.verify_certificate(
            cert, creds.ca, revoked=creds.revoked if revoked is None else revoked,
            expected_identity=creds.expected(hello.rank),
        )
    except pki.CertificateRejected as exc:
        raise TransportError(f"refused {who} claiming rank {hello.rank}: {exc.message}", peer=hello.rank) from exc
    return cert


def _refuse(sock: socket.socket, exc: TransportError, *, peer: int) -> TransportError:
    try:
        send_plain(sock, RecordType.ALERT, exc.message.encode()[:2048], peer=peer)
    except TransportError:
        pass  # the refused side may already be gone; we fail closed either way
    sock.close()
    return exc


def _finish_link(
    sock: socket.socket,
    creds: Credentials,
    config: TransportConfig,
    *,
    rank: int,
    peer: int,
    cert: x509.Certificate,
    shared: bytes,
    th: bytes,
    initiator: bool,
) -> Link:
    i2r, r2i = derive_chains(shared, th)
    tx_chain, rx_chain = (i2r, r2i) if initiator else (r2i, i2r)
    info = pki.cert_info(cert)

    def event(direction: str) -> object:
        return lambda epoch: config.record(
            KeyEvent(time.time(), "rekey", rank, peer, direction, epoch, f"peer {info.identity}")
        )

    tx = TxState(tx_chain, config.rekey_bytes, config.rekey_seconds, event("tx"))  # type: ignore[arg-type]
    rx = RxState(rx_chain, event("rx"))  # type: ignore[arg-type]
    link = Link(
        sock,
        rank=rank,
        peer=peer,
        peer_identity=info.identity or info.subject,
        peer_fingerprint=info.fingerprint,
        tx=tx,
        rx=rx,
        max_chunk=config.chunk_bytes,
    )
    config.record(KeyEvent(time.time(), "handshake", rank, peer, "both", 0, f"peer {info.identity} {info.fingerprint}"))
    return link


def initiate(
    sock: socket.socket, creds: Credentials, config: TransportConfig, *, rank: int, peer: int, world: int, group: bytes
) -> Link:
    """Run the handshake as initiator towards ``peer``; returns the ready link."""
    eph = x25519.X25519PrivateKey.generate()
    hello_i = _Hello(rank, peer, world, group, os.urandom(32), eph.public_key().public_bytes_raw(), creds.cert_der, b"")
    body_i = _encode_hello(hello_i, with_sig=False)
    send_plain(sock, RecordType.HELLO, body_i, peer=peer)
    kind, body = recv_plain(sock, peer=peer)
    if kind is RecordType.ALERT:
        raise TransportError(f"rank {peer} refused this rank: {body.decode(errors='replace')}", peer=peer)
    if kind is not RecordType.HELLO:
        raise TransportError(f"rank {peer} answered the handshake with {kind.name}", peer=peer)
    hello_r = _decode_hello(body, peer=f"rank {peer}")
    who = f"the peer at rank {peer}'s address"
    try:
        if hello_r.rank != peer:
            raise TransportError(f"{who} answered as rank {hello_r.rank}", peer=peer)
        cert = _check_peer(creds, hello_r, rank=rank, world=world, group=group, who=who,
                           revoked=current_revocations(creds, config))
        th = hashes.Hash(hashes.SHA256())
        th.update(body_i + _encode_hello(hello_r, with_sig=False))
        digest = th.finalize()
        if not _verify_sig(cert, hello_r.sig, b"rft1 responder" + digest):
            raise TransportError(f"rank {peer}'s handshake signature does not verify", peer=peer)
    except TransportError as exc:
        raise _refuse(sock, exc, peer=peer) from None
    send_plain(sock, RecordType.AUTH, _blob(_sign(creds.key, b"rft1 initiator" + digest)), peer=peer)
    shared = eph.exchange(x25519.X25519PublicKey.from_public_bytes(hello_r.eph))
    link = _finish_link(sock, creds, config, rank=rank, peer=peer, cert=cert, shared=shared, th=digest, initiator=True)
    _await_finished(link)
    return link


def _await_finished(link: Link) -> None:
    """The responder's first protected record, or its ALERT if it refused our AUTH."""
    hdr = bytearray(HEADER_SIZE)
    recv_exact(link.sock, memoryview(hdr), peer=link.peer, what="a record header")
    kind, epoch, seq, length = unpack_header(hdr, peer=link.peer)
    if length > 4096 + TAG_SIZE:
        raise TransportError(f"oversized handshake record from rank {link.peer}", peer=link.peer)
    body = bytearray(length)
    recv_exact(link.sock, memoryview(body), peer=link.peer, what="the FINISHED record")
    if kind is RecordType.ALERT:
        raise TransportError(f"rank {link.peer} refused this rank: {body.decode(errors='replace')}", peer=link.peer)
    if kind is not RecordType.FINISHED or length != TAG_SIZE:
        raise TransportError(f"rank {link.peer} did not finish the handshake ({kind.name})", peer=link.peer)
    link.rx.open_into(bytes(hdr), epoch, seq, memoryview(body), memoryview(bytearray(0)), peer=link.peer)


def respond(
    sock: socket.socket,
    creds: Credentials,
    config: TransportConfig,
    *,
    rank: int,
    world: int,
    group: bytes,
    taken: set[int],
    addr: str,
) -> Link:
    """Run the handshake as responder on an accepted connection; returns the ready link."""
    who = f"connection from {addr}"
    kind, body = recv_plain(sock, peer=-1)
    try:
        if kind is not RecordType.HELLO:
            raise TransportError(f"{who} did not start with HELLO ({kind.name})")
        hello_i = _decode_hello(body, peer=who)
        cert = _check_peer(creds, hello_i, rank=rank, world=world, group=group, who=who,
                           revoked=current_revocations(creds, config))
        if hello_i.rank in taken or hello_i.rank < rank:
            raise TransportError(f"{who}: rank {hello_i.rank} is already connected or must not initiate")
    except TransportError as exc:
        raise _refuse(sock, exc, peer=-1) from None
    peer = hello_i.rank
    eph = x25519.X25519PrivateKey.generate()
    hello_r = _Hello(rank, peer, world, group, os.urandom(32), eph.public_key().public_bytes_raw(), creds.cert_der, b"")
    unsigned = _encode_hello(hello_r, with_sig=False)
    th = hashes.Hash(hashes.SHA256())
    th.update(body + unsigned)
    digest = th.finalize()
    hello_r = dataclasses.replace(hello_r, sig=_sign(creds.key, b"rft1 responder" + digest))
    send_plain(sock, RecordType.HELLO, _encode_hello(hello_r, with_sig=True), peer=peer)
    kind, body = recv_plain(sock, peer=peer)
    try:
        if kind is not RecordType.AUTH or len(body) < 2:
            raise TransportError(f"rank {peer} did not authenticate ({kind.name})", peer=peer)
        if not _verify_sig(cert, body[2:], b"rft1 initiator" + digest):
            raise TransportError(
                f"rank {peer}'s handshake signature does not verify: it does not hold the key of its certificate",
                peer=peer,
            )
    except TransportError as exc:
        raise _refuse(sock, exc, peer=peer) from None
    shared = eph.exchange(x25519.X25519PublicKey.from_public_bytes(hello_i.eph))
    link = _finish_link(sock, creds, config, rank=rank, peer=peer, cert=cert, shared=shared, th=digest, initiator=False)
    link.send(b"", RecordType.FINISHED)
    return link


__all__ = ["VERSION", "Credentials", "current_revocations", "initiate", "load_credentials", "respond"]
