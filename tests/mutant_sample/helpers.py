"""The sample's kernel and helpers (Triton syntax; the tests only parse it)."""
import triton
import triton.language as tl

PLACEHOLDER = -1
BLOCK = 128
UNUSED = 3


def cdiv(a, b):
    return (a + b - 1) // b


def unused_helper(x):
    return x < UNUSED


@triton.jit
def copy_kernel(out_ptr, x_ptr, n, x_stride, BLOCK: tl.constexpr):
    """Copy n ids < 2 and not placeholders, else 0."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    x = tl.load(x_ptr + offs * x_stride, mask=live, other=0)
    first = tl.min(tl.where(x == 7, offs, BLOCK), axis=0)
    y = tl.where((x != PLACEHOLDER) & live, x, 0)
    tl.store(out_ptr + offs.to(tl.int64), tl.maximum(y, first), mask=live)
