"""The egress gateway's access log as facts: the egress control judges its records against the policy's gateway."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from ctl_kit import facts_for

from flow_kit import EXT, MGMT, STORAGE, policy_variant, with_gateway
from ringfence.controls import egress
from ringfence.controls.interface import Facts, Verdict
from ringfence.controls.requirements import enforce_requirements
from ringfence.facts import FactsFileError
from ringfence.facts.gateway import load

POLICY = policy_variant(with_gateway)
NOW = datetime(2026, 12, 1, 16, 0, tzinfo=UTC)


def _log(tmp_path: Path, *lines: str) -> Path:
    p = tmp_path / "tinyproxy.log"
    p.write_text("".join(f"{line}\n" for line in lines))
    return p


def _forward(fd: int, client: str, host: str, port: int, hms: str) -> tuple[str, ...]:
    return (f"CONNECT   Dec 01 {hms}.100 [29001]: Connect (file descriptor {fd}): {client}",
            f"CONNECT   Dec 01 {hms}.120 [29001]: Request (file descriptor {fd}): CONNECT {host}:{port} HTTP/1.1",
            f'CONNECT   Dec 01 {hms}.140 [29001]: Established connection to host "{host}" using file descriptor 9.')


def test_the_log_loads_dated_by_its_newest_decision(tmp_path: Path) -> None:
    path = _log(tmp_path, *_forward(5, STORAGE, EXT, 9000, "15:00:01"),
                "CONNECT   Dec 01 15:00:05.100 [29002]: Connect (file descriptor 6): 10.77.1.13",
                'NOTICE    Dec 01 15:00:05.110 [29002]: Unauthorized connection from "10.77.1.13".')
    loaded = load(path)
    assert [r["decision"] for r in loaded.value] == ["allow", "deny"]
    assert loaded.value[0]["source"] == str(path) and loaded.taken is not None
    assert loaded.taken.isoformat().endswith("15:00:05.110000+00:00")


def test_a_file_of_no_gateway_log_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(FactsFileError, match="no tinyproxy decision"):
        load(_log(tmp_path, "this is not", "a tinyproxy log"))


def _judge(records: tuple[dict[str, object], ...], *, volume: bool = True) -> dict[str, tuple[Verdict, str]]:
    rows = [{"src": MGMT, "dst": EXT, "dport": 9000, "bytes": 5000 if volume else 0}]
    facts = facts_for(POLICY, rows, gateway=records)
    facts = Facts(now=facts.taken["flows"] + timedelta(hours=1), flows=facts.flows, gateway=records,
                  taken=facts.taken)
    found = enforce_requirements(egress.meta, POLICY, facts, egress.evaluate(POLICY, facts))
    return {f.subject: (f.verdict, f.message) for f in found if "via mgmt" in f.subject or "gateway" in f.subject}


def _rec(client: str, host: str | None, port: int | None, decision: str) -> dict[str, object]:
    return {"time": "2026-11-30T10:00:00+00:00", "client": client, "host": host, "port": port, "method": "CONNECT",
            "decision": decision, "reason": "established" if decision == "allow" else "filtered destination",
            "bytes": None, "node": None, "line": 1, "source": "tinyproxy.log"}


def test_approved_egress_through_the_gateway_passes_with_its_volume_from_the_capture() -> None:
    got = _judge((_rec(STORAGE, EXT, 9000, "allow"),))
    passed = [m for v, m in got.values() if v is Verdict.PASS]
    assert any("5000 bytes carried" in m for m in passed), got
    without = _judge((_rec(STORAGE, EXT, 9000, "allow"),), volume=False)
    assert any(v is Verdict.UNKNOWN and "volume is not shown" in m for v, m in without.values()), without


def test_a_forward_the_policy_does_not_approve_fails_and_a_refusal_is_reported() -> None:
    got = _judge((_rec("10.77.1.13", EXT, 9000, "allow"), _rec("10.77.1.13", "10.9.9.9", 443, "deny")))
    fail = [(s, m) for s, (v, m) in got.items() if v is Verdict.FAIL]
    assert fail and "worker-3" in fail[0][0] or "10.77.1.13" in fail[0][0]
    assert any(v is Verdict.PASS and "refused at the egress gateway" in m for v, m in got.values())


def test_no_gateway_record_leaves_the_requirement_unmet() -> None:
    got = _judge(())
    assert any(v is Verdict.UNKNOWN and "gateway-records" in s for s, (v, _) in got.items()), got
