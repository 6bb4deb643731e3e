"""Configuration of the ringfence transport: environment variables or :func:`configure`.

========================================  ==========================================================
``RINGFENCE_TRANSPORT_DIR``               a per-workload directory from ``ringfence pki issue``
                                          (cert.pem, key.pem, ca.pem); the three below override it;
                                          ``{rank}`` in it (and in CERT, KEY) becomes the rank
``RINGFENCE_TRANSPORT_CERT``              this rank's certificate (PEM)
``RINGFENCE_TRANSPORT_KEY``               its private key (PEM, mode 0600)
``RINGFENCE_TRANSPORT_CA``                the cluster CA certificate
``RINGFENCE_TRANSPORT_REVOKED``           revocation list (one ``sha256:<hex>`` fingerprint a line)
``RINGFENCE_TRANSPORT_JOB``               the job identity ``spiffe://<cluster>/job/<job>``
                                          (default: taken from this rank's own certificate)
``RINGFENCE_TRANSPORT_REKEY_BYTES``       new epoch after this many bytes per direction (default 1 GiB)
``RINGFENCE_TRANSPORT_REKEY_SECONDS``     …or after this long (``120``, ``2m``; default 2m)
``RINGFENCE_TRANSPORT_ADDR``              address to bind and advertise (default: the address of
                                          ``RINGFENCE_TRANSPORT_IFNAME``/``GLOO_SOCKET_IFNAME``,
                                          else 127.0.0.1)
``RINGFENCE_TRANSPORT_IFNAME``            interface whose IPv4 address to use
``RINGFENCE_TRANSPORT_PORT``              port to listen on (default 0: any free port)
``RINGFENCE_TRANSPORT_ADVERTISE``         ``host:port`` published to peers instead (NAT, proxies)
``RINGFENCE_TRANSPORT_CHUNK_BYTES``       record payload size of the pipeline (default 1 MiB)
``RINGFENCE_TRANSPORT_TIMEOUT``           seconds a rank waits for a peer (default: the group's)
``RINGFENCE_TRANSPORT_EVENTS``            JSON-lines file that key events are appended to
``RINGFENCE_TRANSPORT_SWITCH_INTERVAL``   lower ``sys.setswitchinterval`` to this (default 0.0002 s;
                                          0 leaves the interpreter's setting alone)
``RINGFENCE_TRANSPORT_EVIDENCE``          evidence store directory that key events are recorded in
``RINGFENCE_TRANSPORT_ENGINE``            how a rank moves large records: ``threads`` (default; a sender
                                          thread seals and sends while the caller receives) or ``polled``
                                          (the calling thread alone, non-blocking socket calls)
========================================  ==========================================================
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import socket
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ringfence.errors import InputError
from ringfence.secure.pki import parse_duration
from ringfence.secure.transport.wire import KeyEvent, TransportError

_PREFIX = "RINGFENCE_TRANSPORT_"
#: How a rank runs a schedule of large records (small ones always run on the calling thread).
ENGINES = ("threads", "polled")
_SIOCGIFADDR = 0x8915


@dataclass(frozen=True)
class TransportConfig:
    """Everything a rank needs to join a ringfence-transport group."""

    cert: Path
    key: Path
    ca: Path
    job: str | None = None  # spiffe://<cluster>/job/<job>; None: from the rank's own certificate
    revoked: Path | None = None
    rekey_bytes: int = 1 << 30
    rekey_seconds: float = 120.0
    address: str | None = None
    interface: str | None = None
    port: int = 0
    advertise: str | None = None
    chunk_bytes: int = 1 << 20
    timeout: float | None = None
    event_log: Path | None = None
    evidence: Path | None = None
    # sys.setswitchinterval while a group is open; 0: leave it alone. 0.2 ms stays the default: under the
    # lab's load, 0 (CPython's 5 ms) led in 13/18 and 12/18 paired repeats at 4/64 MiB, median paired
    # ratio 114 %/109 %, interquartile 82-134 %/93-130 % — within the spread (BENCHMARKS.md, issue 15).
    switch_interval: float = 0.0002
    on_event: Callable[[KeyEvent], None] | None = None
    #: "threads" or "polled" (see ringfence.secure.transport.engine)
    engine: str = "threads"

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise InputError(
                _PREFIX + "ENGINE", f"unknown transport engine {self.engine!r}",
                hint=f"use one of: {', '.join(ENGINES)}",
            )
        if self.rekey_bytes <= 0 or self.rekey_seconds <= 0:
            raise InputError("transport config", "rekey_bytes and rekey_seconds must be positive")
        if not 4096 <= self.chunk_bytes <= (64 << 20):
            raise InputError("transport config", f"chunk_bytes {self.chunk_bytes} is outside 4 KiB..64 MiB")

    def bind_address(self) -> str:
        """The local address to listen on and advertise."""
        if self.address:
            return self.address
        ifname = self.interface or os.environ.get("GLOO_SOCKET_IFNAME")
        if ifname:
            return interface_address(ifname)
        return "127.0.0.1"

    def record(self, event: KeyEvent) -> None:
        """Pass a key event to the callback and append it to the event log (one JSON line)."""
        if self.on_event is not None:
            self.on_event(event)
        if self.event_log is not None:
            line = (json.dumps(event.as_dict(), sort_keys=True) + "\n").encode()
            # O_APPEND writes of one short line are atomic, so ranks sharing a log do not interleave.
            fd = os.open(self.event_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        if self.evidence is not None:
            from ringfence.evidence import EvidenceStore, RecordKind

            EvidenceStore.open(self.evidence).append(
                RecordKind.KEY_EVENT,
                "ringfence-transport",
                f"link rank {event.rank} <-> rank {event.peer}",
                event.as_dict(),
            )


def interface_address(ifname: str) -> str:
    """The IPv4 address of interface ``ifname``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            res = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
        except OSError as exc:
            raise TransportError(f"interface {ifname!r} has no IPv4 address ({exc.strerror})") from exc
    return socket.inet_ntoa(res[20:24])


