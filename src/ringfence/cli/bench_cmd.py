"""``ringfence bench allreduce|import|compare|show``: measure, import, gate."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringfence.errors import InputError

if TYPE_CHECKING:
    from ringfence.bench.compare import GateBudget
    from ringfence.bench.driver import Progress
    from ringfence.bench.launchers import Launcher
    from ringfence.bench.run import BenchRun
    from ringfence.lab import Lab
    from ringfence.targets.interface import Site

#: the job the benchmark's ranks are issued transport certificates for (spiffe://<cluster>/job/bench/rank/<r>)
BENCH_JOB = "bench"


def _progress_printer() -> Any:
    from ringfence.bench.compare import human_size

    def show(p: Progress) -> None:
        r = p.result
        print(f"repeat {p.repeat + 1}/{p.repeats}  [{p.done}/{p.total}]  {human_size(r.size):>8}  "
              f"busbw {r.busbw:8.3f} GB/s  p99 {r.p99_us or 0:10.0f} µs  wrong {r.wrong}", file=sys.stderr, flush=True)
    return show


def _table(run: BenchRun) -> str:
    from ringfence.bench.compare import human_size

    c = run.config
    lines = [f"{c.tool} {c.collective} {c.dtype} n={c.world_size} on {','.join(c.nodes)}  "
             f"{c.backend}/{c.layer}  {len(run.repeats)} repeat(s)  {run.config_hash[:19]}…",
             f"{'size':>9}  {'repeat':>6}  {'time µs':>10}  {'algbw':>8}  {'busbw':>8}  {'p50 µs':>10}  "
             f"{'p99 µs':>10}  {'cv %':>6}  wrong"]
    for k, rep in enumerate(run.repeats, start=1):
        for r in rep.results:
            p50 = f"{r.p50_us:10.0f}" if r.p50_us is not None else f"{'—':>10}"
            p99 = f"{r.p99_us:10.0f}" if r.p99_us is not None else f"{'—':>10}"
            cv = f"{r.cv * 100:6.1f}" if r.cv is not None else f"{'—':>6}"
            lines.append(f"{human_size(r.size):>9}  {k:>6}  {r.time_us:10.1f}  {r.algbw:8.3f}  {r.busbw:8.3f}  "
                         f"{p50}  {p99}  {cv}  {'N/A' if r.wrong is None else r.wrong}")
    lines += [f"note: {n}" for n in run.notes]
    return "\n".join(lines)


def _emit_run(run: BenchRun, output: str | None) -> None:
    from ringfence.bench.run import run_to_dict, save_run

    if output:
        save_run(run, output)
        print(f"wrote {output}", file=sys.stderr)
    else:
        sys.stdout.write(json.dumps(run_to_dict(run), indent=1) + "\n")


def _launcher(args: argparse.Namespace, site: Site | None) -> Launcher:
    """The ``--launcher`` asked for; srun submits through ``--submit-host``, a host of the site."""
    from ringfence.bench.launchers import SrunLauncher, make_launcher

    if args.launcher != "srun":
        if args.submit_host or args.partition:
            raise InputError("--submit-host", "only the srun launcher submits to Slurm")
        return make_launcher(args.launcher)
    if site is None:
        raise InputError("--launcher", "srun needs a site with a Slurm submit host (--target lab or ssh)")
    name = args.submit_host or "mgmt"
    if name not in site.hosts:
        raise InputError("--submit-host", f"{site.kind} site {site.name} has no host {name!r} to run srun on "
                         f"(it has: {', '.join(sorted(site.hosts))})")
    return SrunLauncher(site.host(name), partition=args.partition)


def _allreduce(args: argparse.Namespace) -> int:
    from ringfence.bench.compare import human_size
    from ringfence.bench.driver import DEFAULT_SIZES, BenchSpec, parse_sizes, run_allreduce
    from ringfence.bench.placement import local_ranks, site_ranks, split_interfaces
    from ringfence.bench.run import load_run

    nodes = [n for n in args.nodes.split(",") if n]
    if len(nodes) < 2 or len(set(nodes)) != len(nodes):
        raise InputError("--nodes", "name at least two distinct nodes (one rank each)")
    try:
        sizes = parse_sizes(args.sizes) if args.sizes else DEFAULT_SIZES
    except ValueError as exc:
        raise InputError("--sizes", str(exc)) from exc
    ifaces = split_interfaces(args.iface, nodes)
    site: Site | None = None
    env: dict[str, str] = {}
    if args.target == "local":
        ranks = local_ranks(nodes, ifaces)
    elif args.target == "ssh":
        # ranks launched over SSH on the inventory's hosts, exactly as on the lab's namespaces
        if not args.hosts:
            raise InputError("--hosts", "--target ssh needs the hosts inventory (ringfence lab hosts -o hosts.yaml)")
        from ringfence.targets.hosts import load_hosts, ssh_site

        site = ssh_site(load_hosts(args.hosts))
        ranks = site_ranks(site, nodes, ifaces)
    else:
        from ringfence.lab import Lab

        lab = Lab.attach(args.lab)
        site = lab.site()
        ranks = site_ranks(site, nodes, ifaces)
        if args.backend == "ringfence":
            env = _lab_transport_env(lab, len(nodes), args.timeout)
    launcher = _launcher(args, site)
    spec = BenchSpec(sizes=sizes, dtype=args.dtype, backend=args.backend, warmup=args.warmup, iterations=args.iters,
                     repeats=args.repeats, layer=args.layer, device=args.device, plugins=tuple(args.plugin),
                     timeout_s=args.timeout, env=env)
    print(f"all-reduce {args.backend}/{args.layer} on {','.join(nodes)} ({launcher.name}): {len(sizes)} sizes "
          f"{human_size(sizes[0])}..{human_size(sizes[-1])}, {args.repeats} repeat(s)", file=sys.stderr)
    run = run_allreduce(ranks, spec, launcher=launcher, progress=_progress_printer())
    if args.append:
        if not args.output or not Path(args.output).exists():
            raise InputError("--append", "needs an existing --output run file to add repeats to")
        run = load_run(args.output).merged(run)
    print(_table(run), file=sys.stderr)
    _emit_run(run, args.output)
    return 1 if run.wrong_total() else 0


def _lab_transport_env(lab: Lab, world: int, timeout: float) -> dict[str, str]:
    """The ranks' transport credentials, issued from the lab's cluster PKI unless the caller gave some.

    The CA is the one the lab's TLS and IPsec layers use (created for the lab policy's cluster when
    none exists yet); every run gets fresh rank keys, valid for the run's timeout and an hour more.
    """
    import os
    from datetime import timedelta

    from ringfence.secure.layers.tls_run import pki_dir
    from ringfence.secure.transport.provision import provisioned, rank_credentials

    if provisioned(dict(os.environ)):
        return {}
    pdir = pki_dir(lab.name)
    env = rank_credentials(pdir, lab.policy().cluster, BENCH_JOB, world,
                           lifetime=timedelta(seconds=timeout) + timedelta(hours=1))
    print(f"issued transport certificates for {BENCH_JOB} ranks 0..{world - 1} from the lab's CA in {pdir / 'ca'}",
          file=sys.stderr)
    return env


def _import(args: argparse.Namespace) -> int:
    from ringfence.bench.nccl_tests import import_nccl_tests

    report = import_nccl_tests(args.file)
    run = report.to_run(args.placement, layer=args.layer, backend=args.backend)
    print(_table(run), file=sys.stderr)
    if report.avg_busbw is not None:
        print(f"nccl-tests footer: Avg bus bandwidth {report.avg_busbw:g} GB/s", file=sys.stderr)
    _emit_run(run, args.output)
    return 0


def _load_any(path: str, placement: str) -> BenchRun:
    """A ringfence run file, or nccl-tests output (text or -J) imported on the fly."""
    from ringfence.bench.nccl_tests import import_nccl_tests
    from ringfence.bench.run import RunFileError, load_run

    try:
        head = Path(path).read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError as exc:
        raise RunFileError(path, f"cannot read: {exc.strerror or exc}") from exc
    if '"ringfence.bench.run/' in head:
        return load_run(path)
    return import_nccl_tests(path).to_run("in-place" if placement == "in-place" else "out-of-place")


def _budget(args: argparse.Namespace) -> GateBudget:
    from ringfence.bench.compare import GateBudget
    from ringfence.bench.driver import parse_size
    from ringfence.policy import load_policy

    base = GateBudget.from_policy(load_policy(args.policy).budget) if args.policy else GateBudget()
    over: dict[str, Any] = {}
    if args.busbw_loss is not None:
        over["busbw_loss_pct"] = args.busbw_loss
    if args.p99_growth is not None:
        over["p99_growth_pct"] = args.p99_growth
    if args.min_repeats is not None:
        over["min_repeats"] = args.min_repeats
    if args.confidence is not None:
        if not 0.5 <= args.confidence < 1:
            raise InputError("--confidence", "must be in [0.5, 1)")
        over["confidence"] = args.confidence
    if args.sizes:
        try:
            over["sizes"] = tuple(parse_size(s) for s in args.sizes.split(","))
        except ValueError as exc:
            raise InputError("--sizes", str(exc)) from exc
    return GateBudget(**{**base.to_dict(), **over})


def _compare(args: argparse.Namespace) -> int:
    from ringfence.atomic import write_atomic
    from ringfence.bench.compare import GateVerdict, compare_runs
    from ringfence.bench.plot import svg_chart

    baseline = _load_any(args.baseline, args.placement)
    candidate = _load_any(args.candidate, args.placement)
    result = compare_runs(baseline, candidate, _budget(args))
    if args.charts:
        out = Path(args.charts)
        for metric in ("busbw", "p99"):
            write_atomic(out / f"{metric}.svg", svg_chart(baseline, candidate, metric).encode())
        print(f"wrote {out}/busbw.svg and {out}/p99.svg", file=sys.stderr)
    # The JSON form is the bench facts file `assess --bench` reads: tagged, and dated for its maximum age.
    doc = {"format": "ringfence-bench-compare/1", "taken": datetime.now(UTC).isoformat(), **result.to_dict()}
    if args.evidence:
        from ringfence.evidence import EvidenceStore, RecordKind
        from ringfence.evidence.interface import sha256_file

        EvidenceStore.open(Path(args.evidence)).append(
            RecordKind.OBSERVATION, source="bench.compare", subject=f"{args.baseline} vs {args.candidate}", data=doc,
            inputs={Path(f).name: sha256_file(f) for f in (args.baseline, args.candidate)})
    text = json.dumps(doc, indent=1) + "\n" if args.json else result.summary() + "\n"
    if args.output:
        write_atomic(args.output, text.encode())
        print(result.summary().splitlines()[0], file=sys.stderr)
    else:
        sys.stdout.write(text)
    # Only a pass exits 0: an inconclusive answer must not let a script roll out.
    return 0 if result.verdict is GateVerdict.PASS else 1


def _show(args: argparse.Namespace) -> int:
    print(_table(_load_any(args.run, "out-of-place")))
    return 0


def register(sub: Any) -> None:
    """Add the ``bench`` verb."""
    p = sub.add_parser("bench", help="all-reduce benchmark, nccl-tests import, comparison gate")
    bsub = p.add_subparsers(dest="bench_cmd", required=True, metavar="CMD")

    a = bsub.add_parser("allreduce", help="run a torch.distributed all-reduce size sweep across nodes")
    a.add_argument("--target", choices=("local", "lab", "ssh"), default="local",
                   help="where ranks run (default: loopback)")
    a.add_argument("--hosts", help="--target ssh: the hosts inventory (YAML, e.g. from `ringfence lab hosts`)")
    a.add_argument("--nodes", default="rank0,rank1", help="comma-separated nodes, one rank each (rank 0 first)")
    a.add_argument("--sizes", help="1M..256M (doubling), 1M..64M:4, or 1M,4M,64M (default 1M..256M)")
    a.add_argument("--dtype", default="float32", choices=("float32", "float64", "float16", "bfloat16", "int32"))
    a.add_argument("--backend", default="gloo", help="gloo, nccl, or a backend registered by --plugin")
    a.add_argument("--plugin", action="append", default=[], help="MODULE:FUNC registering a backend in each rank")
    a.add_argument("--device", default="cpu", help="cpu, or cuda:N with nccl")
    a.add_argument("--warmup", type=int, default=5)
    a.add_argument("--iters", type=int, default=20)
    a.add_argument("--repeats", type=int, default=3, help="whole-sweep repeats (the gate compares medians)")
    a.add_argument("--layer", default="none", help="label of the protection layer in place (not hashed)")
    a.add_argument("--iface", help="GLOO_SOCKET_IFNAME: one name, or node=name,…")
    a.add_argument("--lab", help="name of the lab (default: the only one running)")
    a.add_argument("--launcher", choices=("direct", "torchrun", "srun"), default="direct",
                   help="how ranks start: one worker per rank (direct), one torchrun per node, or one srun "
                        "through the Slurm submit host (default: direct)")
    a.add_argument("--submit-host", help="--launcher srun: the host whose srun reaches slurmctld (default: mgmt)")
    a.add_argument("--partition", help="--launcher srun: the Slurm partition (default: the cluster's default)")
    a.add_argument("--timeout", type=float, default=1800.0, help="seconds before all ranks are stopped")
    a.add_argument("--append", action="store_true", help="add these repeats to the existing --output run")
    a.add_argument("-o", "--output", help="run file to write (default: stdout)")
    a.set_defaults(func=_allreduce)

    i = bsub.add_parser("import", help="import nccl-tests all_reduce_perf output (text or -J JSON)")
    i.add_argument("file")
    i.add_argument("--placement", choices=("out-of-place", "in-place"), default="out-of-place")
    i.add_argument("--layer", default="none", help="label of the protection layer (not hashed)")
    i.add_argument("--backend", default="nccl")
    i.add_argument("-o", "--output", help="run file to write (default: stdout)")
    i.set_defaults(func=_import)

    c = bsub.add_parser("compare", help="gate a candidate run against a baseline: pass, fail or inconclusive")
    c.add_argument("baseline", help="run file or nccl-tests output")
    c.add_argument("candidate", help="run file or nccl-tests output")
    c.add_argument("--policy", help="take the budget from this policy's budget:")
    c.add_argument("--busbw-loss", type=float, help="max busbw loss, %% (default 5)")
    c.add_argument("--p99-growth", type=float, help="max p99 growth, %% (default 25)")
    c.add_argument("--sizes", help="sizes that matter, e.g. 16M,64M (default: all ≥ 1 MiB)")
    c.add_argument("--min-repeats", type=int)
    c.add_argument("--confidence", type=float, help="interval confidence (default 0.95)")
    c.add_argument("--placement", choices=("out-of-place", "in-place"), default="out-of-place",
                   help="which nccl-tests half to import")
    c.add_argument("--json", action="store_true", help="machine-readable output (the facts `assess --bench` reads)")
    c.add_argument("--evidence", metavar="STORE", help="record the comparison in this evidence store")
    c.add_argument("--charts", help="directory to write busbw.svg and p99.svg into")
    c.add_argument("-o", "--output", help="write the result here instead of stdout")
    c.set_defaults(func=_compare)

    s = bsub.add_parser("show", help="print a run file (or nccl-tests output) as a table")
    s.add_argument("run")
    s.set_defaults(func=_show)
