"""Temporary exceptions render as timed set elements: open until their expiry, nothing once expired."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringfence.enforce import EnforceError
from ringfence.enforce.apply import FABRIC, render_bundle
from ringfence.enforce.expiry import SET, timed_paths
from ringfence.enforce.interface import RenderOptions
from ringfence.enforce.nftables import NftablesRenderer
from ringfence.policy import Policy, parse_policy

LAB = Path(__file__).resolve().parents[2] / "examples" / "lab-policy.yaml"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def with_exception(until: datetime, **opens: Any) -> Policy:
    """The lab policy with one exception opening aux → storage:8080 until ``until``."""
    doc = yaml.safe_load(LAB.read_text())
    doc["exceptions"] = [{"id": "tmp-aux", "control": "zones", "subject": "node:aux", "owner": "netsec@lab",
                          "reason": "migration", "expires": until.date().isoformat(), "until": until.isoformat(),
                          "review_trigger": "migration done",
                          "opens": {"from": "aux", "to": "storage", "port": 8080, **opens}}]
    return parse_policy(yaml.safe_dump(doc), "exception-policy")


def _sets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c["add"]["set"] for c in doc["nftables"] if "set" in c.get("add", {}) and c["add"]["set"]["name"] == SET]


def test_an_open_exception_is_a_set_element_with_its_remaining_time() -> None:
    policy = with_exception(NOW + timedelta(seconds=90))
    (path,) = timed_paths(policy, NOW)
    assert (path.source, path.destination, path.proto, path.port, path.timeout_s) == (
        "10.77.1.50", "10.77.2.10", "tcp", 8080, 90)
    bundle = render_bundle(policy, [FABRIC, "storage"], RenderOptions(timed=timed_paths(policy, NOW)))
    for scope in (FABRIC, "storage"):
        sets = _sets(bundle[scope])
        assert sets and all(s["flags"] == ["timeout"] for s in sets)
        assert sets[0]["elem"] == [{"elem": {"val": {"concat": ["10.77.1.50", "10.77.2.10", "tcp", 8080]},
                                             "timeout": 90}}]
        rules = [c["add"]["rule"] for c in bundle[scope]["nftables"] if "rule" in c.get("add", {})]
        assert any(f"@{SET}" in str(r["expr"]) for r in rules)


def test_an_expired_exception_renders_nothing_and_no_exception_changes_nothing() -> None:
    expired = with_exception(NOW - timedelta(seconds=1))
    assert timed_paths(expired, NOW) == ()
    plain = parse_policy(LAB.read_text(), "lab")
    a = render_bundle(expired, [FABRIC], RenderOptions(timed=timed_paths(expired, NOW)))
    b = render_bundle(plain, [FABRIC], RenderOptions())
    assert a == b and not _sets(a[FABRIC])


def test_the_compiled_files_carry_the_timed_set() -> None:
    policy = with_exception(datetime.now(UTC) + timedelta(days=2))
    files = NftablesRenderer().render(policy).files
    assert all(_sets(f.json()) for f in files)


def test_an_exception_naming_no_node_or_address_is_refused() -> None:
    policy = with_exception(NOW + timedelta(seconds=5), to="nowhere")
    with pytest.raises(EnforceError, match="neither a node"):
        timed_paths(policy, NOW)


def test_a_naive_until_is_refused_by_the_policy_loader() -> None:
    doc = yaml.safe_load(LAB.read_text())
    doc["exceptions"] = [{"id": "x", "control": "zones", "subject": "node:aux", "owner": "o", "reason": "r",
                          "expires": "2027-01-01", "until": "2027-01-01T00:00:00",
                          "opens": {"from": "aux", "to": "storage", "port": 8080}}]
    from ringfence.policy import PolicyError

    with pytest.raises(PolicyError, match="until"):
        parse_policy(yaml.safe_dump(doc), "naive")
