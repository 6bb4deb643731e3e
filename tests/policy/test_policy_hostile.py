"""Hostile or careless policy files (issue 11 causes 7–12 and the policy "Also:" items): exit 2, file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.policy import PolicyError, load_policy, parse_policy
from ringfence.policy.load import MAX_POLICY_BYTES

ROOT = Path(__file__).resolve().parents[2]
LAB = (ROOT / "examples" / "lab-policy.yaml").read_text()


def _check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    f = tmp_path / "p.yaml"
    f.write_text(text)
    code = main(["policy", "check", str(f)])
    return code, capsys.readouterr().err


def _bomb(levels: int = 9) -> str:
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_alias_bomb_alone_and_inside_the_lab_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _check(tmp_path, _bomb(), capsys)
    assert code == 2 and "alias bomb" in err and "p.yaml:" in err
    code, err = _check(
        tmp_path, LAB.replace("exceptions: []", _bomb().replace("l0:", "exceptions: []\nx0:", 1)), capsys
    )
    assert code == 2 and "alias bomb" in err


@pytest.mark.parametrize(
    "text",
    [
        "[" * 1000 + "]" * 1000,
        "a:\n" + "".join(" " * i + "- \n" for i in range(5000)),
        "".join(" " * i + f"k{i}:\n" for i in range(2000)),
        "a: &a [*a]\n",
    ],
)
def test_deep_or_self_referencing_nesting_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    code, err = _check(tmp_path, text, capsys)
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err and "p.yaml:" in err


@pytest.mark.parametrize(
    ("old", "new", "line_of", "match"),
    [
        ("cluster: lab", "? [a, b]\n: lab", "? [a, b]", "a mapping key must be a plain scalar"),
        (
            "exceptions: []",
            "exceptions:\n  - {id: x, control: egress, subject: node:aux, owner: o, reason: r, expires: 2024-02-30}",
            "expires: 2024-02-30",
            "unusable value '2024-02-30'",
        ),
        ("min_repeats: 3", "min_repeats: " + "7" * 5000, "min_repeats", "unusable value"),
    ],
)
def test_impossible_values_name_their_line(old: str, new: str, line_of: str, match: str) -> None:
    text = LAB.replace(old, new) if old in LAB else LAB + "\n" + new
    expected = next(i for i, ln in enumerate(text.splitlines(), 1) if line_of in ln)
    with pytest.raises(PolicyError, match=match) as info:
        parse_policy(text, "p.yaml")
    assert info.value.where == f"p.yaml:{expected}"


@pytest.mark.parametrize(
    "keys",
    [
        "{cert_lifetime: banana, rotation: 12h, tunnel_rekey: 2m}",
        '{cert_lifetime: 24h, rotation: "-5h", tunnel_rekey: 2m}',
        "{cert_lifetime: 24h, rotation: 12h, tunnel_rekey: 0s}",
        "{cert_lifetime: 99999d, rotation: 12h, tunnel_rekey: 2m}",
    ],
)
def test_unusable_key_durations_are_refused(keys: str) -> None:
    text = LAB.replace("keys: {cert_lifetime: 24h, rotation: 12h, tunnel_rekey: 2m}", f"keys: {keys}")
    with pytest.raises(PolicyError, match=r"keys\.") as info:
        parse_policy(text, "p.yaml")
    assert (
        info.value.where == f"p.yaml:{next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith('keys:'))}"
    )


def test_key_durations_are_read_as_timedeltas() -> None:
    keys = parse_policy(LAB, "p").keys
    assert keys.duration("rotation").total_seconds() == 12 * 3600 and keys.duration("tunnel_rekey").seconds == 120


def test_ipv4_mapped_address_is_the_same_node() -> None:
    dup = LAB.replace(
        "  - {name: external, zone: external",
        '  - {name: twin, zone: workload, addresses: ["::ffff:10.77.1.10"]}\n  - {name: external, zone: external',
    )
    with pytest.raises(PolicyError, match="address 10.77.1.10 is already node 'worker-0'"):
        parse_policy(dup, "p")
    mapped = parse_policy(LAB.replace("addresses: [10.77.1.10]", 'addresses: ["::ffff:10.77.1.10"]'), "p")
    assert mapped.node("worker-0").addresses == ("10.77.1.10",)  # type: ignore[union-attr]


def test_unknown_control_id_is_refused() -> None:
    with pytest.raises(PolicyError, match="unknown control 'egres'"):
        parse_policy(LAB.replace("  egress: {owner", "  egres: {owner"), "p")
    text = LAB.replace(
        "exceptions: []",
        "exceptions:\n  - {id: x, control: egres, subject: node:aux, owner: o, reason: r, expires: 2099-01-01}",
    )
    with pytest.raises(PolicyError, match=r"exceptions\.0\.control: .*unknown control 'egres'"):
        parse_policy(text, "p")


def test_expired_exception_is_reported_by_policy_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = LAB.replace(
        "exceptions: []",
        "exceptions:\n  - {id: old-waiver, control: egress, subject: node:aux, "
        "owner: netsec, reason: r, expires: 2020-01-01}",
    )
    code, err = _check(tmp_path, text, capsys)
    assert code == 1 and "old-waiver" in err and "expired on 2020-01-01" in err
    code, _ = _check(tmp_path, text.replace("2020-01-01", "2999-01-01"), capsys)
    assert code == 0


def test_oversized_policy_is_refused_without_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.write(LAB.encode())
        fh.truncate(MAX_POLICY_BYTES + 1)
    with pytest.raises(PolicyError, match="larger than the limit"):
        load_policy(big)


def test_not_utf8_names_line_and_offset(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(LAB.encode().replace(b"cluster: lab", b"cluster: l\xffb"))
    line = next(i for i, ln in enumerate(LAB.splitlines(), 1) if ln.startswith("cluster:"))
    with pytest.raises(PolicyError, match=rf"bad.yaml:{line}@\d+: the policy is not UTF-8"):
        load_policy(bad)
