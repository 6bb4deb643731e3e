"""The acceptance of issue 10 on a real lab: the README's whole loop, recorded in one store.

enforce → probe (+ruleset, +changes) → TLS and WireGuard → verify keys → a containment drill → capture →
assess with every facts file. Then the same assessment with each facts file left out in turn: exactly
the controls whose requirements need that fact lose their ``pass`` (the others keep their verdict), and
``assess --evidence`` on the store reproduces report.json but for ``generated``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringfence.cli import main
from ringfence.controls.registry import REGISTRY
from ringfence.enforce.apply import rollback
from ringfence.enforce.facts import load_probe_facts
from ringfence.enforce.probe_matrix import behaviour_failed
from ringfence.errors import EnvironmentProblem
from ringfence.evidence import EvidenceStore
from ringfence.evidence.checkpoint import load_signer, public_bytes
from ringfence.lab import Lab
from ringfence.lab.netns import require_privileges
from ringfence.lab.points import lab_points
from ringfence.secure.layers import tls_run, wireguard_run
from ringfence.secure.layers.runtime import StateStore
from steps_kit import member_steps, stepped, steps_advance

pytestmark = [pytest.mark.privileged, pytest.mark.slow]

TUNNEL = (
    "  - {id: train-a-wireguard, from: {job: train-a}, to: {job: train-a}, proto: udp, ports: '51820-51821',"
    " class: collective}\n"
)
# The tunnel is set up for train-a only (wireguard-go on four workers of two cores is too slow to train);
# train-b's gradients are exempt, owned and time-limited, as the procedure allows.
EXCEPTION = (
    "exceptions:\n  - {{id: exc-train-b, control: encryption_keys, subject: 'job:train-b', owner: 'ml-security@lab', "
    "reason: 'canary on train-a first', expires: {expires}, review_trigger: 'train-a canary passes', "
    "trusted_boundary: 'lab fabric', compensating: [segmentation]}}\n"
)
#: assess option → the Facts field it feeds.
OPTIONS = {"--probes": "probes", "--ruleset": "ruleset", "--changes": "changes", "--keys": "keys",
           "--containment": "containment", "--trace": "traces"}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@lab", *args], check=True,
                   capture_output=True, timeout=60)


def _commit(repo: Path, policy: Path, text: str, message: str) -> None:
    policy.write_text(text)
    _git(repo, "add", policy.name)
    _git(repo, "commit", "-q", "-m", message)


def _change(work: Path, policy: Path, text: str, ticket: str, name: list[str], store: Path) -> None:
    """Commit ``text``, propose it (dev@lab), approve it (cab@lab), deploy the approved request."""
    _commit(policy.parent, policy, text, ticket)
    req = work / f"{ticket}.json"
    assert main(["change", "propose", str(policy), "--by", "dev@lab", "--ticket", ticket, "-o", str(req),
                 "--evidence", str(store)]) == 0
    assert main(["change", "approve", str(req), "--by", "cab@lab", "--key", str(work / "cab.key"), "--evidence",
                 str(store)]) == 0
    assert main(["apply", str(policy), "--target", "lab", *name, "--request", str(req), "--evidence",
                 str(store)]) == 0


def _probe(policy: Path, out: Path, name: list[str], store: Path, *extra: str) -> None:
    """``ringfence probe`` that must show every expected behaviour; when it does not, the failure names the probes."""
    code = main(["probe", str(policy), "--target", "lab", *name, "-o", str(out), *extra, "--store", str(store)])
    if code != 0:
        rows = load_probe_facts(out) if out.exists() else ()
        bad = [f"{r.expected} {r.source} → {r.destination}: {r.outcome}; {r.detail}"
               for r in rows if behaviour_failed(r)]
        raise AssertionError(f"probe exited {code}; not as expected: {bad or 'no probes file'}")


#: the job whose ranks the tunnel joins (its steps, not the lab's, say the collective runs through it)
TUNNELLED = ("worker-0", "worker-1")


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path, dict[str, Path]]]:
    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    work = tmp_path_factory.mktemp("readme-loop")
    store = work / "evidence"
    with Lab.up(workers=4, jobs=2) as lab:  # a second job to contain while train-a keeps training
        repo = work / "policy-repo"  # policy lives in git; changes go through change control
        repo.mkdir()
        _git(repo, "init", "-q")
        policy = repo / "lab.yaml"
        text = lab.policy_yaml().replace("\nclasses:", "\n" + TUNNEL + "\nclasses:", 1)
        assert "exceptions: []\n" in text
        cab = load_signer(work / "cab.key")
        text = text.replace("exceptions: []\n", EXCEPTION.format(expires=date.today() + timedelta(days=30)))
        text += ("change_control:\n  required: true\n  approvers: {'cab@lab': '"
                 + public_bytes(cab.public_key).hex() + "'}\n")
        name = ["--name", lab.name]
        try:
            files = {o: work / f"{f}.json" for o, f in OPTIONS.items()}
            # a change traced through request → approval → deploy (probed) → rollback, as change_control asks
            _change(work, policy, text, "CHG-1", name, store)
            _probe(policy, work / "v1-probes.json", name, store)
            variant = yaml.safe_load(text)
            variant["approved"] = [f for f in variant["approved"] if f["id"] != "aux-telemetry"]
            _change(work, policy, yaml.safe_dump(variant, sort_keys=False), "CHG-2", name, store)
            _probe(policy, work / "v2-probes.json", name, store)
            assert main(["change", "rollback", "--target", "lab", *name, "--by", "cab@lab", "--evidence",
                         str(store)]) == 0
            _commit(repo, policy, text, "CHG-2 rolled back")  # the repository says what is in force again
            _probe(policy, work / "first-probes.json", name, store)  # verifies the applied version
            # the drill before the layers: its collector check speaks plain HTTP to the management API; a job
            # is contained (a lone node shares its zone's segment with its peers, out of the fabric's reach)
            assert main(["contain", "--job", "train-b", "--drill", *name, "--policy", str(policy), "--store",
                         str(store), "--seconds", "3", "-o", str(files["--containment"]), "--approved-by",
                         "secops@lab"]) == 0
            tls_run.enable_tls(lab.site(), lab.policy(), ["storage", "management", "replication"])
            wireguard_run.enable_wireguard(lab.site(), ["worker-0", "worker-1"])
            wireguard_run.set_collective_class(lab.site(), ["collective"])
            steps_advance(lab, TUNNELLED, by=2, timeout=90)
            _probe(policy, files["--probes"], name, store, "--ruleset", str(files["--ruleset"]), "--changes",
                   str(files["--changes"]))
            # verify's own exit is 1 when its short capture missed a class; its drills are what assess reads
            assert main(["verify", "keys", "--target", "lab", *name, "--policy", str(policy), "-o",
                         str(files["--keys"]), "--evidence", str(store), "--work", str(work / "verify")]) in (0, 1)
            assert files["--keys"].exists()
            # telemetry's acceptance: a sampled allowed flow and a denied attempt, reconstructed from the logs
            traces = [work / f"trace-{s}.json" for s in ("allowed", "denied")]
            for sample, out in zip(("allowed", "denied"), traces, strict=True):
                assert main(["trace", "--sample", sample, "--target", "lab", *name, "--evidence", str(store),
                             "-o", str(out)]) == 0
            files["--trace"] = traces[0]
            # storage_flows' acceptance: a dataset read traced through storage's TLS gate (the object server's
            # record joined to the flow, the reader's certificate identity), and aux — no member of train-a —
            # dropped on its way to the same service
            addr = lab.topology.address
            for doc, args in (("trace-read.json", ["--sample", "allowed", "--object", "served", "--flow",
                                                   f"{addr('worker-0')}:*-{addr('storage')}:8080/tcp"]),
                              ("trace-aux.json", ["--sample", "denied", "--flow",
                                                  f"{addr('aux')}:*-{addr('storage')}:8080/tcp"])):
                assert main(["trace", *args, "--target", "lab", *name, "--evidence", str(store), "-o",
                             str(work / doc)]) == 0, doc
            capture = work / "after.pcap"
            for _ in range(3):  # a capture during which the job took no step shows nothing of the collective
                before = member_steps(lab, TUNNELLED)
                lab.capture(8, capture)
                if stepped(lab, TUNNELLED, before, 1):
                    break
            yield work, policy, capture, files
        finally:
            try:
                wireguard_run.disable_wireguard(lab.site())
                tls_run.disable_tls(lab.site())
                rollback(lab_points(lab), EvidenceStore.open(store), target=f"lab:{lab.name}")
            finally:
                StateStore(lab.name).forget()


def _assess(work: Path, policy: Path, capture: Path, files: dict[str, Path], out: str, *, leave_out: str = "") -> Any:
    args = [a for o, f in files.items() if o != leave_out for a in (o, str(f))]
    if leave_out != "--trace":  # both samples: the denied one beside the allowed one; the dataset read and aux's
        args += ["--trace", str(files["--trace"]).replace("trace-allowed", "trace-denied")]
        args += [a for f in ("trace-read.json", "trace-aux.json") for a in ("--trace", str(work / f))]
    store = work / "evidence" if not leave_out else work / f"evidence-{out}"
    main(["assess", str(policy), "--captures", str(capture), "-o", str(work / out), "--store", str(store), "-q",
          *args])
    return json.loads((work / out / "report.json").read_text())


def _verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["verdict"] for c in report["controls"]}


def test_the_whole_loop_passes_what_it_proves(loop: tuple[Path, Path, Path, dict[str, Path]]) -> None:
    work, policy, capture, files = loop
    report = _assess(work, policy, capture, files, "full")
    verdicts = _verdicts(report)
    failing = {c["id"]: [f["subject"] + ": " + f["message"] for f in c["findings"] if f["verdict"] == "fail"]
               for c in report["controls"] if c["verdict"] == "fail"}
    assert failing == {}
    proven = {cid for cid, v in verdicts.items() if v == "pass"}
    unproven = {c["id"]: [f["subject"] for f in c["findings"] if f["verdict"] == "unknown"]
                for c in report["controls"] if c["verdict"] != "pass"}
    assert {"zones", "admin_paths", "storage_flows", "training_traffic", "egress", "telemetry", "change_control",
            "containment"} <= proven, unproven
    # encryption_keys has every requirement met; what it may lack is the payload verdict of a flow the
    # classifier could not judge (a short keepalive): that flow is unknown, and so is the control, honestly.
    assert not [s for s in unproven.get("encryption_keys", []) if s.startswith("requirement ")]
    # workload identity needs identities on the wire, which a pcap does not carry
    assert verdicts["workload_identity"] == "unknown"


@pytest.mark.parametrize("option", list(OPTIONS))
def test_each_facts_file_left_out_unproves_exactly_the_controls_that_need_it(
    loop: tuple[Path, Path, Path, dict[str, Path]], option: str
) -> None:
    work, policy, capture, files = loop
    full = _verdicts(json.loads((work / "full" / "report.json").read_text()))
    without = _verdicts(_assess(work, policy, capture, files, f"without{option}", leave_out=option))
    fact = OPTIONS[option]
    needs = {cid for cid, c in REGISTRY.items() if any(fact in r.facts for r in c.meta.requirements)}
    for cid, verdict in full.items():
        if cid in needs and verdict == "pass":
            assert without[cid] == "unknown", (option, cid)
        elif cid not in needs:
            assert without[cid] == verdict, (option, cid)


def test_the_store_alone_gives_the_same_report(loop: tuple[Path, Path, Path, dict[str, Path]]) -> None:
    work = loop[0]
    assert main(["assess", str(loop[1]), "--evidence", str(work / "evidence"), "-o", str(work / "again"), "-q"]) in (
        0, 1, 3)
    original = json.loads((work / "full" / "report.json").read_text())
    again = json.loads((work / "again" / "report.json").read_text())
    assert {k: v for k, v in again.items() if k != "generated"} == {k: v for k, v in original.items()
                                                                     if k != "generated"}
    assert main(["evidence", "verify", "--store", str(work / "evidence")]) == 0
