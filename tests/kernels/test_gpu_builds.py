"""Every specialization our Triton kernels launch in a few interpreter examples of every stage builds for an
NVIDIA GPU (sm_90, ptxas included) on this machine: the interpreter accepts code the GPU build refuses, and CI
has no GPU. Skipped where Triton's NVIDIA backend or its ptxas is missing."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]


def nvidia_backend() -> bool:
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        tool = get_ptxas(90) if "arch" in inspect.signature(get_ptxas).parameters else get_ptxas()
        return Path(tool.path).exists()
    except Exception:       # no NVIDIA backend, or a Triton without get_ptxas
        return False


@pytest.mark.skipif(not nvidia_backend(), reason="needs Triton's NVIDIA backend and its ptxas")
def test_every_launched_specialization_builds_for_sm_90(tmp_path):
    path = str(tmp_path / "specializations.json")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    recorded = subprocess.run([sys.executable, str(HERE.with_name("gpu_builds.py")), "record", path], cwd=tmp_path,
                              env={**env, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=900)
    assert Path(path).exists(), recorded.stdout[-3000:] + recorded.stderr[-3000:]
    built = subprocess.run([sys.executable, str(HERE.with_name("gpu_builds.py")), "build", path], cwd=tmp_path,
                           env={**env, "TRITON_INTERPRET": "0"}, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]
