"""Launches in Triton's interpreter patch the language once per launch (`kernels/triton/interpreted.py`): a
device function whose language modules the launch has patched skips the repeat, the results are the
same, and launches made elsewhere are untouched. Skipped where Triton compiles for a GPU."""
import pytest
import torch

from specverify import env

env.prepare()
pytestmark = pytest.mark.skipif(not env.triton_interpreted() or env.triton_import_error() is not None,
                                reason="Triton is not running in its interpreter here")

if env.triton_interpreted() and env.triton_import_error() is None:
    import triton
    import triton.language as tl
    import triton.runtime.interpreter as interpreter

    from specverify.kernels.triton import interpreted
    from specverify.kernels.triton.launch import launcher

    @triton.jit
    def add_one(x):
        return x + 1

    @triton.jit
    def largest(x):
        return tl.max(x, axis=0)          # tl.max is a device function of triton.language.standard

    @triton.jit
    def row_max_kernel(out_ptr, in_ptr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        x = tl.load(in_ptr + row * BLOCK + tl.arange(0, BLOCK))
        tl.store(out_ptr + row, largest(add_one(x)))

    launched = launcher(row_max_kernel)

ROWS, BLOCK = 6, 8


def patches(monkeypatch, launch) -> tuple[torch.Tensor, int]:
    """(the kernel's output, how many language modules Triton patched) for one launch."""
    done = []
    core = interpreter._patch_lang_core
    monkeypatch.setattr(interpreter, "_patch_lang_core", lambda lang, scope: (done.append(lang), core(lang, scope)))
    values = torch.arange(ROWS * BLOCK, dtype=torch.float32).reshape(ROWS, BLOCK).flip(1).contiguous()
    out = torch.zeros(ROWS)
    launch(out, values)
    monkeypatch.setattr(interpreter, "_patch_lang_core", core)
    return out, len(done)


def test_a_launch_patches_each_language_module_once(monkeypatch):
    expected = torch.arange(ROWS * BLOCK, dtype=torch.float32).reshape(ROWS, BLOCK).max(1).values + 1
    kernel, device = interpreted.languages(row_max_kernel.fn), interpreted.languages(tl.max.fn)   # before it runs
    out, once = patches(monkeypatch, lambda out, values: launched[(ROWS,)](out, values, BLOCK=BLOCK))
    assert torch.equal(out, expected)
    # the kernel's triton.language, then tl.max's modules (triton.language.core; triton.language too once
    # the interpreter has rewritten a function of triton.language.standard), once each
    assert once == len(kernel) + (0 if device <= kernel else len(device))
    plain, every = patches(monkeypatch, lambda out, values: row_max_kernel[(ROWS,)](out, values, BLOCK=BLOCK))
    assert torch.equal(plain, expected)
    assert every >= 1 + 3 * ROWS      # elsewhere: the launch, then each device call of each program


def test_a_restored_device_patch_is_made_again():
    """A Triton that undoes a device call's patch afterwards: the launch forgets those modules."""
    undone = []

    class Scope:
        def restore(self):
            undone.append(True)

    launch = [frozenset({1, 2}), True]
    interpreted.Patched(Scope(), launch, frozenset({2})).restore()
    assert undone and launch[0] == frozenset({1})
