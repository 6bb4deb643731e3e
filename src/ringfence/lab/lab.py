"""A real miniature training cluster in Linux network namespaces.

Topology (one lab; ``rfXXXX`` is its prefix)::

    rfXXXX-worker-0 ─┐                      ┌─ rfXXXX-storage   (10.77.2.10, object store :8080)
    rfXXXX-worker-1 ─┤ rfXXXX-b-wl  ┌─────┐ ├─ rfXXXX-mgmt      (10.77.3.10, job API :8000, sshd :22)
    rfXXXX-aux      ─┘ 10.77.1.1    │fabric│ ├─ rfXXXX-user      (10.77.4.10)
                                    │routes│ ├─ rfXXXX-jump      (10.77.5.10)
                                    └─────┘ └─ rfXXXX-external  (10.77.9.10, replica sink :9000)

Every bridge lives in the lab's own ``rfXXXX-fabric`` namespace, which routes between the zone
subnets (each bridge's ``.1`` is that zone's gateway); nothing touches the host's network, and two
labs never see each other. The lab starts "as found": plaintext everywhere, no filtering.

Use it as a context manager so it is always torn down::

    with Lab.up(workers=2, jobs=1) as lab:
        lab.capture(8, Path("lab.pcap"))
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import ringfence
from ringfence.errors import RingfenceError
from ringfence.lab import netns, procs, sshd, telemetry, tpm
from ringfence.lab import slurm as sched
from ringfence.lab.capture import run_capture
from ringfence.lab.policy_text import GATEWAY_NODE, GATEWAY_PORT, render_policy
from ringfence.lab.state import (
    DEFAULT_ROOT,
    LabState,
    LabStateError,
    ProcessRecord,
    StatePaths,
    TlsPaths,
    add_namespace,
    add_process,
    create_state,
    forget,
    list_lab_names,
    now_iso,
    pidfile_pids,
    read_state,
    remove_processes,
    set_phase,
    set_tls,
)
from ringfence.lab.status import (
    CaptureResult,
    DownReport,
    JobStatus,
    LabStatus,
    NodeStatus,
    ProcessStatus,
    ServiceStatus,
    TpmStatus,
    ZoneStatus,
)
from ringfence.lab.topology import LabError, Topology, build_topology
from ringfence.observe.flows.events import deploy
from ringfence.targets.interface import Host, Site
from ringfence.targets.lab import NamespaceExecutor
from ringfence.targets.ssh import SshExecutor

if TYPE_CHECKING:
    from ringfence.policy import Policy

_PKG_PARENT = str(Path(ringfence.__file__).resolve().parents[1])
#: the egress gateway's process label (``<node>-tinyproxy``: every lab process is named after its node)
GATEWAY_LABEL = f"{GATEWAY_NODE}-tinyproxy"
TINYPROXY_BIN = "/usr/bin/tinyproxy"


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _listening(pid: int) -> set[int]:
    """TCP ports in LISTEN state in the network namespace of ``pid`` (read from /proc, no traffic)."""
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@dataclass(frozen=True)
class StoppedProcess:
    """A lab process stopped by :meth:`Lab.stop_node`: its record and the TCP ports it listened on."""

    record: ProcessRecord
    ports: frozenset[int]


class Lab:
    """A running lab. Make one with :meth:`up` or find one with :meth:`attach`; end it with :meth:`down`."""

    def __init__(self, topology: Topology, paths: StatePaths) -> None:
        self.topology = topology
        self.paths = paths
        self._marker = f"{paths.directory}/"  # every process we start names a path under it

    # ---------------------------------------------------------------- finding and making labs

    @property
    def name(self) -> str:
        """The lab's name, which is also the prefix of its namespaces and links."""
        return self.topology.prefix

    @staticmethod
    def names(root: Path = DEFAULT_ROOT) -> tuple[str, ...]:
        """Names of every lab with a state file."""
        return list_lab_names(root)

    @classmethod
    def attach(cls, name: str | None = None, *, root: Path = DEFAULT_ROOT) -> Lab:
        """The lab called ``name``; without a name, the only lab there is."""
        if name is None:
            names = list_lab_names(root)
            if not names:
                raise LabError("no lab is running", hint="ringfence lab up")
            if len(names) > 1:
                raise LabError(f"several labs are running: {', '.join(names)}", hint="pass --name")
            name = names[0]
        paths = StatePaths(root, name)
        state = read_state(paths)
        return cls(build_topology(name, state.workers, state.jobs), paths)

    @classmethod
    def up(
        cls,
        workers: int = 2,
        jobs: int = 1,
        name: str | None = None,
        *,
        traffic: bool = True,
        wait: bool = True,
        root: Path = DEFAULT_ROOT,
        timeout: float = 90.0,
        scheduler: bool = True,
        egress_gateway: bool = False,
    ) -> Lab:
        """Build a lab, start its services and (unless ``traffic=False``) its traffic.

        With ``wait``, returns once every traffic class has been seen flowing (see
        :meth:`wait_for_traffic`). On any failure, everything made so far is removed again.
        ``scheduler``: the training ranks run under the lab's Slurm (``sbatch``/``srun``); without it
        they are started directly and no Slurm runs. ``egress_gateway``: also run the egress gateway
        (:meth:`start_egress_gateway`) before the servers, so storage replicates through it from the start.
        """
        netns.require_privileges()
        if scheduler:
            sched.require_slurm()  # the training job runs under Slurm: say so before anything is built
        name = name or cls._fresh_name(root)
        topo = build_topology(name, workers, jobs)  # validates before anything is created
        paths = StatePaths(root, name)
        create_state(paths, LabState(prefix=name, workers=workers, jobs=jobs, created=now_iso(),
                                     scheduler=scheduler))
        lab = cls(topo, paths)
        try:
            lab._build()
            lab.start_telemetry()
            if egress_gateway:
                lab.start_egress_gateway(restart_services=False)
            if scheduler:
                lab.start_scheduler(wait=False)  # the daemons initialise while the servers start
            lab.start_services()
            if scheduler:
                lab.wait_for_scheduler()
            set_phase(paths, "up")
            if traffic:
                lab.start_traffic(wait=wait, timeout=timeout)
        except BaseException:
            lab.down()
            raise
        return lab

    @staticmethod
    def _fresh_name(root: Path) -> str:
        taken = set(list_lab_names(root))
        spaces = netns.list_namespaces()
        for _ in range(100):
            name = f"rf{secrets.token_hex(2)}"
            if name not in taken and not any(ns.startswith(f"{name}-") for ns in spaces):
                return name
        raise LabError("could not find a free lab name", hint="ringfence lab down --all")

    def _build(self) -> None:
        topo = self.topology
        for d in (self.paths.directory, self.paths.pid_dir, self.paths.log_dir, self.paths.status_dir):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        for ns in (topo.fabric_namespace, *(topo.namespace(n) for n in topo.node_names())):
            add_namespace(self.paths, ns)  # recorded first: a crash right after creating still leaves a record
            netns.add_namespace(ns)
        netns.build_fabric(topo)
        sshd.prepare(self.paths.directory / "ssh", topo.address("mgmt"))

    # ---------------------------------------------------------------- processes

    def _spawn(self, node: str, label: str, kind: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        pidfile = self.paths.pid_dir / f"{label}.pid"
        log = self.paths.log_dir / f"{label}.log"
        environ = {"PYTHONPATH": _PKG_PARENT, "PYTHONUNBUFFERED": "1", **(env or {})}
        ns = self.topology.fabric_namespace if node == "fabric" else self.topology.namespace(node)
        pid = procs.spawn(ns, argv, pidfile=pidfile, log=log, env=environ)
        add_process(self.paths, ProcessRecord(pid, label, node, kind, tuple(argv)))
        return pid

    def _agent_argv(self, node: str, agent: str, args: list[str]) -> list[str]:
        status_file = self.paths.status_dir / f"{node}-{agent}.json"
        status_file.unlink(missing_ok=True)  # a restarted agent must not look ready from its predecessor's file
        tls = read_state(self.paths).tls.get(node)
        tls_args = ["--tls-cert", tls.cert, "--tls-key", tls.key, "--tls-ca", tls.ca] if tls else []
        return [sys.executable, "-m", f"ringfence.lab.agents.{agent}", "--status-file", str(status_file),
                *tls_args, *args]

    def _agent(self, node: str, agent: str, kind: str, args: list[str], env: dict[str, str] | None = None) -> int:
        return self._spawn(node, f"{node}-{agent}", kind, self._agent_argv(node, agent, args), env)

    def _scheme(self, node: str) -> str:
        return "https" if node in read_state(self.paths).tls else "http"

    def _stop_kind(self, kinds: set[str]) -> None:
        state = read_state(self.paths)
        pids = {p.pid for p in state.processes if p.kind in kinds}
        _, left = procs.stop(pids, self._marker)
        if left:
            raise LabError(f"processes {sorted(left)} of lab {self.name} did not stop")
        self._forget(pids)

    @property
    def telemetry_dir(self) -> Path:
        """Where the telemetry daemons write, one directory per enforcement point (a node or ``fabric``)."""
        return self.paths.directory / "telemetry"

    def start_telemetry(self) -> None:
        """Start ulogd2 and ``conntrack -E`` in every namespace and dnsmasq in mgmt; wait until DNS answers."""
        telemetry.start(self.topology, self.telemetry_dir,
                        lambda point, label, argv: self._spawn(point, label, "telemetry", argv))
        self._wait_listening({telemetry.DNS_NODE: {53}}, timeout=30)
        dead = [p.label for p in read_state(self.paths).processes if p.kind == "telemetry"
                and not procs.is_alive(p.pid)]
        if dead:
            raise LabError(f"telemetry daemons exited during start-up: {', '.join(dead)}:\n"
                           f"{_log_tail(self._log(dead[0]))}")

    def start_services(self, tls: dict[str, TlsPaths] | None = None) -> None:
        """Start the servers (object store, job API, sshd, replica sink) and wait until they listen.

        ``tls`` maps node names to certificate/key/CA paths; those nodes' HTTP agents then speak TLS
        1.3 with mutual authentication (and clients on those nodes use it too). It is remembered, so
        traffic started later uses the same setting. Servers already running are stopped first.
        """
        if tls is not None:
            set_tls(self.paths, tls)
        self._stop_kind({"service"})
        topo = self.topology
        ssh_dir = sshd.SshMaterial(self.paths.directory / "ssh")
        replica = f"{self._scheme('storage')}://{topo.address('external')}:9000"
        # with the egress gateway running, replication leaves through it (CONNECT), as the policy then approves
        via = ["--replica-proxy", f"{topo.address(GATEWAY_NODE)}:{GATEWAY_PORT}"] if self.egress_gateway else []
        # each job's objects are served to its own ranks only; every access (served or refused) is the object
        # server's telemetry
        owners = [a for j in topo.jobs for a in ("--owner", f"{j.name}={','.join(topo.address(m) for m in j.members)}")]
        refusals = telemetry.point_dir(self.telemetry_dir, "storage") / deploy.OBJECT_LOG
        self._agent("storage", "storage", "service", ["--port", "8080", "--replica-url", replica, *owners,
                                                      "--object-log", str(refusals), *via])
        self._agent("mgmt", "mgmt", "service", ["--port", "8000"])
        self._agent("external", "replica", "service", ["--port", "9000"])
        self._spawn("mgmt", "mgmt-sshd", "service", sshd.sshd_argv(ssh_dir))
        self._wait_listening({"storage": {8080}, "mgmt": {8000, 22}, "external": {9000}}, timeout=30)

    @property
    def egress_gateway(self) -> bool:
        """Whether this lab runs its egress gateway (a recorded ``mgmt-tinyproxy``; ``lab down`` ends it)."""
        return any(p.label == GATEWAY_LABEL for p in read_state(self.paths).processes)

    def start_egress_gateway(self, *, restart_services: bool = True) -> None:
        """Start the lab's egress gateway: tinyproxy on the management node (``GATEWAY_NODE``), its configuration
        rendered from the lab's policy with the gateway in it (:mod:`ringfence.enforce.egress_gateway`), its log
        in that node's telemetry directory. Fails closed: a configuration that cannot be rendered, or a tinyproxy
        that does not listen, is a :class:`LabError` and nothing is left running. With ``restart_services``
        the servers restart so storage replicates through it."""
        from ringfence.enforce.egress_gateway import LOG_FILE, filter_text, tinyproxy_argv, tinyproxy_config
        from ringfence.policy import parse_policy
        from ringfence.policy.egress import GatewayError, find_gateway

        if self.egress_gateway:
            return
        if not Path(TINYPROXY_BIN).exists():
            raise LabError(f"{TINYPROXY_BIN} is missing: the egress gateway cannot run",
                           hint="install tinyproxy-bin (scripts/sysdeps.sh)")
        state = read_state(self.paths)
        text = render_policy(self.topology, {p.node for p in state.processes if p.kind == "sshd"},
                             egress_gateway=True)
        try:
            gw = find_gateway(parse_policy(text, source=f"lab {self.name} with its egress gateway"))
        except GatewayError as exc:
            raise LabError(f"the egress gateway's configuration cannot be rendered: {exc.message}") from exc
        if gw is None:
            raise LabError("the lab's policy names no egress gateway")  # render_policy always names one here
        d = telemetry.point_dir(self.telemetry_dir, gw.node)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        conf, filt = d / "tinyproxy.conf", d / "tinyproxy.filter"
        try:
            filt.write_text(filter_text(gw))
            conf.write_text(tinyproxy_config(gw, log=str(d / LOG_FILE), pidfile=str(d / "tinyproxy.pid"),
                                             filter_file=str(filt)))
        except GatewayError as exc:
            raise LabError(f"the egress gateway's configuration cannot be rendered: {exc.message}") from exc
        pid = self._spawn(gw.node, GATEWAY_LABEL, "gateway", tinyproxy_argv(str(conf)))
        try:
            self._wait_listening({gw.node: {gw.port}}, timeout=15)
        except LabError:
            _, left = procs.stop({pid}, self._marker)  # never left half-started
            self._forget({pid} - left)
            raise
        if restart_services:
            self.start_services()

    def ensure_sshd(self, nodes: list[str]) -> dict[str, Path]:
        """Every node in ``nodes`` runs an sshd (mgmt's own, the others one each, tracked like every lab
        process, so ``lab down`` ends them); returns node → its pinned known_hosts file."""
        base = self.paths.directory / "ssh"
        # from the state, not status(): the fabric's sshd belongs to no node of the topology
        running = {p.label for p in read_state(self.paths).processes if procs.is_alive(p.pid)}
        out: dict[str, Path] = {}
        wait: dict[str, set[int]] = {}
        for node in nodes:
            if node == "mgmt":
                out[node] = sshd.SshMaterial(base).known_hosts
                if "mgmt-sshd" not in running:
                    raise LabError("mgmt's sshd is not running: restart the lab's services")
                continue
            m = sshd.prepare_node(base, node, self.sshd_address(node))
            if f"{node}-sshd" not in running:
                self._spawn(node, f"{node}-sshd", "sshd", sshd.sshd_argv(m))
                wait[node] = {22}
            out[node] = m.known_hosts
        if wait:
            self._wait_listening(wait, timeout=30)
        return out

    def sshd_address(self, node: str) -> str:
        """Where ``node``'s sshd listens: its own address; the fabric's on the jump zone's gateway (the
        fabric has no node address: its management interface faces the administrators)."""
        if node == "fabric":
            return self.topology.zone(self.topology.node("jump").zone).gateway()
        return self.topology.address(node)
    def tpm_paths(self, node: str) -> tpm.TpmPaths:
        """Where ``node``'s software TPM lives (under the lab's directory)."""
        self.topology.namespace(node)  # an unknown node is an error here, not a stray directory
        return tpm.TpmPaths(self.paths.directory / "tpm" / node)

    def ensure_tpm(self, nodes: list[str], *, restart: bool = False) -> dict[str, tpm.TpmPaths]:
        """Every node in ``nodes`` has a swtpm, started on first use (tracked like every lab process, so
        ``lab down`` ends it) and booted; returns node → paths. A TPM that ran and was stopped stays down
        (an unreachable TPM is what attestation must see) unless ``restart``: then it starts and boots again."""
        running = {p.label for n in self.status().nodes for p in n.processes if p.alive}
        out: dict[str, tpm.TpmPaths] = {}
        started: list[str] = []
        for node in nodes:
            p = self.tpm_paths(node)
            out[node] = p
            if f"{node}-swtpm" in running or (p.event_log.exists() and not restart):
                continue
            for d in (p.state, p.work):
                d.mkdir(parents=True, exist_ok=True, mode=0o700)
            p.socket.unlink(missing_ok=True)  # a stale socket must not look like a started TPM
            self._spawn(node, f"{node}-swtpm", "tpm", tpm.swtpm_argv(p))
            started.append(node)
        deadline = time.monotonic() + 30
        for node in started:  # observed, not slept: the control socket is made after the data socket
            while not out[node].ctrl.exists():
                dead = [r for r in read_state(self.paths).processes
                        if r.label == f"{node}-swtpm" and not procs.is_alive(r.pid)]
                if dead or time.monotonic() > deadline:
                    raise LabError(f"{node}'s swtpm did not start:\n{_log_tail(self._log(f'{node}-swtpm'))}")
                time.sleep(0.02)
            tpm.boot(out[node])  # a fresh swtpm starts with PCRs reset (startup-clear): a boot
        return out

    def reboot_tpm(self, node: str, *, replace: dict[str, Path] | None = None,
                   extra: tuple[tpm.Measured, ...] = ()) -> None:
        """Power-cycle ``node``'s TPM and boot it again, measuring ``replace``'s files in place of the
        stack's (a changed binary) and ``extra`` events after it."""
        tpm.boot(self.ensure_tpm([node], restart=True)[node], replace=replace, reset=True, extra=extra)

    def stop_tpm(self, node: str) -> None:
        """Stop ``node``'s swtpm (its TPM becomes unreachable; its state is kept for a restart)."""
        state = read_state(self.paths)
        pids = {p.pid for p in state.processes if p.label == f"{node}-swtpm"}
        _, left = procs.stop(pids, self._marker)
        if left:
            raise LabError(f"{node}'s swtpm {sorted(left)} did not stop")
        self._forget(pids)

    def fabric_executor(self) -> NamespaceExecutor:
        """An executor in the lab's fabric namespace, where its zones are bridged and routed."""
        return NamespaceExecutor("fabric", self.topology.fabric_namespace)
    @property
    def slurm(self) -> sched.SlurmPaths:
        """Where this lab's Slurm keeps its configuration, key, sockets and state."""
        return sched.SlurmPaths(self.paths.directory / "slurm")

    def start_scheduler(self, *, wait: bool = True) -> None:
        """Start the lab's Slurm: munged and slurmctld on mgmt, one ``slurmd -N NODE`` on every worker.

        With ``wait``, returns once every node has registered (:meth:`wait_for_scheduler`).
        """
        topo, paths = self.topology, self.slurm
        sched.prepare(topo, paths, self.paths.log_dir)
        self._spawn("mgmt", "mgmt-munged", "scheduler", sched.munged_argv(paths, self.paths.log_dir))
        deadline = time.monotonic() + 10
        while not paths.munge_socket.exists():
            if time.monotonic() > deadline:
                raise LabError(f"munged did not create its socket:\n{_log_tail(self._log('mgmt-munged'))}")
            time.sleep(0.02)
        self._spawn("mgmt", "mgmt-slurmctld", "scheduler", sched.slurmctld_argv(paths))
        for w in self._workers():
            self._spawn(w, f"{w}-slurmd", "scheduler", sched.slurmd_argv(paths, w))
        if wait:
            self.wait_for_scheduler()

    def _workers(self) -> list[str]:
        return [n for n in self.topology.node_names() if n.startswith("worker-")]

    def wait_for_scheduler(self) -> None:
        """Block until slurmctld and every slurmd listen and every node has registered with the controller
        (a job submitted then is scheduled at once)."""
        workers = self._workers()
        self._wait_listening({"mgmt": {sched.CTLD_PORT}, **{w: {sched.SLURMD_PORT} for w in workers}}, timeout=30)
        sched.wait_nodes_ready(self.topology.namespace("mgmt"), self.slurm, workers)

    def squeue_json(self) -> str:
        """``squeue --json`` as run in the management node's namespace (the lab's controller)."""
        return sched.run_client(self.topology.namespace("mgmt"), ["squeue", "--json"], self.slurm)

    def stop_services(self) -> None:
        """Stop the servers."""
        self._stop_kind({"service"})

    def stop_node(self, node: str, kinds: tuple[str, ...] = ("service", "scheduler")) -> tuple[StoppedProcess, ...]:
        """Stop the processes of ``kinds`` the lab runs on ``node`` (by their recorded pids), as if that node
        failed; returns what :meth:`restart` needs to start them again."""
        state = read_state(self.paths)
        mine = [p for p in state.processes if p.node == node and p.kind in kinds and procs.is_alive(p.pid)]
        stopped = tuple(StoppedProcess(p, frozenset(_listening(p.pid))) for p in mine)
        _, left = procs.stop({p.pid for p in mine}, self._marker)
        if left:
            raise LabError(f"processes {sorted(left)} of lab {self.name} on {node} did not stop")
        self._forget({p.pid for p in mine})
        return stopped

    def restart(self, stopped: tuple[StoppedProcess, ...], timeout: float = 30.0) -> tuple[int, ...]:
        """Start again what :meth:`stop_node` stopped (same node, label, kind, command line), and wait until
        each listens where it listened before; returns the new pids."""
        pids = tuple(self._spawn(s.record.node, s.record.label, s.record.kind, list(s.record.argv)) for s in stopped)
        wanted: dict[str, set[int]] = {}
        for s in stopped:
            wanted.setdefault(s.record.node, set()).update(s.ports)
        self._wait_listening({n: p for n, p in wanted.items() if p}, timeout=timeout)
        return pids

    def _wait_listening(self, wanted: dict[str, set[int]], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        missing: dict[str, set[int]] = dict(wanted)
        while missing and time.monotonic() < deadline:
            state = read_state(self.paths)
            for node in list(missing):
                listening: set[int] = set()
                for p in state.processes:
                    if p.node != node:
                        continue
                    if not procs.is_alive(p.pid):
                        raise LabError(f"{p.label} exited during start-up:\n{_log_tail(self._log(p.label))}")
                    listening |= _listening(p.pid)
                if missing[node] <= listening:
                    del missing[node]
            if missing:
                time.sleep(0.1)
        if missing:
            raise LabError(f"services did not start listening within {timeout:.0f}s: {missing}")

    def _log(self, label: str) -> Path:
        return self.paths.log_dir / f"{label}.log"

    def start_traffic(self, *, wait: bool = True, timeout: float = 90.0) -> None:
        """Start the clients: all-reduce ranks, job submissions, admin ssh, telemetry and lateral attempts."""
        self._stop_kind({"traffic"})
        topo = self.topology
        mgmt = f"{topo.address('mgmt')}:8000"
        # the workers name storage and mgmt: each resolves them once through the lab's dnsmasq
        named = {n: telemetry.dns_name(topo, n) for n in ("storage", "mgmt")}
        fallback = [a for n, name in named.items() for a in ("--fallback-address", f"{name}={topo.address(n)}")]
        direct = not read_state(self.paths).scheduler
        for job in topo.jobs:
            if direct:  # no scheduler: each rank started in its node's namespace
                master = topo.address(job.members[0])
                for rank, node in enumerate(job.members):
                    self._agent(
                        node, "worker", "traffic",
                        ["--job", job.name, "--rank", str(rank), "--world", str(len(job.members)),
                         "--master-addr", master, "--master-port", str(job.master_port),
                         "--storage", f"{named['storage']}:8080", "--mgmt", f"{named['mgmt']}:8000", *fallback],
                        env={"GLOO_SOCKET_IFNAME": topo.interface(node), "OMP_NUM_THREADS": "1"},
                    )
                continue
            self._submit_job(job.name, job.members, job.master_port, f"{named['storage']}:8080",
                             f"{named['mgmt']}:8000", fallback)
        self._agent("user", "user", "traffic", ["--mgmt", mgmt])
        ssh_dir = sshd.SshMaterial(self.paths.directory / "ssh")
        self._agent("jump", "jump", "traffic",
                    ["--target", topo.address("mgmt"), "--user", sshd.LOGIN_USER, "--key", str(ssh_dir.admin_key),
                     "--known-hosts", str(ssh_dir.known_hosts)])
        self._agent("aux", "aux", "traffic",
                    ["--mgmt", mgmt, "--storage", f"{named['storage']}:8080", "--ssh", f"{topo.address('mgmt')}:22",
                     *fallback[:2]])
        if wait:
            self.wait_for_traffic(timeout)

    def _submit_job(self, job: str, members: tuple[str, ...], port: int, storage: str, mgmt: str,
                    extra: list[str] | None = None) -> None:
        """Submit one training job to the lab's Slurm (sbatch, whose script sruns one rank per member), then
        record each rank once its pid file appears (the rank writes it, then execs the worker agent)."""
        topo, paths = self.topology, self.slurm
        master = topo.address(members[0])
        ranks: dict[str, tuple[list[str], dict[str, str], Path]] = {}
        for rank, node in enumerate(members):
            argv = self._agent_argv(node, "worker", [
                "--job", job, "--rank", str(rank), "--world", str(len(members)), "--master-addr", master,
                "--master-port", str(port), "--storage", storage, "--mgmt", mgmt, *(extra or [])])
            env = {"PYTHONPATH": _PKG_PARENT, "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": topo.interface(node),
                   "OMP_NUM_THREADS": "1"}
            pidfile = self.paths.pid_dir / f"{node}-worker.pid"  # every worker is in one job (topology)
            pidfile.unlink(missing_ok=True)
            ranks[node] = (argv, env, pidfile)
        sched.write_job(paths, job, ranks)
        sched.run_client(topo.namespace("mgmt"), sched.sbatch_argv(paths, job, members, self.paths.log_dir), paths)
        pids = sched.rank_pids(job, {n: r[2] for n, r in ranks.items()}, self._log("slurmctld"))
        for node, pid in pids.items():
            add_process(self.paths, ProcessRecord(pid, f"{node}-worker", node, "traffic", tuple(ranks[node][0])))

    def stop_traffic(self) -> None:
        """Stop every client (the ranks end, and with them their Slurm jobs)."""
        self._stop_kind({"traffic"})

    def agent_status(self) -> dict[str, dict[str, Any]]:
        """Every agent's latest status file (``<node>-<agent>`` → counters, readiness, last error)."""
        out: dict[str, dict[str, Any]] = {}
        for f in sorted(self.paths.status_dir.glob("*.json")):
            try:
                out[f.stem] = json.loads(f.read_text())
            except (OSError, ValueError):
                continue  # being replaced right now; the next read sees the new one
        return out

    def _traffic_gaps(self) -> list[str]:
        st = self.agent_status()

        def count(agent: str, counter: str) -> int:
            return int(st.get(agent, {}).get("counters", {}).get(counter, 0))

        gaps = [f"{w}: no all-reduce step" for j in self.topology.jobs for w in j.members
                if count(f"{w}-worker", "steps") < 1]
        gaps += [f"{w}: no progress report" for j in self.topology.jobs for w in j.members
                 if count(f"{w}-worker", "reports") < 1]
        checks = [("storage-storage", "replicated", "no checkpoint replicated to external"),
                  ("user-user", "jobs_submitted", "no job submitted"),
                  ("jump-jump", "ssh_ok", "no admin ssh session"),
                  ("aux-aux", "metrics_sent", "no telemetry")]
        gaps += [f"{a.split('-')[0]}: {why}" for a, c, why in checks if count(a, c) < 1]
        return gaps

    def wait_for_traffic(self, timeout: float = 90.0) -> None:
        """Block until all four classes have flowed at least once; :class:`LabError` with the reasons otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            gaps = self._traffic_gaps()
            if not gaps:
                return
            state = read_state(self.paths)
            dead = [p for p in state.processes if not procs.is_alive(p.pid)]
            if dead or time.monotonic() > deadline:
                st = self.agent_status()
                errors = {k: v.get("last_error") for k, v in st.items() if v.get("last_error")}
                logs = "\n".join(f"--- {p.label} exited:\n{_log_tail(self._log(p.label))}" for p in dead)
                raise LabError(f"traffic of lab {self.name} is not flowing: {'; '.join(gaps)}"
                               f"{'; errors: ' + str(errors) if errors else ''}{chr(10) + logs if logs else ''}")
            time.sleep(0.2)

    # ---------------------------------------------------------------- using a lab

    def executor(self, node: str) -> NamespaceExecutor:
        """An executor that runs commands inside ``node``'s namespace."""
        return NamespaceExecutor(node, self.topology.namespace(node))

    def site(self) -> Site:
        """The lab as a site: every node a host behind its namespace executor (what actions are written against).

        Modules are started with this interpreter and this checkout on ``PYTHONPATH``: the namespaces
        share the file system, so the code the controller runs is the code the nodes run.
        """
        env = {"PYTHONPATH": str(Path(ringfence.__file__).resolve().parents[1]), **sched.client_env(self.slurm)}
        hosts = {
            n: Host(n, self.topology.address(n), self.executor(n), python=(sys.executable,), env=env,
                    interface=str(self.topology.interface(n)))
            for n in self.topology.node_names()
        }
        return Site(self.name, "lab", hosts)

    def workers_alive(self) -> bool:
        """Whether every training rank (``<node>-worker``) of the lab still runs."""
        return all(p.alive for n in self.status().nodes for p in n.processes if p.label.endswith("-worker"))

    def policy(self) -> Policy:
        """The running lab's policy, parsed."""
        from ringfence.policy import parse_policy

        return parse_policy(self.policy_yaml(), source=f"lab {self.name}")

    def ssh_executor(self, source: str = "jump", target: str = "mgmt") -> SshExecutor:
        """An OpenSSH executor reaching ``target``'s sshd from ``source``'s namespace with the admin key."""
        if target != "mgmt":
            raise LabError(f"only mgmt runs sshd in the lab, not {target!r}")
        m = sshd.SshMaterial(self.paths.directory / "ssh")
        return SshExecutor(self.topology.address(target), user=sshd.LOGIN_USER, key=m.admin_key,
                           known_hosts=m.known_hosts, name=target,
                           prefix=("ip", "netns", "exec", self.topology.namespace(source)))

    def capture(self, seconds: float, out_path: Path, *, snaplen: int = 256) -> CaptureResult:
        """Capture every packet entering the fabric from any node for ``seconds``, into ONE pcap at ``out_path``.

        One tcpdump per fabric-side port, inbound only, merged by time with ``mergecap``: each
        packet is recorded exactly once, where it left its sender — bridged (same-zone) and routed
        traffic alike. ``snaplen`` bytes per packet are kept (0: whole packets).
        """
        topo = self.topology
        ports = tuple(topo.port(n) for n in topo.node_names())
        return run_capture(
            ports, seconds, Path(out_path), snaplen=snaplen,
            work_dir=self.paths.directory / "capture", log_dir=self.paths.log_dir,
            spawn=lambda label, argv: self._spawn("fabric", label, "capture", argv),
            stop=lambda pids: self._stop_capture(pids),
        )

    def _stop_capture(self, pids: set[int]) -> None:
        procs.stop(pids, self._marker)
        self._forget(pids)

    def _forget(self, pids: set[int]) -> None:
        """Drop stopped processes from the record, and their pid files, so down() sees nothing stale."""
        for rec in read_state(self.paths).processes:
            if rec.pid in pids:
                (self.paths.pid_dir / f"{rec.label}.pid").unlink(missing_ok=True)
        remove_processes(self.paths, pids)

    def policy_yaml(self) -> str:
        """The as-found policy of this lab (shape of ``examples/lab-policy.yaml``)."""
        state = read_state(self.paths)
        return render_policy(self.topology, {p.node for p in state.processes if p.kind == "sshd"},
                             egress_gateway=any(p.label == GATEWAY_LABEL for p in state.processes),
                             slurm=state.scheduler)

    def status(self) -> LabStatus:
        """A snapshot: namespaces present, processes alive, ports listening."""
        state = read_state(self.paths)
        topo = self.topology
        present = netns.list_namespaces()
        alive = {p.pid: procs.is_ours(p.pid, self._marker) for p in state.processes}
        nodes = []
        for n in topo.nodes:
            mine = [p for p in state.processes if p.node == n.name]
            listening: set[int] = set()
            for p in mine:
                if alive[p.pid]:
                    listening |= _listening(p.pid)
            services = tuple(
                ServiceStatus(s.name, s.port, "tcp", s.traffic_class, s.application, s.admin,
                              s.application == "http" and n.name in state.tls, s.port in listening)
                for s in topo.services if s.node == n.name
            )
            nodes.append(NodeStatus(
                name=n.name, namespace=topo.namespace(n.name), zone=n.zone, interface=topo.interface(n.name),
                addresses=(n.address,), gateway=topo.zone(n.zone).gateway(), roles=n.roles, identity=n.identity,
                present=topo.namespace(n.name) in present, services=services,
                processes=tuple(ProcessStatus(p.label, p.pid, p.kind, alive[p.pid]) for p in mine),
                tpm=TpmStatus(self.tpm_paths(n.name).tcti,
                              any(alive[p.pid] for p in mine if p.label == f"{n.name}-swtpm")),
            ))
        return LabStatus(
            name=self.name, phase=state.phase, created=state.created, fabric_namespace=topo.fabric_namespace,
            state_file=self.paths.state_file, directory=self.paths.directory, workers=topo.workers,
            zones=tuple(ZoneStatus(z.name, z.subnet, topo.bridge(z.name), z.gateway(), z.trust) for z in topo.zones),
            nodes=tuple(nodes),
            jobs=tuple(JobStatus(j.name, j.members, topo.address(j.members[0]), j.master_port) for j in topo.jobs),
            traffic_running=any(alive[p.pid] for p in state.processes if p.kind == "traffic"),
        )

    # ---------------------------------------------------------------- tearing down

    def down(self) -> DownReport:
        """Stop every recorded process, delete every namespace (and with it every link), forget the lab."""
        return down_lab(self.name, root=self.paths.root)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()


def down_lab(name: str, *, root: Path = DEFAULT_ROOT) -> DownReport:
    """Remove lab ``name`` completely, from whatever its state file and pid files record.

    Works on a half-built lab, after the creating process was killed, and when some of its parts
    were already deleted by hand. Only processes recorded by this lab are signalled.
    """
    paths = StatePaths(root, name)
    marker = f"{paths.directory}/"
    # shared SSH connections this process holds through the lab's namespaces (``lab hosts`` inventories) end
    # first: otherwise each would keep a deleted namespace alive until its ControlPersist ran out
    ssh = sys.modules.get("ringfence.targets.ssh")
    if ssh is not None:
        ssh.close_masters(through=f"{name}-")
    try:
        state: LabState | None = read_state(paths)
        set_phase(paths, "deleting")
    except LabStateError:
        state = None  # a damaged record: fall back to pid files and the namespace names
    except LabError:
        if not paths.directory.exists():
            raise
        state = None
    records = state.processes if state else ()
    # The encryption layers' daemons first (sidecars, wireguard-go): they run in this lab's namespaces but
    # are recorded by the layers, under their own directory, which their command lines name.
    layer_marker, layer_pids = _layer_processes(name)
    ended, left = procs.stop(layer_pids, layer_marker)
    by_kind = [{p.pid for p in records if p.kind not in ("service", "scheduler")},
               {p.pid for p in records if p.kind == "scheduler"}, {p.pid for p in records if p.kind == "service"}]
    by_kind[2] |= set(pidfile_pids(paths)) - by_kind[0] - by_kind[1]
    stopped: list[int] = sorted(ended)
    leftovers: set[int] = set(left)
    spaces = set(state.namespaces if state else ())
    spaces |= {ns for ns in netns.list_namespaces() if ns.startswith(f"{name}-")}
    for i, group in enumerate(by_kind):  # clients first, so servers do not log a storm of broken connections
        ended, left = procs.stop(group, marker)
        leftovers |= left
        stopped += sorted(ended)
        if i == 0:  # the ranks have ended: their Slurm step daemons finish before the scheduler stops
            stopped += sorted(sched.end_job_steps(spaces, marker))
    # processes we did not record keep a deleted namespace alive. One whose command line names this lab's
    # directory (or its layers') is ours: a spawn still in flight when its creator was killed, whose wrapper
    # wrote its pid file after we read them (a ulogd was left so once) — it is stopped. Any other is
    # reported, never signalled.
    strays = {pid for ns in spaces for pid in netns.namespace_pids(ns) if procs.is_alive(pid)}
    for mark in (marker, layer_marker):
        ended, left = procs.stop(strays, mark)
        stopped += sorted(ended)
        leftovers |= left
        strays -= ended
    deleted = tuple(sorted(ns for ns in spaces if netns.delete_namespace(ns)))
    telemetry.remove_resolvers(spaces)
    if leftovers:
        raise LabError(f"lab {name}: processes {sorted(leftovers)} did not stop; nothing else was kept back",
                       hint=f"check them, then run: ringfence lab down --name {name}")
    try:
        shutil.rmtree(paths.directory, ignore_errors=False)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise LabError(f"cannot remove {paths.directory}: {exc.strerror or exc}") from exc
    forget(paths)
    shutil.rmtree(Path(layer_marker), ignore_errors=True)  # the layers' record and files of this lab
    return DownReport(name, tuple(stopped), deleted, tuple(sorted(strays - leftovers)))


def _layer_processes(name: str) -> tuple[str, set[int]]:
    """(marker, pids) of every process an encryption layer started in lab ``name``: those its record lists
    and those whose pid file exists on a node (a layer killed between starting a daemon and recording it
    leaves only the pid file)."""
    from ringfence.secure.layers.runtime import SECURE_ROOT, StateStore

    store = StateStore(name, root=SECURE_ROOT)
    pids: set[int] = set()
    try:
        pids |= {p.pid for p in store.read().processes}
    except RingfenceError:
        pass  # a damaged record: the pid files below still name every daemon that got started
    for pidfile in store.directory.glob("hosts/*/pids/*.pid"):
        text = pidfile.read_text(errors="replace").strip()
        if text.isdigit():
            pids.add(int(text))
    return store.marker, pids


def down_all(*, root: Path = DEFAULT_ROOT) -> tuple[DownReport, ...]:
    """Remove every lab that has a state file (and every namespace carrying such a lab's prefix)."""
    return tuple(down_lab(n, root=root) for n in list_lab_names(root))


__all__ = ["Lab", "StoppedProcess", "down_all", "down_lab"]
