"""Strategies of the `stop` family.

Token ids come from a small shared pool so that a row's tokens often hold another row's stop ids; each
row plays one scenario, drawn on purpose: a run with no stop, a stop id mid-run, a stop id as the last
emitted token (the bonus when every draft was accepted), a stop id exactly where the budget runs out,
the budget crossed mid-run, a stop id before the token where the budget runs out in the same step (a
kernel that checks the cap before the stop ids stops at the cap: SGLang #31599), a budget already
spent, another row's stop id. Hypothesis draws which scenario the batch focuses on (the stop ids drawn
then have what it needs), or a mix that deals every scenario out in turn, so a failure shrinks to the
scenario that shows it.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from specverify.oracles.stop import LOWEST, PLACEHOLDER, sequential_stopping
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.records.values import output_value
from specverify.strategies.blocks import (batch_size, generator, invalid, label, label_programs, labelled_dtype, layout,
                                          one_invalid, short, tile_rows)

POOL = 12   # token ids 0..POOL-1: stop ids and tokens collide often
BEFORE_THE_CAP, ANOTHER_ROWS = "stop id before the cap", "another row's stop id"   # labelled by `reached`
SCENARIOS = ("run", "stop id", "stop id last", "stop id as the bonus", "stop id at the cap", "cap crossed",
             BEFORE_THE_CAP, "budget spent", ANOTHER_ROWS)
# the stop ids a focused scenario needs (`stop_id_rows`): another row's stop id needs rows with their own
NEEDS = {name: "ids" for name in SCENARIOS if name.startswith("stop id")} | {ANOTHER_ROWS: "per row"}
HIGHEST = {"int32": 2**31 - 1, "int64": 2**63 - 1}


@st.composite
def stop_id_rows(draw, rng: np.random.Generator, batch: int, given: bool | None = None,
                 needed: str | None = None) -> np.ndarray | None:
    """None (unless the declared domain says they are always `given`), no columns, one list for every
    row, or each row its own; -1 padding trailing or anywhere. `needed` by the batch's scenario (unless
    the declared domain says None): "ids" (never None or without columns) or "per row" (each row its own)."""
    kind = draw(st.sampled_from(["none", "per row", "shared", "empty", "per row", "empty", "none", "per row"]))
    if needed and given is not False:
        kind = "per row" if needed == "per row" else {"none": "shared", "empty": "per row"}.get(kind, kind)
    kind = "per row" if given and kind == "none" else kind
    label(f"stop ids: {kind}")
    if kind == "none":
        return None
    width = 0 if kind == "empty" else draw(st.integers(1, 6))
    ids = np.full((batch, width), PLACEHOLDER, np.int64)
    for r in range(batch):
        if kind == "shared" and r:
            ids[r] = ids[0]
            continue
        count = int(rng.integers(1, width + 1)) if width and rng.random() < 0.8 else 0
        ids[r, :count] = rng.integers(0, POOL, count)
    if width and draw(st.booleans()):
        label("stop ids: padding between ids")
        ids = rng.permuted(ids, axis=1)
    return ids


def random_entry(rng, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: one of its stop ids (not padding) chosen at random, and whether it has any."""
    real = ids != PLACEHOLDER
    pick = np.argmax(rng.random(ids.shape) * real, axis=1) if ids.shape[1] else np.zeros(len(ids), int)
    has = real.any(axis=1)
    return np.where(has, ids[np.arange(len(ids)), pick] if ids.shape[1] else 0, PLACEHOLDER), has


