"""Case files: a shrunk failing input, stored once by content hash, replayable on any backend.

`cases/<stage>/<hash>.npz` holds the arrays (`input.<name>`) and a JSON header (`__meta__`: scalars,
layouts, output buffers, containers, tier); `<hash>.json` beside it records who failed on it and how.
Both are written to a temporary file in the same folder and renamed, so neither is ever half-written.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from specverify.stage import Buffer, Example, Layout

FORMAT = "specverify-case/1"


class CaseError(Exception):
    """A file that is not a readable specverify case."""


def default_dir() -> Path:
    return Path(os.environ.get("SPECVERIFY_CASES", "cases"))


def to_meta(stage: str, ex: Example) -> tuple[dict, dict[str, np.ndarray]]:
    arrays = {f"input.{k}": v for k, v in ex.inputs.items() if isinstance(v, np.ndarray)}
    scalars = {k: (v.item() if isinstance(v, np.generic) else v)
               for k, v in ex.inputs.items() if not isinstance(v, np.ndarray)}
    meta = {
        "format": FORMAT, "stage": stage, "tier": ex.tier, "scalars": scalars,
        "layouts": {k: v.to_json() for k, v in ex.layouts.items()},
        "outputs": {k: {"shape": list(b.shape), "dtype": b.dtype,
                        "layout": b.layout.to_json() if b.layout else None} for k, b in ex.outputs.items()},
        "containers": ex.containers, "bad_field": ex.bad_field, "rule": ex.rule,
    }
    return meta, arrays


def content_hash(meta: dict, arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save(directory: Path, stage: str, ex: Example, record: dict[str, Any]) -> Path:
    """Store `ex` (once) under directory/stage/, and add `record` (backend, device, failure, ...) to its
    sidecar. Returns the .npz path."""
    meta, arrays = to_meta(stage, ex)
    path = Path(directory) / stage / f"{content_hash(meta, arrays)}.npz"
    if not path.exists():
        buf = io.BytesIO()
        np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
        sidecar = {"stage": stage, "failures": []}
        write_atomic(path.with_suffix(".json"), json.dumps(sidecar, indent=1).encode())
        write_atomic(path, buf.getvalue())
    sidecar_path = path.with_suffix(".json")
    try:
        sidecar = json.loads(sidecar_path.read_text())
    except (OSError, ValueError):
        sidecar = {"stage": stage, "failures": []}
    key = (record.get("backend"), record.get("device"), record.get("source"))
    failures = [f for f in sidecar.get("failures", [])
                if (f.get("backend"), f.get("device"), f.get("source")) != key]
    failures.append({**record, "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    sidecar["failures"] = failures
    write_atomic(sidecar_path, json.dumps(sidecar, indent=1).encode())
    return path


def load(path: Path | str) -> tuple[str, Example]:
    """The stage name and example stored in a case file; CaseError with one clear line otherwise."""
    path = Path(path)
    if path.exists() and not zipfile.is_zipfile(path):
        raise CaseError(f"{path}: not a readable case file (not an .npz archive, or truncated)")
    try:
        with np.load(path, allow_pickle=False) as data:
            files = {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise CaseError(f"{path}: no such case file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise CaseError(f"{path}: not a readable case file ({type(exc).__name__}: {exc})") from None
    if "__meta__" not in files:
        raise CaseError(f"{path}: not a specverify case file (an .npz without the __meta__ header)")
    try:
        meta = json.loads(files.pop("__meta__").tobytes().decode())
        if meta.get("format") != FORMAT:
            raise CaseError(f"{path}: unsupported case format {meta.get('format')!r} (expected {FORMAT})")
        inputs: dict[str, Any] = dict(meta["scalars"])
        for name, value in files.items():
            if not name.startswith("input."):
                raise CaseError(f"{path}: unexpected array {name!r} in a case file")
            inputs[name.removeprefix("input.")] = value
        outputs = {k: Buffer(tuple(b["shape"]), b["dtype"], Layout.from_json(b["layout"]) if b["layout"] else None)
                   for k, b in meta["outputs"].items()}
        example = Example(tier=meta["tier"], inputs=inputs, outputs=outputs,
                          layouts={k: Layout.from_json(v) for k, v in meta["layouts"].items()},
                          containers=meta["containers"], bad_field=meta["bad_field"], rule=meta["rule"])
        return meta["stage"], example
    except CaseError:
        raise
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise CaseError(f"{path}: damaged case header ({type(exc).__name__}: {exc})") from None
