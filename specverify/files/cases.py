"""Case files: a shrunk failing input, stored once by content hash, replayable on any backend.

`cases/<stage>/<hash>.npz` holds the arrays (`input.<name>`) and a JSON header (`__meta__`: scalars,
layouts, output buffers, containers, tier); `<hash>.json` beside it records who failed on it and how.
Files are written to a temporary file in the same folder and renamed (never half-written), with the
ordinary permissions of the umask; the sidecar's read-modify-write holds a lock on the folder, so writers
in parallel (pytest -n) lose no record; temporary files and sidecars left by a killed writer are removed.
Reading refuses what is not a regular file and bounds the file, the header's bytes and its nesting
before anything is parsed; it validates the header's every field, bounds ranks and shapes before anything
is allocated, and checks the inputs and outputs against the stage's record (`case_fields`). Before a
stored case is replayed, its values are put to the oracle (`check_values`): a case whose values break the
contract is damaged, never a failure of the implementation it is replayed on.
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import tempfile
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

import specverify
from specverify import bounded
from specverify.records.stage import TIERS, Buffer, Example, Layout
from specverify.records.values import EXTRA_DTYPES, np_dtype

FORMAT = "specverify-case/1"
MAX_BUFFER_BYTES = 1 << 30        # one output buffer of a case (its strided base)
MAX_CASE_BYTES = 4 << 30          # all the arrays of a case file, uncompressed (and the file itself)
MAX_HEADER_BYTES = 1 << 20        # the __meta__ JSON header
MAX_RANK = 8                      # of an input array or an output buffer
ARRAY_KINDS = "biuf"              # bool, int, unsigned, float: what an input array may hold
STALE_SECONDS = 600               # a temporary file this old was left by a killed writer
CONTAINERS = ("list", "ndarray", "tensor")


class CaseError(Exception):
    """A file that is not a readable specverify case."""


FINDINGS_ENV = "SPECVERIFY_FINDINGS"
FINDINGS_DEFAULT = "specverify-findings"


def findings_dir(given: Path | None = None) -> Path:
    """Where a run saves the cases it finds: `given` (--findings), else $SPECVERIFY_FINDINGS, else
    ./specverify-findings. Never the suite's corpus: only `specverify corpus add` grows that."""
    return Path(given or os.environ.get(FINDINGS_ENV) or FINDINGS_DEFAULT)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()


def to_meta(stage: str, ex: Example) -> tuple[dict, dict[str, np.ndarray]]:
    """The header and the arrays of a case file (layouts only of the inputs that are arrays: an invalid
    case may have set an input with a layout to None)."""
    arrays, dtypes = {}, {}
    for k, v in ex.inputs.items():
        if isinstance(v, np.ndarray):
            if v.dtype.name in EXTRA_DTYPES:   # stored as same-width unsigned ints, the name in the header
                dtypes[k] = v.dtype.name
                v = v.view(f"u{v.dtype.itemsize}")
            arrays[f"input.{k}"] = v
    scalars = {k: (v.item() if isinstance(v, np.generic) else v)
               for k, v in ex.inputs.items() if not isinstance(v, np.ndarray)}
    meta = {
        "format": FORMAT, "stage": stage, "tier": ex.tier, "scalars": scalars,
        "layouts": {k: v.to_json() for k, v in ex.layouts.items() if isinstance(ex.inputs.get(k), np.ndarray)},
        "outputs": {k: {"shape": list(b.shape), "dtype": b.dtype,
                        "layout": b.layout.to_json() if b.layout else None} for k, b in ex.outputs.items()},
        "containers": ex.containers, "bad_field": ex.bad_field, "rule": ex.rule,
    }
    if dtypes:
        meta["dtypes"] = dtypes
    return meta, arrays


