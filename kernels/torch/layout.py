"""Pieces every family's Torch kernels share: per-device constants that cost no launch once cached (an
arange, 0-dim scalars, small tables) and a buffer for one-launch running sums.

Every cached constant is made by device ops (no host-to-device copy, so no sync even on a first call)
and is listed here: `warm_up(device)` makes them all before a first measured or captured call, so no
call of ours adds one then. A 0-dim scalar outside `SCALARS` is refused (its value would depend on the
call); a kernel passes such a value as a Python scalar to an op that takes one."""
from __future__ import annotations

import sys

import torch

INDEX_DTYPES = (torch.int32, torch.int64)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
SCALARS = {"int": (0, 1, -1, 2**31 - 1), "float": (0.0, 1.0, float("-inf"))}   # what `scalar` caches, by kind
WARM_IOTA = 1 << 16                        # the arange `warm_up` makes per index dtype; `iota` grows it

_IOTAS: dict = {}


def capturing(like: torch.Tensor) -> bool:
    """Whether a CUDA graph is being captured on `like`'s device's current stream (never on the CPU)."""
    return like.is_cuda and torch.cuda.is_current_stream_capturing()


def cached_run(cache: dict, n: int, like: torch.Tensor, dtype: torch.dtype, make) -> torch.Tensor:
    """The first n elements of the run `make(size, device=, dtype=)` (torch.arange, torch.zeros) cached in
    `cache` per (device, dtype): grown (at least doubled, at least 4096) outside CUDA-graph capture only;
    a capture that finds it too short gets a fresh run of n, made inside the graph. A replaced run stays
    referenced by the views handed out earlier."""
    key = (like.device, dtype)
    cached = cache.get(key)
    if cached is None or cached.numel() < n:
        if capturing(like):
            return make(n, device=like.device, dtype=dtype)
        size = max(n, 2 * (0 if cached is None else cached.numel()), 4096)
        cached = make(size, device=like.device, dtype=dtype)
        cache[key] = cached
    return cached[:n]


