"""trace joins the object server's requests and the TLS sidecars' identities to the flow (recorded logs)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from ringfence.policy import Policy, load_policy
from ringfence.trace.model import Trace
from ringfence.trace.reconstruct import FlowSpec, NoSample, load, reconstruct

ROOT = Path(__file__).resolve().parents[2]
W0, W1, STORAGE, AUX = "10.77.1.10", "10.77.1.11", "10.77.2.10", "10.77.1.50"
ID_A, ID_STORE = "spiffe://lab/job/train-a", "spiffe://lab/node/storage"


@pytest.fixture()
def policy() -> Policy:
    return load_policy(ROOT / "examples" / "lab-policy.yaml")


def _ulogd(t: float, point: str, src: str, sport: int, prefix: str = "train-a-storage", label: int = 1) -> str:
    return json.dumps({"dvc": point, "oob.prefix": prefix, "oob.time.sec": int(t), "oob.time.usec": int(t % 1 * 1e6),
                       "raw.label": label, "ip.protocol": 6, "src_port": sport, "dest_port": 8080, "src_ip": src,
                       "dest_ip": STORAGE})


def _obj(t: float, peer: str, port: int | None, result: str = "served", job: str = "train-a",
         identity: str = "-") -> str:
    rec: dict[str, Any] = {"time": t, "peer": peer, "identity": identity, "method": "GET",
                           "path": f"/datasets/{job}/shard-{int(t) % 7}", "job": job, "result": result,
                           "bytes": 131072 if result == "served" else 0}
    if port is not None:
        rec.update(peer_port=port, local=STORAGE if peer not in ("127.0.0.1",) else "127.0.0.1",
                   local_port=8080 if peer != "127.0.0.1" else 18080)
    return json.dumps(rec)


def _write(tmp: Path, files: dict[tuple[str, str], list[str]]) -> list[tuple[str, str, Path]]:
    out = []
    for (point, name), lines in files.items():
        p = tmp / f"{point}.{name}"
        p.write_text("\n".join(lines) + "\n")
        out.append((point, name, p))
    return out


def _conntrack(t: float, src: str, sport: int, event: str = "NEW") -> str:
    return (f"[{t:.6f}]\t    [{event}] tcp      6 120 SYN_SENT src={src} dst={STORAGE} sport={sport} dport=8080 "
            f"[UNREPLIED] src={STORAGE} dst={src} sport=8080 dport={sport} id=7")


def test_a_dataset_read_joins_its_flow_by_community_id(tmp_path: Path, policy: Policy) -> None:
    t = time.time()
    files = _write(tmp_path, {
        ("storage", "ulogd"): [_ulogd(t, "storage", W0, 41000), _ulogd(t + 3, "storage", W0, 41002)],
        ("storage", "conntrack"): [_conntrack(t, W0, 41000), _conntrack(t + 0.5, W0, 41000, "DESTROY")],
        # the same client's next connection (another port) and a request after this one ended: not this flow's
        ("storage", "objects"): [_obj(t + 0.01, W0, 41000), _obj(t + 3.01, W0, 41002), _obj(t + 2.5, W0, 41000)],
    })
    tr = reconstruct(load(files), policy, "allowed", spec=FlowSpec.parse(f"{W0}:41000-{STORAGE}:8080/tcp"))
    [read] = tr.objects
    assert (read.joined, read.result, read.bytes, read.job, read.node, read.line) == \
        ("5-tuple", "served", 131072, "train-a", "storage", 1)
    assert read.path.startswith("/datasets/train-a/") and read.identity is None
    assert any(e.where == "objects storage" and "served 131072 bytes" in e.what for e in tr.timeline)
    assert not any("addresses and time" in n for n in tr.notes)
    # round trip: the document the facts loader validates
    assert Trace.model_validate_json(tr.model_dump_json()) == tr


def test_behind_a_tls_gate_the_read_and_both_identities_come_from_the_sidecars(tmp_path: Path,
                                                                              policy: Policy) -> None:
    t = time.time()
    gate = {"t": t + 0.05, "dir": "in", "node": "storage", "service": "storage-http", "peer": W0,
            "peer_identity": ID_A, "method": "GET", "path": f"/datasets/train-a/shard-{int(t + 0.04) % 7}",
            "result": "allowed", "reason": "job:train-a", "response_bytes": 131100}
    client = {"t": t + 0.06, "dir": "out", "node": "worker-0", "peer": f"{STORAGE}:8080",
              "expected_identity": ID_STORE, "peer_identity": ID_STORE, "method": "GET", "path": gate["path"],
              "result": "allowed", "response_bytes": 131100}
    other = {**gate, "peer": W1, "peer_identity": "spiffe://lab/node/worker-1", "t": t + 0.02}
    files = _write(tmp_path, {
        ("storage", "ulogd"): [_ulogd(t, "storage", W0, 41000)],
        ("storage", "objects"): [_obj(t + 0.04, "127.0.0.1", 50000)],  # the gate forwarded it: a loopback peer
        ("storage", "tls"): [json.dumps(other), json.dumps(gate)],
        ("worker-0", "tls"): [json.dumps(client)],
    })
    tr = reconstruct(load(files), policy, "allowed", objects="served")
    [read] = tr.objects
    assert (read.joined, read.identity, read.path) == ("tls-gate", ID_A, gate["path"])
    assert (tr.src.identity, tr.dst.identity) == (ID_A, ID_STORE)
    assert [(r.direction, r.node, r.identity) for r in tr.tls] == [("in", "storage", ID_A),
                                                                   ("out", "worker-0", ID_STORE)]
    assert any(e.where == "tls storage" and ID_A in e.what for e in tr.timeline)
    assert any("addresses and time" in n for n in tr.notes)


def test_a_gate_that_logs_the_client_port_joins_only_its_own_connection(tmp_path: Path, policy: Policy) -> None:
    """The same client's other connection, nearer in time, is not this flow's: the gate's port decides."""
    t = time.time()
    path = f"/datasets/train-a/shard-{int(t + 0.29) % 7}"  # the object record's path (_obj: from its own time)
    mine = {"t": t + 0.30, "dir": "in", "node": "storage", "service": "storage-http", "peer": W0, "peer_port": 41000,
            "peer_identity": ID_A, "method": "GET", "path": path, "result": "allowed", "reason": "job:train-a",
            "response_bytes": 131100}
    nearer = {**mine, "t": t + 0.01, "peer_port": 41002, "peer_identity": "spiffe://lab/job/train-b",
              "result": "denied"}
    files = _write(tmp_path, {
        ("storage", "ulogd"): [_ulogd(t, "storage", W0, 41000)],
        ("storage", "objects"): [_obj(t + 0.29, "127.0.0.1", 50000)],
        ("storage", "tls"): [json.dumps(nearer), json.dumps(mine)],
    })
    tr = reconstruct(load(files), policy, "allowed", spec=FlowSpec.parse(f"{W0}:41000-{STORAGE}:8080/tcp"))
    assert tr.src.identity == ID_A
    assert [(r.direction, r.peer_port, r.result) for r in tr.tls] == [("in", 41000, "allowed")]
    assert any("joined this flow by its client port" in n for n in tr.notes)
    assert not any("addresses and time" in n for n in tr.notes)


