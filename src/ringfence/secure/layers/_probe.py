"""Probe a kernel feature in a throwaway network namespace, so the probed node is never changed.

Trying is the only honest test: a module may be built in, loadable, or absent, and ``lsmod`` says
nothing about the first and last. The namespace gets a unique name and is deleted by the same
shell that made it (a ``trap``), also when the probe fails.
"""

from __future__ import annotations

import secrets
import shlex

from ringfence.policy.model import Layer
from ringfence.secure.layers.interface import Support
from ringfence.targets.interface import Executor, TargetError


def probe_kernel(executor: Executor, layer: Layer, steps: tuple[str, ...], *, what: str) -> Support:
    """Run ``steps`` (shell, ``$NS`` is the throwaway namespace) and report whether the last one worked.

    ``what`` names the feature for the message ("the macsec link type"). The namespace is
    ``rfprobe<hex>``, deleted on exit.
    """
    ns = f"rfprobe{secrets.token_hex(3)}"
    body = " && ".join(steps)
    script = f'NS={shlex.quote(ns)}; ip netns add "$NS" || exit 3; trap \'ip netns del "$NS" 2>/dev/null\' EXIT; {body}'
    argv = ("sh", "-c", script)
    try:
        res = executor.run(list(argv), timeout=20.0)
    except TargetError as exc:
        return Support(layer, executor.name, False, f"could not run the probe: {exc.message}", argv)
    err = (res.stderr or res.stdout).decode(errors="replace").strip().splitlines()
    detail = err[-1] if err else f"exit status {res.returncode}"
    if res.timed_out:
        return Support(layer, executor.name, False, f"the probe for {what} timed out", argv)
    if res.returncode == 3:
        return Support(layer, executor.name, False, f"cannot create a namespace to probe {what}: {detail}", argv)
    if res.returncode != 0:
        return Support(
            layer, executor.name, False, f"this kernel lacks {what} (tried it in a throwaway namespace: {detail})", argv
        )
    return Support(
        layer, executor.name, True, f"{what} works on this kernel (created one in a throwaway namespace)", argv
    )


__all__ = ["probe_kernel"]
