"""``recommend`` on the seed's three situations: shared links with offload NICs; a dedicated single-tenant
fabric; no offload with class 2 (collective) confidential — and measured beats prior."""

from __future__ import annotations

from typing import Any

from flow_kit import policy_variant
from ringfence.facts.nic import NicCaps, NicNode, capabilities
from ringfence.recommend import Recommendation, measured_costs, recommend

MACSEC_ETHTOOL = "Features for eth0:\nmacsec-hw-offload: on\nesp-hw-offload: off [fixed]\ntls-hw-tx-offload: on\n"
PLAIN_ETHTOOL = "Features for eth0:\nmacsec-hw-offload: off [fixed]\nesp-hw-offload: off [fixed]\n"


def _nics(ethtool: str, nodes: tuple[str, ...] = ("worker-0", "worker-1", "storage", "mgmt", "replica")
          ) -> dict[str, NicCaps]:
    return {n: capabilities(NicNode(node=n, ethtool_k=ethtool)) for n in nodes}


def _collective(rows: list[Recommendation]) -> Recommendation:
    return next(r for r in rows if r.traffic_class == "collective")


def _shared(doc: dict[str, Any]) -> None:
    doc["fabric"] = {"links": "shared"}


def _dedicated(doc: dict[str, Any]) -> None:
    doc["fabric"] = {"links": "dedicated", "owner": "netops@lab", "rationale": "InfiniBand fabric of one tenant"}


def test_shared_links_with_offload_nics_get_macsec_inside_the_budget() -> None:
    rows = recommend(policy_variant(_shared), _nics(MACSEC_ETHTOOL))
    col = _collective(rows)
    assert col.option == "macsec" and col.layer == "macsec" and col.within_budget is True
    assert col.cost.source == "prior" and col.cost.loss_pct == (0, 2)
    assert "macsec offload on every node" in " ".join(col.why)
    assert col.plan[0].startswith("ringfence rollout plan --state ro.json --pair worker-0,worker-1 --layer macsec")
    assert any(c.startswith("wireguard: 40–60 % busbw") for c in col.considered)
    tls = [r for r in rows if r.traffic_class != "collective"]
    assert {r.traffic_class for r in tls} == {"storage", "management", "replication"}
    assert all(r.layer == "tls" for r in tls) and any(r.option == "tls-offload" for r in tls)


def test_a_dedicated_single_tenant_fabric_costs_nothing_and_is_carried_as_an_exception() -> None:
    col = _collective(recommend(policy_variant(_dedicated), _nics(PLAIN_ETHTOOL)))
    assert col.option == "dedicated-fabric" and col.layer is None and col.cost.loss_pct == (0, 0)
    assert "dedicated single-tenant fabric" in " ".join(col.why) and "netops@lab" in " ".join(col.why)
    assert "exception for class:collective" in col.plan[0] and "compensating" in col.plan[0]


def test_no_offload_and_confidential_gradients_mean_host_software_over_budget() -> None:
    rows = recommend(policy_variant(_shared), _nics(PLAIN_ETHTOOL))
    col = _collective(rows)
    assert col.option == "wireguard" and col.cost.loss_pct == (40, 60) and col.within_budget is False
    assert "gradients are confidential by decision of ml-platform-security@lab" in col.why[0]
    assert any("no macsec offload on worker-0, worker-1" in c for c in col.considered)
    assert "expect the canary gate to fail: 40 % > 5 %" in col.plan[1]
    assert all(r.option == "tls" for r in rows if r.traffic_class != "collective")


def test_missing_nic_facts_never_assume_an_offload() -> None:
    col = _collective(recommend(policy_variant(_shared), {}))
    assert col.option != "macsec" and any("no NIC facts for worker-0, worker-1" in c for c in col.considered)


def test_measured_beats_prior_and_says_so() -> None:
    cmp = {"verdict": "pass", "baseline": {"label": "gloo/none"},
           "candidate": {"label": "ringfence/ringfence-transport"},
           "sizes": [{"busbw": {"change_pct": {"estimate": 2.0, "low": 0.5, "high": 4.0}}}]}
    wg = {"verdict": "fail", "baseline": {"label": "gloo/none"}, "candidate": {"label": "gloo/wireguard"},
          "sizes": [{"busbw": {"change_pct": {"estimate": 95.2, "low": 87.1, "high": 97.2}}}]}
    measured = measured_costs([cmp, wg])
    col = _collective(recommend(policy_variant(_shared), _nics(PLAIN_ETHTOOL), measured))
    assert col.option == "ringfence-transport" and col.cost.source == "measured" and col.within_budget is True
    assert "cost from the measured" in " ".join(col.why)
    assert any(c.startswith("wireguard: 87.1–97.2 % busbw (measured") for c in col.considered)


def test_gradients_not_confidential_by_a_named_owner_need_nothing_and_without_owner_are_treated_as_confidential(
) -> None:
    def optional(owner: str) -> Any:
        def change(doc: dict[str, Any]) -> None:
            doc["classes"]["collective"].update({"confidential": False, "decision_owner": owner})
        return change

    owned = _collective(recommend(policy_variant(optional("cto@lab")), {}))
    assert owned.option == "none" and "cto@lab" in owned.why[0]
    unowned = _collective(recommend(policy_variant(optional("")), {}))
    assert unowned.option == "wireguard" and "no decision owner" in unowned.why[0]


def test_nic_outputs_of_ip_link_and_devlink_are_read() -> None:
    caps = capabilities(NicNode(node="n", ip_link="3: macsec0@eth0: ...\n    macsec sci 1 ... offload mac",
                                devlink="pci/0000:08:00.0/1: ... ipsec_crypto enable ipsec_packet disable"))
    assert caps.has("macsec") and caps.has("ipsec") and not caps.has("tls")
    assert not capabilities(NicNode(node="n", ethtool_k="macsec-hw-offload: off [fixed]")).has("macsec")
