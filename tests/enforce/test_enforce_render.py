"""Renderers without root: the resolved matrix, growth in flows, schema-valid Kubernetes objects, notes, refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from ringfence.cli import main
from ringfence.enforce import (
    RENDERERS,
    CiliumRenderer,
    EnforceError,
    NetworkPolicyRenderer,
    NftablesRenderer,
    RenderOptions,
    UnsafePolicy,
    check_policy,
    policy_problems,
    renderer,
    resolve,
)
from ringfence.enforce.nftables import render_fabric, render_node, ruleset_stats
from ringfence.enforce.synth import synthetic_policy
from ringfence.policy import Policy, load_policy, parse_policy

ROOT = Path(__file__).resolve().parents[2]
LAB_POLICY = ROOT / "examples" / "lab-policy.yaml"
CILIUM_CRD = ROOT.parent / "shared" / "schemas" / "cilium" / "ciliumnetworkpolicies.yaml"
K8S_VERSION = "1.30.0"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(LAB_POLICY)


def _rules(doc: dict[str, Any], family: str, chain: str) -> list[dict[str, Any]]:
    return [c["add"]["rule"] for c in doc["nftables"]
            if "rule" in c.get("add", {}) and c["add"]["rule"]["family"] == family
            and c["add"]["rule"]["chain"] == chain]


def test_matrix_resolves_every_selector(policy: Policy) -> None:
    m = resolve(policy)
    by_id = {f.id: f for f in m.flows}
    assert by_id["train-a-collective"].source.addresses == ("10.77.1.10", "10.77.1.11")
    assert by_id["train-a-collective"].ports == (1024, 65535)
    assert by_id["train-a-storage"].destination.addresses == ("10.77.2.10",)
    assert by_id["train-a-storage"].ports == (8080, 8080)  # the destination service's port
    assert by_id["user-submit"].source.key == "zone_user"
    assert m.external_addresses() == ("10.77.9.10",)
    assert {f.id for f in m.flows_to("mgmt")} == {"train-a-report", "aux-telemetry", "user-submit", "admin-ssh"}
    assert {f.id for f in m.flows_from("aux")} == {"aux-telemetry"}


def test_node_ruleset_accepts_only_its_flows_and_ends_in_counted_logged_drop(policy: Policy) -> None:
    doc = render_node(resolve(policy), "mgmt")
    inp = _rules(doc, "inet", "input")
    comments = [r.get("comment", "") for r in inp]
    assert [c for c in comments if c.startswith("flow ")] == [
        "flow train-a-report (management)", "flow aux-telemetry (management)",
        "flow user-submit (management)", "flow admin-ssh (management)"]
    last = inp[-1]["expr"]
    assert {"counter": None} in last and {"drop": None} in last
    assert any("log" in e and e["log"]["prefix"].startswith("rf-drop mgmt/input") for e in last)
    # the drop is preceded by the per-packet record that lets a probe find its own denied packet
    assert any("set" in e and e["set"]["set"] == "@denied" for e in inp[-2]["expr"])
    out = _rules(doc, "inet", "output")
    assert not [r for r in out if r.get("comment", "").startswith("flow ")]  # mgmt opens nothing


def test_every_drop_rule_has_counter_and_log_and_audit_accepts(policy: Policy) -> None:
    m = resolve(policy)
    for audit in (False, True):
        opts = RenderOptions(audit=audit)
        docs = [render_fabric(m, opts), *(render_node(m, n, opts) for n in ("worker-0", "storage", "jump"))]
        for doc in docs:
            for c in doc["nftables"]:
                rule = c.get("add", {}).get("rule")
                if not rule:
                    continue
                verdicts = {k for e in rule["expr"] for k in e if k in ("accept", "drop")}
                logged = [e["log"]["prefix"] for e in rule["expr"] if "log" in e]
                if "drop" in verdicts:
                    assert {"counter": None} in rule["expr"] and logged, rule
                    assert not audit or "contain" in logged[0]  # in audit only containment still drops
                if audit and logged and "audit" in logged[0]:
                    assert verdicts == {"accept"}


def test_rule_count_grows_with_flows_not_nodes() -> None:
    small = ruleset_stats(render_fabric(resolve(synthetic_policy(100, 10))))
    many_nodes = ruleset_stats(render_fabric(resolve(synthetic_policy(2000, 10))))
    many_jobs = ruleset_stats(render_fabric(resolve(synthetic_policy(2000, 100))))
    assert small["rules"] == many_nodes["rules"]  # 20x the nodes, same flows: same rules
    assert many_jobs["rules"] > many_nodes["rules"]
    # linear in flows: per extra job, a fixed number of rules (3 flows, in inet and bridge)
    per_job = (many_jobs["rules"] - many_nodes["rules"]) / 90
    assert per_job == 6
    assert many_nodes["elements"] > small["elements"]  # nodes grow the sets, not the rules


def test_networkpolicy_objects_validate_against_kubernetes_schema(policy: Policy) -> None:
    result = NetworkPolicyRenderer().render(policy)
    doc = result.file("networkpolicy.json").json()
    assert doc["kind"] == "List" and len(doc["items"]) == result.stats["objects"] > 7
    for item in doc["items"]:
        kubernetes_validate.validate(item, K8S_VERSION, strict=True)
    names = {i["metadata"]["name"] for i in doc["items"]}
    assert {"rf-default-deny-workload", "rf-admin-ssh-ingress", "rf-admin-ssh-egress"} <= names
    # the external replica is not a pod: storage's egress reaches it as an IP block
    egress = next(i for i in doc["items"] if i["metadata"]["name"] == "rf-checkpoint-replication-egress")
    assert egress["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": "10.77.9.10/32"}}]
    assert "rf-checkpoint-replication-ingress" not in names
    collective = next(i for i in doc["items"] if i["metadata"]["name"] == "rf-train-a-collective-ingress")
    assert collective["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 1024, "endPort": 65535}]


def test_networkpolicy_is_validated_for_real() -> None:
    bad = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "x"},
           "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelecter": {}}]}]}}  # misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def _python_patterns(node: Any) -> Any:
    # The CRD's patterns are Go regular expressions; the one construct Python's re lacks is the
    # Unicode class \\PC ("not a control character"), spelt here as the equivalent negated range.
    if isinstance(node, dict):
        return {k: (v.replace("\\PC", "[^\\x00-\\x1f\\x7f-\\x9f]") if k == "pattern" and isinstance(v, str)
                    else _python_patterns(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_python_patterns(v) for v in node]
    return node


@pytest.fixture(scope="module")
def cilium_schema() -> jsonschema.protocols.Validator:
    crd = yaml.safe_load(CILIUM_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v2")
    schema = _python_patterns(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_cilium_objects_validate_against_crd_schema(policy: Policy,
                                                   cilium_schema: jsonschema.protocols.Validator) -> None:
    doc = CiliumRenderer().render(policy).file("ciliumnetworkpolicy.json").json()
    for item in doc["items"]:
        cilium_schema.validate(item)
        assert item["apiVersion"] == "cilium.io/v2" and item["kind"] == "CiliumNetworkPolicy"
    ssh = next(i for i in doc["items"] if i["metadata"]["name"] == "rf-admin-ssh-ingress")
    assert ssh["spec"]["ingress"][0]["toPorts"] == [{"ports": [{"protocol": "TCP", "port": "22"}]}]
    assert ssh["spec"]["log"] == {"value": "rf:admin-ssh"}
    broken = json.loads(json.dumps(ssh))
    broken["spec"]["ingress"][0]["toPorts"][0]["ports"][0]["protocol"] = "ICMP"
    with pytest.raises(jsonschema.ValidationError):
        cilium_schema.validate(broken)


def test_what_targets_cannot_express_is_reported(policy: Policy) -> None:
    for name in RENDERERS:
        notes = renderer(name).render(policy).unsupported
        assert {n.subject for n in notes} >= {"class:storage", "class:collective", "class:management",
                                              "class:replication"}
    audit = NetworkPolicyRenderer().render(policy, RenderOptions(audit=True))
    assert audit.files == () and any(n.subject == "option:audit" for n in audit.unsupported)
    assert any(n.subject == "option:audit" for n in CiliumRenderer().render(policy, RenderOptions(audit=True))
               .unsupported)
    assert any(n.subject == "denials" for n in NetworkPolicyRenderer().render(policy).unsupported)
    assert not any(n.subject.startswith("option") for n in NftablesRenderer().render(policy,
                                                                                     RenderOptions(audit=True))
                   .unsupported)


def _edited(text: str, old: str, new: str) -> Policy:
    assert old in text
    return parse_policy(text.replace(old, new), "edited.yaml")


def test_dangerous_policies_are_refused(policy: Policy) -> None:
    text = LAB_POLICY.read_text()
    check_policy(policy)  # the lab's own policy is fine
    no_admin = _edited(text, "  - {id: admin-ssh, from: {node: jump}, to: {service: mgmt-ssh}, class: management,\n"
                       '     description: "administration only through the jump host"}\n', "")
    assert any("lock out" in p for p in policy_problems(no_admin))
    anyany = _edited(text, "approved:\n", 'approved:\n  - {id: all, from: {cidr: 0.0.0.0/0}, to: {cidr: 0.0.0.0/0},'
                     ' proto: any, class: management}\n')
    assert any("any to any" in p for p in policy_problems(anyany))
    with pytest.raises(UnsafePolicy, match="not in the target"):
        check_policy(policy, inventory={"worker-0": ["10.77.1.10"]})
    with pytest.raises(UnsafePolicy, match="addresses"):
        check_policy(policy, inventory={n.name: ["192.0.2.1"] for n in policy.nodes})


def test_cli_compile_writes_files_and_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(LAB_POLICY), "--to", "networkpolicy", "-o", str(tmp_path / "np")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["unsupported"] >= 5 and (tmp_path / "np" / "networkpolicy.json").is_file()
    notes = json.loads((tmp_path / "np" / "unsupported.json").read_text())
    assert any(n["subject"] == "class:collective" for n in notes)
    bad = tmp_path / "bad.yaml"
    bad.write_text(LAB_POLICY.read_text().replace("from: {node: jump}, to: {service: mgmt-ssh}",
                                                  "from: {node: jump}, to: {service: mgmt-api}"))
    assert main(["compile", str(bad), "--to", "nftables", "-o", str(tmp_path / "nft")]) == 2
    err = capsys.readouterr().err
    assert "lock out the administrative path" in err and "Traceback" not in err
    assert not (tmp_path / "nft").exists()


def test_unknown_target_is_a_clear_error() -> None:
    with pytest.raises(EnforceError, match="unknown enforcement target"):
        renderer("iptables")
