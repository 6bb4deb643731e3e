"""The attestation gate on a real lab: swtpm per rank, quotes verified in Python, nftables at the fabric.

Each refusal (Keylime's failure modes) must leave the node out of the admitted set and its collective
traffic dropped at the fabric — shown by a probe to rank 0's rendezvous port timing out, while the
same probe connects once the node is attested again — with the decision recorded as evidence.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringfence.attest.interface import Evidence
from ringfence.attest.node import NodeTpm
from ringfence.attest.run import AttestSite, Round, attest_round, facts_document, probe
from ringfence.attest.verifier import Collector, collect, enrol
from ringfence.controls import workload_identity
from ringfence.controls.interface import Facts, Verdict
from ringfence.errors import EnvironmentProblem
from ringfence.evidence.store import EvidenceStore
from ringfence.lab import Lab
from ringfence.lab.attest import attest_site, lab_allowlist
from ringfence.lab.netns import require_privileges
from ringfence.lab.tpm import Measured

pytestmark = pytest.mark.privileged

POLICY = lab_allowlist("60s")
BAD = "worker-1"


@dataclasses.dataclass
class Bench:
    lab: Lab
    site: AttestSite
    registry: Path
    store: EvidenceStore

    def round(self, collector: Collector = collect, **kw: object) -> Round:
        return attest_round(self.site, POLICY, self.registry, store=self.store, collector=collector,
                            do_probe=True, **kw)  # type: ignore[arg-type]

    def healthy(self) -> None:
        """worker-1 booted with the approved stack and admitted again (each test's clean-up)."""
        self.lab.reboot_tpm(BAD)
        self.site = attest_site(self.lab)
        rnd = self.round()
        assert rnd.all_admitted, [d.reasons for d in rnd.decisions]


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    if shutil.which("swtpm") is None:
        pytest.skip("swtpm is not installed")
    tmp = tmp_path_factory.mktemp("attest-lab")
    with Lab.up(workers=2, jobs=1, traffic=True, wait=True) as lab:
        site = attest_site(lab)
        outcomes = enrol([site.tpms[n] for n in sorted(site.tpms)], tmp / "registry.json", site.name)
        assert all(o.enrolled for o in outcomes), outcomes
        yield Bench(lab, site, tmp / "registry.json", EvidenceStore.open(tmp / "evidence"))


def _refused(b: Bench, rnd: Round, why: str) -> None:
    """worker-1 refused for ``why``, worker-0 still admitted, worker-1's probe dropped, evidence recorded."""
    final = {d.node: d for d in rnd.decisions}
    assert not final[BAD].admitted and any(why in r for r in final[BAD].reasons), final[BAD].reasons
    assert final["worker-0"].admitted, final["worker-0"].reasons
    blocked = [p for p in rnd.probes if p.source == BAD]
    assert blocked and all(p.expected == "blocked" and p.outcome == "timeout" for p in blocked), blocked
    assert b.site.addresses()[BAD][0] not in b.site.gate.admitted()
    record = b.store.get(rnd.evidence[BAD])
    assert record.data["admitted"] is False and any(why in r for r in record.data["reasons"])


def _steps(lab: Lab, node: str) -> int:
    return int(lab.agent_status().get(f"{node}-worker", {}).get("counters", {}).get("steps", 0))


def test_approved_nodes_are_admitted_and_keep_training(bench: Bench) -> None:
    rnd = bench.round()
    assert rnd.all_admitted, [d.reasons for d in rnd.decisions]
    assert rnd.probes and all(p.outcome == "connected" and p.verdict == "pass" for p in rnd.probes)
    assert set(bench.site.gate.admitted()) == {a for v in bench.site.addresses().values() for a in v}
    before = _steps(bench.lab, BAD)
    deadline = time.monotonic() + 90
    while _steps(bench.lab, BAD) <= before:  # observed: the all-reduce goes on through the gate
        assert time.monotonic() < deadline, "no all-reduce step since admission"
        assert bench.lab.workers_alive()
        time.sleep(0.2)


def test_a_changed_binary_is_refused_and_cut_off(bench: Bench, tmp_path: Path) -> None:
    changed = tmp_path / "python"
    changed.write_bytes(Path(sys.executable).resolve().read_bytes() + b"\0patched")
    try:
        bench.lab.reboot_tpm(BAD, replace={"python": changed})
        _refused(bench, bench.round(), "is not an approved digest of python")
    finally:
        bench.healthy()


def test_a_replayed_old_quote_is_refused_then_the_fresh_one_admitted(bench: Bench) -> None:
    rnd = bench.round(drill=BAD)
    first = [d for d in rnd.decisions if d.node == BAD]
    assert not first[0].admitted and "nonce" in first[0].reasons[0]
    assert first[-1].admitted, first[-1].reasons
    assert [(p.expected, p.outcome) for p in rnd.probes] == [("blocked", "timeout"), ("reached", "connected")]
    doc = facts_document(bench.site, POLICY, rnd)  # the facts workload_identity judges
    found = workload_identity.evaluate(bench.lab.policy(), Facts(attestation=doc))
    by_req = {f.requirement: f.verdict for f in found if f.requirement in (workload_identity.ATTESTED,
                                                                             workload_identity.ATTEST_DENIED)}
    assert by_req == {workload_identity.ATTESTED: Verdict.PASS, workload_identity.ATTEST_DENIED: Verdict.PASS}


def test_a_quote_signed_by_another_tpms_ak_is_refused(bench: Bench) -> None:
    other = bench.site.tpms["worker-0"]

    def foreign(tpm: NodeTpm, nonce: bytes, pcrs: tuple[int, ...]) -> Evidence:
        if tpm.node != BAD:
            return tpm.quote(nonce, pcrs)
        return dataclasses.replace(other.quote(nonce, pcrs), node=BAD)  # same stack, the right nonce

    try:
        _refused(bench, bench.round(foreign), "does not verify under the enrolled AK")
    finally:
        bench.healthy()


def test_a_bad_signature_is_refused_cve_2023_3674(bench: Bench) -> None:
    def flipped(tpm: NodeTpm, nonce: bytes, pcrs: tuple[int, ...]) -> Evidence:
        ev = tpm.quote(nonce, pcrs)
        if tpm.node != BAD:
            return ev
        sig = bytearray(ev.signature)
        sig[10] ^= 0x40
        return dataclasses.replace(ev, signature=bytes(sig))

    try:
        _refused(bench, bench.round(flipped), "does not verify")
    finally:
        bench.healthy()


def test_a_pcr_outside_the_policy_is_refused(bench: Bench) -> None:
    extra = (Measured(11, "debug-shell", "binary", "", "ab" * 32, "/tmp/debug-shell"),)
    try:
        bench.lab.reboot_tpm(BAD, extra=extra)
        _refused(bench, bench.round(), "PCR 11 is not in the policy")
    finally:
        bench.healthy()


def test_an_unreachable_tpm_is_refused(bench: Bench) -> None:
    try:
        bench.lab.stop_tpm(BAD)
        _refused(bench, bench.round(), "no quote")
    finally:
        bench.healthy()  # reboot_tpm starts it again: a fresh boot


def test_a_second_tpm_claiming_an_enrolled_name_is_refused_cve_2025_13609(bench: Bench) -> None:
    aux = bench.lab.ensure_tpm(["aux"])["aux"]
    impostor = dataclasses.replace(bench.site.tpms[BAD], tcti=aux.tcti, workdir=str(aux.work))
    [outcome] = enrol([impostor], bench.registry, bench.site.name)
    assert not outcome.enrolled and "bound to another TPM" in outcome.reason
    rnd = bench.round()  # the genuine worker-1 is still the enrolled one
    assert rnd.all_admitted, [d.reasons for d in rnd.decisions]


def test_the_verb_exits_0_when_all_are_admitted_and_1_naming_the_refused(
        bench: Bench, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ringfence.cli import main

    common = ["--name", bench.lab.name, "--registry", str(bench.registry)]
    out = tmp_path / "attest.json"
    assert main(["attest", "verify", *common, "--probe", "--store", str(tmp_path / "ev"), "-o", str(out)]) == 0
    doc = __import__("json").loads(out.read_text())
    assert doc["format"] == "ringfence-attestation-1" and all(n["admitted"] for n in doc["nodes"])
    try:
        bench.lab.stop_tpm(BAD)
        capsys.readouterr()
        assert main(["attest", "verify", *common, "--store", str(tmp_path / "ev"), "-o", str(out)]) == 1
        assert f"{BAD}: REFUSED: no quote" in capsys.readouterr().err
        assert main(["attest", "status", *common, "--nodes", BAD]) == 1
    finally:
        bench.healthy()


# Last: with every rank cut off for longer than gloo's timeout the job itself may end (that is denial).
def test_a_stopped_verifier_leaves_no_node_admitted_cve_2022_3500(bench: Bench) -> None:
    # the interval must outlast one round, or the first node's admission lapses before the last is checked:
    # measure a round on this machine (a busy one takes many seconds), then take a few times that
    t0 = time.monotonic()
    attest_round(bench.site, lab_allowlist("10m"), bench.registry, store=bench.store)
    seconds = max(8, int(3 * (time.monotonic() - t0)) + 1)
    short = lab_allowlist(f"{seconds}s")
    try:
        rnd = attest_round(bench.site, short, bench.registry, store=bench.store)
        assert rnd.all_admitted and bench.site.gate.admitted()  # (probes would race the short timeout here)
        # the verifier now stops: no renewal. The kernel drops the admissions on its own.
        deadline = time.monotonic() + seconds + 40
        while bench.site.gate.admitted():
            assert time.monotonic() < deadline, f"admissions outlived the interval: {bench.site.gate.admitted()}"
            time.sleep(0.2)
        lapsed = probe(bench.site, {})
        assert lapsed and all(p.outcome == "timeout" and p.verdict == "pass" for p in lapsed), lapsed
    finally:
        bench.healthy()
