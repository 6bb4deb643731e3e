"""``import ringfence`` registers the backend when torch is in use, and never imports torch itself."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _py(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


def test_import_ringfence_does_not_import_torch() -> None:
    out = _py("import sys, ringfence, ringfence.cli; print('torch' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_import_ringfence_after_torch_registers_the_backend() -> None:
    pytest.importorskip("torch")
    out = _py(
        "import torch.distributed as dist\n"
        "assert 'ringfence' not in dist.Backend.backend_list\n"
        "import ringfence\n"
        "print('ringfence' in dist.Backend.backend_list)\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