def content_hash(meta: dict, arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the folder's lock (other processes writing cases there wait)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def clean_stale(directory: Path) -> None:
    """Remove what killed writers left: old temporary files, and sidecars whose case file is gone."""
    cutoff = time.time() - STALE_SECONDS
    for path in directory.iterdir():
        try:
            old = path.stat().st_mtime < cutoff
        except OSError:
            continue
        stale_tmp = path.name.startswith(".") and path.name.endswith(".tmp")
        orphan = path.suffix == ".json" and not path.with_suffix(".npz").exists()
        if old and (stale_tmp or orphan):
            path.unlink(missing_ok=True)


def read_sidecar(path: Path, stage: str) -> dict:
    """The sidecar's records; a damaged sidecar starts afresh (its case file is what matters)."""
    try:
        sidecar = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {"stage": stage, "failures": []}
    if not isinstance(sidecar, dict) or not isinstance(sidecar.get("failures"), list):
        return {"stage": stage, "failures": []}
    sidecar["failures"] = [f for f in sidecar["failures"] if isinstance(f, dict)]
    return sidecar


def save(directory: Path, stage: str, ex: Example, record: dict[str, Any]) -> Path:
    """Store `ex` (once) under directory/stage/, and add `record` (backend, device, failure, ...) to its
    sidecar. Returns the .npz path."""
    meta, arrays = to_meta(stage, ex)
    folder = Path(directory) / stage
    path = folder / f"{content_hash(meta, arrays)}.npz"
    with locked(folder):
        clean_stale(folder)
        if not path.exists():
            buf = io.BytesIO()
            np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
            write_atomic(path, buf.getvalue())
        sidecar_path = path.with_suffix(".json")
        sidecar = read_sidecar(sidecar_path, stage)
        key = (record.get("backend"), record.get("device"), record.get("source"))
        failures = [f for f in sidecar["failures"] if (f.get("backend"), f.get("device"), f.get("source")) != key]
        failures.append({**record, "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        sidecar["failures"] = failures
        write_atomic(sidecar_path, json.dumps(sidecar, indent=1).encode())
    return path


def failures_of(path: Path) -> list[dict]:
    """The failure records beside a case file (empty when there is no readable sidecar)."""
    return read_sidecar(Path(path).with_suffix(".json"), "")["failures"]


def load(path: Path | str) -> tuple[str, Example]:
    """The stage name and example stored in a case file; CaseError with one clear line otherwise. When
    the stage is known, its inputs and outputs are checked against the stage's record."""
    path = Path(path)
    stage_name, example = read(path)
    from specverify.files import case_fields
    from specverify.records import registry

    stage = registry.all_stages().get(stage_name)
    if stage is not None:
        try:
            case_fields.check(stage, example)
        except case_fields.RecordError as exc:
            raise CaseError(f"{path}: {exc}") from None
    return stage_name, example


def check_values(path: Path | str, stage, example: Example) -> None:
    """Raise CaseError (one line: the file, then the oracle's words, which name the field and the rule)
    for a stored case of `stage` whose values break its contract: a valid- or hazard-tier case the oracle
    refuses (a scalar of 10^30 shaping an output), or an invalid-tier case it accepts (called checked, as
    the invalid tier calls implementations)."""
    from specverify.judge import materialize
    from specverify.judge.calls import invoke

    checked = example.tier == "invalid"
    plan, arena = materialize.plan(stage, example)
    _, error, _, _ = invoke(stage.oracle, plan, arena, "numpy", "cpu", checked, None)
    if checked and error is None:
        raise CaseError(f"{path}: the oracle accepts this invalid-tier case ({example.bad_field}: {example.rule}): "
                        f"it is not invalid")
    if not checked and error is not None:
        raise CaseError(f"{path}: the oracle refuses this {example.tier}-tier case: {error.text}")


def read(path: Path) -> tuple[str, Example]:
    """The stage name and example of a case file, its header validated (not yet against a record)."""
    try:
        with bounded.open_regular(path, MAX_CASE_BYTES) as f:
            files = read_archive(path, f)
    except FileNotFoundError:
        raise CaseError(f"{path}: no such case file") from None
    except bounded.FileProblem as exc:
        raise CaseError(f"{path}: not a readable case file ({exc})") from None
    except OSError as exc:
        raise CaseError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if "__meta__" not in files:
        raise CaseError(f"{path}: not a specverify case file (an .npz without the __meta__ header)")
    header = files.pop("__meta__").tobytes()
    if bounded.nesting(header, bounded.JSON_SKIPPED) > bounded.MAX_NESTING:
        raise CaseError(f"{path}: damaged case header (nested deeper than {bounded.MAX_NESTING})")
    try:
        meta = json.loads(header.decode())
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CaseError(f"{path}: damaged case header ({type(exc).__name__})") from None
    try:
        return example_from(meta, files)
    except (HeaderError, KeyError, TypeError, ValueError) as exc:
        raise CaseError(f"{path}: damaged case header ({exc})") from None


def read_archive(path: Path, f) -> dict[str, np.ndarray]:
    """Every array of an open .npz, its sizes bounded before they are read."""
    if not zipfile.is_zipfile(f):
        raise CaseError(f"{path}: not a readable case file (not an .npz archive, or truncated)")
    try:
        with zipfile.ZipFile(f) as archive:
            infos = archive.infolist()
        size = sum(info.file_size for info in infos)
        if size > MAX_CASE_BYTES:
            raise CaseError(f"{path}: its arrays would take {size} bytes (at most {MAX_CASE_BYTES})")
        header = sum(info.file_size for info in infos if info.filename == "__meta__.npy")
        if header > MAX_HEADER_BYTES:
            raise CaseError(f"{path}: its header takes {header} bytes (at most {MAX_HEADER_BYTES})")
        f.seek(0)
        with np.load(f, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except CaseError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, MemoryError) as exc:
        raise CaseError(f"{path}: not a readable case file ({type(exc).__name__}: {exc})") from None


class HeaderError(ValueError):
    """A header field of the wrong type or out of its bounds."""


def need(ok: bool, what: str) -> None:
    if not ok:
        raise HeaderError(what)


def is_int(x: Any, low: int = 0, high: int = 2**31) -> bool:
    return type(x) is int and low <= x <= high


def layout_from(d: Any, ndim: int, what: str) -> Layout:
    need(isinstance(d, dict) and isinstance(d.get("step"), list) and isinstance(d.get("pad"), list),
         f"{what}: a layout needs lists 'step' and 'pad'")
    need(len(d["step"]) == ndim and len(d["pad"]) == ndim, f"{what}: layout rank differs from the array's")
    need(all(is_int(s, 1, 64) for s in d["step"]), f"{what}: steps must be ints in [1, 64]")
    need(all(is_int(p, 0, 1 << 20) for p in d["pad"]), f"{what}: pads must be ints in [0, 2^20]")
    order = d.get("order")
    need(order is None or (isinstance(order, list) and sorted(order) == list(range(ndim))
                           and all(type(a) is int for a in order)), f"{what}: order must be a permutation")
    return Layout.from_json(d)


def example_from(meta: Any, files: dict[str, np.ndarray]) -> tuple[str, Example]:
    """Validate a case header field by field and build the example it describes."""
    need(isinstance(meta, dict), "the header is not a JSON object")
    need(meta.get("format") == FORMAT, f"unsupported case format {meta.get('format')!r:.40} (expected {FORMAT})")
    for key, kind in (("stage", str), ("tier", str), ("scalars", dict), ("layouts", dict), ("outputs", dict),
                      ("containers", dict), ("rule", str)):
        need(isinstance(meta.get(key), kind), f"'{key}' must be a {kind.__name__}")
    need(meta["tier"] in TIERS, f"'tier' must be one of {TIERS}")
    need(meta.get("bad_field") is None or isinstance(meta["bad_field"], str), "'bad_field' must be a string")
    dtypes = meta.get("dtypes", {})
    need(isinstance(dtypes, dict) and all(v in EXTRA_DTYPES for v in dtypes.values()), "'dtypes' is damaged")
    inputs: dict[str, Any] = dict(meta["scalars"])
    for name, value in files.items():
        need(name.startswith("input."), f"unexpected array {name!r}")
        key = name.removeprefix("input.")
        need(value.dtype.kind in ARRAY_KINDS, f"input {key!r}: an array of {value.dtype} (numbers or bools only)")
        need(value.ndim <= MAX_RANK, f"input {key!r}: rank {value.ndim} (at most {MAX_RANK})")
        inputs[key] = value.view(np_dtype(dtypes[key])) if key in dtypes else value
    outputs = {}
    for name, b in meta["outputs"].items():
        need(isinstance(b, dict) and isinstance(b.get("shape"), list) and isinstance(b.get("dtype"), str),
             f"output {name!r}: needs a 'shape' list and a 'dtype'")
        need(len(b["shape"]) <= MAX_RANK, f"output {name!r}: rank {len(b['shape'])} (at most {MAX_RANK})")
        need(all(is_int(n) for n in b["shape"]), f"output {name!r}: dimensions must be ints in [0, 2^31]")
        try:
            dtype = np_dtype(b["dtype"])
        except TypeError:
            raise HeaderError(f"output {name!r}: unknown dtype {b['dtype']!r:.40}") from None
        layout = None if b.get("layout") is None else layout_from(b["layout"], len(b["shape"]), f"output {name!r}")
        base = layout.base_shape(tuple(b["shape"])) if layout else tuple(b["shape"])
        nbytes = int(np.prod(base, dtype=object)) * dtype.itemsize
        need(nbytes <= MAX_BUFFER_BYTES, f"output {name!r} would take {nbytes} bytes (at most {MAX_BUFFER_BYTES})")
        outputs[name] = Buffer(tuple(b["shape"]), b["dtype"], layout)
    layouts = {}
    for name, d in meta["layouts"].items():
        value = inputs.get(name)
        need(isinstance(value, np.ndarray), f"layout for {name!r}, which is not an array input")
        layouts[name] = layout_from(d, value.ndim, f"input {name!r}")
        nbytes = int(np.prod(layouts[name].base_shape(value.shape), dtype=object)) * value.dtype.itemsize
        need(nbytes <= MAX_BUFFER_BYTES, f"input {name!r} would take {nbytes} bytes (at most {MAX_BUFFER_BYTES})")
    need(all(isinstance(v, str) and v in CONTAINERS for v in meta["containers"].values()),
         f"containers must be among {CONTAINERS}")
    need(meta["tier"] != "invalid" or isinstance(meta.get("bad_field"), str), "an invalid case names its field")
    example = Example(tier=meta["tier"], inputs=inputs, outputs=outputs, layouts=layouts,
                      containers=meta["containers"], bad_field=meta.get("bad_field"), rule=meta["rule"])
    return meta["stage"], example


# --- the corpus on disk: the suite's folder and a run's --cases folder ------------------------------------

def suite_corpus() -> Path | None:
    """The suite's own regression corpus folder, or None when this installation has none."""
    package = Path(specverify.__file__).resolve().parent
    if (package / "suite_cases").is_dir():
        return package / "suite_cases"
    root = package.parent
    if all((root / d).is_dir() for d in ("cases", "oracles", "kernels")):
        return root / "cases"
    return None


def case_files(stage: str, local: Path | None) -> list[tuple[str, Path]]:
    """(origin, path) of every case file of `stage`: the suite's ("suite") first, then the local folder's
    ("local"), each content id once, in file-name order."""
    found, seen = [], set()
    for origin, folder in (("suite", suite_corpus()), ("local", local)):
        directory = Path(folder) / stage if folder is not None else None
        if directory is None or not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.npz")):
            if path.stem not in seen:
                seen.add(path.stem)
                found.append((origin, path))
    return found
