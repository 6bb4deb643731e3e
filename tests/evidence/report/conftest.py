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


PLAINTEXT_FIX = "nftables: drop plaintext ports; pair with a mesh; cilium: enable transparent encryption"


def _plaintext(src: str, sport: int, dst: str, cls: str, kb: float, control: str = "encryption_keys") -> Finding:
    return _f(
        control,
        Verdict.FAIL,
        f"flow {src}:{sport} → {dst} ({cls})",
        f"plaintext payload on class {cls}, which requires protection (tls): 1 record, {kb:.1f} kB readable on the "
        f"wire (2 HTTP/1.x request/status lines in clear: 'PUT /ckpt/step-{sport} HTTP/1.1')",
        "ev-000002-b22eee74",
        fix=PLAINTEXT_FIX,
    )


def make_many_flows(**overrides: object) -> Assessment:
    """Like the lab as found: one control failing on 190 near-identical plaintext flows, others unknown."""
    findings = (
        *(_plaintext("10.77.1.10", 40000 + i, "10.77.2.10:8080", "storage", 264.2) for i in range(100)),
        *(_plaintext("10.77.1.11", 41000 + i, "10.77.2.10:8080", "storage", 100.0) for i in range(80)),
        *(_plaintext("10.77.2.10", 42000 + i, "10.77.9.10:9000", "replication", 264.3) for i in range(10)),
        _f("encryption_keys", Verdict.PASS, "class management", "6 flow(s), 6 records, 30.6 kB, no plaintext"),
        _f("encryption_keys", Verdict.UNKNOWN, "key management", "no key evidence: run `ringfence verify keys`"),
    )
    probe = "no denied behaviour proven: run `ringfence probe POLICY --target lab -o probes.json`"
    controls = (
        ControlResult(
            "encryption_keys",
            "Encryption per traffic class, and key management with a long title",
            Verdict.FAIL,
            findings,
            owner="ml-platform-security@lab",
        ),
        ControlResult(
            "zones",
            "Security zones and the approved communication matrix",
            Verdict.UNKNOWN,
            (_f("zones", Verdict.UNKNOWN, "denied paths (between zones)", probe),),
            owner="netsec@lab",
        ),
        ControlResult(
            "egress",
            "Egress across the trust boundary",
            Verdict.UNKNOWN,
            (_f("egress", Verdict.UNKNOWN, "denied paths (outside)", probe),),
            owner="netsec@lab",
        ),
        ControlResult("containment", "Incident containment", Verdict.UNKNOWN, ()),
    )
    fields: dict[str, object] = {
        "controls": controls,
        "class_bytes": {
            "storage": {"plaintext": 34_420_000, "encrypted": 1_000},
            "replication": {"plaintext": 2_643_000},
        },
        "matrix": (
            MatrixRow("workload", "storage", "storage", "train-a-storage", True, 180, 34_421_000),
            MatrixRow("storage", "external", "replication", "checkpoint-replication", True, 10, 2_643_000),
            MatrixRow("workload", "management", "management", "admin-ssh", True, 0, 0),
            MatrixRow("workload", "storage", "storage", None, False, 3, 398_052),
        ),
        "warnings": (),
        "charts": (),
    }
    fields.update(overrides)
    return make_assessment(**fields)


@pytest.fixture(scope="session")
def many_flows() -> Assessment:
    """An assessment shaped like the lab as found (see :func:`make_many_flows`)."""
    return make_many_flows()
