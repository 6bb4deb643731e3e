"""The attestation allowlist's keys for real hosts' logs: UEFI event types and IMA paths, strictly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from ringfence.policy.attestation import Attestation, ComponentKind

_D = "sha256:" + "ab" * 32


def _doc(**comp: Any) -> str:
    c = {"name": "c", "kind": "firmware", "pcr": 0, "digests": [_D], **comp}
    return json.dumps({"pcrs": [0, 10], "components": [c]})


def test_event_types_and_paths_are_read() -> None:
    a = Attestation.model_validate_json(_doc(event_types=["EV_POST_CODE", "EV_SEPARATOR"],
                                             paths=["/usr/lib/modules/*/nvidia*.ko*"]))
    c = a.components[0]
    assert c.event_types == ("EV_POST_CODE", "EV_SEPARATOR") and c.paths == ("/usr/lib/modules/*/nvidia*.ko*",)
    assert c.kind is ComponentKind.FIRMWARE
    assert ComponentKind("boot-loader") is ComponentKind.BOOT_LOADER


@pytest.mark.parametrize("comp", [
    {"event_types": ["post_code"]},  # not a PFP name
    {"event_types": ["EV_"]},
    {"paths": ["lib/modules/nvidia.ko"]},  # IMA paths are absolute
    {"paths": [""]},
    {"event_type": ["EV_POST_CODE"]},  # a misspelt key is refused, not ignored
])
def test_bad_keys_are_refused(comp: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Attestation.model_validate_json(_doc(**comp))


def test_the_allowlist_is_frozen() -> None:
    a = Attestation.model_validate_json(_doc(paths=["/x"]))
    with pytest.raises(ValidationError):
        a.components[0].paths = ("/y",)
