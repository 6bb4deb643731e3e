"""The TPM structure parsers and the allowlist's policy model survive hostile input with our own errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from swtpm_kit import policy_doc

from ringfence.attest.eventlog import parse_event_log
from ringfence.attest.interface import MalformedTpmData
from ringfence.attest.quote import check_quote
from ringfence.attest.structures import parse_attest, parse_public, parse_signature
from ringfence.policy.attestation import Attestation

# a TPMS_ATTEST quote as swtpm wrote one (nonce 32 bytes, PCRs 7, 9, 10)
QUOTE = bytes.fromhex(
    "ff54434780180022000b5499888b02ff8c2c239e21a572acc9a0c0cc754ff03021729a8f5fc9dfcf66ba0020c3788424ddb49961cc35"
    "2b19e3b5b7b7db0ac5d891a48c7e80582cff201870790000000000000fc9000000010000000001201910230016363600000001000b03"
    "8006000020a445cb2258e312dbc6c5abb9130945ca5a2c790af52383d301f8ed04b17d07ef")


def test_a_recorded_quote_parses() -> None:
    att = parse_attest(QUOTE)
    assert att.selection == ((0x000B, (7, 9, 10)),) and len(att.extra_data) == 32 and att.safe


@pytest.mark.parametrize("cut", [0, 3, 10, 40, len(QUOTE) - 1])
def test_a_truncated_quote_is_malformed(cut: int) -> None:
    with pytest.raises(MalformedTpmData, match="truncated"):
        parse_attest(QUOTE[:cut])


def test_a_quote_with_a_tail_or_another_magic_is_refused() -> None:
    with pytest.raises(MalformedTpmData, match="trailing"):
        parse_attest(QUOTE + b"\0")
    with pytest.raises(MalformedTpmData, match="TPM_GENERATED"):
        parse_attest(b"\0" + QUOTE[1:])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_parse_or_are_malformed(data: bytes) -> None:
    for parser in (parse_attest, parse_public, parse_signature):
        try:
            parser(data)
        except MalformedTpmData:
            pass


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=120))
def test_garbage_never_verifies(quote: bytes, sig: bytes) -> None:
    check = check_quote(ak_public=b"\0\x02ab", quote=quote, signature=sig, nonce=b"n", pcrs=(7,),
                        expected_digest=b"", last=None)
    assert not check.ok


def test_a_hostile_event_log_names_its_field() -> None:
    with pytest.raises(MalformedTpmData, match="events"):
        parse_event_log(b'{"format": "ringfence-eventlog-1", "events": [{"pcr": 99}]}', "n")
    with pytest.raises(MalformedTpmData):
        parse_event_log(b"\xff not json", "n")


def _policy(**over: Any) -> Attestation:
    return Attestation.model_validate_json(json.dumps(policy_doc(**over)))


def test_the_allowlist_is_strict() -> None:
    assert _policy().interval_seconds() == 60
    with pytest.raises(ValidationError, match="which pcrs does not quote"):
        _policy(pcrs=[7, 9])  # components in PCR 10 would go unquoted
    with pytest.raises(ValidationError, match="Extra inputs"):
        _policy(skip_unknown_pcrs=True)
    with pytest.raises(ValidationError, match="ascending"):
        _policy(pcrs=[10, 9, 7])
    with pytest.raises(ValidationError):
        _policy(components=[{"name": "kernel", "kind": "host-kernel", "pcr": 9, "digests": ["md5:00"]}])


def test_a_policy_file_carries_the_optional_section() -> None:
    from pathlib import Path

    import yaml

    from ringfence.policy import parse_policy

    text = (Path(__file__).resolve().parents[2] / "examples" / "lab-policy.yaml").read_text()
    assert parse_policy(text, source="lab").attestation is None
    with_section = text + "\n" + yaml.safe_dump({"attestation": policy_doc()})
    assert parse_policy(with_section, source="lab").attestation == _policy()
