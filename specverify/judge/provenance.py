"""Provenance for reports: which source files were judged and where.

A fingerprint names a module, its source file and the file's sha256. The judge fingerprints only modules
it has imported itself (the oracles, our own kernels); an outside implementation's module is fingerprinted
by the worker that imported it and sent back as plain JSON (see `worker.py`), so the judge never imports
vendor code.
"""
from __future__ import annotations

import hashlib
import platform
import re
import sys
from typing import Any

from specverify import env

SHA256 = re.compile(r"^[0-9a-f]{64}$")


def file_sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def module_fingerprint(name: str) -> dict[str, Any]:
    """{"module", "file", "sha256"} of an imported module (file and hash None when it has no source file)."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None) if module is not None else None
    return {"module": name, "file": path, "sha256": file_sha256(path) if path else None}


def checked_fingerprint(d: Any, name: str) -> dict[str, Any]:
    """A fingerprint received from a worker, kept only where it has the expected shape."""
    if not isinstance(d, dict):
        return {"module": name, "file": None, "sha256": None}
    path, digest = d.get("file"), d.get("sha256")
    return {"module": name, "file": path if isinstance(path, str) and len(path) < 4096 else None,
            "sha256": digest if isinstance(digest, str) and SHA256.match(digest) else None}


def machine(device: str) -> dict[str, str]:
    """The device a run used, in words: the GPU's name on CUDA, the CPU's architecture otherwise."""
    found = {"device": device, "platform": platform.platform(), "machine": platform.machine()}
    if device == "cuda" and env.cuda_available():
        import torch

        found["gpu"] = torch.cuda.get_device_name(0)
        found["cuda"] = str(torch.version.cuda)
    return found
