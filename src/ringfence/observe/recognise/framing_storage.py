"""Recognisers for storage and replication protocols: ONC RPC / NFS, SMB1/2/3, iSCSI, NVMe/TCP, Ceph msgr2,
Lustre LNet, BeeGFS, DRBD.

Each follows its specification's fixed fields (record marks, protocol ids, structure sizes, reserved
bytes that must be zero) and decides only from what the 64-byte head shows; every length read from
the wire is bounded before it moves a position, so hostile lengths cannot push a read outside the head
(:func:`._bytes.at` reads 0 there, and ``visible`` checks keep such rows unlabelled).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ringfence.observe.recognise._bytes import (
    HEAD,
    I64,
    U8,
    Bool,
    Labeller,
    Packets,
    be16,
    be32,
    be32_at,
    le,
    prefix,
    printable,
    select,
    table,
)
from ringfence.observe.recognise.labels import Label

_TCP: Final = 6
_UDP: Final = 17
#: RFC 5531 §8.2: the body of an opaque_auth is at most 400 bytes.
_RPC_AUTH_MAX: Final = 400
_AUTH_FLAVOURS: Final = np.array([0, 1, 2, 3, 6, 7])  # NONE, SYS, SHORT, DH, RPCSEC_GSS, AUTH_TLS
_RPCSEC_GSS: Final = 6
_AUTH_TLS: Final = 7  # RFC 9289 §4.1: the NULL-procedure probe that asks to start TLS
_STARTTLS: Final = np.frombuffer(b"STARTTLS", np.uint8)
#: An RPC record larger than this (16 MiB) is not an NFS/RPC record (Linux caps rsize/wsize at 1 MiB).
_RPC_RECORD_MAX: Final = 1 << 24
_SMB2_CANCEL: Final = 12
_SMB2_OPLOCK_BREAK: Final = 18
_STATUS_PENDING: Final = 0x00000103
#: First bytes of iSCSI login/text PDUs: opcode 0x03/0x23/0x04/0x24, optionally with the immediate bit 0x40.
_ISCSI_FIRST: Final = table([0x03, 0x23, 0x04, 0x24, 0x43, 0x63, 0x44, 0x64])
#: DRBD packet headers (drbd_protocol.h): p_header80 (magic, command, 16-bit length), p_header95 (16-bit magic,
#: command, 32-bit length), p_header100 (magic, volume, command, length, zero pad); big-endian.
_DRBD_MAGIC: Final = 0x83740267
_DRBD_MAGIC_BIG: Final = 0x835A
_DRBD_MAGIC_100: Final = 0x8620EC20
#: Largest DRBD payload: a 1 MiB bio (DRBD_MAX_BIO_SIZE) with its request header and digest, rounded up.
_DRBD_MAX: Final = (1 << 20) + 4096
#: DRBD commands: the numbered ones (P_DATA 0 … DRBD 9's last, below 0x80), and the connection's first packets
#: P_INITIAL_META, P_INITIAL_DATA and P_CONNECTION_FEATURES.
_DRBD_FIRST: Final = (0xFFF1, 0xFFF2, 0xFFFE)
_DRBD_AUTH: Final = (0x10, 0x11)  # P_AUTH_CHALLENGE, P_AUTH_RESPONSE (cram-hmac-alg)
_DRBD_DATA: Final = (0x00, 0x01, 0x02)  # P_DATA, P_DATA_REPLY, P_RS_DATA_REPLY: the disk's blocks
#: BeeGFS (7 and later) message header: 40 bytes, little-endian (msgLength, feature flags, compat flags, flags,
#: the prefix "BGFS" << 32 | data version 0, msgType, target, user, sequence numbers; NetMessage.h).
_BEEGFS_HEADER: Final = 40
_BEEGFS_PREFIX: Final = ((0x42474653 << 32) + 0).to_bytes(8, "little")
_BEEGFS_FLAGS: Final = 0x07  # BUDDYMIRROR_SECOND, IS_SELECTIVE_ACK, HAS_SEQUENCE_NO
_BEEGFS_MAX: Final = 1 << 24
_BEEGFS_AUTH: Final = 4007  # AuthenticateChannelMsg: the connAuthFile secret
_NVME_HLEN: Final = {4: 72, 5: 24, 6: 24, 7: 24, 9: 24}  # PDU type -> header length (NVMe/TCP 1.0 §3.6)


def onc_rpc(p: Packets, out: Labeller) -> None:
    """ONC RPC (RFC 5531) calls and replies; over TCP after the 4-byte record mark (§11).

    A call: xid, msg_type 0, rpcvers 2, program, version, procedure, then the credential
    (flavour, length <= 400). With RPCSEC_GSS (RFC 2203 §5) the credential body says version 1,
    the procedure (DATA or context INIT/CONTINUE/DESTROY) and the service: none (krb5), integrity
    (krb5i) or privacy (krb5p). A reply: xid, msg_type 1, reply_stat, and for an accepted one the
    verifier (RPCSEC_GSS for every GSS-protected call) and accept_stat 0..5. RPC-with-TLS (RFC 9289 §4.1):
    a NULL call with an empty AUTH_TLS credential, answered by an AUTH_NONE verifier holding "STARTTLS";
    TLS then runs on the same connection.
    """
    c = p.cols
    tcp_mark = (p.proto == _TCP) & ((c[0] & 0x7F) == 0) & (p.length >= 28)
    udp = (p.proto == _UDP) & (p.length >= 24)
    for base, rows in ((4, tcp_mark), (0, udp)):
        mtype_zero = (c[base + 4] == 0) & (c[base + 5] == 0) & (c[base + 6] == 0) & (c[base + 7] <= 1)
        idx, s, length, v = select(p, out, rows & mtype_zero)
        if idx.size == 0:
            continue
        k = idx.size
        ok = np.ones(k, dtype=np.bool_)
        if base:
            record = be32(s, 0) & 0x7FFFFFFF
            ok &= (record >= 24) & (record <= _RPC_RECORD_MAX)
        call = ok & (s[:, base + 7] == 0) & (be32(s, base + 8) == 2) & (length >= base + 40)
        call &= (be32(s, base + 12) < 0x60000000) & (be32(s, base + 16) <= 0xFFFF) & (be32(s, base + 20) <= 0xFFFF)
        flavour = be32(s, base + 24)
        cred_len = be32(s, base + 28)
        call &= np.isin(flavour, _AUTH_FLAVOURS) & (cred_len <= _RPC_AUTH_MAX)
        call &= (flavour != 0) | (cred_len == 0)
        gss = call & (flavour == _RPCSEC_GSS) & (cred_len >= 20) & (be32(s, base + 32) == 1)
        gss_proc = be32(s, base + 36)
        service = be32(s, base + 44)
        gss &= (gss_proc <= 3) & ((gss_proc != 0) | ((service >= 1) & (service <= 3)))
        reply = ok & (s[:, base + 7] == 1) & (be32(s, base + 8) <= 1)
        accepted = reply & (be32(s, base + 8) == 0)
        verf = be32(s, base + 12)
        verf_len = be32(s, base + 16)
        accepted &= np.isin(verf, _AUTH_FLAVOURS) & (verf_len <= _RPC_AUTH_MAX)
        stat_pos = base + 20 + ((np.minimum(verf_len, _RPC_AUTH_MAX) + 3) & ~3)
        accepted &= (stat_pos + 4 > v) | (be32_at(s, stat_pos) <= 5)
        denied = reply & (be32(s, base + 8) == 1) & (be32(s, base + 12) <= 1)
        probe = call & (flavour == _AUTH_TLS) & (cred_len == 0) & (be32(s, base + 20) == 0)
        starttls = accepted & (verf == 0) & (verf_len == 8) & np.all(s[:, base + 20 : base + 28] == _STARTTLS, axis=1)
        codes = np.select(
            [
                probe,
                starttls,
                gss & (gss_proc != 0),
                gss & (service == 1),
                gss & (service == 2),
                gss & (service == 3),
                call & (flavour != _RPCSEC_GSS) & (be32(s, base + 20) == 0),
                call & (flavour != _RPCSEC_GSS),
                accepted & (verf == _RPCSEC_GSS),
                accepted,
                denied,
            ],
            [
                Label.RPC_TLS_PROBE,
                Label.RPC_STARTTLS,
                Label.RPC_GSS_CTRL,
                Label.RPC_GSS_NONE,
                Label.RPC_GSS_INTEG,
                Label.RPC_GSS_PRIV,
                Label.RPC_NULL,
                Label.RPC_CALL_CLEAR,
                Label.RPC_REPLY_GSS,
                Label.RPC_REPLY_CLEAR,
                Label.RPC_DENIED,
            ],
            0,
        )
        out.assign(idx, codes.astype(np.int64))


def smb(p: Packets, out: Labeller) -> None:
    """SMB over direct TCP / NetBIOS session service (MS-SMB2 §2.1): a 4-byte session header, then
    the protocol id 0xFF/0xFE/0xFD/0xFC 'SMB'.

    SMB2 header: StructureSize 64, command <= 0x12, Flags (SIGNED 0x08), SessionId. Transform header
    (0xFD, MS-SMB2 §2.2.41): reserved zero and Flags/EncryptionAlgorithm 0x0001. Compression
    transform (0xFC, §2.2.42): a known algorithm, flags 0 or 1.
    """
    c = p.cols
    cand = (p.proto == _TCP) & (c[0] == 0) & (c[5] == 0x53) & (c[6] == 0x4D) & (c[7] == 0x42)
    idx, s, length, _ = select(p, out, cand & ((c[4] - 0xFC) <= 3) & (p.length >= 12))
    if idx.size == 0:
        return
    nbss = (s[:, 1].astype(np.int64) << 16) | be16(s, 2)
    ok = nbss >= 8
    pid = s[:, 4]
    smb1 = ok & (pid == 0xFF) & (length >= 36)
    smb2 = ok & (pid == 0xFE) & (le(s, 8, 2) == 64) & (length >= 68) & (le(s, 16, 2) <= 0x12)
    command = le(s, 16, 2)
    flags = le(s, 20, 4)
    status = le(s, 12, 4)
    session = le(s, 44, 4) | (le(s, 48, 4) << 32)
    message_all_f = np.all(s[:, 28:36] == 0xFF, axis=1)
    handshake = smb2 & (command <= 1)
    signed = smb2 & ((flags & 0x08) != 0)
    exempt = smb2 & (
        (session == 0)
        | (status == _STATUS_PENDING)
        | (command == _SMB2_CANCEL)
        | ((command == _SMB2_OPLOCK_BREAK) & message_all_f)
    )
    transform = ok & (pid == 0xFD) & (length >= 52) & (le(s, 44, 2) == 0) & (le(s, 46, 2) == 1)
    transform &= le(s, 40, 4) >= 64
    compressed = ok & (pid == 0xFC) & (le(s, 12, 2) <= 5) & (le(s, 14, 2) <= 1) & (length >= 20)
    # Windows clients open with an SMB1 NEGOTIATE (0x72) offering SMB2 dialects: a handshake, not SMB1 use.
    smb1_negotiate = smb1 & (s[:, 8] == 0x72)
    codes = np.select(
        [smb1_negotiate, smb1, handshake, signed, exempt, smb2, transform, compressed],
        [
            Label.SMB2_HS,
            Label.SMB1,
            Label.SMB2_HS,
            Label.SMB2_SIGNED,
            Label.SMB2_EXEMPT,
            Label.SMB2_PLAIN,
            Label.SMB3_TRANSFORM,
            Label.SMB3_COMPRESSED,
        ],
        0,
    )
    out.assign(idx, codes.astype(np.int64))


def _text_key(s: U8, v: I64, start: int) -> Bool:
    """Rows whose bytes from ``start`` begin a ``Key=value`` text parameter (RFC 7143 §6.1): an
    upper-case first letter (standard keys and ``X-`` vendor keys), then printable bytes without spaces."""
    window = s[:, start:HEAD]
    need = np.arange(HEAD - start)[None, :] < (v - start)[:, None]
    text = np.all((printable(window) & (window > 0x20)) | ~need, axis=1)
    first = (s[:, start] >= 0x41) & (s[:, start] <= 0x5A)
    return np.asarray((v - start >= 4) & first & text)


def iscsi(p: Packets, out: Labeller) -> None:
    """iSCSI (RFC 7143 §11): login and text PDUs, whose 48-byte header is followed by key=value text.

    Login request 0x03 (version-max and version-min 0, CSG/NSG 0, 1 or 3, not both T and C),
    login response 0x23 (status class 0..3), text request 0x04 / response 0x24; TotalAHSLength 0.
    """
    c = p.cols
    cand = (p.proto == _TCP) & _ISCSI_FIRST[c[0]] & (c[4] == 0)
    idx, s, length, v = select(p, out, cand & (p.length >= 52))
    if idx.size == 0:
        return
    op = s[:, 0] & 0x3F
    flags = s[:, 1]
    stages_ok = (((flags >> 2) & 3) != 2) & ((flags & 3) != 2) & ((flags & 0xC0) != 0xC0) & ((flags & 0x30) == 0)
    data_len = (s[:, 5].astype(np.int64) << 16) | be16(s, 6)
    text = _text_key(s, v, 48) & (data_len >= 4) & (data_len <= 1 << 20)
    login_req = (op == 0x03) & stages_ok & (s[:, 2] == 0) & (s[:, 3] == 0)
    login_rsp = (op == 0x23) & stages_ok & (s[:, 2] == 0) & (s[:, 3] == 0) & (s[:, 36] <= 3)
    text_pdu = np.isin(op, [0x04, 0x24]) & ((flags & 0x3F) == 0) & (s[:, 2] == 0) & (s[:, 3] == 0)
    codes = np.select([(login_req | login_rsp) & text, text_pdu & text], [Label.ISCSI_LOGIN, Label.ISCSI_TEXT], 0)
    out.assign(idx, codes.astype(np.int64))


def nvme_tcp(p: Packets, out: Labeller) -> None:
    """NVMe/TCP PDUs (NVMe/TCP transport 1.0 §3.6): common header type, flags, HLEN, PDO, PLEN.

    ICReq (0) / ICResp (1): HLEN = PLEN = 128, PDO 0, PFV 0, digest bits <= 3. Capsule and data
    PDUs (4, 5, 6, 7, 9): the HLEN their type fixes and PLEN >= HLEN.
    """
    c = p.cols
    cand = (p.proto == _TCP) & (c[0] <= 9) & (c[7] == 0) & (p.length >= 8)
    idx, s, length, _ = select(p, out, cand)
    if idx.size == 0:
        return
    kind = s[:, 0]
    hlen = s[:, 2]
    pdo = s[:, 3]
    plen = le(s, 4, 4)
    ic = (kind <= 1) & (s[:, 1] == 0) & (hlen == 128) & (pdo == 0) & (plen == 128) & (length >= 128)
    ic &= (le(s, 8, 2) == 0) & (s[:, 10] <= 31) & (s[:, 11] <= 3)
    want = np.zeros(256, dtype=np.int64)
    for k, h in _NVME_HLEN.items():
        want[k] = h
    pdu = (want[kind] > 0) & (hlen == want[kind]) & (plen >= hlen) & (length >= hlen) & ((s[:, 1] & 0xF0) == 0)
    pdu &= (pdo == 0) | ((pdo >= hlen) & (pdo <= plen))
    codes = np.select([ic, pdu], [Label.NVME_IC, Label.NVME_PDU], 0)
    out.assign(idx, codes.astype(np.int64))


def ceph(p: Packets, out: Labeller) -> None:
    """Ceph messenger v2: the banner ``ceph v2\\n`` and frame preambles (32 bytes: tag, segment count
    1..4, four (length, alignment) pairs with the unused ones zero, flags, reserved 0, crc32c).

    AUTH_DONE (tag 6) carries global_id (u64) then con_mode (u32: 1 crc, 2 secure) right after the
    preamble. Tags 1..7 precede authentication; later frames in clear mean crc mode. Tags end at 30
    (msgr2 defines up to COMPRESSION_DONE, 23).
    """
    c = p.cols
    banner = (p.proto == _TCP) & (c[0] == 0x63) & (c[1] == 0x65) & (c[2] == 0x70) & (c[3] == 0x68)
    idx, s, _, _ = select(p, out, banner & (p.length >= 8))
    out.assign(idx, np.where(prefix(s, 0, b"ceph v2\n"), Label.CEPH_BANNER, 0).astype(np.int64))
    cand = (p.proto == _TCP) & (c[0] >= 1) & (c[0] <= 30) & (c[1] >= 1) & (c[1] <= 4) & (p.length >= 32)
    idx, s, _, v = select(p, out, cand)
    if idx.size == 0:
        return
    count = s[:, 1].astype(np.int64)
    ok = s[:, 27] == 0
    for seg in range(4):
        seg_len, align = le(s, 2 + 6 * seg, 4), le(s, 6 + 6 * seg, 2)
        used = seg < count
        ok &= np.where(used, (align <= 4096) & (seg_len <= _RPC_RECORD_MAX), (seg_len == 0) & (align == 0))
    ok &= le(s, 2, 4) > 0
    tag = s[:, 0]
    mode = le(s, 40, 4)
    auth_done = ok & (tag == 6) & (v >= 44)
    codes = np.select(
        [auth_done & (mode == 2), auth_done & (mode == 1), ok & (tag <= 7), ok],
        [Label.CEPH_SECURE, Label.CEPH_CRC, Label.CEPH_BANNER, Label.CEPH_FRAME],
        0,
    )
    out.assign(idx, codes.astype(np.int64))


def lnet(p: Packets, out: Labeller) -> None:
    """Lustre LNet over TCP: the acceptor request (magic 0xacce7100, version 1, in the sender's byte
    order) and the socklnd hello (magic 0xeebc0ded)."""
    c = p.cols
    le_acc = (c[0] == 0x00) & (c[1] == 0x71) & (c[2] == 0xCE) & (c[3] == 0xAC)
    be_acc = (c[0] == 0xAC) & (c[1] == 0xCE) & (c[2] == 0x71) & (c[3] == 0x00)
    le_hello = (c[0] == 0xED) & (c[1] == 0x0D) & (c[2] == 0xBC) & (c[3] == 0xEE)
    be_hello = (c[0] == 0xEE) & (c[1] == 0xBC) & (c[2] == 0x0D) & (c[3] == 0xED)
    idx, s, _, _ = select(p, out, (p.proto == _TCP) & (le_acc | be_acc | le_hello | be_hello) & (p.length >= 16))
    if idx.size == 0:
        return
    little = s[:, 0] != 0xAC
    little &= s[:, 0] != 0xEE
    version = np.where(little, le(s, 4, 4), be32(s, 4))
    acceptor = (s[:, 1] == 0x71) | (s[:, 1] == 0xCE)
    # Acceptor version 1; socklnd hello versions are (major, minor) u16 pairs, major 1..3.
    ok = np.where(acceptor, version == 1, ((version & 0xFFFF) <= 3) | ((version >> 16) <= 3))
    out.assign(idx, np.where(ok, Label.LNET, 0).astype(np.int64))


def drbd(p: Packets, out: Labeller) -> None:
    """DRBD replication over TCP (drbd_protocol.h): a p_header80 (32-bit magic 0x83740267), p_header95 (16-bit
    magic 0x835a) or p_header100 (magic 0x8620ec20 and a zero pad) with a defined command and a length no larger
    than a 1 MiB bio; the command says whether it carries the disk's blocks or the peers' authentication."""
    c = p.cols
    cand = (p.proto == _TCP) & (((c[0] == 0x83) & ((c[1] == 0x74) | (c[1] == 0x5A))) | (c[0] == 0x86))
    idx, s, length, v = select(p, out, cand & (p.length >= 8))
    if idx.size == 0:
        return
    h80 = be32(s, 0) == _DRBD_MAGIC
    h95 = (be16(s, 0) == _DRBD_MAGIC_BIG) & ~h80
    h100 = (be32(s, 0) == _DRBD_MAGIC_100) & (length >= 16) & (v >= 16) & (be32(s, 12) == 0)
    command = np.where(h80, be16(s, 4), np.where(h95, be16(s, 2), be16(s, 6)))
    size = np.where(h80, be16(s, 6), np.where(h95, be32(s, 4), be32(s, 8)))
    known = (command < 0x80) | np.isin(command, _DRBD_FIRST)
    ok = (h80 | h95 | h100) & known & (size <= _DRBD_MAX)
    codes = np.select(
        [ok & np.isin(command, _DRBD_AUTH), ok & np.isin(command, _DRBD_DATA), ok],
        [Label.DRBD_AUTH, Label.DRBD_DATA, Label.DRBD],
        0,
    )
    out.assign(idx, np.asarray(codes, np.int64))


def beegfs(p: Packets, out: Labeller) -> None:
    """BeeGFS 7+ messages over TCP (NetMessage.h): a little-endian msgLength of at least the 40-byte header,
    the 8-byte prefix "BGFS" << 32 | data version 0 at byte 8, only the three defined header flags."""
    c = p.cols
    cand = (p.proto == _TCP) & (c[8] == 0) & (c[12] == _BEEGFS_PREFIX[4]) & (c[15] == _BEEGFS_PREFIX[7])
    idx, s, length, _ = select(p, out, cand & (p.length >= _BEEGFS_HEADER))
    if idx.size == 0:
        return
    size = le(s, 0, 4)
    ok = prefix(s, 8, _BEEGFS_PREFIX) & (size >= _BEEGFS_HEADER) & (size <= _BEEGFS_MAX)
    ok &= (s[:, 7] & (0xFF ^ _BEEGFS_FLAGS)) == 0
    codes = np.where(ok, np.where(le(s, 16, 2) == _BEEGFS_AUTH, Label.BEEGFS_AUTH, Label.BEEGFS), 0)
    out.assign(idx, np.asarray(codes, np.int64))


__all__ = ["beegfs", "ceph", "drbd", "iscsi", "lnet", "nvme_tcp", "onc_rpc", "smb"]
