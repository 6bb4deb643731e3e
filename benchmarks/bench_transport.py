"""Plaintext gloo vs the ``ringfence`` backend vs gloo over wireguard-go: busbw and latency, same machine, same run.

    .venv/bin/python benchmarks/bench_transport.py                     # loopback, 2 and 4 ranks (no wireguard-go)
    .venv/bin/python benchmarks/bench_transport.py --target lab --up   # one rank per lab worker namespace
    .venv/bin/python benchmarks/bench_transport.py --target lab --up --load --worlds 2 --sizes 4M,64M --no-wireguard
                                                   # …with the lab's training job running, load per repeat
    … --rf-env SWITCH_INTERVAL=0.0002 --rf-env SWITCH_INTERVAL=0
                                                   # A/B of two transport settings in one interleaved run
    .venv/bin/python benchmarks/bench_transport.py --aead-gil
                                                   # does AES-GCM (`cryptography`) release the GIL? no ranks

Arms are interleaved (gloo, ringfence, wireguard-go, gloo, …) so that a noisy neighbour hits all alike;
each ``--rf-env`` makes one more ringfence arm with those ``RINGFENCE_TRANSPORT_*`` settings (the ringfence
arms swap order every repeat, ABBA, so neither always runs right after gloo), and the per-repeat table then
also gives each arm's busbw over the first ringfence arm's in the same repeat (the paired A/B);
each cell is the median over ``--repeats`` runs of that run's figure (busbw from the mean iteration
time at 4 MiB and 64 MiB, p50 latency at ≤ 64 KiB). Prints a markdown table with machine and date,
ready for BENCHMARKS.md. Uses the benchmark driver (:mod:`ringfence.bench.driver`), so every rank is
a real process and every all-reduce result is checked element by element.

The wireguard-go arm (lab only) is plain gloo on the same workers with WireGuard enabled among the
ranks' nodes for that arm only (strict mode: no plaintext path between them), then disabled again.
The layer's policy routing sends all traffic to a peer's lab address through the tunnel, so gloo keeps
its addresses. wireguard-go is ~1/37 of gloo here, so that arm runs only ``--wg-sizes`` with
``--wg-iters`` iterations; after each such run the tunnel's byte counters must show the all-reduce
went through it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from ringfence.bench.driver import BenchSpec, RankSpec, parse_sizes, run_allreduce
from ringfence.bench.placement import local_ranks
from ringfence.bench.run import BenchRun
from ringfence.secure import pki

if TYPE_CHECKING:
    from ringfence.lab import Lab

LATENCY_MAX = 64 << 10
PLUGIN = "ringfence.secure.transport:register"
TARGETS = {4 << 20: "≥ 90 %", 64 << 20: "≥ 95 %"}  # ringfence vs gloo, 2 ranks (issue 7)
_RF_PREFIX = "RINGFENCE_TRANSPORT_"
Rows = dict[tuple[int, str, int], list[tuple[float, float]]]  # (world, arm, size) → per repeat (busbw, p50 µs)


def parse_rf_env(texts: list[str] | None) -> list[tuple[str, dict[str, str]]]:
    """``--rf-env`` values → ringfence arms: (label, environment). None or empty: the one plain arm.

    Each value is ``NAME=VALUE[,NAME=VALUE…]`` with NAME a ``RINGFENCE_TRANSPORT_*`` variable, prefix
    optional (``SWITCH_INTERVAL=0``); the label is the value as given, so the table says what ran.
    """
    if not texts:
        return [("ringfence", {})]
    arms: list[tuple[str, dict[str, str]]] = []
    for text in texts:
        env: dict[str, str] = {}
        for item in text.split(","):
            name, eq, value = item.strip().partition("=")
            if not eq or not name or not value:
                raise ValueError(f"--rf-env {text!r}: {item!r} is not NAME=VALUE")
            full = name if name.startswith(_RF_PREFIX) else _RF_PREFIX + name
            if not full[len(_RF_PREFIX) :].replace("_", "").isalnum() or not full.isupper():
                raise ValueError(f"--rf-env {text!r}: {name!r} is not a RINGFENCE_TRANSPORT_ variable name")
            env[full] = value
        label = f"ringfence {text}"
        if label in (a for a, _ in arms):
            raise ValueError(f"--rf-env {text!r} is given twice")
        arms.append((label, env))
    return arms


def arm_order(rf_labels: list[str], wireguard: bool, repeat: int) -> list[str]:
    """The arms of one repeat: gloo, the ringfence arms (reversed every other repeat), wireguard-go."""
    rf = rf_labels if repeat % 2 == 0 else rf_labels[::-1]
    return ["gloo", *rf, *(["wireguard"] if wireguard else [])]


def _pki(world: int, root: Path) -> str:
    pki.init_ca(root, "bench")
    for r in range(world):
        pki.issue(root, f"spiffe://bench/job/allreduce/rank/{r}", lifetime=timedelta(hours=2))
    return str(root / "nodes" / "job-allreduce-rank-{rank}")


def _ranks(lab_name: str | None, world: int) -> list[RankSpec]:
    if lab_name is None:
        return local_ranks([f"rank-{r}" for r in range(world)])
    from ringfence.lab.points import lab_ranks

    return lab_ranks([f"worker-{r}" for r in range(world)], lab_name=lab_name)


def _fmt_size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def _over_wireguard(lab: Lab, ranks: list[RankSpec], spec: BenchSpec) -> tuple[BenchRun, int, int]:
    """Gloo with WireGuard on among the ranks' nodes for this run only: the run, tunnel bytes sent, strict drops."""
    from ringfence.secure.layers import wireguard_run

    nodes = [r.node for r in ranks]
    wireguard_run.enable_wireguard(lab.site(), nodes, strict=True)
    try:
        run = run_allreduce(ranks, spec)
        sent = sum(p.tx_bytes for n in nodes for p in wireguard_run.node_handle(lab.site(), n).peers())
        drops = sum(sum(wireguard_run.strict_counters(lab.site(), n).values()) for n in nodes)
    finally:
        wireguard_run.disable_wireguard(lab.site())
    # Every iteration moves at least the largest message out of some rank; less through the tunnel means
    # gloo went around it and the arm would be measuring plaintext.
    floor = max(spec.sizes) * (spec.iterations + spec.warmup)
    if sent < floor:
        raise SystemExit(f"wireguard-go arm: the tunnels sent only {sent} bytes (< {floor}); gloo bypassed them")
    return run, sent, drops


