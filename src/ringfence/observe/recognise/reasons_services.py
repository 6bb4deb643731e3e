"""The words of the verdicts for flows without payload, plaintext service protocols (HTTP, DNS, NTP,
syslog, ICMP) and the storage, management and identity protocols (NFS/ONC RPC, SMB, iSCSI, NVMe/TCP,
Ceph, LNet, SNMP, IPMI, Kerberos, LDAP, RADIUS, DHCP, TFTP, PostgreSQL, MySQL, MQTT, RDP, Kafka, Slurm).

Each handler decides by its protocol's own rules, the weakest message first: one message in clear
makes a flow plaintext even when others were protected. ``docs/verdicts.md`` states the evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ringfence.observe.recognise.labels import HTTP_LABELS, READABLE_KINDS, Kind, Label
from ringfence.observe.recognise.reasons import ENC, HANDSHAKE, INTEG, PLAIN, UNKNOWN, Family, Row, Verdict
from ringfence.observe.recognise.reasons import plural as _n

_NFS_PROGRAMS: Final = {100003: "nfs", 100005: "nfs", 100021: "nfs", 100227: "nfs"}  # NFS, MOUNT, NLM, NFS_ACL


def _http(r: Row) -> Verdict:
    protocol = "http2" if r.c(Label.HTTP2_PREFACE) else "http"
    line = f": {r.detail!r}" if r.detail else ""
    what = (
        "HTTP/2 cleartext preface (h2c: gRPC or etcd without TLS)"
        if protocol == "http2"
        else ("HTTP/1.x request/status line")
    )
    scrape = " — a Prometheus scrape" if r.detail.startswith("GET /metrics") else ""
    return PLAIN, protocol, f"{_n(r.c(*HTTP_LABELS), what)} in clear{line}{scrape}"


def _dns(r: Row) -> Verdict:
    return PLAIN, "dns", f"DNS: header and question name parse in {_n(r.c(Label.DNS), 'packet')}; DNS is unencrypted"


def _ntp(r: Row) -> Verdict:
    plain, mac, nts = r.c(Label.NTP), r.c(Label.NTP_MAC), r.c(Label.NTP_NTS)
    control, private = r.c(Label.NTP_CONTROL), r.c(Label.NTP_PRIVATE)
    if (mac or nts) and not (plain or control or private):
        how = "; ".join(
            ([f"{_n(mac, 'packet')} with a symmetric-key MAC"] if mac else [])
            + ([f"{_n(nts, 'packet')} with Network Time Security (RFC 8915)"] if nts else [])
        )
        return INTEG, "ntp", f"NTP: every time packet authenticated ({how}): forged time is refused, it is readable"
    parts = []
    if plain + mac + nts:
        notes = ([f"{mac} with a MAC"] if mac else []) + ([f"{nts} with NTS"] if nts else [])
        note = f" ({', '.join(notes)}: authenticated, but not every packet is)" if notes else ""
        parts.append(f"{_n(plain + mac + nts, 'packet')} with a valid NTPv1-4 header{note}")
    if control:
        parts.append(f"{_n(control, 'mode-6 control message')} (ntpq: a server's variables, read and set) on port 123")
    if private:
        parts.append(f"{_n(private, 'mode-7 private message')} (ntpdc: monlist and other ntpd requests) on port 123")
    return PLAIN, "ntp", f"NTP: {'; '.join(parts)}; NTP is unencrypted"


def _ptp(r: Row) -> Verdict:
    plain, auth, unread, mgmt = r.c(Label.PTP), r.c(Label.PTP_AUTH), r.c(Label.PTP_TLV), r.c(Label.PTP_MANAGEMENT)
    if plain or mgmt:
        parts = [f"{_n(plain, 'message')} without an AUTHENTICATION TLV"] if plain else []
        if mgmt:
            parts.append(
                f"{_n(mgmt, 'management message')} without {'one' if plain else 'an AUTHENTICATION TLV'} (pmc: the "
                "clock's data sets, read and set)"
            )
        note = f"; {auth} other{'s' if auth != 1 else ''} authenticated" if auth else ""
        return (
            PLAIN,
            "ptp",
            f"PTP: {' and '.join(parts)}{note}: whoever reaches UDP 319/320 can forge the time a clock follows",
        )
    if unread:
        return (
            UNKNOWN,
            "ptp",
            (
                f"PTP: {_n(unread, 'message')} whose TLVs run past the sampled bytes"
                + (f" and {_n(auth, 'authenticated message')}" if auth else "")
                + ": whether an AUTHENTICATION TLV protects them is not visible"
            ),
        )
    return (
        INTEG,
        "ptp",
        (
            f"PTP: every message ({_n(auth, 'message')}) carries an AUTHENTICATION TLV (IEEE 1588-2019 §16.14): "
            "forged time is refused; the messages are readable"
        ),
    )


def _syslog(r: Row) -> Verdict:
    return PLAIN, "syslog", f"syslog: {_n(r.c(Label.SYSLOG), 'message')} starting <PRI> followed by text, in clear"


def _icmp(r: Row) -> Verdict:
    name = "icmpv6" if r.proto == 58 else "icmp"
    return PLAIN, name, f"{name.upper()}: {_n(r.sampled, 'message')} in clear; ICMP has no encryption of its own"


def _no_payload(r: Row) -> Verdict:
    if r.more:
        return UNKNOWN, None, "payload observed but none sampled"
    return UNKNOWN, None, "no payload observed"


def _later(r: Row) -> bool:
    """Packets follow in the flow after the sampled ones, or unrecognised ones are in the sample."""
    return bool(r.free or r.later)


def _rpc(r: Row) -> Verdict:
    program = r.detail  # e.g. "program 100003 v3"
    number = int(program.split()[1]) if program.startswith("program ") else -1
    protocol = _NFS_PROGRAMS.get(number, "onc-rpc")
    what = f"ONC RPC ({program}{', NFS' if protocol == 'nfs' else ''})" if program else "ONC RPC"
    clear, gss_none = r.c(Label.RPC_CALL_CLEAR), r.c(Label.RPC_GSS_NONE)
    integ, priv, ctrl = r.c(Label.RPC_GSS_INTEG), r.c(Label.RPC_GSS_PRIV), r.c(Label.RPC_GSS_CTRL)
    reply_clear, reply_gss = r.c(Label.RPC_REPLY_CLEAR), r.c(Label.RPC_REPLY_GSS)
    gss = integ + priv + gss_none + ctrl + reply_gss
    tls = r.c(Label.RPC_TLS_PROBE, Label.RPC_STARTTLS)
    if tls and not clear and not gss_none:
        # The TLS rules judge a flow whose TLS was sampled; here it was not (or not enough of it).
        return (
            HANDSHAKE,
            protocol,
            (
                f"{what}: RPC-with-TLS (RFC 9289) asked for — the AUTH_TLS probe and STARTTLS reply ({tls} "
                f"messages) — and no TLS record sampled after it{r.sample_note()}"
            ),
        )
    if clear:
        return (
            PLAIN,
            protocol,
            (
                f"{what}: {_n(clear, 'call')} with AUTH_SYS/AUTH_NONE credentials — arguments and results in clear "
                "(AUTH_SYS asserts a uid/gid, it authenticates nothing)"
            ),
        )
    if gss_none:
        return (
            PLAIN,
            protocol,
            (
                f"{what}: {_n(gss_none, 'call')} with RPCSEC_GSS service none (krb5): the header is authenticated, "
                "arguments and results travel in clear"
            ),
        )
    if reply_clear and not gss:
        return (
            PLAIN,
            protocol,
            (
                f"{what}: {_n(reply_clear, 'reply')} with a non-RPCSEC_GSS verifier (the call was AUTH_SYS/AUTH_NONE): "
                "results in clear"
            ),
        )
    if integ:
        mixed = f" ({priv} other calls krb5p)" if priv else ""
        return (
            INTEG,
            protocol,
            (
                f"{what}: {_n(integ, 'call')} with RPCSEC_GSS service integrity (krb5i){mixed}: a checksum protects "
                "the body, which is readable — NOT confidential"
            ),
        )
    if priv:
        return (
            ENC,
            protocol,
            (
                f"{what}: {_n(priv, 'call')} with RPCSEC_GSS service privacy (krb5p): arguments and results are "
                "GSS-wrapped (encrypted); only the RPC header is in clear"
            ),
        )
    if ctrl:
        return HANDSHAKE, protocol, f"{what}: RPCSEC_GSS context creation/destruction only ({_n(ctrl, 'call')})"
    if reply_gss:
        return (
            UNKNOWN,
            protocol,
            (
                f"{what}: {_n(reply_gss, 'reply')} with RPCSEC_GSS verifiers only; the service (krb5 / krb5i / krb5p) "
                f"is named in calls, none sampled{r.sample_note()}"
            ),
        )
    null = r.c(Label.RPC_NULL)
    return (
        UNKNOWN,
        protocol,
        (f"{what}: only NULL-procedure pings ({null}) or rejected calls ({r.c(Label.RPC_DENIED)}), no data"),
    )


def _smb(r: Row) -> Verdict:
    smb1, plain, comp = r.c(Label.SMB1), r.c(Label.SMB2_PLAIN), r.c(Label.SMB3_COMPRESSED)
    signed, transform = r.c(Label.SMB2_SIGNED), r.c(Label.SMB3_TRANSFORM)
    if smb1:
        return (
            PLAIN,
            "smb1",
            f"SMB1: {_n(smb1, 'message')} (0xFF 'SMB'); SMB1 has no encryption (signing authenticates only)",
        )
    if plain or comp:
        what = ", ".join(
            x for x in (f"{_n(plain, 'message')} neither signed nor encrypted" if plain else "",
                        f"{_n(comp, 'compression transform')} (0xFC 'SMB') outside encryption" if comp else "") if x
        )  # fmt: skip
        return PLAIN, "smb2", f"SMB2/3 after session setup: {what}; readable"
    if signed:
        mixed = f" ({transform} other messages encrypted)" if transform else ""
        return (
            INTEG,
            "smb2",
            (
                f"SMB2/3: {_n(signed, 'message')} signed (SMB2_FLAGS_SIGNED) but not encrypted{mixed}: authenticated, "
                "readable — NOT confidential"
            ),
        )
    if transform:
        return (
            ENC,
            "smb3",
            (f"SMB3: {_n(transform, 'message')} in transform headers (0xFD 'SMB', AES-CCM/GCM): encrypted"),
        )
    return (
        HANDSHAKE,
        "smb2",
        (
            f"SMB2/3: negotiate / session setup only ({_n(r.c(Label.SMB2_HS, Label.SMB2_EXEMPT), 'message')})"
            f"{r.sample_note()}"
        ),
    )


def _iscsi(r: Row) -> Verdict:
    login, text = r.c(Label.ISCSI_LOGIN), r.c(Label.ISCSI_TEXT)
    return (
        PLAIN,
        "iscsi",
        (
            f"iSCSI: {_n(login, 'login PDU')} and {_n(text, 'text PDU')} in clear (key=value parameters readable); "
            "iSCSI has no encryption of its own (CHAP authenticates only) — IPsec or TLS underneath would show as such"
        ),
    )


def _nvme(r: Row) -> Verdict:
    ic, pdu = r.c(Label.NVME_IC), r.c(Label.NVME_PDU)
    return (
        PLAIN,
        "nvme-tcp",
        (
            f"NVMe/TCP: {_n(ic, 'ICReq/ICResp')} and {_n(pdu, 'capsule/data PDU')} in clear; NVMe/TCP with TLS "
            "(TP 8011) starts with a TLS handshake and shows as TLS"
        ),
    )


def _ceph(r: Row) -> Verdict:
    secure, crc, frames = r.c(Label.CEPH_SECURE), r.c(Label.CEPH_CRC), r.c(Label.CEPH_FRAME)
    lead = "Ceph msgr2"
    if frames or crc:
        mode = "AUTH_DONE selected crc mode; " if crc else ""
        return (
            PLAIN,
            "ceph-msgr2",
            (
                f"{lead}: {mode}{_n(frames, 'frame')} after authentication with their preamble in clear — crc mode: "
                "crc32c detects corruption, not tampering; messages readable"
            ),
        )
    if secure and _later(r):
        return (
            ENC,
            "ceph-msgr2",
            (
                f"{lead}: AUTH_DONE selected secure mode (con_mode 2); the frames after it are AES-128-GCM and none "
                "parses in clear"
            ),
        )
    return HANDSHAKE, "ceph-msgr2", f"{lead}: banner and pre-authentication frames only{r.sample_note()}"


def _lnet(r: Row) -> Verdict:
    return (
        UNKNOWN,
        "lnet",
        (
            f"Lustre LNet over TCP ({_n(r.c(Label.LNET), 'acceptor/hello message')}: magic 0xacce7100 / 0xeebc0ded): "
            "LNet never encrypts, but Lustre may protect RPCs inside it with sptlrpc (krb5i/krb5p, SSK), which "
            "64-byte heads cannot show"
        ),
    )


def _drbd(r: Row) -> Verdict:
    data, auth = r.c(Label.DRBD_DATA), r.c(Label.DRBD_AUTH)
    said = [_n(r.c(Label.DRBD, Label.DRBD_DATA, Label.DRBD_AUTH), "packet") + " in clear"]
    if data:
        said.append(f"{data} of them with the replicated disk's blocks (P_DATA)")
    auth_text = (
        "the peers authenticated each other at connect (cram-hmac-alg), which protects no packet after it"
        if auth
        else "cram-hmac-alg, where set, only authenticates the peers at connect"
    )
    return (
        PLAIN,
        "drbd",
        f"DRBD block replication: {', '.join(said)}; {auth_text}; DRBD 9.2's TLS would show as TLS records",
    )


def _beegfs(r: Row) -> Verdict:
    auth = r.c(Label.BEEGFS_AUTH)
    said = f"; {_n(auth, 'AuthenticateChannel message')} (the connAuthFile secret)" if auth else ""
    return (
        PLAIN,
        "beegfs",
        (
            f"BeeGFS: {_n(r.c(Label.BEEGFS, Label.BEEGFS_AUTH), 'message')} in clear (paths, file ids, and the "
            f"file data after them){said}; connection authentication proves the peer knows the shared secret, "
            "it encrypts nothing"
        ),
    )


def _snmp(r: Row) -> Verdict:
    community, noauth = r.c(Label.SNMP_COMMUNITY), r.c(Label.SNMP3_NOAUTH)
    auth, priv, discovery = r.c(Label.SNMP3_AUTH), r.c(Label.SNMP3_PRIV), r.c(Label.SNMP3_DISCOVERY)
    if community:
        return PLAIN, "snmp", f"SNMPv1/v2c: {_n(community, 'message')} with the community string and PDU in clear"
    if noauth:
        return PLAIN, "snmp", f"SNMPv3: {_n(noauth, 'message')} noAuthNoPriv (msgFlags 0): readable, unauthenticated"
    if auth:
        return (
            INTEG,
            "snmp",
            (
                f"SNMPv3: {_n(auth, 'message')} authNoPriv (msgFlags auth): USM authenticates, the PDU is readable — "
                "NOT confidential"
            ),
        )
    if priv:
        return ENC, "snmp", f"SNMPv3: {_n(priv, 'message')} authPriv (msgFlags auth+priv): the scoped PDU is encrypted"
    return HANDSHAKE, "snmp", f"SNMPv3: engine-id discovery only ({_n(discovery, 'message')}, empty engine id)"


def _ipmi(r: Row) -> Verdict:
    clear15, auth15 = r.c(Label.IPMI15_CLEAR), r.c(Label.IPMI15_AUTH)
    plain, auth, enc = r.c(Label.RMCPP_PLAIN), r.c(Label.RMCPP_AUTH), r.c(Label.RMCPP_ENC)
    setup, asf = r.c(Label.RMCPP_SETUP), r.c(Label.ASF)
    if clear15:
        return (
            PLAIN,
            "ipmi",
            (
                f"IPMI 1.5 over RMCP: {_n(clear15, 'message')} with authentication type none or straight password — "
                "commands (and the password) in clear"
            ),
        )
    if plain:
        return (
            PLAIN,
            "ipmi",
            f"RMCP+ (IPMI 2.0): {_n(plain, 'payload')} neither authenticated nor encrypted (cipher suite 0)",
        )
    if auth15 or auth:
        return (
            INTEG,
            "ipmi",
            (
                f"IPMI over RMCP: {_n(auth15 + auth, 'message')} authenticated (IPMI 1.5 MD2/MD5 authcode or RMCP+ "
                "integrity) but not encrypted — NOT confidential"
            ),
        )
    if enc:
        return (
            ENC,
            "ipmi",
            (
                f"RMCP+ (IPMI 2.0): {_n(enc, 'payload')} with the encrypted bit (AES-CBC-128); note RAKP exposes a "
                "password hash to offline guessing"
            ),
        )
    if setup:
        return HANDSHAKE, "ipmi", f"RMCP+ session setup only (open session / RAKP, {_n(setup, 'message')})"
    return PLAIN, "asf", f"RMCP ASF presence ping/pong ({_n(asf, 'message')}) in clear; no IPMI session sampled"


def _kerberos(r: Row) -> Verdict:
    return (
        HANDSHAKE,
        "kerberos",
        (
            f"Kerberos v5 ({_n(r.c(Label.KERBEROS), 'message')}: AS/TGS/AP exchange or KRB-ERROR): tickets and the "
            "KDC reply's enc-part (session keys) are encrypted; client and service principal names, realm, times, "
            "flags and errors are in clear. It keys other traffic, judged in its own flow"
        ),
    )


def _ldap(r: Row) -> Verdict:
    simple, ops = r.c(Label.LDAP_SIMPLE_BIND), r.c(Label.LDAP_OP)
    starttls, sasl = r.c(Label.LDAP_STARTTLS), r.c(Label.LDAP_SASL_BIND)
    if simple:
        return PLAIN, "ldap", f"LDAP: {_n(simple, 'simple bind')} — DN and password in clear"
    if ops:
        return PLAIN, "ldap", f"LDAP: {_n(ops, 'operation')} in clear (BER messages readable)"
    if starttls:
        return HANDSHAKE, "ldap", f"LDAP: StartTLS requested; no TLS record sampled{r.sample_note()}"
    return (
        UNKNOWN,
        "ldap",
        (
            f"LDAP: SASL bind only ({_n(sasl, 'message')}); a SASL security layer (e.g. GSSAPI sign/seal) may "
            "protect what follows, and which one was chosen is not visible"
        ),
    )


def _radius(r: Row) -> Verdict:
    return (
        PLAIN,
        "radius",
        (
            f"RADIUS: {_n(r.c(Label.RADIUS), 'message')} with attributes in clear (User-Name, NAS and station ids); "
            "User-Password is only hidden with an MD5 keystream of the shared secret and Message-Authenticator "
            "authenticates — neither makes it confidential (RADIUS over TLS shows as TLS)"
        ),
    )


def _rx(r: Row) -> Verdict:
    null, kad, ctrl = r.c(Label.RX_NULL), r.c(Label.RX_KAD), r.c(Label.RX_CTRL)
    lead = f"AFS Rx ({_n(null + kad, 'DATA packet')}, {_n(ctrl, 'control packet')}; epoch and connection id agree)"
    if null:
        return PLAIN, "rx", f"{lead}: security index 0 (rxnull) — neither authenticated nor encrypted"
    readable = r.readable_body((*READABLE_KINDS, Kind.LOW))
    if kad and readable:
        return PLAIN, "rx", (
            f"{lead}: rxkad (security index 2) with {_n(readable, 'DATA body')} not ciphertext (readable or "
            "low entropy): level clear or auth — authenticated at most, NOT confidential"
        )
    if kad:
        return UNKNOWN, "rx", (
            f"{lead}: rxkad (security index 2); DATA bodies high entropy — level crypt, or compressed data; the "
            "level is not in the header"
        )
    return UNKNOWN, "rx", f"{lead}: control packets only, no DATA sampled"


def _dhcp(r: Row) -> Verdict:
    return (
        PLAIN,
        "dhcp",
        (
            f"DHCP/BOOTP: {_n(r.c(Label.DHCP), 'message')} in clear (DHCPv6 identified on UDP 546/547); "
            "DHCP (and the PXE boot built on it) has no encryption"
        ),
    )


def _tftp(r: Row) -> Verdict:
    req, data = r.c(Label.TFTP_REQ), r.c(Label.TFTP_DATA, Label.TFTP_ACK)
    return (
        PLAIN,
        "tftp",
        (
            f"TFTP: {_n(req, 'request')} and {_n(data, 'DATA/ACK packet')}; TFTP has neither encryption nor "
            "authentication (RFC 1350): files such as PXE boot images travel in clear"
        ),
    )


def _postgres(r: Row) -> Verdict:
    startup, request = r.c(Label.PG_STARTUP), r.c(Label.PG_SSLREQ)
    if startup:
        return (
            PLAIN,
            "postgresql",
            f"PostgreSQL: StartupMessage in clear ({_n(startup, 'message')}): user, database and queries readable",
        )
    return (
        HANDSHAKE,
        "postgresql",
        (
            f"PostgreSQL: SSLRequest/GSSENCRequest ({request}); the TLS or GSSAPI encryption that may follow is not "
            f"in the sample{r.sample_note()}"
        ),
    )


def _mysql(r: Row) -> Verdict:
    login, ssl = r.c(Label.MYSQL_LOGIN), r.c(Label.MYSQL_SSLREQ)
    if login:
        return PLAIN, "mysql", "MySQL: HandshakeResponse without CLIENT_SSL: user name and every query in clear"
    if ssl:
        return HANDSHAKE, "mysql", f"MySQL: SSLRequest (CLIENT_SSL); no TLS record sampled{r.sample_note()}"
    return HANDSHAKE, "mysql", f"MySQL: server greeting only (protocol 10){r.sample_note()}"


def _mqtt(r: Row) -> Verdict:
    return (
        PLAIN,
        "mqtt",
        (f"MQTT: {_n(r.c(Label.MQTT_CONNECT), 'CONNECT')} in clear (client id and any username/password readable)"),
    )


def _rdp(r: Row) -> Verdict:
    if r.c(Label.RDP_NEG_STD):
        return (
            UNKNOWN,
            "rdp",
            (
                "RDP: X.224 negotiation selected standard RDP security: RC4 with keys from an unauthenticated "
                "exchange, or no encryption (the level is in the MCS connect response, not sampled); not TLS"
            ),
        )
    return HANDSHAKE, "rdp", f"RDP: TLS/CredSSP negotiated (X.224); no TLS record sampled{r.sample_note()}"


def _kafka(r: Row) -> Verdict:
    return PLAIN, "kafka", f"Kafka: {_n(r.c(Label.KAFKA), 'request header')} in clear (api key, client id readable)"


def _slurm(r: Row) -> Verdict:
    munge = r.c(Label.SLURM_MUNGE)
    if munge:
        return (
            INTEG,
            "slurm",
            (
                f"Slurm RPC: {_n(munge, 'message')} with a MUNGE credential: it authenticates the sender's uid/gid "
                "(signed with the cluster's munge key); the message itself is not encrypted — NOT confidential"
            ),
        )
    return (
        PLAIN,
        "slurm",
        (
            f"Slurm RPC: {_n(r.c(Label.SLURM), 'header')} in clear; no authentication credential within the "
            "sampled bytes"
        ),
    )


def _tacacs(r: Row) -> Verdict:
    clear, hidden = r.c(Label.TACACS_CLEAR), r.c(Label.TACACS_OBFUSCATED)
    if clear:
        return (
            PLAIN,
            "tacacs+",
            (
                f"TACACS+: {_n(clear, 'packet')} with the UNENCRYPTED flag: user names, passwords and commands "
                "in clear on TCP 49"
            ),
        )
    return (
        PLAIN,
        "tacacs+",
        (
            f"TACACS+: {_n(hidden, 'packet')} on TCP 49 whose bodies are only obfuscated with an MD5 keystream of "
            "the shared secret (RFC 8907 §4.5: not confidentiality by current standards, and no integrity) — "
            "not counted as a protection; TACACS+ over TLS shows as TLS"
        ),
    )


def _pptp(r: Row) -> Verdict:
    return (
        PLAIN,
        "pptp",
        (
            f"PPTP: {_n(r.c(Label.PPTP), 'control message')} in clear (host name, vendor, call ids); its tunnel is "
            "PPP in GRE, whose MPPE encryption (RC4 keyed from MS-CHAPv2) is broken — not a protection"
        ),
    )


#: Handlers of the families worded here; :mod:`.verdict` joins them with :data:`.reasons.HANDLERS`.
SERVICE_HANDLERS: Final[dict[Family, Callable[[Row], Verdict]]] = {
    Family.NO_PAYLOAD: _no_payload,
    Family.ICMP: _icmp,
    Family.HTTP: _http,
    Family.DNS: _dns,
    Family.NTP: _ntp,
    Family.SYSLOG: _syslog,
    Family.ONC_RPC: _rpc,
    Family.SMB: _smb,
    Family.ISCSI: _iscsi,
    Family.NVME_TCP: _nvme,
    Family.CEPH: _ceph,
    Family.LNET: _lnet,
    Family.DRBD: _drbd,
    Family.BEEGFS: _beegfs,
    Family.SNMP: _snmp,
    Family.IPMI: _ipmi,
    Family.KERBEROS: _kerberos,
    Family.LDAP: _ldap,
    Family.RADIUS: _radius,
    Family.PPTP: _pptp,
    Family.TACACS: _tacacs,
    Family.RX: _rx,
    Family.DHCP: _dhcp,
    Family.TFTP: _tftp,
    Family.POSTGRES: _postgres,
    Family.MYSQL: _mysql,
    Family.MQTT: _mqtt,
    Family.RDP: _rdp,
    Family.KAFKA: _kafka,
    Family.PTP: _ptp,
    Family.SLURM: _slurm,
}

__all__ = ["SERVICE_HANDLERS"]
