"""Read ``swanctl --list-sas``: the IKE and CHILD SAs one charon holds, as frozen records.

Pure parsing of the command's text output (strongSwan 5.9): an IKE SA line ``NAME: #ID, STATE,
IKEv2, …`` with its identities and ports below it, then indented CHILD SA lines ``NAME: #ID, reqid
R, STATE, MODE, PROTO:ALG`` each followed by their ``in``/``out`` SPI and byte counters. Lines it
does not know are skipped (strongSwan adds some by version); a CHILD SA line outside an IKE SA is a
:class:`~ringfence.secure.layers.interface.LayerError`, as the text is then not what we think it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ringfence.secure.layers.interface import LayerError

_IKE = re.compile(r"^(?P<name>[\w.-]+): #(?P<id>\d+), (?P<state>[A-Z_]+), IKEv(?P<version>\d)")
_CHILD = re.compile(
    r"^\s+(?P<name>[\w.-]+): #(?P<id>\d+), reqid (?P<reqid>\d+), (?P<state>[A-Z_]+), (?P<mode>[\w-]+), "
    r"(?P<proposal>\S+)"
)
_END = re.compile(r"^\s+(?P<side>local|remote)\s+'(?P<id>[^']*)' @ (?P<addr>[^\[]+)\[(?P<port>\d+)\]")
_TRAFFIC = re.compile(r"^\s+(?P<dir>in|out)\s+(?P<spi>[0-9a-f]+)(?:\s*\([^)]*\))?,\s+(?P<bytes>\d+) bytes,\s+"
                      r"(?P<packets>\d+) packets")


@dataclass(frozen=True)
class ChildSa:
    """One CHILD SA: its state (``INSTALLED``, ``REKEYED``, …), mode (``TUNNEL-in-UDP``) and counters."""

    name: str
    uniqueid: int
    reqid: int
    state: str
    mode: str
    proposal: str  # e.g. ``ESP:AES_GCM_16-256``
    spi_in: str = ""
    spi_out: str = ""
    bytes_in: int = 0
    bytes_out: int = 0
    packets_in: int = 0
    packets_out: int = 0


@dataclass(frozen=True)
class IkeSa:
    """One IKE SA and its CHILD SAs."""

    name: str
    uniqueid: int
    state: str
    local_id: str = ""
    remote_id: str = ""
    local_port: int = 0
    remote_port: int = 0
    children: tuple[ChildSa, ...] = ()

    def installed(self) -> tuple[ChildSa, ...]:
        """The CHILD SAs that carry traffic now."""
        return tuple(c for c in self.children if c.state == "INSTALLED")


def parse_sas(text: str) -> tuple[IkeSa, ...]:
    """Every IKE SA in ``swanctl --list-sas`` output (empty text: none)."""
    out: list[IkeSa] = []
    child: ChildSa | None = None

    def flush_child() -> None:
        nonlocal child
        if child is not None:
            out[-1] = replace(out[-1], children=(*out[-1].children, child))
            child = None

    for line in text.splitlines():
        if m := _IKE.match(line):
            flush_child()
            out.append(IkeSa(m["name"], int(m["id"]), m["state"]))
        elif m := _CHILD.match(line):
            if not out:
                raise LayerError(f"swanctl --list-sas: a CHILD SA outside an IKE SA: {line.strip()!r}")
            flush_child()
            child = ChildSa(m["name"], int(m["id"]), int(m["reqid"]), m["state"], m["mode"], m["proposal"])
        elif (m := _TRAFFIC.match(line)) and child is not None:
            n, p = int(m["bytes"]), int(m["packets"])
            if m["dir"] == "in":
                child = replace(child, spi_in=m["spi"], bytes_in=n, packets_in=p)
            else:
                child = replace(child, spi_out=m["spi"], bytes_out=n, packets_out=p)
        elif (m := _END.match(line)) and out and child is None:
            if m["side"] == "local":
                out[-1] = replace(out[-1], local_id=m["id"], local_port=int(m["port"]))
            else:
                out[-1] = replace(out[-1], remote_id=m["id"], remote_port=int(m["port"]))
    if out:
        flush_child()
    return tuple(out)


__all__ = ["ChildSa", "IkeSa", "parse_sas"]