def plant(rng, scenario: np.ndarray, tokens: np.ndarray, emitted: np.ndarray, stop_ids: np.ndarray):
    """Put each row's scenario in place (vectorized over rows); returns (emitted, budgets, the scenario
    each row actually plays: "run" where its preconditions fail)."""
    batch, width = tokens.shape
    rows = np.arange(batch)
    before_cap = scenario == BEFORE_THE_CAP
    emitted = np.where(scenario == "stop id as the bonus", width, emitted)
    emitted = np.where(before_cap & (emitted > 0), np.minimum(width, np.maximum(emitted, 2)), emitted)
    budgets = emitted + rng.integers(1, 4, batch)          # more than this step emits: never capped
    anywhere = np.floor(rng.random(batch) * emitted).astype(int)
    own, has_own = random_entry(rng, stop_ids)
    other_rows = (rows + rng.integers(1, max(batch, 2), batch)) % max(batch, 1)   # another row where B >= 2
    other, has_other = own[other_rows], has_own[other_rows]
    other_ok = has_other & ~(stop_ids == other[:, None]).any(axis=1)
    stop_id = np.char.startswith(scenario.astype(str), "stop id") & has_own & (emitted > before_cap)
    early = np.floor(rng.random(batch) * (emitted - 1)).astype(int)          # in [0, emitted - 2]
    at = np.where(np.isin(scenario, ["stop id last", "stop id as the bonus"]), emitted - 1,
                  np.where(before_cap, early, anywhere))
    tokens[rows[stop_id], at[stop_id]] = own[stop_id]
    cap_at_stop = stop_id & (scenario == "stop id at the cap")
    budgets[cap_at_stop] = at[cap_at_stop] + 1
    later = stop_id & before_cap                  # the budget runs out at a later emitted token
    runs_out = at + 1 + np.floor(rng.random(batch) * (emitted - 1 - at)).astype(int)
    budgets[later] = runs_out[later] + 1
    crossed = (scenario == "cap crossed") & (emitted > 0)
    budgets[crossed] = anywhere[crossed] + 1
    spent = scenario == "budget spent"
    budgets[spent] = rng.integers(-3, 1, batch)[spent]
    foreign = (scenario == ANOTHER_ROWS) & other_ok & (emitted > 0)
    tokens[rows[foreign], anywhere[foreign]] = other[foreign]
    played = np.where(stop_id | crossed | spent | foreign, scenario, "run")
    return emitted, budgets, played