def iota(n: int, like: torch.Tensor, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """0, 1, ..., n-1 on `like`'s device: a read-only view of a cached arange (no launch once cached; see
    `cached_run`: a capture after a warm-up call of the same sizes finds it big enough). Never write into
    the result."""
    return cached_run(_IOTAS, n, like, dtype, torch.arange)


def low_bits(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """int64 `values` as int32 `dtype` with no launch: a view of each element's low 32 bits (little-endian
    devices), the value itself wherever it fits int32; `values` when the dtype already agrees. A last dim of
    stride other than 1 (a broadcast single element or an empty run, which torch counts as contiguous) and a
    big-endian host get a converted copy."""
    if values.dtype == dtype:
        return values
    if sys.byteorder != "little" or values.stride(-1) != 1:
        return values.to(dtype)
    return values.view(dtype)[..., ::2]


def as_flags(flags: torch.Tensor) -> torch.Tensor:
    """A 0/1 integer tensor (last dim of stride 1) as bool with no launch: a view of each element's low
    byte (little-endian devices; a big-endian host gets a converted copy). For a comparison written
    into an integer buffer with `out=` that a `torch.where` then takes as its condition."""
    if sys.byteorder != "little":
        return flags.bool()
    return flags.view(torch.uint8)[..., ::flags.element_size()].view(torch.bool)


def pair_rows(n: int, like: torch.Tensor, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """An uninitialized [2, n] buffer for a running sum taken along its rows. On CUDA a 1-D cumsum is
    two launches (cub's init and scan); the cumsum of a matrix along its rows is one. Callers write the
    same values into both rows in one broadcast op, so nothing uninitialized is ever summed."""
    return torch.empty((2, n), device=like.device, dtype=dtype)


def iota_value(n: int, like: torch.Tensor) -> torch.Tensor:
    """The count n >= 0 as a 0-dim int64 tensor with no launch: element n of the cached arange (a view; the
    cache grows like `iota`'s for n >= WARM_IOTA). For a per-call integer a `torch.where` takes as a
    tensor, where a Python scalar would be made a tensor (a fill on CUDA)."""
    return iota(n + 1, like)[n]


def zeros(n: int, like: torch.Tensor, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """n zeros on `like`'s device: a read-only view of a cached run (`cached_run`), a contiguous operand
    where an expanded 0-dim scalar would be strided (a `cat` of strided inputs is a copy per input on CUDA)."""
    return cached_run(_ZEROS, n, like, dtype, torch.zeros)


_ZEROS: dict = {}
_SCALARS: dict = {}


def scalar(value: int | float, like: torch.Tensor, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """`value` (one of `SCALARS` for its dtype's kind) as a cached 0-dim tensor on `like`'s device, for
    ops whose `out=` form takes tensors only (`torch.where`); a 0-dim operand does not promote the other's
    dtype. Cached like `iota`."""
    kind = "float" if dtype.is_floating_point else "int"
    if value not in SCALARS[kind] or type(value) is not (float if kind == "float" else int):
        raise ValueError(f"scalar: value must be one of {SCALARS[kind]} for {dtype} (a value that depends on "
                         f"the call is passed as a Python scalar), got {value!r}")
    key = (like.device, dtype, value)
    cached = _SCALARS.get(key)
    if cached is None:
        cached = torch.full((), value, device=like.device, dtype=dtype)
        if not capturing(like):
            _SCALARS[key] = cached
    return cached


# the small tables `constant` caches: name -> make(device), device ops only (a host list would be a copy)
CONSTANTS = {
    "qkv_padding": lambda device: (torch.arange(3, device=device) > 0).long()[:, None],        # [[0], [1], [1]]
    "second_row": lambda device: torch.arange(2, device=device)[:, None],                     # [[0], [1]]
    **{f"zero_column_{str(d)[6:]}": (lambda d: lambda device: torch.zeros((2, 1), device=device, dtype=d))(d)
       for d in INDEX_DTYPES},                                                                # [[0], [0]]
    "zero_int32": lambda device: torch.zeros(1, device=device, dtype=torch.int32),
    **{f"{name}_float32": (lambda v: lambda device: torch.full((), v, device=device))(v)
       for name, v in (("nan", float("nan")), ("inf", float("inf")))},                       # 0-dim f32
}

_CONSTANTS: dict = {}


def constant(name: str, like: torch.Tensor) -> torch.Tensor:
    """The small read-only tensor `CONSTANTS[name]` on `like`'s device (cached like `iota`)."""
    key = (like.device, name)
    cached = _CONSTANTS.get(key)
    if cached is None:
        cached = CONSTANTS[name](like.device)
        if not capturing(like):
            _CONSTANTS[key] = cached
    return cached


# the flags of a span slot's class code (`span_codes`), one byte each
SPAN_LIVE, SPAN_REJECTED, SPAN_PARALLEL = 0, 1, 2
WARM_SPAN = 16                             # the new-slot counts p < WARM_SPAN `warm_up` makes codes for

_SPAN_CODES: dict = {}


def _make_span_codes(cap: int, device) -> torch.Tensor:
    """int32 [cap, cap + 3]: row p holds `span_codes(p)` then zeros."""
    p = torch.arange(cap, device=device)[:, None]
    c = torch.arange(cap + 3, device=device)[None, :]
    live = (c > 0) & (c < p + 3)
    code = live.int() << 8 * SPAN_LIVE
    code |= (c == p + 2).int() << 8 * SPAN_REJECTED
    code |= ((c > 2) & (c < p + 2)).int() << 8 * SPAN_PARALLEL
    return code.int()


def span_codes(p: int, like: torch.Tensor) -> torch.Tensor:
    """int32 [p + 3] (read-only): the code of each slot class of an output span with p >= 1 new slots
    (`eagle.copy_and_expand_inputs`): class 0 (a slot past every span) 0; 1 (a kept token) and 2 (the next
    token) SPAN_LIVE; 3 .. p + 1 (the parallel slots) SPAN_LIVE and SPAN_PARALLEL; p + 2 (a rejected slot)
    SPAN_LIVE and SPAN_REJECTED: each flag the byte of that index set to 1 (`span_flag`). Cached per device
    for every p below a capacity that grows (doubling) outside CUDA-graph capture, like `cached_run`."""
    key = like.device
    table = _SPAN_CODES.get(key)
    if table is None or table.shape[0] <= p:
        cap = max(p + 1, 2 * (0 if table is None else table.shape[0]), WARM_SPAN)
        table = _make_span_codes(cap, like.device)
        if not capturing(like):
            _SPAN_CODES[key] = table
    return table[p, :p + 3]


def span_flag(codes: torch.Tensor, flag: int) -> torch.Tensor:
    """One flag of 1-D `span_codes` values (contiguous int32) as a bool view (no launch; a big-endian host
    reads the byte from the other end)."""
    byte = flag if sys.byteorder == "little" else 3 - flag
    return codes.view(torch.uint8).view(-1, 4)[:, byte].view(torch.bool)


def warm_up(device: torch.device | str) -> None:
    """Make every cached constant our Torch kernels use on `device`: the arange of each index dtype up
    to `WARM_IOTA` and as many zeros, every `SCALARS` value in every index and float dtype, every
    `CONSTANTS` table, the `span_codes` of every p below `WARM_SPAN`. Call it outside CUDA-graph capture,
    before the first call on the device; it is idempotent."""
    like = torch.empty(0, device=device)
    if capturing(like):
        raise RuntimeError("warm_up: must not run during CUDA-graph capture (it makes the cached constants)")
    for dtype in INDEX_DTYPES:
        iota(WARM_IOTA, like, dtype)
        zeros(WARM_IOTA, like, dtype)
    for kind, dtypes in (("int", INDEX_DTYPES), ("float", FLOAT_DTYPES)):
        for dtype in dtypes:
            for value in SCALARS[kind]:
                scalar(value, like, dtype)
    for name in CONSTANTS:
        constant(name, like)
    span_codes(WARM_SPAN - 1, like)
