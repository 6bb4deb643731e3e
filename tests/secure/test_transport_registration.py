"""The ``ringfence`` backend is registered by an explicit call, never as a side effect of an import."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _py(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


def test_import_ringfence_does_not_import_torch() -> None:
    out = _py("import sys, ringfence, ringfence.cli, ringfence.secure.transport; print('torch' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_importing_ringfence_after_torch_registers_nothing() -> None:
    pytest.importorskip("torch")
    out = _py(
        "import torch.distributed as dist\n"
        "import ringfence, ringfence.secure.transport\n"
        "print('ringfence' in dist.Backend.backend_list)\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_explicit_register_makes_the_backend_available() -> None:
    pytest.importorskip("torch")
    out = _py(
        "import torch.distributed as dist\n"
        "from ringfence.secure import transport\n"
        "transport.register()\n"
        "transport.register()  # idempotent\n"
        "print('ringfence' in dist.Backend.backend_list)\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
