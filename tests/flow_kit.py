"""Builders shared by the analyze and control tests: the lab policy, policy variants, hand-made flow tables.

Imported as a top-level module (``from flow_kit import ...``): it sits in ``tests/``, which pytest puts on
``sys.path`` when it loads ``tests/conftest.py``, so it works whichever test directory is run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from ringfence.observe.schema import FLOW_SCHEMA, conform
from ringfence.policy import Policy, load_policy, parse_policy

REPO = Path(__file__).resolve().parents[1]
LAB_POLICY = REPO / "examples" / "lab-policy.yaml"

# Addresses of the lab (examples/lab-policy.yaml).
W0, W1, AUX, STORAGE, MGMT, USER, JUMP, EXT = (
    "10.77.1.10",
    "10.77.1.11",
    "10.77.1.50",
    "10.77.2.10",
    "10.77.3.10",
    "10.77.4.10",
    "10.77.5.10",
    "10.77.9.10",
)


def lab_policy() -> Policy:
    """The lab policy as shipped."""
    return load_policy(LAB_POLICY)


def policy_variant(change: Callable[[dict[str, Any]], None]) -> Policy:
    """The lab policy with ``change`` applied to its YAML document."""
    doc = yaml.safe_load(LAB_POLICY.read_text(encoding="utf-8"))
    change(doc)
    return parse_policy(json.dumps(doc, default=str), "<variant>")


def with_gateway(d: dict[str, Any]) -> None:
    """Make a lab policy document route replication through an egress gateway on mgmt (port 8888), as
    ``ringfence.lab.policy_text.render_policy(..., egress_gateway=True)`` does (direct replication kept)."""
    for n in d["nodes"]:
        if n["name"] == "mgmt":
            n["roles"] = [*n.get("roles", []), "egress-gateway"]
    d["services"].append({"name": "egress-gateway", "node": "mgmt", "port": 8888, "class": "replication",
                          "application": "http-proxy"})
    d["approved"] += [{"id": "replication-via-gateway", "from": {"node": "storage"},
                       "to": {"service": "egress-gateway"}, "class": "replication"},
                      {"id": "egress-gateway-replication", "from": {"node": "mgmt"},
                       "to": {"service": "replica-sink"}, "class": "replication"}]


def flows(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """An observed flow table: each row gives at least src, dst, dport; defaults fill the rest."""
    t0 = datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=UTC)
    if not rows:
        return FLOW_SCHEMA.empty_table()
    full = []
    for i, r in enumerate(rows):
        row = {
            "sport": 40000 + i,
            "proto": 6,
            "packets": 10,
            "bytes": 1000,
            "protection": "plaintext",
            "source": "pcap:test.pcap",
            "first_seen": t0,
            "last_seen": t0,
        }
        row.update(r)
        full.append(row)
    cols = {k: [r.get(k) for r in full] for k in {k for r in full for k in r}}
    table = pa.table({k: v for k, v in cols.items() if k not in ("proto", "first_seen", "last_seen")})
    table = table.append_column("proto", pa.array(cols["proto"], pa.uint8()))
    ts = pa.timestamp("ns", tz="UTC")
    table = table.append_column("first_seen", pa.array(cols["first_seen"], ts))
    table = table.append_column("last_seen", pa.array(cols["last_seen"], ts))
    return conform(table)
