"""A hostile but realistic Assessment shared by the renderer tests."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from ringfence.controls.interface import ControlResult, Finding, Verdict
from ringfence.evidence import ChainHead
from ringfence.evidence.report import Assessment, InputSummary, MatrixRow

HOSTILE = "<script>alert(\"x\")</script> & 'q' [bold]markup[/bold] \x1b[31mred\x01"
CHART = '<svg viewBox="0 0 10 10" width="100" height="100"><rect x="1" y="1" width="8" height="8"/></svg>'


def _f(control: str, verdict: Verdict, subject: str, message: str, *evidence: str, fix: str = "") -> Finding:
    return Finding(control, verdict, subject, message, tuple(evidence), fix)


def make_assessment(**overrides: object) -> Assessment:
    """The shared assessment; keyword overrides replace fields."""
    controls = (
        ControlResult(
            "zones",
            "Zones and segmentation",
            Verdict.FAIL,
            (
                _f(
                    "zones",
                    Verdict.FAIL,
                    HOSTILE,
                    "unapproved flow aux → storage",
                    "ev-000003-abcdef01",
                    fix="nft add rule inet ringfence fwd drop",
                ),
                _f(
                    "zones",
                    Verdict.PASS,
                    "flow w1 → storage (storage)",
                    "approved by rule storage-read",
                    "ev-000004-abcdef02",
                ),
            ),
            owner="netops",
        ),
        ControlResult(
            "egress",
            "Egress",
            Verdict.PASS,
            (_f("egress", Verdict.PASS, "node w1", "egress to replica only", "ev-000005-abcdef03"),),
            owner="secops",
        ),
        ControlResult(
            "encryption",
            "Encryption and keys",
            Verdict.EXEMPT,
            (_f("encryption", Verdict.EXEMPT, "class:collective", "exception exc-1 until 2026-01-01"),),
            owner="ml-platform",
        ),
        ControlResult(
            "telemetry",
            "Network telemetry with identity",
            Verdict.UNKNOWN,
            (_f("telemetry", Verdict.UNKNOWN, "flow logs", "no flow log source was given"),),
        ),
        ControlResult("containment", "Incident containment", Verdict.UNKNOWN, ()),
    )
    fields: dict[str, object] = {
        "cluster": "lab",
        "policy_path": "examples/lab-policy.yaml",
        "policy_sha256": "ab" * 32,
        "generated": datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC),
        "controls": controls,
        "version": "0.1.0",
        "inputs": (InputSummary("lab.pcap", "pcap", "cd" * 32, records=1200, flows=14),),
        "class_bytes": {
            "unclassified": {"unknown": 42},
            "storage": {"plaintext": 1_000, "encrypted": 9_000},
            "collective": {"encrypted": 5_000_000_000},
        },
        "matrix": (
            MatrixRow("compute", "storage", "storage", "storage-read", True, 10, 10_000),
            MatrixRow("aux", "storage", "unclassified", None, False, 1, 42),
        ),
        "evidence_store": "out/evidence",
        "chain_head": ChainHead(7, "ef" * 32),
        "warnings": ("lab.pcap: 3 truncated packets skipped",),
        "charts": (("busbw before/after", CHART),),
    }
    fields.update(overrides)
    return Assessment(**fields)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def assessment() -> Assessment:
    return make_assessment()


@pytest.fixture(scope="session")
def build() -> Callable[..., Assessment]:
    """The factory, for tests that need a variant (tests cannot import conftest reliably)."""
    return make_assessment
