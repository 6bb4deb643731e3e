"""Codes for what one sampled packet was recognised as, and what its bytes look like."""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class Label(IntEnum):
    """Protocol framing recognised at the start of one sampled payload (0: none)."""

    NONE = 0
    # TLS record layer (TCP)
    TLS_CH = 1  # ClientHello
    TLS_SH = 2  # ServerHello, legacy_version 0x0303, version not visible
    TLS_SH13 = 3  # ServerHello with supported_versions = 0x0304 inside the head
    TLS_SH_SSL3 = 4  # ServerHello choosing SSL 3.0
    TLS_SH10 = 5  # … TLS 1.0
    TLS_SH11 = 6  # … TLS 1.1
    TLS_HS12 = 7  # plaintext Certificate/ServerKeyExchange/…/ClientKeyExchange: TLS <= 1.2 only
    TLS_HS = 8  # other handshake record (e.g. an encrypted Finished)
    TLS_CCS12 = 9  # ChangeCipherSpec followed by a handshake record (TLS <= 1.2 encrypted Finished)
    TLS_CCS = 10  # ChangeCipherSpec alone
    TLS_ALERT = 11
    TLS_APP = 12  # application_data record (content type 23)
    TLS_APP13 = 13  # ChangeCipherSpec then application_data: TLS 1.3 middlebox-compatibility flight
    TLS_HB = 14  # heartbeat
    # DTLS (UDP)
    DTLS_HS = 15
    DTLS_APP = 16
    DTLS_OTHER = 17
    # SSH (TCP)
    SSH_BANNER = 18
    SSH_KEX = 19  # cleartext binary packet of the key exchange
    SSH_NEWKEYS = 20
    # QUIC (UDP)
    QUIC_INITIAL = 21
    QUIC_0RTT = 22
    QUIC_HANDSHAKE = 23
    QUIC_RETRY = 24
    QUIC_VN = 25  # version negotiation
    GQUIC_HS = 26  # Google QUIC packet with version or crypto-handshake tags
    # WireGuard (UDP)
    WG_INIT = 27
    WG_RESP = 28
    WG_COOKIE = 29
    WG_DATA = 30
    # IPsec
    IKE1 = 31
    IKE2 = 32
    ESP = 33
    ESP_NULL = 34  # inner IP header readable right after SPI and sequence number
    NAT_KEEPALIVE = 35
    # MACsec (L2)
    MACSEC_E = 36
    MACSEC_I = 37
    MACSEC_BAD = 38
    # RDMA
    ROCE_DATA = 39
    ROCE_CTRL = 40
    # collective transports
    GLOO_CTRL = 41
    GLOO_DATA = 42
    RFT = 43  # ringfence transport protected record (DATA, ABORT, FINISHED)
    # plaintext application protocols
    HTTP_REQ = 44
    HTTP_RESP = 45
    HTTP2_PREFACE = 46
    DNS = 47
    NTP = 48
    NTP_MAC = 49  # a key id and an MD5/SHA-1 MAC after the header (symmetric-key authentication)
    SYSLOG = 50
    RFT_HS = 51  # ringfence transport handshake record (HELLO, AUTH, ALERT: plaintext body)
    SSH_NEWKEYS_DATA = 52  # NEWKEYS and, in the same segment, bytes under the new keys
    # ONC RPC (RFC 5531) and NFS; RPCSEC_GSS (RFC 2203) services
    RPC_CALL_CLEAR = 53  # call with AUTH_NONE / AUTH_SYS / AUTH_SHORT / AUTH_DH: body in clear
    RPC_GSS_NONE = 54  # RPCSEC_GSS service none (krb5): header authenticated, body in clear
    RPC_GSS_INTEG = 55  # service integrity (krb5i)
    RPC_GSS_PRIV = 56  # service privacy (krb5p)
    RPC_GSS_CTRL = 57  # RPCSEC_GSS context creation / destruction
    RPC_REPLY_CLEAR = 58  # accepted/denied reply whose verifier is not RPCSEC_GSS
    RPC_REPLY_GSS = 59
    # SMB over NetBIOS session service / direct TCP
    SMB1 = 60
    SMB2_HS = 61  # NEGOTIATE / SESSION_SETUP
    SMB2_SIGNED = 62
    SMB2_PLAIN = 63  # unsigned request/response after session setup
    SMB2_EXEMPT = 64  # unsigned by the spec: interim responses, oplock-break notifications, CANCEL
    SMB3_TRANSFORM = 65  # 0xFD 'SMB': encrypted
    SMB3_COMPRESSED = 66  # 0xFC 'SMB' outside a transform header: compressed, not encrypted
    # block storage
    ISCSI_LOGIN = 67
    ISCSI_TEXT = 68
    NVME_IC = 69  # NVMe/TCP ICReq / ICResp
    NVME_PDU = 70
    # Ceph msgr2, Lustre LNet
    CEPH_BANNER = 71
    CEPH_FRAME = 72  # frame preamble in clear (crc mode, or before auth)
    CEPH_SECURE = 73  # AUTH_DONE selecting con_mode secure
    CEPH_CRC = 74  # AUTH_DONE selecting con_mode crc
    LNET = 75
    # management
    SNMP_COMMUNITY = 76  # v1 / v2c
    SNMP3_NOAUTH = 77
    SNMP3_AUTH = 78
    SNMP3_PRIV = 79
    SNMP3_DISCOVERY = 80  # noAuthNoPriv with an empty engine id (RFC 3414 §4)
    IPMI15_CLEAR = 81  # IPMI 1.5 session, authentication type none / straight password
    IPMI15_AUTH = 82  # IPMI 1.5 session with MD2 / MD5 / OEM authcode
    RMCPP_SETUP = 83  # RMCP+ open session / RAKP, or an IPMI 1.5 message outside a session (discovery)
    RMCPP_PLAIN = 84
    RMCPP_AUTH = 85  # authenticated, not encrypted
    RMCPP_ENC = 86
    ASF = 87  # RMCP ASF presence ping / pong
    KERBEROS = 88
    LDAP_SIMPLE_BIND = 89
    LDAP_SASL_BIND = 90
    LDAP_STARTTLS = 91
    LDAP_OP = 92
    DHCP = 93
    TFTP_REQ = 94
    TFTP_DATA = 95  # DATA whose block the other side ACKs in the same flow (framing._tftp_transfer)
    TFTP_ACK = 96
    PG_SSLREQ = 97  # SSLRequest / GSSENCRequest
    PG_STARTUP = 98
    MYSQL_GREETING = 99
    MYSQL_SSLREQ = 100
    MYSQL_LOGIN = 101
    MQTT_CONNECT = 102
    RDP_NEG_TLS = 103  # X.224 negotiation requesting / selecting TLS or CredSSP
    RDP_NEG_STD = 104  # … selecting standard RDP security
    KAFKA = 105
    SLURM_MUNGE = 106  # Slurm RPC with a MUNGE credential in the head
    SLURM = 107
    RPC_DENIED = 108  # a rejected RPC call (authentication error, version mismatch): no data
    RPC_NULL = 109  # a NULL-procedure ping (procedure 0): no arguments, no results
    RADIUS = 110
    # AFS Rx (UDP): labelled per flow (framing._rx), by the security index of the connection
    RX_NULL = 111  # DATA on an rxnull connection (security index 0): no authentication, no encryption
    RX_KAD = 112  # DATA on an rxkad connection (index 2): level clear / auth / crypt not in the header
    RX_CTRL = 113  # ACK, BUSY, ABORT, ACKALL, CHALLENGE, RESPONSE, …
    NTP_CONTROL = 114  # NTP mode 6 (ntpq): reads and writes a server's variables
    NTP_PRIVATE = 115  # NTP mode 7 (ntpdc): ntpd's private requests (monlist, …)
    PPTP = 116  # PPTP control message (TCP 1723)
    # HSRP hellos (UDP 1985), by what authenticates them
    HSRP_DEFAULT = 117  # v0/v1 with the default text "cisco"
    HSRP_TEXT = 118  # a text password in clear
    HSRP_MD5 = 119  # v2 with an MD5 authentication TLV (keyed hash: integrity, readable)
    HSRP_NOAUTH = 120  # v2 without an authentication TLV in the head
    VRRP_TEXT = 121  # VRRPv2 with a text password in clear
    VRRP_NOAUTH = 122  # VRRPv2 without authentication, or VRRPv3 (which has none)
    BGP = 123  # a BGP-4 message (marker, length, type)
    TACACS_CLEAR = 124  # TACACS+ with the UNENCRYPTED flag: the body in clear
    TACACS_OBFUSCATED = 125  # TACACS+ body XORed with an MD5 keystream of the shared secret
    # OSPF (IP protocol 89), by what authenticates it
    OSPF_NULL = 126  # OSPFv2 AuType 0
    OSPF_SIMPLE = 127  # OSPFv2 AuType 1: a password in clear
    OSPF_CRYPTO = 128  # OSPFv2 AuType 2: a keyed digest after the packet
    OSPF3 = 129  # OSPFv3: no authentication in its header
    # ZeroMQ ZMTP 3.x greetings, by their security mechanism; the signature alone
    ZMTP_NULL = 130
    ZMTP_PLAIN = 131
    ZMTP_CURVE = 132
    ZMTP_GSSAPI = 133
    ZMTP_SIGNATURE = 134
    # AMQP protocol headers
    AMQP = 135  # 0-8, 0-9, 0-9-1, or 1.0 with protocol id 0: frames in clear
    AMQP_SASL = 136  # 1.0, SASL next
    AMQP_TLS = 137  # 1.0, TLS next
    # A tunnel's own packets, left in its outer flow once what it carries is decoded
    GRE_KEEPALIVE = 138  # GRE v0, protocol type 0, nothing after the header: a keepalive's reply
    GRE_OPAQUE = 139  # GRE v0 of a protocol type not decoded, or cut short
    PPTP_ACK = 140  # enhanced GRE (PPTP) carrying only an acknowledgement
    PPP_CONTROL = 141  # PPP negotiation (LCP, CHAP, EAP, CCP, IPCP, …) in PPTP's GRE or an L2TP session
    PPP_PAP = 142  # PAP: the user's password in clear
    PPP_MPPE = 143  # a PPP compressed datagram with MPPE's encrypted bit: RC4 keyed from MS-CHAP
    L2TP_CONTROL = 144  # an L2TPv2 control message (or its zero-length-body acknowledgement)
    # Replication and parallel file systems
    DRBD = 145  # a DRBD packet header (state, bitmap, barrier, ping …)
    DRBD_DATA = 146  # P_DATA / P_DATA_REPLY / P_RS_DATA_REPLY: the replicated disk's blocks
    DRBD_AUTH = 147  # P_AUTH_CHALLENGE / P_AUTH_RESPONSE: cram-hmac peer authentication
    BEEGFS = 148  # a BeeGFS message header
    BEEGFS_AUTH = 149  # AuthenticateChannelMsg: the connAuthFile shared secret
    # Multicast control
    IGMP = 150  # an IGMP query, report or leave with a valid checksum
    PIM = 151  # a PIMv2 message with a valid checksum
    # Consoles and application databases
    TELNET = 152  # Telnet option negotiation (IAC WILL/WONT/DO/DONT, subnegotiation)
    RFB = 153  # VNC's RFB ProtocolVersion banner
    VNC_AUTH = 154  # a 16-byte VNC authentication challenge or response in an RFB flow
    MONGODB = 155  # a MongoDB wire protocol message header
    NTP_NTS = 156  # NTP with Network Time Security extension fields (RFC 8915): authenticated
    # RPC-with-TLS (RFC 9289): NFS over TLS starts with these two on the connection TLS then takes
    RPC_TLS_PROBE = 157  # a NULL call with an AUTH_TLS credential
    RPC_STARTTLS = 158  # its reply: an AUTH_NONE verifier holding "STARTTLS"
    # IPsec AH (RFC 4302)
    AH = 159  # an authentication header: the packet authenticated, what follows in clear
    AH_ESP = 160  # an authentication header whose next header is ESP
    # Key-value stores and coordination services
    REDIS = 161  # a RESP command (an array of bulk strings naming a command)
    REDIS_AUTH = 162  # AUTH, or HELLO with AUTH: the password in clear
    REDIS_REPLY = 163  # a RESP reply in a flow with a RESP command
    REDIS_CLUSTER = 164  # a Redis Cluster bus message (RCmb)
    MEMCACHED = 165  # a memcached binary protocol header
    MEMCACHED_SASL = 166  # memcached SASL auth/step: the mechanism's data (PLAIN: the password)
    MEMCACHED_TEXT = 167  # a memcached text protocol command or VALUE line
    ZOOKEEPER = 168  # a ZooKeeper ConnectRequest/ConnectResponse, ping or ping reply
    ZK_DIGEST = 169  # a ZooKeeper AuthPacket of the digest scheme: user:password in clear
    ZK_AUTH = 170  # a ZooKeeper AuthPacket of another scheme
    ZK_MESSAGE = 171  # a length-framed message in a flow shown to be ZooKeeper
    ZK_WORD = 172  # a four-letter admin command on port 2181
    CQL = 173  # a Cassandra CQL native protocol frame header
    CQL_AUTH = 174  # a CQL AUTH_RESPONSE: the authenticator's token (PasswordAuthenticator: the password)
    # Precision Time Protocol (IEEE 1588) over UDP
    PTP = 175  # a PTPv2 message without an AUTHENTICATION TLV
    PTP_AUTH = 176  # a PTPv2 message with an AUTHENTICATION TLV
    PTP_TLV = 177  # a PTPv2 message whose TLVs run past the sampled head
    PTP_MANAGEMENT = 178  # a PTPv2 management message without an AUTHENTICATION TLV
    # Bidirectional Forwarding Detection (RFC 5880)
    BFD_NOAUTH = 179  # a BFD control packet without authentication
    BFD_SIMPLE = 180  # … with a simple password, in clear
    BFD_KEYED = 181  # … with keyed or meticulous keyed MD5/SHA1
    # OpenVPN
    OVPN_RESET = 182  # a hard reset with a plain control channel
    OVPN_RESET_AUTH = 183  # … under --tls-auth (an HMAC over every control packet)
    OVPN_RESET_CRYPT = 184  # … under --tls-crypt (the control channel encrypted too)
    OVPN_CONTROL = 185  # a control/ack packet in an OpenVPN flow: the control channel's TLS
    OVPN_DATA = 186  # a data packet (P_DATA_V1/V2) in an OpenVPN flow
    OVPN_CLEAR = 187  # a data packet whose body is a whole IP packet in clear (--cipher none)
    MEMCACHED_UDP = 188  # memcached over UDP: a frame header, then a command or reply
    # Hadoop IPC, HDFS data transfer, Spark
    HRPC_SIMPLE = 189  # a Hadoop IPC connection header with SIMPLE authentication
    HRPC_SASL = 190  # … with SASL
    HRPC_SASL_MSG = 191  # a SASL negotiation message (callId -33)
    HRPC_WRAP = 192  # a SASL-wrapped call (state WRAP): integrity or privacy
    HRPC_CALL = 193  # an RPC request in clear
    HDFS_OP = 194  # a DataTransferProtocol op (READ_BLOCK, WRITE_BLOCK, …)
    HDFS_SASL = 195  # the SASL data-transfer handshake (magic 0xDEADBEEF)
    HDFS_PACKET = 196  # a block data packet in an HDFS data-transfer flow
    SPARK = 197  # a Spark transport frame
    SPARK_AUTH = 198  # an RpcRequest carrying spark.network.crypto's AuthMessage
    SPARK_SASL = 199  # an RpcRequest carrying a SASL message (spark.authenticate)
    SPARK_REPLY = 200  # an RpcResponse in a Spark flow that authenticates: perhaps the exchange's own reply