@st.composite
def spec_stopping_valid(draw, ctx: DrawContext, tier: str = "valid") -> Example:
    batch = draw(batch_size(ctx))
    width = 1 + draw(st.one_of(st.integers(0, 8), st.integers(0, 40)))
    tok_dtype, budget_dtype = draw(labelled_dtype("output_token_ids", ctx)), draw(labelled_dtype("num_appendable", ctx))
    rng = draw(generator())
    focus = draw(st.sampled_from(("mixed",) + SCENARIOS + ("mixed",) * 7))
    stop_ids = draw(stop_id_rows(rng, batch, ctx.given("stop_ids"), NEEDS.get(focus)))
    ids_dtype = draw(labelled_dtype("stop_ids", ctx)) if stop_ids is not None else "int32"
    emit = draw(st.sampled_from(["ragged", "all", "ragged", "none"]))
    label(f"emitted: {emit}")
    ids = stop_ids if stop_ids is not None else np.full((batch, 0), PLACEHOLDER, np.int64)
    row = rng.integers(0, POOL, (batch, width))
    mine = ((row[:, :, None] == ids[:, None, :]) & (ids[:, None, :] != PLACEHOLDER)).any(axis=2)
    row[mine] = POOL   # no accidental stop of a row by its own ids: the scenarios place them
    emitted = {"ragged": rng.integers(0, width + 1, batch), "all": np.full(batch, width),
               "none": np.zeros(batch, int)}[emit]
    # a mixed batch deals the scenarios out in a shuffled order: every one of them once B >= len(SCENARIOS)
    scenario = np.full(batch, focus, dtype=object) if focus != "mixed" else \
        np.array(SCENARIOS)[rng.permutation(len(SCENARIOS))[np.arange(batch) % len(SCENARIOS)]]
    emitted, budgets, played = plant(rng, np.asarray(scenario, str), row, emitted, ids)
    tokens = np.where(np.arange(width) < emitted[:, None], row, PLACEHOLDER)
    label_programs(batch, tile_rows(width))
    for name in sorted(set(played.tolist()) - {BEFORE_THE_CAP, ANOTHER_ROWS}):
        label(f"stop: {name}")
    if batch and draw(st.booleans()):
        label("ids: out of vocabulary (the dtype's largest)")
        tokens[(tokens != PLACEHOLDER) & (rng.random(tokens.shape) < 0.3)] = HIGHEST[tok_dtype]
    if batch and draw(st.booleans()):
        edge = draw(st.sampled_from(["largest", "lowest"]))
        label(f"budget: the dtype's {edge}")
        budgets[int(rng.integers(0, batch))] = (HIGHEST[budget_dtype] if edge == "largest"
                                                else LOWEST[budget_dtype] + width)
    if tier == "hazard":
        narrow = "int32" if "int32" in (tok_dtype, ids_dtype) else "int64"
        tokens, stop_ids = draw(extreme_ids(rng, tokens, stop_ids, HIGHEST[narrow]))
    for name in reached(tokens, budgets, stop_ids):
        label(f"stop: {name}")
    with_counts = draw(st.booleans()) or bool(ctx.given("num_rejected_tokens"))
    label("num_rejected_tokens: given" if with_counts else "num_rejected_tokens: None")
    rejected = (tokens == PLACEHOLDER).sum(axis=1).astype(np.int32) if with_counts else None
    layouts = {"output_token_ids": draw(layout(2))}
    if stop_ids is not None:
        layouts["stop_ids"] = draw(layout(2))
    return Example(
        tier=tier,
        layouts={name: value for name, value in layouts.items() if value is not None},
        inputs={"output_token_ids": tokens.astype(tok_dtype), "num_rejected_tokens": rejected,
                "num_appendable": budgets.astype(budget_dtype),
                "stop_ids": None if stop_ids is None else stop_ids.astype(ids_dtype)},
        outputs={"stop_pos": Buffer((batch,), "int32"), "stopped": Buffer((batch,), "bool"),
                 "new_num_appendable": Buffer((batch,), budget_dtype)},
    )


def reached(tokens: np.ndarray, budgets: np.ndarray, stop_ids: np.ndarray | None) -> list[str]:
    """The classes read off the drawn rows (whatever scenario put them there): a row that emits one of its
    own stop ids before the token where its budget runs out, that token emitted in this step too (a cap
    checked before the stop ids stops too late: SGLang #31599); a row that emits a stop id of another row
    only (which must not stop it)."""
    if stop_ids is None or not tokens.size or not stop_ids.shape[1]:
        return []
    emitted = tokens != PLACEHOLDER
    own = ((tokens[:, :, None] == stop_ids[:, None, :]) & (stop_ids[:, None, :] != PLACEHOLDER)).any(axis=2)
    own &= emitted
    first = np.where(own.any(axis=1), own.argmax(axis=1), tokens.shape[1])
    runs_out = np.maximum(budgets, 1) - 1          # the index of the token that spends the budget
    found = [BEFORE_THE_CAP] if ((first < runs_out) & (runs_out < emitted.sum(axis=1))).any() else []
    foreign = np.isin(tokens, stop_ids[stop_ids != PLACEHOLDER]) & emitted & ~own
    return found + ([ANOTHER_ROWS] if foreign.any() else [])


