"""Launches in Triton's interpreter (TRITON_INTERPRET=1) without re-patching the language per device call.

A launch in the interpreter patches `triton.language` for the kernel once (`_patch_lang` in
`triton.runtime.interpreter`), then every call of a `@triton.jit` device function from the kernel patches
it again, although nothing is left to patch: a scan of the language modules that costs about a
millisecond (`tl.max`, `tl.min` and `tl.sum` are device functions too). Inside `once(kernel)` (a launch
through `launch.launch`), a device function whose language modules the launch has already patched skips
that repeat: the kernel's own at the start, and those a device call patched, for as long as its patch is
in place (a Triton that restores a device call's patch afterwards makes the next call patch again). Every
launch made elsewhere goes through Triton as it is. Where the interpreter has no `_patch_lang` or
`_LangPatchScope` (another Triton version), nothing changes.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

# the launch under way: [the language modules patched now, whether the launch's own patch has been made]
_launch: ContextVar[list | None] = ContextVar("specverify_interpreted_launch", default=None)


def languages(fn) -> frozenset[int]:
    """The ids of the language modules (`triton.language`, `triton.language.core`) `fn`'s globals name now:
    the ones `_patch_lang(fn)` patches. Not cached: Triton's interpreter copies its own globals (`tl`
    among them) into a module's when it rewrites a function of it, so the answer can grow."""
    import triton.language as tl

    return frozenset(id(v) for v in fn.__globals__.values() if v is tl or v is tl.core)


def _installed():
    """The interpreter module with the patch in place (installed once), or None where it cannot be."""
    import triton.runtime.interpreter as interpreter

    patch, scope = getattr(interpreter, "_patch_lang", None), getattr(interpreter, "_LangPatchScope", None)
    if patch is None or scope is None:
        return None
    if getattr(patch, "specverify_original", None) is None:

        def patch_once(fn):
            launch = _launch.get()
            if launch is None:
                return patch(fn)
            mine = languages(fn)
            if launch[1] and mine <= launch[0]:
                return scope()
            launch[1] = True
            added = mine - launch[0]
            launch[0] = launch[0] | added
            return Patched(patch(fn), launch, added)

        patch_once.specverify_original = patch
        interpreter._patch_lang = patch_once
    return interpreter


class Patched:
    """A patch made during a launch: undoing it (`restore`) also forgets the language modules it added."""

    def __init__(self, scope, launch: list, added: frozenset[int]):
        self.scope, self.launch, self.added = scope, launch, added

    def restore(self) -> None:
        self.scope.restore()
        self.launch[0] = self.launch[0] - self.added

    def __getattr__(self, name: str):
        return getattr(self.scope, name)


@contextmanager
def once(kernel) -> Iterator[None]:
    """Run a launch of `kernel` (an interpreted @triton.jit function) with its device calls patched once."""
    fn = getattr(kernel, "fn", None)
    if fn is None or _installed() is None:
        yield
        return
    token = _launch.set([frozenset(), False])
    try:
        yield
    finally:
        _launch.reset(token)