#: Number of label codes (array dimension for per-flow counts).
N_LABELS = max(Label) + 1


class Kind(IntEnum):
    """What the bytes of an unframed payload (or a protocol body) look like."""

    SHORT = 0  # too few bytes to say anything
    ZERO = 1  # all zero
    TEXT = 2  # printable ASCII
    F32 = 3  # float32 words with plausible exponents
    BF16 = 4
    F16 = 5
    LOW = 6  # byte entropy well below random: not ciphertext
    MID = 7
    HIGH = 8  # byte entropy of random data: ciphertext, compressed or random


N_KINDS = max(Kind) + 1

#: Kinds that show readable data in a body that should have been ciphertext.
READABLE_KINDS = (Kind.ZERO, Kind.TEXT, Kind.F32, Kind.BF16, Kind.F16)
TENSOR_KINDS = (Kind.F32, Kind.BF16, Kind.F16)

TLS_LABELS: Final = tuple(Label(i) for i in range(Label.TLS_CH, Label.TLS_HB + 1))
TLS_STRONG: Final = (
    Label.TLS_CH,
    Label.TLS_SH,
    Label.TLS_SH13,
    Label.TLS_SH_SSL3,
    Label.TLS_SH10,
    Label.TLS_SH11,
    Label.TLS_HS12,
    Label.TLS_CCS12,
    Label.TLS_CCS,
    Label.TLS_APP13,
)
QUIC_LABELS: Final = (Label.QUIC_INITIAL, Label.QUIC_0RTT, Label.QUIC_HANDSHAKE, Label.QUIC_RETRY, Label.QUIC_VN)
HTTP_LABELS: Final = (Label.HTTP_REQ, Label.HTTP_RESP, Label.HTTP2_PREFACE)
#: Application messages whose content is in clear by their protocol's own rules: one in a flow of an
#: encrypting protocol makes it plaintext (the weakest packet wins), like an HTTP line does.
CLEAR_APP_LABELS: Final = (
    Label.RPC_CALL_CLEAR,
    Label.RPC_GSS_NONE,
    Label.SMB1,
    Label.SMB2_PLAIN,
    Label.SNMP_COMMUNITY,
    Label.SNMP3_NOAUTH,
    Label.LDAP_SIMPLE_BIND,
    Label.LDAP_OP,
    Label.PG_STARTUP,
    Label.MYSQL_LOGIN,
    Label.MQTT_CONNECT,
    Label.KAFKA,
    Label.ISCSI_LOGIN,
    Label.ISCSI_TEXT,
    Label.NVME_IC,
    Label.NVME_PDU,
    Label.REDIS,
    Label.REDIS_AUTH,
    Label.MEMCACHED,
    Label.MEMCACHED_TEXT,
    Label.ZOOKEEPER,
    Label.CQL,
    Label.HRPC_CALL,
    Label.HDFS_OP,
)


