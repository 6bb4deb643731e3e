"""The gate's nft transactions and the re-attestation loop, against a recording executor (no root needed)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from swtpm_kit import boot, policy_doc, swtpm

from ringfence.attest.gate import Gate
from ringfence.attest.run import AttestSite, Round, watch
from ringfence.attest.verifier import enrol
from ringfence.policy.attestation import Attestation
from ringfence.targets.interface import Host, RunResult
from ringfence.targets.local import LocalExecutor


class RecordingNft:
    """An executor that records every nft script and answers like an empty, working nft."""

    name = "fabric"

    def __init__(self) -> None:
        self.scripts: list[str] = []

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        self.scripts.append((stdin or b"").decode())
        return RunResult(tuple(argv), 0, b'{"nftables": []}', b"", 0.0)

    def spawn(self, *a: object, **k: object) -> object:  # pragma: no cover - never used by the gate
        raise NotImplementedError

    def copy_to(self, local: Path, remote: str) -> None:  # pragma: no cover
        raise NotImplementedError

    def copy_from(self, remote: str, local: Path) -> None:  # pragma: no cover
        raise NotImplementedError


def test_admission_renews_its_timeout_and_refusal_revokes_first(tmp_path: Path) -> None:
    nft = RecordingNft()
    gate = Gate(nft)  # type: ignore[arg-type]
    gate.install(["10.0.0.2", "10.0.0.1"])
    assert "flags timeout" in nft.scripts[0] and "add element bridge ringfence_attest members { 10.0.0.1, 10.0.0.2 }" \
        in nft.scripts[0] and "ip saddr != @admitted" in nft.scripts[0]
    gate.admit(["10.0.0.1"], 60)
    lines = nft.scripts[1].splitlines()
    assert lines[:3] == ["add element bridge ringfence_attest admitted { 10.0.0.1 timeout 60s }",
                         "delete element bridge ringfence_attest admitted { 10.0.0.1 }",
                         "add element bridge ringfence_attest admitted { 10.0.0.1 timeout 60s }"]
    assert any(line.startswith("add element inet ") for line in lines)


def test_watch_reattests_every_half_interval_with_the_interval_as_timeout(tmp_path: Path) -> None:
    policy = Attestation.model_validate_json(json.dumps(policy_doc(interval="2s")))
    nft = RecordingNft()
    with swtpm(tmp_path / "a", "node-a") as tpm:
        boot(tpm)
        reg = tmp_path / "reg.json"
        assert enrol([tpm], reg, "s")[0].enrolled
        site = AttestSite("s", {"node-a": tpm}, {"node-a": Host("node-a", "10.0.0.1", LocalExecutor("node-a"))},
                          Gate(nft), ())  # type: ignore[arg-type]
        rounds: list[Round] = []
        watch(site, policy, reg, rounds=2, report=rounds.append)
    assert len(rounds) == 2 and all(r.all_admitted for r in rounds), [r.decisions for r in rounds]
    admits = [s for s in nft.scripts if "timeout 2s" in s]
    assert len(admits) == 2  # one renewal per round, each with the full interval
