"""The canonical encoding: one byte form per JSON value, stable under decoding and key order."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.evidence import ChainHead, EvidenceStore, canonical_json, make_id, parse_id
from ringfence.evidence.interface import record_hash

# Every code point, lone surrogates included: hostile log lines carry anything.
_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=20)
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _TEXT
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=25,
)


@settings(deadline=None)  # a busy CI machine must not turn slowness into a failure
@given(_JSON)
def test_decode_then_encode_reproduces_the_bytes(value: Any) -> None:
    encoded = canonical_json(value)
    assert encoded.isascii() and b"\n" not in encoded
    decoded = json.loads(encoded)
    assert canonical_json(decoded) == encoded


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(_TEXT, _JSON, min_size=2, max_size=6))
def test_key_order_does_not_change_the_bytes(value: dict[str, Any]) -> None:
    reordered = dict(reversed(list(value.items())))
    assert canonical_json(reordered) == canonical_json(value)
    assert record_hash(reordered) == record_hash(value)


@pytest.mark.parametrize(
    "bad",
    [float("nan"), float("inf"), {1: "x"}, {"a": {2.5: 1}}, {1, 2}, b"bytes", object()],
)
def test_values_json_would_change_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        canonical_json(bad)


@settings(deadline=None)
@given(st.integers(min_value=1, max_value=10**9), st.text(alphabet="0123456789abcdef", min_size=64, max_size=64))
def test_ids_and_heads_round_trip(seq: int, digest: str) -> None:
    assert parse_id(make_id(seq, digest)) == (seq, digest[:8])
    assert ChainHead.parse(str(ChainHead(seq, digest))) == ChainHead(seq, digest)


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> EvidenceStore:
    return EvidenceStore.open(tmp_path_factory.mktemp("canon") / "ev")


@settings(max_examples=40, deadline=None)
@given(data=_JSON, subject=_TEXT)
def test_stored_records_give_back_what_was_appended(shared_store: EvidenceStore, data: Any, subject: str) -> None:
    evidence_id = shared_store.append("observation", "test.hypothesis", subject, data)
    record = shared_store.get(evidence_id)
    assert canonical_json(record.data) == canonical_json(data)
    assert record.subject == subject
    assert shared_store.verify(check_blobs=False).ok


def test_chain_head_parse_rejects_junk() -> None:
    for junk in ("", "42", "x:" + "0" * 64, "1:" + "g" * 64, "1:" + "0" * 63):
        with pytest.raises(ValueError):
            ChainHead.parse(junk)


def test_hash_is_reproducible_with_plain_json(shared_store: EvidenceStore) -> None:
    # docs/evidence.md promises anyone can recompute a record's hash with an ordinary JSON library.
    import hashlib

    shared_store.append("note", "test", "plain", {"z": [1, 2.5, "é"], "a": None})
    for line in shared_store.raw_lines():
        obj = json.loads(line)
        body = {k: v for k, v in obj.items() if k != "hash"}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        assert hashlib.sha256(text.encode()).hexdigest() == obj["hash"]
