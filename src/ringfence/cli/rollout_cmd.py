"""``ringfence rollout plan|budget|status|advance|abort``: the recorded canary rollout."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringfence.errors import InputError

if TYPE_CHECKING:
    from ringfence.bench.compare import GateBudget
    from ringfence.bench.driver import BenchSpec, RankSpec
    from ringfence.rollout.interface import EvidenceSink, StepAction
    from ringfence.rollout.layers import AllReduceBenchmarker
    from ringfence.rollout.machine import Rollout


def _evidence(args: argparse.Namespace) -> EvidenceSink:
    from ringfence.evidence.store import EvidenceStore, default_store_path

    return EvidenceStore.open(args.evidence or default_store_path())


def _nodes(text: str, what: str) -> list[str]:
    nodes = [n.strip() for n in text.split(",") if n.strip()]
    if not nodes:
        raise InputError(what, "name at least one node")
    return nodes


def _budget(args: argparse.Namespace) -> GateBudget | None:
    from ringfence.bench.compare import GateBudget
    from ringfence.bench.driver import parse_size
    from ringfence.policy import load_policy

    over: dict[str, Any] = {}
    if args.busbw_loss is not None:
        over["busbw_loss_pct"] = args.busbw_loss
    if args.p99_growth is not None:
        over["p99_growth_pct"] = args.p99_growth
    if args.min_repeats is not None:
        over["min_repeats"] = args.min_repeats
    if args.gate_sizes:
        try:
            over["sizes"] = tuple(parse_size(s) for s in args.gate_sizes.split(","))
        except ValueError as exc:
            raise InputError("--gate-sizes", str(exc)) from exc
    if args.policy:
        return GateBudget.from_policy(load_policy(args.policy).budget, **over)
    return GateBudget(**over) if over else None


def _plan(args: argparse.Namespace) -> int:
    from ringfence.bench.driver import DEFAULT_SIZES, parse_sizes
    from ringfence.rollout.machine import Rollout

    pair, layer, fleet, origin = _what_to_roll_out(args)
    try:
        sizes = parse_sizes(args.sizes) if args.sizes else DEFAULT_SIZES
    except ValueError as exc:
        raise InputError("--sizes", str(exc)) from exc
    bench = {"target": args.target, "sizes": list(sizes), "dtype": args.dtype, "backend": args.backend,
             "warmup": args.warmup, "iterations": args.iters, "repeats": args.repeats, "timeout_s": args.timeout}
    if args.target == "ssh":
        if not args.hosts or not args.policy:
            raise InputError("--target", "--target ssh needs --hosts (the inventory) and --policy (the cluster's)")
        # absolute: a later `rollout advance` may run from another directory
        bench |= {"hosts": str(Path(args.hosts).resolve()), "policy": str(Path(args.policy).resolve())}
    ro = Rollout.plan(Path(args.state), pair=pair, layer=layer, evidence=_evidence(args), fleet=fleet,
                      budget=_budget(args), budget_source=args.policy or "command line", bench=bench, origin=origin)
    print(_status_text(ro))
    return 0


def _what_to_roll_out(args: argparse.Namespace) -> tuple[list[str], str, list[str], dict[str, Any] | None]:
    """(pair, layer, fleet, where they came from): the flags, or the collective row of a recommendation."""
    fleet = _nodes(args.fleet, "--fleet") if args.fleet else []
    if not args.from_recommend:
        if not args.pair or not args.layer:
            raise InputError("rollout plan", "give --pair and --layer, or --from-recommend REC.json")
        return _nodes(args.pair, "--pair"), args.layer, fleet, None
    if args.pair or args.layer:
        raise InputError("--from-recommend", "takes the canary pair and the layer from the recommendation: give "
                                             "it or --pair/--layer, not both")
    from ringfence.recommend.document import collective_choice, load_recommendations

    row = collective_choice(load_recommendations(args.from_recommend), args.link, source=args.from_recommend)
    if row.within_budget is False:
        print(f"rollout plan: the recommendation expects the canary gate to fail for {row.link} "
              f"({row.plan[-1] if row.plan else row.recommended})", file=sys.stderr)
    origin = {"file": str(Path(args.from_recommend).resolve()), "link": row.link, "option": row.recommended,
              "layer": row.layer, "busbw_loss_pct": list(row.cost.busbw_loss_pct), "cost_source": row.cost.source}
    return list(row.nodes[:2]), str(row.layer), fleet or list(row.nodes), origin


def _budget_cmd(args: argparse.Namespace) -> int:
    from ringfence.bench.run import load_run
    from ringfence.rollout.machine import Rollout

    ro = Rollout.open(Path(args.state), _evidence(args))
    budget = _budget(args)
    if budget is None and not args.baseline:
        raise InputError("rollout budget", "give --policy or budget flags (and/or --baseline RUN)")
    if budget is not None:
        ro.record_budget(budget, args.policy or "command line")
    if args.baseline:
        ro.record_baseline(load_run(args.baseline), args.baseline)
    print(_status_text(ro))
    return 0


def _spec(ro: Rollout) -> BenchSpec:
    from ringfence.bench.driver import DEFAULT_SIZES, BenchSpec

    b = ro.state.bench
    return BenchSpec(sizes=tuple(b.get("sizes", DEFAULT_SIZES)), dtype=b.get("dtype", "float32"),
                     backend=b.get("backend", "gloo"), warmup=int(b.get("warmup", 5)),
                     iterations=int(b.get("iterations", 20)), repeats=int(b.get("repeats", 3)),
                     timeout_s=float(b.get("timeout_s", 1800.0)))


def _benchmarker(ro: Rollout) -> AllReduceBenchmarker:
    from ringfence.bench.placement import local_ranks
    from ringfence.lab.points import lab_ranks
    from ringfence.rollout.layers import AllReduceBenchmarker

    b = ro.state.bench
    spec = _spec(ro)
    target = b.get("target", "local")

    def ranks(nodes: Sequence[str]) -> list[RankSpec]:
        return local_ranks(list(nodes)) if target == "local" else lab_ranks(list(nodes))

    return AllReduceBenchmarker(spec, ranks)


def _actions(spec: str | None) -> tuple[StepAction | None, StepAction | None]:
    from ringfence.rollout.interface import RolloutError

    if not spec:
        return None, None
    module_name, _, factory = spec.partition(":")
    try:
        provider = getattr(importlib.import_module(module_name), factory or "rollout_actions")()
    except (ImportError, AttributeError) as exc:
        raise RolloutError(f"cannot load step actions from {spec!r}: {exc}") from exc
    return getattr(provider, "tls", None), getattr(provider, "keys", None)


def _advance(args: argparse.Namespace) -> int:
    from ringfence.bench.run import load_run
    from ringfence.rollout.layers import load_layer
    from ringfence.rollout.machine import Rollout, StepTools

    evidence = _evidence(args)
    ro = Rollout.open(Path(args.state), evidence)
    candidate = load_run(args.candidate) if args.candidate else None
    if ro.state.bench.get("target") == "ssh":
        from ringfence.cli._rollout_site import ssh_tools
        from ringfence.evidence import EvidenceStore

        spec = _spec(ro)
        if args.repeats is not None:
            spec = replace(spec, repeats=args.repeats)
        store = evidence if isinstance(evidence, EvidenceStore) else None
        s_tls, s_keys, s_layer, bench = ssh_tools(ro.state.bench, ro.state.layer, spec, store)
        tls, keys = _actions(args.actions) if args.actions else (s_tls, s_keys)
        tools = StepTools(tls=tls, keys=keys, layer=s_layer or load_layer(ro.state.layer), benchmark=bench,
                          candidate_run=candidate)
    else:
        tls, keys = _actions(args.actions)
        tools = StepTools(tls=tls, keys=keys, layer=load_layer(ro.state.layer), benchmark=_benchmarker(ro),
                          candidate_run=candidate)
        if args.repeats is not None:
            bm = _benchmarker(ro)
            tools = replace(tools, benchmark=replace(bm, spec=replace(bm.spec, repeats=args.repeats)))
    # step 4 interleaves single repeats: as many pairs as the plan's (or --repeats') repeats
    tools = replace(tools, pairs=args.repeats or int(ro.state.bench.get("repeats", 0)) or None)
    rec = ro.advance(tools, args.step)
    print(_status_text(ro))
    return 0 if rec.status.value == "done" else 1


def _abort(args: argparse.Namespace) -> int:
    from ringfence.rollout.layers import load_layer
    from ringfence.rollout.machine import Rollout

    ro = Rollout.open(Path(args.state), _evidence(args))
    ro.abort(args.reason, load_layer(ro.state.layer))
    print(_status_text(ro))
    return 0


def _status_text(ro: Rollout) -> str:
    st = ro.state
    lines = [f"rollout {st.id}: canary {st.pair[0]}+{st.pair[1]}, layer {st.layer}, fleet {len(st.fleet)} nodes"
             + (f" — ABORTED: {st.aborted}" if st.aborted else "")]
    if st.budget:
        b = st.budget.budget
        lines.append(f"budget (seq {st.budget.seq}): busbw loss ≤ {b['busbw_loss_pct']:g} %, p99 growth ≤ "
                     f"{b['p99_growth_pct']:g} %, ≥ {b['min_repeats']} repeats  [{st.budget.evidence}]")
    else:
        lines.append("budget: not recorded (step 3 will refuse)")
    for s in st.steps:
        ev = f"  [{', '.join(s.evidence)}]" if s.evidence else ""
        lines.append(f"{s.number}. {s.status.value:<12} {s.title}{(' — ' + s.detail) if s.detail else ''}{ev}")
    nxt = st.next_step()
    if not st.aborted and nxt is not None:
        lines.append(f"next: step {nxt}")
    return "\n".join(lines)


def _status(args: argparse.Namespace) -> int:
    from ringfence.rollout.machine import Rollout
    from ringfence.rollout.state import state_to_dict

    ro = Rollout.open(Path(args.state), _evidence(args))
    if args.json:
        sys.stdout.write(json.dumps(state_to_dict(ro.state), indent=1) + "\n")
    else:
        print(_status_text(ro))
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state", required=True, help="the rollout state file")
    p.add_argument("--evidence", help="evidence store directory (default: $RINGFENCE_EVIDENCE or .ringfence/evidence)")


def _budget_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", help="take the budget from this policy's budget:")
    p.add_argument("--busbw-loss", type=float, help="max busbw loss, %%")
    p.add_argument("--p99-growth", type=float, help="max p99 growth, %%")
    p.add_argument("--min-repeats", type=int)
    p.add_argument("--gate-sizes", help="sizes that matter to the job, e.g. 16M,64M")


def register(sub: Any) -> None:
    """Add the ``rollout`` verb."""
    p = sub.add_parser("rollout", help="canary rollout of collective-path encryption, gated by the benchmark")
    rsub = p.add_subparsers(dest="rollout_cmd", required=True, metavar="CMD")

    pl = rsub.add_parser("plan", help="create a rollout: canary pair, layer, fleet, benchmark, budget")
    _common(pl)
    pl.add_argument("--pair", help="the canary pair, A,B")
    pl.add_argument("--layer", help="collective layer (noop, or one from ringfence.secure)")
    pl.add_argument("--from-recommend", metavar="REC.json",
                    help="take the layer, the pair (its first two nodes) and the fleet from `ringfence recommend "
                         "--format json`'s collective recommendation")
    pl.add_argument("--link", help="with --from-recommend: which collective link (job) when it has several")
    pl.add_argument("--fleet", help="all nodes for step 5 (default: the pair, or the recommendation's nodes)")
    pl.add_argument("--target", choices=("local", "lab", "ssh"), default="lab")
    pl.add_argument("--hosts", help="--target ssh: the hosts inventory (with --policy: the cluster's policy)")
    pl.add_argument("--sizes", help="benchmark sizes (default 1M..256M)")
    pl.add_argument("--dtype", default="float32")
    pl.add_argument("--backend", default="gloo")
    pl.add_argument("--warmup", type=int, default=5)
    pl.add_argument("--iters", type=int, default=20)
    pl.add_argument("--repeats", type=int, default=3)
    pl.add_argument("--timeout", type=float, default=1800.0)
    _budget_flags(pl)
    pl.set_defaults(func=_plan)

    bu = rsub.add_parser("budget", help="record the budget (and optionally a baseline run) before step 3")
    _common(bu)
    _budget_flags(bu)
    bu.add_argument("--baseline", help="a baseline run file measured elsewhere")
    bu.set_defaults(func=_budget_cmd)

    st = rsub.add_parser("status", help="show the steps, their evidence and what is next")
    _common(st)
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_status)

    ad = rsub.add_parser("advance", help="carry out the next step")
    _common(ad)
    ad.add_argument("--step", type=int, choices=range(1, 6), help="refuse unless this is the next step")
    ad.add_argument("--actions", help="MODULE:FACTORY providing .tls and .keys step actions (steps 1-2)")
    ad.add_argument("--candidate", help="step 4: a candidate run measured elsewhere (e.g. imported nccl-tests)")
    ad.add_argument("--repeats", type=int, help="override the planned repeats for this measurement")
    ad.set_defaults(func=_advance)

    ab = rsub.add_parser("abort", help="roll the canary back and record why")
    _common(ab)
    ab.add_argument("--reason", required=True)
    ab.set_defaults(func=_abort)