def test_object_sampling_prefers_a_dataset_read_to_a_checkpoint_write(tmp_path: Path, policy: Policy) -> None:
    """``--object served`` is the dataset read storage_flows asks for: a likelier flow (one conntrack saw)
    that carried a checkpoint write is passed over for one that carried a served GET /datasets/…."""
    t = time.time()
    put = json.loads(_obj(t + 0.01, W0, 41000))
    put.update(method="PUT", path="/checkpoints/train-a/rank-0/step-9")
    files = _write(tmp_path, {
        ("storage", "ulogd"): [_ulogd(t, "storage", W0, 41000), _ulogd(t + 1, "storage", W0, 41002)],
        ("storage", "conntrack"): [_conntrack(t, W0, 41000)],
        ("storage", "objects"): [json.dumps(put), _obj(t + 1.01, W0, 41002)],
    })
    tr = reconstruct(load(files), policy, "allowed", objects="served")
    assert (tr.flow.sport, [(o.method, o.path.split("/")[1]) for o in tr.objects]) == (41002, [("GET", "datasets")])
    (tmp_path / "p").mkdir()
    only_put = _write(tmp_path / "p", {("storage", "ulogd"): [_ulogd(t, "storage", W0, 41000)],
                                       ("storage", "objects"): [json.dumps(put)]})
    tr = reconstruct(load(only_put), policy, "allowed", objects="served")  # none read: the write is the answer
    assert [o.method for o in tr.objects] == ["PUT"]


def test_a_log_without_ports_joins_by_address_and_time_only(tmp_path: Path, policy: Policy) -> None:
    t = time.time()
    files = _write(tmp_path, {("storage", "ulogd"): [_ulogd(t, "storage", W0, 41000)],
                              ("storage", "objects"): [_obj(t + 0.01, W0, None), _obj(t + 30, W0, None)]})
    tr = reconstruct(load(files), policy, "allowed")
    assert [o.joined for o in tr.objects] == ["address-time"]
    assert any("not an exact 5-tuple match" in n for n in tr.notes)


def test_object_sampling_picks_the_read_served_or_refused(tmp_path: Path, policy: Policy) -> None:
    t = time.time()
    files = _write(tmp_path, {
        ("storage", "ulogd"): [_ulogd(t, "storage", W0, 41000), _ulogd(t + 1, "storage", W1, 42000),
                               _ulogd(t + 2, "storage", AUX, 43000, "aux-any", 1)],
        ("storage", "objects"): [_obj(t + 0.01, W0, 41000),
                                 _obj(t + 2.01, AUX, 43000, "refused", identity="spiffe://lab/node/aux")],
    })
    tel = load(files)
    served = reconstruct(tel, policy, "allowed", objects="served")
    assert (served.flow.src, [o.result for o in served.objects]) == (W0, ["served"])
    refused = reconstruct(tel, policy, "allowed", objects="refused")
    assert (refused.flow.src, refused.objects[0].result, refused.objects[0].identity) == \
        (AUX, "refused", "spiffe://lab/node/aux")
    plain = reconstruct(tel, policy, "allowed", spec=FlowSpec.parse(f"{W1}:42000-{STORAGE}:8080"))
    assert plain.objects == ()  # no request rode on it
    with pytest.raises(NoSample, match="object request"):
        reconstruct(tel, policy, "allowed", spec=FlowSpec.parse(f"{W1}:*-{STORAGE}:8080"), objects="refused")
    with pytest.raises(NoSample, match="object request"):
        reconstruct(tel, policy, "allowed", spec=FlowSpec.parse(f"{W1}:42000-{STORAGE}:8080"), objects="served")


def test_a_log_trace_does_not_read_is_our_error(tmp_path: Path) -> None:
    from ringfence.errors import InputError

    p = tmp_path / "x.log"
    p.write_text("x\n")
    with pytest.raises(InputError, match="trace reads no tinyproxy log"):
        load([("mgmt", "tinyproxy", p)])
