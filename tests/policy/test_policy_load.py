"""The policy loader: strict models, errors that name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.cli import main
from ringfence.policy import PolicyError, TrafficClass, load_policy, parse_policy, policy_schema

ROOT = Path(__file__).resolve().parents[2]
LAB_POLICY = ROOT / "examples" / "lab-policy.yaml"


def _lab_text() -> str:
    return LAB_POLICY.read_text()


def test_lab_policy_loads_with_every_section() -> None:
    p = load_policy(LAB_POLICY)
    assert p.cluster == "lab"
    assert {z.name for z in p.zones} >= {"workload", "storage", "management", "user", "admin", "external"}
    assert p.job("train-a") is not None and p.job("train-a").collective_range == (1024, 65535)  # type: ignore[union-attr]
    assert p.service("mgmt-ssh").admin  # type: ignore[union-attr]
    assert p.classes.collective.confidential and p.classes.collective.decision_owner
    assert p.classes.of(TrafficClass.UNCLASSIFIED) is None
    assert len(p.controls) == 10


def test_models_are_frozen() -> None:
    p = load_policy(LAB_POLICY)
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError for frozen instances
        p.zones[0].name = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("old", "new", "marker", "field"),
    [
        ("10.77.1.11]", "10.77.1.311]", "10.77.1.311", "nodes.1.addresses"),
        ("members: [worker-0, worker-1]", "members: [worker-0, worker-9]", "worker-9", "jobs.0.members.1"),
        ("port: 8080, class: storage,", "port: 8080, class: storag,", "class: storag,", "services.0.class"),
        ("port: 8080,", "port: 70000,", "70000", "services.0.port"),
        ("{name: storage, description", "{name: storage, colour: red, description", "colour", "zones.1.colour"),
        ("busbw_loss_pct: 5,", "busbw_loss_pct: -5,", "busbw_loss_pct: -5", "budget.busbw_loss_pct"),
    ],
)
def test_malformed_policy_names_file_line_and_field(old: str, new: str, marker: str, field: str) -> None:
    text = _lab_text()
    assert old in text
    bad = text.replace(old, new, 1)
    expected_line = next(i for i, ln in enumerate(bad.splitlines(), 1) if marker in ln)
    with pytest.raises(PolicyError) as err:
        parse_policy(bad, "p.yaml")
    assert err.value.where == f"p.yaml:{expected_line}"
    assert field in err.value.message


def test_unknown_reference_in_approved_matrix() -> None:
    bad = _lab_text().replace("to: {service: mgmt-ssh}", "to: {service: mgmt-sshd}")
    with pytest.raises(PolicyError, match=r"approved\.5\.to\.service: unknown service 'mgmt-sshd'"):
        parse_policy(bad, "p.yaml")


def test_duplicate_keys_and_addresses_are_refused() -> None:
    dup_addr = _lab_text().replace("addresses: [10.77.1.50]", "addresses: [10.77.1.10]")
    with pytest.raises(PolicyError, match="already node 'worker-0'"):
        parse_policy(dup_addr, "p.yaml")
    with pytest.raises(PolicyError, match="duplicate key 'cluster'"):
        parse_policy("cluster: a\ncluster: b\n", "p.yaml")


def test_endpoint_needs_exactly_one_selector() -> None:
    bad = _lab_text().replace("from: {node: jump}", "from: {node: jump, zone: admin}")
    with pytest.raises(PolicyError, match="exactly one"):
        parse_policy(bad, "p.yaml")


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "zones: [\n", "cluster: !!python/object:os.system x\n", "\xff"])
def test_not_a_policy(text: str) -> None:
    with pytest.raises(PolicyError):
        parse_policy(text, "p.yaml")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(PolicyError, match="not UTF-8"):
        load_policy(tmp_path / "bin.yaml")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_gives_policy_error_or_policy(text: str) -> None:
    try:
        parse_policy(text, "fuzz.yaml")
    except PolicyError as exc:
        assert exc.where.startswith("fuzz.yaml")


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=4000), st.binary(min_size=1, max_size=8))
def test_corrupted_lab_policy_never_crashes(pos: int, junk: bytes) -> None:
    raw = LAB_POLICY.read_bytes()
    pos = pos % len(raw)
    mutated = raw[:pos] + junk + raw[pos + len(junk):]
    try:
        parse_policy(mutated.decode("utf-8", errors="replace"), "fuzz.yaml")
    except PolicyError:
        pass


def test_schema_is_json_and_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    schema = json.loads(policy_schema())
    assert "ApprovedFlow" in schema["$defs"] and schema["additionalProperties"] is False
    assert main(["policy", "check", str(LAB_POLICY)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(_lab_text().replace("10.77.1.11]", "10.77.1.311]"))
    assert main(["policy", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:" in err and "Traceback" not in err
    out = tmp_path / "schema.json"
    assert main(["policy", "schema", "-o", str(out)]) == 0
    assert json.loads(out.read_text()) == schema