@st.composite
def extreme_ids(draw, rng, tokens: np.ndarray, stop_ids: np.ndarray | None, top: int):
    """Hazard: the largest id both dtypes hold (and 0) as tokens and as stop ids, stop rows of one id
    repeated."""
    emitted = tokens != PLACEHOLDER
    tokens = np.where(emitted & (rng.random(tokens.shape) < 0.5), rng.choice([0, top], tokens.shape), tokens)
    if stop_ids is not None and stop_ids.shape[1]:
        stop_ids = stop_ids.copy()
        stop_ids[:, 0] = rng.choice([0, top, PLACEHOLDER], len(stop_ids))
        if draw(st.booleans()):
            label("hazard: one stop id repeated across the row")
            stop_ids[:] = stop_ids[:, :1]
    label("hazard: ids 0 and the dtype's largest")
    return tokens, stop_ids


def spec_stopping_hazard(ctx: DrawContext):
    return spec_stopping_valid(ctx, tier="hazard")


def spec_stopping_invariants(ex: Example, out: dict) -> list[str]:
    """Hazard tier: each row must agree with the token-at-a-time reference."""
    x = ex.inputs
    broken = []
    for r in range(len(x["num_appendable"])):
        ids = None if x["stop_ids"] is None else x["stop_ids"][r]
        _, position, finished, budget = sequential_stopping(x["output_token_ids"][r], x["num_appendable"][r], ids)
        got = (int(out["stop_pos"][r]), bool(out["stopped"].view(np.uint8)[r] == 1),
               int(out["new_num_appendable"][r]))
        if got != (position, finished, budget):
            shown = ", ".join(output_value(out[name][r:r + 1])
                              for name in ("stop_pos", "stopped", "new_num_appendable"))
            broken.append(f"row {r}: (stop_pos, stopped, new_num_appendable) = ({shown}), the one-token-at-a-time "
                          f"check gives {(position, finished, budget)}")
    return broken[:3]


@st.composite
def spec_stopping_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(spec_stopping_valid(ctx))
    x = ex.inputs
    tokens, budgets = x["output_token_ids"], x["num_appendable"]
    batch, width = tokens.shape
    found = [invalid(ex, "output_token_ids", "K+1 >= 1 columns", output_token_ids=tokens[:, :0]),
             invalid(ex, "new_num_appendable", "dtype of num_appendable", outputs={"new_num_appendable": Buffer(
                 (batch,), "int64" if budgets.dtype == np.int32 else "int32")})]
    if batch:
        r = int(draw(st.integers(0, batch - 1)))
        bad = tokens.copy()
        bad[r, 0] = -2
        found.append(invalid(ex, "output_token_ids", "ids >= -1", output_token_ids=bad))
        if width > 1:
            bad = tokens.copy()
            bad[r, :2] = PLACEHOLDER, 3
            found.append(invalid(ex, "output_token_ids", "an id after a -1", output_token_ids=bad))
        low = budgets.copy()
        low[r] = LOWEST[budgets.dtype.name] + width - 1
        found.append(invalid(ex, "num_appendable", "A - emitted fits the dtype", num_appendable=low))
        if x["num_rejected_tokens"] is not None:
            count = x["num_rejected_tokens"].copy()
            count[r] += 1
            found.append(invalid(ex, "num_rejected_tokens", "counts the -1 of its row", num_rejected_tokens=count))
        if x["stop_ids"] is not None and x["stop_ids"].shape[1]:
            ids = x["stop_ids"].copy()
            ids[r, -1] = -5
            found.append(invalid(ex, "stop_ids", "ids >= -1", stop_ids=ids))
        if x["stop_ids"] is not None:
            found.append(invalid(ex, "stop_ids", "one row per request", stop_ids=x["stop_ids"][:-1]))
    return draw(one_invalid(found))


def spec_stopping_table(ex: Example):
    x = ex.inputs
    tokens, rejected, ids = x["output_token_ids"], x["num_rejected_tokens"], x["stop_ids"]
    rows = []
    for r in range(len(tokens)):
        rows.append([r, short(tokens[r]), None if rejected is None else int(rejected[r]),
                     int(x["num_appendable"][r]), None if ids is None else short(ids[r])])
    return ["req", "tokens", "rejected", "budget", "stop ids"], rows


