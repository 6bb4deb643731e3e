"""Folding near-identical findings into groups: who is folded with whom, and what the group says."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from ringfence.controls.interface import Finding, Verdict
from ringfence.evidence.report import Assessment
from ringfence.evidence.report.grouping import common_message, group_findings, parse_volume, split_remediation


def _flow(
    src: str, sport: int, dst: str, cls: str, msg: str, verdict: Verdict = Verdict.FAIL, fix: str = "f"
) -> Finding:
    return Finding("c", verdict, f"flow {src}:{sport} → {dst} ({cls})", msg, ("ev-1",), fix)


def test_many_flows_fold_per_destination_and_class(many_flows: Assessment) -> None:
    control = many_flows.controls[0]
    groups = group_findings(control.findings)
    assert [(g.verdict, g.subject, g.count) for g in groups] == [
        (Verdict.FAIL, "10.77.2.10:8080 (storage)", 180),
        (Verdict.FAIL, "10.77.9.10:9000 (replication)", 10),
        (Verdict.UNKNOWN, "key management", 1),
        (Verdict.PASS, "class management", 1),
    ]
    storage = groups[0]
    assert storage.sources == (("10.77.1.10", 100), ("10.77.1.11", 80))
    assert storage.bytes == 100 * 264_200 + 80 * 100_000 and storage.records == 180
    assert storage.message == "plaintext payload on class storage, which requires protection (tls)"
    assert storage.messages_differ and storage.evidence == ("ev-000002-b22eee74",)
    assert storage.headline() == "180 flows 10.77.1.10, 10.77.1.11 → 10.77.2.10:8080 (storage)"
    assert groups[3].bytes == 30_600 and not groups[3].flow_group  # a stated volume counts outside flows too
    assert sum(g.count for g in groups) == len(control.findings)


def test_what_keeps_findings_apart() -> None:
    findings = [
        _flow("10.0.0.1", 1, "10.0.0.9:80", "storage", "m 1 record, 1.0 kB"),
        _flow("10.0.0.2", 2, "10.0.0.9:80", "storage", "m 1 record, 2.0 kB", verdict=Verdict.EXEMPT),
        _flow("10.0.0.1", 3, "10.0.0.9:80", "management", "m 1 record, 3.0 kB"),
        _flow("10.0.0.1", 4, "10.0.0.9:81", "storage", "m 1 record, 4.0 kB"),
        _flow("10.0.0.1", 5, "10.0.0.9:80", "storage", "m 1 record, 5.0 kB", fix="other fix"),
        _flow("[fd00::1]", 6, "[fd00::9]:80", "udp, storage", "m without a volume"),
        _flow("[fd00::2]", 7, "[fd00::9]:80", "udp, storage", "m 1 record, 7.0 kB"),
        Finding("c", Verdict.FAIL, "node aux", "same"),
        Finding("c", Verdict.FAIL, "node aux", "same"),
        Finding("c", Verdict.FAIL, "node aux", "different"),
    ]
    groups = group_findings(findings)
    assert sorted(g.count for g in groups) == [1, 1, 1, 1, 1, 1, 2, 2]
    v6 = next(g for g in groups if g.subject == "[fd00::9]:80 (udp, storage)")
    assert v6.sources == (("[fd00::1]", 1), ("[fd00::2]", 1))
    assert v6.bytes is None and v6.records is None  # one message states no volume: no partial total
    aux = next(g for g in groups if g.subject == "node aux" and g.count == 2)
    assert aux.headline() == "node aux (×2)" and not aux.messages_differ and aux.message == "same"
    assert [g.verdict for g in groups][-1] is Verdict.EXEMPT  # fail first, exempt after


def test_common_message() -> None:
    assert common_message(["a b", "a b"]) == ("a b", False)
    short = ["x: 1 record, 2.0 kB y", "x: 1 record, 3.0 kB z"]
    assert common_message(short) == (short[0], True)  # "x" says nothing: the first message is the example
    long = "plaintext payload on class storage (tls): "
    assert common_message([long + "1 record, 2.0 kB", long + "1 record, 3.0 kB"]) == (long.rstrip(": "), True)
    assert common_message(["node aux reached y", "node w1 reached y"]) == ("node aux reached y", True)


def test_parse_volume_and_split_remediation() -> None:
    assert parse_volume("x: 3 records, 1.2 MB readable") == (3, 1_200_000)
    assert parse_volume("1 record, 17 B") == (1, 17) and parse_volume("no volume") is None
    assert split_remediation("nftables: a; b; cilium: c d") == (("nftables", "a; b"), ("cilium", "c d"))
    assert split_remediation("just do it") == (("", "just do it"),) and split_remediation("  ") == ()


_SUBJECTS = st.one_of(
    st.builds(
        lambda s, p, d, c: f"flow {s}:{p} → {d} ({c})",
        st.sampled_from(["10.0.0.1", "10.0.0.2", "[fd00::1]"]),
        st.integers(1, 65535),
        st.sampled_from(["10.0.0.9:80", "10.0.0.9:443"]),
        st.sampled_from(["storage", "udp, collective"]),
    ),
    st.text(max_size=30),
)


@given(
    st.lists(
        st.builds(
            Finding,
            control=st.just("c"),
            verdict=st.sampled_from(list(Verdict)),
            subject=_SUBJECTS,
            message=st.one_of(st.text(max_size=40), st.builds(lambda n: f"p: {n} records, 1.5 kB", st.integers(0, 9))),
            evidence=st.just(()),
            remediation=st.sampled_from(["", "nftables: x"]),
        ),
        max_size=40,
    )
)
def test_every_finding_lands_in_exactly_one_group(findings: list[Finding]) -> None:
    groups = group_findings(findings)
    assert Counter(f for g in groups for f in g.findings) == Counter(findings)
    for g in groups:
        assert {f.verdict for f in g.findings} == {g.verdict} and g.count >= 1


def test_exact_volumes_from_the_controls_are_summed_exactly() -> None:
    subj = "flow 10.77.1.{}:4000{} → 10.77.2.10:8080 (storage)"
    msg = "plaintext payload on class storage: 1 record, 1.5 kB readable on the wire"
    exact = [Finding("encryption_keys", Verdict.FAIL, subj.format(i, i), msg, volume=(1, 1499 + i)) for i in range(3)]
    (group,) = group_findings(exact)
    assert (group.records, group.bytes, group.exact) == (3, 1499 * 3 + 3, True)
    # Without the controls' counts the rounded message text is all there is: summed, but marked approximate.
    (approx,) = group_findings([Finding(f.control, f.verdict, f.subject, f.message) for f in exact])
    assert (approx.bytes, approx.exact) == (4500, False)


def test_named_flow_subjects_still_group_by_destination() -> None:
    findings = [
        Finding("zones", Verdict.FAIL, f"flow 10.77.1.50:{4000 + i} [aux] → 10.77.2.10:8080 [storage · storage-http] "
                "(storage)", "m", ("ev-1",)) for i in range(3)
    ]
    (group,) = group_findings(findings)
    assert group.count == 3 and group.subject == "10.77.2.10:8080 [storage · storage-http] (storage)"
