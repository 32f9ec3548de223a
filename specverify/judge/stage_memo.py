"""What a stage's targets share: the examples drawn and the oracle's answers on them.

Every backend of a stage draws the same examples (the draws depend on the run seed, the stage and the tier;
only a slow backend's smaller shapes differ), so within a scope (`session.stage_scope`: one stage's targets
run one after another) two things drawn or computed for the first target serve the ones after it:

- the oracle's answers (`harness.expect`): found by the exact bytes of an example's slots before the call
  (inputs, layouts, guards, poison), its plan (slots, scalars, host containers) and the record's oracle,
  so a dialect's oracle never answers for the record's. The oracle target still calls the oracle in its
  own checks: only the expected outputs it is judged against may come from here.
- the draws of a search that passed (`search.search`): a later target's search with the same strategy,
  seed and budget (a dialect's target too, where the dialect keeps the record's strategy for the tier)
  hands it the same examples again, without Hypothesis, as Hypothesis would have drawn
  them (a passing search's draws do not depend on the test function); where one of them fails, that
  target's search runs with Hypothesis from the start, so its failure is found and shrunk as without the
  memo. Only for profiles without an example database or randomized phases (ci, conformance).

A scope keeps each kind up to BUDGET bytes (later ones are not kept: the targets after the first draw the
same examples in the same order, so the first ones are the ones found) and forgets them at its end. Kept
answers are read only.
"""
from __future__ import annotations

import pickle
from collections import Counter
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

import numpy as np

BUDGET = 256 << 20      # bytes of answers (arenas before and after, defined masks), and again of draws
SAMPLE = 4099           # the key holds every SAMPLE-th byte of each slot; a match is then compared in full


@dataclass
class Draws:
    """A passing search's examples, in the order its judge saw them, what its draws covered and the value rules
    they offered (the invalid tier's)."""
    examples: list
    coverage: Counter
    offered: set


class Memo:
    """Answers (`harness.Expected`) by example, and draws by search, within one scope."""

    def __init__(self, budget: int = BUDGET):
        self.budget, self.used, self.drawn_bytes = budget, 0, 0
        self.answers: dict[tuple, list] = {}
        self.draws: dict[tuple, Draws] = {}
        self.found = 0                     # answers found (for tests and measurements)

    @staticmethod
    def key(stage, plan, arena: np.ndarray) -> tuple:
        """Where an example's answer is kept: its record, plan and a sample of its slots' bytes."""
        slots = tuple((s.name, s.role, s.dtype, s.shape, s.layout, s.offset) for s in plan.slots.values())
        extra = pickle.dumps((plan.values, plan.containers), protocol=pickle.HIGHEST_PROTOCOL)
        sample = b"".join(arena[s.offset:s.end:SAMPLE].tobytes() for s in plan.slots.values())
        return stage.name, stage.oracle, slots, extra, arena.size, sample

    def find(self, key: tuple, plan, arena: np.ndarray):
        """The answer kept under `key` (see `key`: taken before the oracle runs) for this plan's arena, or
        None. Only the slots' bytes count (the alignment gaps between slots are never written)."""
        for expected in self.answers.get(key, ()):
            if all(same_bytes(expected.before[s.offset:s.end], arena[s.offset:s.end]) for s in plan.slots.values()):
                self.found += 1
                return expected
        return None

    def keep(self, key: tuple, expected) -> None:
        """Keep an answer while the budget allows; its arrays become read only."""
        arrays = [expected.before, expected.after, *expected.defined.values()]
        size = sum(a.nbytes for a in arrays)
        if self.used + size > self.budget:
            return
        for a in arrays:
            a.setflags(write=False)
        self.answers.setdefault(key, []).append(expected)
        self.used += size

    def keep_draws(self, key: tuple, examples: list, covered: Counter, offered: set) -> None:
        """Keep a passing search's draws (all of them, or none beyond the budget)."""
        size = sum(v.nbytes for example in examples for v in example.inputs.values() if isinstance(v, np.ndarray))
        if key in self.draws or self.drawn_bytes + size > self.budget:
            return
        self.draws[key] = Draws(list(examples), Counter(covered), set(offered))
        self.drawn_bytes += size


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Two byte ranges (uint8) with equal bytes (compared 8 at a time where they are whole words)."""
    if a.shape != b.shape:
        return False
    if a.size % 8 == 0:
        a, b = a.view(np.uint64), b.view(np.uint64)
    return bool(np.array_equal(a, b))


current: ContextVar[Memo | None] = ContextVar("stage_memo", default=None)


@contextmanager
def scope(budget: int = BUDGET) -> Iterator[Memo]:
    """Share draws and the oracle's answers among the checks run inside (one stage's targets)."""
    memo = Memo(budget)
    token = current.set(memo)
    try:
        yield memo
    finally:
        current.reset(token)