def _num(env: Mapping[str, str], name: str, conv: Callable[[str], float]) -> float | None:
    raw = env.get(_PREFIX + name)
    if raw is None or raw == "":
        return None
    try:
        return conv(raw)
    except (ValueError, InputError) as exc:
        raise InputError(_PREFIX + name, f"{raw!r} is not a valid value") from exc


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return parse_duration(text).total_seconds()


def config_from_env(env: Mapping[str, str] | None = None, *, rank: int | None = None) -> TransportConfig:
    """Build a :class:`TransportConfig` from ``RINGFENCE_TRANSPORT_*`` variables.

    ``{rank}`` in the DIR, CERT and KEY paths is replaced by ``rank``, so a launcher that gives every
    rank the same environment (torchrun, the benchmark driver) still hands each its own certificate.
    """
    e = dict(os.environ if env is None else env)
    for name in ("DIR", "CERT", "KEY"):
        if "{rank}" in e.get(_PREFIX + name, ""):
            if rank is None:
                raise InputError(_PREFIX + name, "contains {rank} but the rank is not known here")
            e[_PREFIX + name] = e[_PREFIX + name].replace("{rank}", str(rank))
    base = e.get(_PREFIX + "DIR")
    paths: dict[str, Path] = {}
    for field, file in (("cert", "cert.pem"), ("key", "key.pem"), ("ca", "ca.pem")):
        raw = e.get(_PREFIX + field.upper())
        if raw:
            paths[field] = Path(raw)
        elif base:
            paths[field] = Path(base) / file
        else:
            raise InputError(
                _PREFIX + field.upper(),
                "not set: the ringfence transport needs this rank's certificate, key and the cluster CA",
                hint=f"set {_PREFIX}DIR to a directory from `ringfence pki issue`, or call "
                "ringfence.secure.transport.configure(...)",
            )
    kwargs: dict[str, object] = {}
    for name, field, conv in (
        ("REKEY_BYTES", "rekey_bytes", int),
        ("REKEY_SECONDS", "rekey_seconds", _seconds),
        ("PORT", "port", int),
        ("CHUNK_BYTES", "chunk_bytes", int),
        ("TIMEOUT", "timeout", _seconds),
        ("SWITCH_INTERVAL", "switch_interval", float),
    ):
        v = _num(e, name, conv)
        if v is not None:
            kwargs[field] = v
    for name, field in (("JOB", "job"), ("ADDR", "address"), ("IFNAME", "interface"), ("ADVERTISE", "advertise"),
                        ("ENGINE", "engine")):  # fmt: skip
        if e.get(_PREFIX + name):
            kwargs[field] = e[_PREFIX + name]
    for name, field in (("REVOKED", "revoked"), ("EVENTS", "event_log"), ("EVIDENCE", "evidence")):
        if e.get(_PREFIX + name):
            kwargs[field] = Path(e[_PREFIX + name])
    if base and "revoked" not in kwargs and (Path(base) / "revoked.txt").exists():
        kwargs["revoked"] = Path(base) / "revoked.txt"
    return TransportConfig(cert=paths["cert"], key=paths["key"], ca=paths["ca"], **kwargs)  # type: ignore[arg-type]


_configured: TransportConfig | None = None


def configure(config: TransportConfig | None = None, /, **changes: object) -> TransportConfig:
    """Set the configuration new ``ringfence`` process groups in this process use.

    ``configure(TransportConfig(...))`` sets it; ``configure(rekey_bytes=1<<20)`` changes fields of the
    current one (taken from the environment if none was set); ``configure(None)`` with no changes
    returns to the environment.
    """
    global _configured
    if config is None and not changes:
        _configured = None
        return config_from_env()
    current = config or _configured or config_from_env()
    _configured = dataclasses.replace(current, **changes) if changes else current  # type: ignore[arg-type]
    return _configured


def current_config(rank: int | None = None) -> TransportConfig:
    """The configuration set by :func:`configure`, else the one from the environment (for ``rank``)."""
    return _configured or config_from_env(rank=rank)


__all__ = ["ENGINES", "TransportConfig", "config_from_env", "configure", "current_config", "interface_address"]
