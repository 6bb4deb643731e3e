"""``junit.xml``: one testcase per control, for CI systems that show JUnit results.

fail → ``<failure type="fail">`` listing the failing findings; unknown → ``<failure type="not-proven">``
naming what is unproven (a CI gate must not go green with nothing proven, so it is not a skip); pass
and exempt → a passing testcase whose ``<system-out>`` lists the findings. The
layout follows the common (Jenkins/Ant ``junit-10.xsd``) schema: ``testsuites > testsuite >
(properties, testcase*)``, with ``failure``/``skipped`` before ``system-out``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC

from ringfence.controls.interface import ControlResult, Finding, Verdict
from ringfence.evidence.report.interface import Assessment, clean_text


def _finding_text(f: Finding) -> str:
    evidence = f" [evidence: {', '.join(f.evidence)}]" if f.evidence else ""
    fix = f"\n    remediation: {f.remediation}" if f.remediation else ""
    return f"[{f.verdict.value}] {f.subject}: {f.message}{evidence}{fix}"


def _testcase(parent: ET.Element, c: ControlResult) -> None:
    case = ET.SubElement(parent, "testcase", name=clean_text(f"{c.id}: {c.title}"), classname="ringfence.controls")
    case.set("time", "0")
    if c.verdict is Verdict.FAIL:
        failing = [f for f in c.findings if f.verdict is Verdict.FAIL]
        failure = ET.SubElement(
            case,
            "failure",
            message=clean_text(
                f"{len(failing)} of {len(c.findings)} findings fail" + (f": {failing[0].subject}" if failing else "")
            ),
            type="fail",
        )
        failure.text = clean_text("\n".join(_finding_text(f) for f in failing))
    elif c.verdict is Verdict.UNKNOWN:
        unknown = [f for f in c.findings if f.verdict is Verdict.UNKNOWN]
        reason = unknown[0].message if unknown else "no findings: nothing was judged"
        failure = ET.SubElement(case, "failure", message=clean_text(f"not proven: {reason}"), type="not-proven")
        failure.text = clean_text("\n".join(_finding_text(f) for f in unknown))
    if c.findings:
        out = ET.SubElement(case, "system-out")
        owner = f"owner: {c.owner}\n" if c.owner else ""
        out.text = clean_text(owner + "\n".join(_finding_text(f) for f in c.findings))


def render(a: Assessment) -> bytes:
    """The JUnit XML report as UTF-8 bytes."""
    failures = sum(c.verdict in (Verdict.FAIL, Verdict.UNKNOWN) for c in a.controls)
    counts = {"tests": str(len(a.controls)), "failures": str(failures), "errors": "0", "skipped": "0"}
    root = ET.Element("testsuites", {"name": "ringfence", **counts, "time": "0"})
    suite_attrs = {
        "name": clean_text(f"ringfence.{a.cluster}"),
        **counts,
        "time": "0",
        # junit-10.xsd wants a timestamp without a zone; it is UTC.
        "timestamp": a.generated.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
        "hostname": clean_text(a.cluster),
    }
    suite = ET.SubElement(root, "testsuite", suite_attrs)
    props = ET.SubElement(suite, "properties")
    values = [
        ("cluster", a.cluster),
        ("ringfence_version", a.version),
        ("policy", a.policy_path),
        ("policy_sha256", a.policy_sha256),
    ]
    if a.chain_head is not None:
        values.append(("evidence_head", str(a.chain_head)))
    for name, value in values:
        ET.SubElement(props, "property", name=name, value=clean_text(value))
    for c in a.controls:
        _testcase(suite, c)
    ET.indent(root)
    text: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return text + b"\n"


__all__ = ["render"]