def aead_gil(mib: int = 64, window: float = 0.5, rounds: int = 3) -> dict[str, float]:
    """Whether ``cryptography``'s AES-GCM runs without the GIL, measured two ways, with no ranks.

    ``*_progress``: how far a pure-Python counting thread gets while this thread seals (opens) ``mib``
    MiB records back to back for ``window`` seconds, over how far it gets while this thread sleeps as
    long — ≈ 0 if the calls hold the GIL (the counter runs only between calls), ≈ 1 with a free core if
    they do not. ``speedup``: two threads sealing ``mib`` MiB each at once over one thread sealing both
    in a row — ≈ 1 when the calls serialise on the GIL, up to 2 with two free cores. Best of
    ``rounds`` for each, since other load only lowers them.
    """
    import threading

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aead = AESGCM(bytes(range(32)))
    n = mib << 20
    plain = memoryview(bytearray(n))
    sealed = [memoryview(bytearray(n + 16)) for _ in range(2)]
    nonce = bytes(12)

    def seal(k: int = 0) -> None:
        aead.encrypt_into(nonce, plain, b"", sealed[k])

    def open_() -> None:
        aead.decrypt_into(nonce, sealed[0], b"", plain)

    def counted(work: Callable[[], None] | None) -> int:
        """Counter steps in ``window`` seconds while this thread runs ``work`` in a loop (None: sleeps)."""
        stop, out = threading.Event(), [0]

        def count() -> None:
            k = 0
            while not stop.is_set():
                k += 1
            out[0] = k

        th = threading.Thread(target=count)
        th.start()
        end = time.perf_counter() + window
        if work is None:
            time.sleep(window)
        while work is not None and time.perf_counter() < end:
            work()
        stop.set()
        th.join()
        return out[0]

    seal()
    seal(1)  # both record buffers touched, and sealed[0] holds a valid record for open_
    one_t, two_t, seal_p, open_p = [], [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        seal(0)
        seal(1)
        one_t.append(time.perf_counter() - t0)
        ths = [threading.Thread(target=seal, args=(k,)) for k in range(2)]
        t0 = time.perf_counter()
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        two_t.append(time.perf_counter() - t0)
        alone = counted(None)
        seal_p.append(counted(seal) / alone if alone else 0.0)
        open_p.append(counted(open_) / alone if alone else 0.0)
    return {
        "seal_progress": max(seal_p),
        "open_progress": max(open_p),
        "speedup": min(one_t) / min(two_t),
        "seal_gb_s": 2 * n / min(one_t) / 1e9,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", choices=["local", "lab"], default="local")
    p.add_argument("--lab", help="lab name (default: the only running lab)")
    p.add_argument("--up", action="store_true", help="with --target lab: bring up a lab for the run, down after")
    p.add_argument("--worlds", default="2,4", help="rank counts, comma-separated")
    p.add_argument("--sizes", default="4K,16K,64K,4M,64M")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--chunk", type=int, default=None, help="RINGFENCE_TRANSPORT_CHUNK_BYTES")
    p.add_argument("--no-wireguard", action="store_true", help="skip the wireguard-go arm (lab only anyway)")
    p.add_argument("--wg-sizes", default="4M,64M", help="sizes of the wireguard-go arm (those also in --sizes)")
    p.add_argument("--wg-iters", type=int, default=3, help="iterations of the wireguard-go arm")
    p.add_argument("--wg-warmup", type=int, default=1, help="warm-up iterations of the wireguard-go arm")
    p.add_argument("--aead-gil", action="store_true",
                   help="only measure whether AES-GCM releases the GIL (two threads, no ranks) and exit")
    p.add_argument("--rf-env", action="append", metavar="NAME=VALUE[,…]",
                   help="one ringfence arm with these RINGFENCE_TRANSPORT_* settings (repeatable: an A/B in "
                        "one interleaved run; the first is the reference of the paired ratio)")
    p.add_argument("--load", action="store_true",
                   help="lab only: the lab's training job runs during the run (--up starts it; an attached lab "
                        "must have it running); load average and the job's liveness recorded per repeat")
    args = p.parse_args(argv)
    if args.aead_gil:
        import cryptography

        r = aead_gil()
        print(f"cryptography {cryptography.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}: "
              f"64 MiB AES-GCM seals {r['seal_gb_s']:.2f} GB/s; a Python thread kept "
              f"{100 * r['seal_progress']:.0f} % of its solo progress during a seal, "
              f"{100 * r['open_progress']:.0f} % during an open (≈ 0 % if the call held the GIL); "
              f"two threads sealing at once: {r['speedup']:.2f}× one thread (1.00× if serialised)")  # fmt: skip
        return 0
    try:
        args.rf_arms = parse_rf_env(args.rf_env)
    except ValueError as exc:
        p.error(str(exc))
    if args.load and args.target != "lab":
        p.error("--load needs --target lab (the load is the lab's own training job)")
    if args.target == "local":
        return _measure(args, None)
    from ringfence.lab import Lab

    if not args.up:
        return _measure(args, Lab.attach(args.lab))
    lab = Lab.up(workers=max(int(w) for w in args.worlds.split(",")), jobs=1, traffic=args.load)
    try:
        return _measure(args, lab)
    finally:
        try:
            lab.down()
        finally:
            _forget_layers(lab)


def _forget_layers(lab: Lab) -> None:
    """Drop the layer state this run left for its own lab (the wireguard arm disabled its processes)."""
    from ringfence.secure.layers.interface import LayerError
    from ringfence.secure.layers.runtime import StateStore

    try:
        StateStore(lab.name).forget()
    except LayerError as exc:
        print(f"warning: {exc.message}", file=sys.stderr)


def _measure(args: argparse.Namespace, lab: Lab | None) -> int:
    sizes = parse_sizes(args.sizes)
    wg_sizes = tuple(s for s in parse_sizes(args.wg_sizes) if s in sizes)
    use_wg = lab is not None and not args.no_wireguard and bool(wg_sizes)
    rf_arms: list[tuple[str, dict[str, str]]] = args.rf_arms
    rf_env = dict(rf_arms)
    worlds = [int(w) for w in args.worlds.split(",")]
    rows: Rows = {}
    tunnel: dict[int, list[tuple[int, int]]] = {}
    loads: dict[tuple[int, int], tuple[float, float]] = {}  # (world, repeat) → load average before, after
    if args.load and lab is not None and not lab.workers_alive():
        raise SystemExit(f"--load: the training job of lab {lab.name} is not running (bring the lab up with traffic)")
    with tempfile.TemporaryDirectory(prefix="rf-bench-pki-") as tmp:
        rank_dir = _pki(max(worlds), Path(tmp))
        env = {"RINGFENCE_TRANSPORT_DIR": rank_dir, "OMP_NUM_THREADS": "1"}
        if args.chunk:
            env["RINGFENCE_TRANSPORT_CHUNK_BYTES"] = str(args.chunk)
        for world in worlds:
            ranks = _ranks(lab.name if lab is not None else None, world)
            for rep in range(args.repeats):
                before = os.getloadavg()[0]
                for arm in arm_order([a for a, _ in rf_arms], use_wg, rep):
                    wg, rf = arm == "wireguard", arm in rf_env
                    spec = BenchSpec(
                        sizes=wg_sizes if wg else sizes, backend="ringfence" if rf else "gloo",
                        warmup=args.wg_warmup if wg else args.warmup, iterations=args.wg_iters if wg else args.iters,
                        plugins=(PLUGIN,) if rf else (), env={**env, **rf_env.get(arm, {})},
                        layer="ringfence" if rf else arm,
                    )  # fmt: skip
                    t0 = time.monotonic()
                    if wg and lab is not None:
                        run, sent, drops = _over_wireguard(lab, ranks, spec)
                        tunnel.setdefault(world, []).append((sent, drops))
                    else:
                        run = run_allreduce(ranks, spec)
                    for res in run.repeats[0].results:
                        if res.wrong not in (0, None):
                            raise SystemExit(f"{arm}: {res.wrong} wrong elements at {res.size}")
                        rows.setdefault((world, arm, res.size), []).append((res.busbw, res.p50_us or 0.0))
                    print(f"world {world} repeat {rep + 1}/{args.repeats} {arm}: done in {time.monotonic() - t0:.0f} s",
                          file=sys.stderr)  # fmt: skip
                loads[(world, rep)] = (before, os.getloadavg()[0])
                if args.load and lab is not None and not lab.workers_alive():
                    # a repeat without the load it claims to measure under would be mislabelled
                    raise SystemExit(f"--load: the training job of lab {lab.name} stopped during repeat {rep + 1}")
    labels = [a for a, _ in rf_arms]
    _print_table(args, lab, worlds, sizes, wg_sizes if use_wg else (), rows, tunnel, labels)
    _print_repeats(worlds, sizes, args.repeats, rows, loads, labels)
    return 0


def _ratio(rows: Rows, world: int, num: str, den: str, size: int, rep: int) -> float | None:
    """``num`` over ``den`` in one repeat: busbw ≥ 1 MiB, p50 latency below; None where ``den`` measured 0."""
    n, d = rows[(world, num, size)][rep], rows[(world, den, size)][rep]
    k = 1 if size <= LATENCY_MAX else 0
    return n[k] / d[k] if d[k] else None


def _cell(ratio: float | None, size: int) -> str:
    if ratio is None:
        return "—"
    return f"{ratio:.2f}×" if size <= LATENCY_MAX else f"{100 * ratio:.0f} %"


def _print_repeats(
    worlds: list[int],
    sizes: tuple[int, ...],
    repeats: int,
    rows: Rows,
    loads: dict[tuple[int, int], tuple[float, float]],
    labels: list[str],
) -> None:
    """Per repeat: each ringfence arm / gloo of that repeat (the arms ran back to back) and the load around it."""
    pairs = [(lab, "gloo") for lab in labels] + [(lab, labels[0]) for lab in labels[1:]]
    many = len(labels) > 1
    head = [_fmt_size(s) + (f" {_short(n)}/{_short(d)}" if many else "") for n, d in pairs for s in sizes]
    print("\nPer repeat (ringfence / gloo; busbw ratio ≥ 1 MiB, latency ratio below; 1-minute load average "
          "before → after the repeat):\n")  # fmt: skip
    if len(labels) > 1:
        print("Arms: " + "; ".join(f"{_short(lab)} = {lab}" for lab in labels) + "\n")
    print("| ranks | repeat | " + " | ".join(head) + " | load |")
    print("|---:|---:|" + "---:|" * len(head) + "---|")
    for world in worlds:
        for rep in range(repeats):
            cells = [_cell(_ratio(rows, world, n, d, s, rep), s) for n, d in pairs for s in sizes]
            a, b = loads[(world, rep)]
            print(f"| {world} | {rep + 1} | " + " | ".join(cells) + f" | {a:.1f} → {b:.1f} |")
    for world in worlds:
        for n, d in pairs:
            for size in sizes:
                if size <= LATENCY_MAX:
                    continue
                ratios = [r for k in range(repeats) if (r := _ratio(rows, world, n, d, size, k)) is not None]
                if not ratios:
                    continue
                lo, mid, hi = min(ratios), statistics.median(ratios), max(ratios)
                print(f"\n{world} ranks {_fmt_size(size)} {n} / {d}: median of per-repeat ratios {100 * mid:.0f} %, "
                      f"range {100 * lo:.0f}–{100 * hi:.0f} %", end="")  # fmt: skip
    print()


def _short(label: str) -> str:
    """``ringfence SWITCH_INTERVAL=0`` → ``rf:SWITCH_INTERVAL=0`` (table headers); ``gloo`` stays."""
    return label.replace("ringfence ", "rf:") if label != "ringfence" else "rf"


def _print_table(
    args: argparse.Namespace,
    lab: Lab | None,
    worlds: list[int],
    sizes: tuple[int, ...],
    wg_sizes: tuple[int, ...],
    rows: Rows,
    tunnel: dict[int, list[tuple[int, int]]],
    labels: list[str],
) -> None:
    load = os.getloadavg()
    where = "loopback" if lab is None else f"lab namespaces ({lab.name})"
    print(f"### ringfence transport vs plaintext gloo vs gloo over wireguard-go — {where}\n")
    print(f"- machine: {platform.node()}, {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"Linux {platform.release()}, load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} at the end")  # fmt: skip
    print(f"- date: {datetime.now(UTC).isoformat(timespec='minutes')}")
    print(f"- {args.repeats} interleaved repeats × {args.iters} iterations (after {args.warmup} warm-up), float32, "
          "median of the per-repeat figures; OMP_NUM_THREADS=1 for every arm")  # fmt: skip
    if len(labels) > 1:
        print(f"- ringfence arms (order swapped every repeat): {', '.join(labels)}")
    if wg_sizes:
        carried = ", ".join(
            f"{w} ranks {sum(s for s, _ in t) / 1e9:.2f} GB sent, {sum(d for _, d in t)} strict-mode drops"
            for w, t in sorted(tunnel.items())
        )
        print(f"- wireguard-go: gloo with WireGuard (strict) enabled among the ranks' workers for that arm only, "
              f"{', '.join(_fmt_size(s) for s in wg_sizes)} × {args.wg_iters} iterations (after {args.wg_warmup} "
              f"warm-up); through the tunnels: {carried}")  # fmt: skip
    else:
        print("- wireguard-go: not measured (" + ("loopback has no lab workers" if lab is None else "--no-wireguard")
              + ")")  # fmt: skip
    print()
    arm_col = "| arm " if len(labels) > 1 else ""
    print(f"| ranks | size {arm_col}| gloo | ringfence | wireguard-go | ringfence / gloo | wireguard-go / gloo "
          "| target |")  # fmt: skip
    print("|---:|---:|" + ("---|" if arm_col else "") + "---:|---:|---:|---:|---:|---|")
    for world in worlds:
        for size in sizes:
            for label in labels:
                g, r = rows[(world, "gloo", size)], rows[(world, label, size)]
                w = rows.get((world, "wireguard", size))
                arm = f"| {label} " if arm_col else ""
                if size <= LATENCY_MAX:
                    gl, rl = statistics.median(x[1] for x in g), statistics.median(x[1] for x in r)
                    wl = statistics.median(x[1] for x in w) if w else None
                    wcell, wratio = (f"{wl:.0f} µs p50", f"{wl / gl:.2f}×") if wl else ("—", "—")
                    print(f"| {world} | {_fmt_size(size)} {arm}| {gl:.0f} µs p50 | {rl:.0f} µs p50 | {wcell} "
                          f"| {rl / gl:.2f}× latency | {wratio} | ≤ 1.5× |")  # fmt: skip
                else:
                    gb, rb = statistics.median(x[0] for x in g), statistics.median(x[0] for x in r)
                    wb = statistics.median(x[0] for x in w) if w else None
                    wcell, wratio = (f"{wb:.3f} GB/s", f"{100 * wb / gb:.1f} %") if wb else ("—", "—")
                    target = TARGETS.get(size, "") if world == 2 else "report"
                    print(f"| {world} | {_fmt_size(size)} {arm}| {gb:.3f} GB/s | {rb:.3f} GB/s | {wcell} "
                          f"| {100 * rb / gb:.0f} % busbw | {wratio} | {target} |")  # fmt: skip

if __name__ == "__main__":
    raise SystemExit(main())
