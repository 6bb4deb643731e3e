"""Drift judged on nft listings: what changes on its own is not drift, an edit anywhere is, named by node and rule."""

from __future__ import annotations

import copy
from typing import Any

from ringfence.change.drift import differences
from ringfence.change.live import normalise

LISTING: dict[str, Any] = {"nftables": [
    {"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
    {"table": {"family": "inet", "name": "ringfence", "handle": 3}},
    {"chain": {"family": "inet", "table": "ringfence", "name": "input", "handle": 1, "type": "filter",
               "hook": "input", "prio": 0, "policy": "accept"}},
    {"set": {"family": "inet", "name": "denied", "table": "ringfence", "type": ["ipv4_addr", "ipv4_addr"],
             "handle": 4, "flags": ["timeout"], "timeout": 3600, "elem": [{"elem": {"val": {"concat": ["1.1.1.1",
                                                                                                     "2.2.2.2"]},
                                                                                    "expires": 3000}}]}},
    {"set": {"family": "inet", "name": "exceptions", "table": "ringfence", "type": ["ipv4_addr", "ipv4_addr"],
             "handle": 5, "flags": ["timeout"], "elem": [{"elem": {"val": {"concat": ["10.0.0.1", "10.0.0.2"]},
                                                                   "timeout": 30, "expires": 29}}]}},
    {"set": {"family": "inet", "name": "contained", "table": "ringfence", "type": "ipv4_addr", "handle": 6}},
    {"rule": {"family": "inet", "table": "ringfence", "chain": "input", "handle": 7, "comment": "flow a (storage)",
              "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                                  "right": 8080}}, {"counter": {"packets": 1, "bytes": 60}}, {"accept": None}]}},
    {"rule": {"family": "inet", "table": "ringfence", "chain": "input", "handle": 8, "comment": "record denied flow",
              "expr": [{"set": {"op": "add", "elem": {"concat": [{"payload": {"protocol": "ip", "field": "saddr"}},
                                                                {"payload": {"protocol": "ip", "field": "daddr"}}]},
                                "set": "@denied"}}]}},
    {"rule": {"family": "inet", "table": "ringfence", "chain": "input", "handle": 9, "comment": "default drop",
              "expr": [{"counter": {"packets": 5, "bytes": 300}}, {"drop": None}]}},
]}


def _entries(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e[kind] for e in doc["nftables"] if kind in e]


def test_counters_handles_packet_path_sets_and_timers_are_not_drift() -> None:
    later = copy.deepcopy(LISTING)
    for r in _entries(later, "rule"):
        r["handle"] += 100
        for e in r["expr"]:
            if "counter" in e:
                e["counter"] = {"packets": 999, "bytes": 99999}
    denied = _entries(later, "set")[0]
    denied["elem"] = [*denied["elem"], {"elem": {"val": {"concat": ["3.3.3.3", "4.4.4.4"]}, "expires": 10}}]
    _entries(later, "set")[1]["elem"][0]["elem"]["expires"] = 3  # the exception's clock ticks
    _entries(later, "set")[2]["elem"] = ["10.0.0.9"]  # containment is its own recorded action
    assert differences("storage", normalise(LISTING), normalise(later)) == []
    # the kernel closing an expired exception is not drift either
    _entries(later, "set")[1].pop("elem")
    assert differences("storage", normalise(LISTING), normalise(later)) == []


def test_a_rule_added_by_hand_is_named_with_its_node_and_chain() -> None:
    edited = copy.deepcopy(LISTING)
    edited["nftables"].insert(-1, {"rule": {"family": "inet", "table": "ringfence", "chain": "input", "handle": 50,
                                            "expr": [{"match": {"op": "==", "left": {"payload": {
                                                "protocol": "tcp", "field": "dport"}}, "right": 4444}},
                                                {"accept": None}]}})
    diffs = differences("storage", normalise(LISTING), normalise(edited))
    assert len(diffs) == 1
    d = diffs[0]
    assert d["node"] == "storage" and d["kind"] == "rule added" and d["where"] == "inet ringfence/input"
    assert "4444" in d["detail"]


def test_a_rule_deleted_a_chain_policy_changed_a_table_added_and_an_element_added_are_drift() -> None:
    edited = copy.deepcopy(LISTING)
    edited["nftables"] = [e for e in edited["nftables"] if e.get("rule", {}).get("comment") != "flow a (storage)"]
    _entries(edited, "chain")[0]["policy"] = "drop"
    edited["nftables"].append({"table": {"family": "ip", "name": "sneaky", "handle": 9}})
    _entries(edited, "set")[1]["elem"].append({"elem": {"val": {"concat": ["6.6.6.6", "10.0.0.2"]}, "timeout": 9}})
    kinds = {(d["kind"], d["where"]) for d in differences("w0", normalise(LISTING), normalise(edited))}
    assert kinds == {("rule missing", "inet ringfence/input"), ("changed", "chain inet ringfence/input"),
                     ("extra", "table ip sneaky"), ("elements added", "set inet ringfence/exceptions")}