#: How a cleartext application message is named in a downgraded verdict, and the protocol it names.
CLEAR_APP_WORDS: Final = {
    Label.RPC_CALL_CLEAR: "ONC RPC call with AUTH_SYS/AUTH_NONE",
    Label.RPC_GSS_NONE: "RPCSEC_GSS call with service none",
    Label.SMB1: "SMB1 message",
    Label.SMB2_PLAIN: "unsigned SMB2 message",
    Label.SNMP_COMMUNITY: "SNMPv1/v2c message",
    Label.SNMP3_NOAUTH: "SNMPv3 noAuthNoPriv message",
    Label.LDAP_SIMPLE_BIND: "LDAP simple bind",
    Label.LDAP_OP: "LDAP operation",
    Label.PG_STARTUP: "PostgreSQL StartupMessage",
    Label.MYSQL_LOGIN: "MySQL login without TLS",
    Label.MQTT_CONNECT: "MQTT CONNECT",
    Label.KAFKA: "Kafka request header",
    Label.ISCSI_LOGIN: "iSCSI login PDU",
    Label.ISCSI_TEXT: "iSCSI text PDU",
    Label.NVME_IC: "NVMe/TCP ICReq/ICResp",
    Label.NVME_PDU: "NVMe/TCP PDU",
    Label.REDIS: "Redis command",
    Label.REDIS_AUTH: "Redis AUTH",
    Label.MEMCACHED: "memcached binary message",
    Label.MEMCACHED_TEXT: "memcached text command",
    Label.ZOOKEEPER: "ZooKeeper connect/ping",
    Label.CQL: "Cassandra CQL frame",
    Label.HRPC_CALL: "Hadoop IPC call",
    Label.HDFS_OP: "HDFS data-transfer op",
}
CLEAR_APP_PROTOCOL: Final = {
    Label.RPC_CALL_CLEAR: "onc-rpc",
    Label.RPC_GSS_NONE: "onc-rpc",
    Label.SMB1: "smb1",
    Label.SMB2_PLAIN: "smb2",
    Label.SNMP_COMMUNITY: "snmp",
    Label.SNMP3_NOAUTH: "snmp",
    Label.LDAP_SIMPLE_BIND: "ldap",
    Label.LDAP_OP: "ldap",
    Label.PG_STARTUP: "postgresql",
    Label.MYSQL_LOGIN: "mysql",
    Label.MQTT_CONNECT: "mqtt",
    Label.KAFKA: "kafka",
    Label.ISCSI_LOGIN: "iscsi",
    Label.ISCSI_TEXT: "iscsi",
    Label.NVME_IC: "nvme-tcp",
    Label.NVME_PDU: "nvme-tcp",
    Label.REDIS: "redis",
    Label.REDIS_AUTH: "redis",
    Label.MEMCACHED: "memcached",
    Label.MEMCACHED_TEXT: "memcached",
    Label.ZOOKEEPER: "zookeeper",
    Label.CQL: "cassandra",
    Label.HRPC_CALL: "hadoop-rpc",
    Label.HDFS_OP: "hdfs",
}
#: Cleartext messages that upgrade a connection to TLS, as a TLS verdict names them.
UPGRADES: Final = {
    Label.PG_SSLREQ: "PostgreSQL SSLRequest",
    Label.LDAP_STARTTLS: "LDAP StartTLS",
    Label.MYSQL_SSLREQ: "MySQL SSLRequest",
    Label.RDP_NEG_TLS: "RDP X.224 negotiation of TLS/CredSSP",
    Label.RPC_TLS_PROBE: "RPC-with-TLS AUTH_TLS probe",
    Label.RPC_STARTTLS: "RPC-with-TLS STARTTLS reply",
}


__all__ = [
    "CLEAR_APP_LABELS",
    "CLEAR_APP_PROTOCOL",
    "CLEAR_APP_WORDS",
    "HTTP_LABELS",
    "N_KINDS",
    "N_LABELS",
    "QUIC_LABELS",
    "READABLE_KINDS",
    "TENSOR_KINDS",
    "TLS_LABELS",
    "TLS_STRONG",
    "UPGRADES",
    "Kind",
    "Label",
]
