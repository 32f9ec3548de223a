"""Every stage's contract as plain data generated from the records (`specverify.stages.*`), and the
files made of it: `specverify/contracts.json` (shipped in the package: what `specverify show` prints,
without loading the records or torch) and `docs/stages.md` (the conventions, an index and every
stage, as Markdown). `specverify.pages.contract_text` renders the data.

The fields table comes from `Stage.inputs` and `Stage.outputs`, the prose from `Stage.doc`,
`Stage.semantics` and `Stage.tiers`, and the worked example from `Stage.worked`, whose outputs are
computed here by running the oracle.

Regenerate both files with `python -m specverify.pages.contract_data`; `--check` exits 1 when one is out of date.
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from specverify.pages import contract_text
from specverify.pages.contract_text import PACKAGED, UNTOUCHED
from specverify.records.stage import TIERS, Example, Field, Stage
from specverify.records.values import GUARD, GUARD_B, GUARD_BYTES, POISON_A, POISON_B

DOCS = Path(__file__).resolve().parents[2] / "docs" / "stages.md"
REGENERATE = "python -m specverify.pages.contract_data"
MAX_ROW = 24             # values shown per row of an array before "..."
MAX_ROWS = 16            # rows shown of an array before "... N more rows"

CONVENTIONS = f"""\
## Conventions every stage follows

**Names.** B is the number of requests, T the number of draft tokens in the batch, V the vocabulary
size, S = `max_spec_len` (at least every request's draft count), K the fixed draft count of the padded
layout. Request r has n[r] drafts. Other sizes (N, NB, P, ...) are named in the stage's field table.

**Offsets.** Inclusive offsets (`cu_num_draft_tokens`, `cu_num_tokens`, `cu_num_scheduled_tokens`) hold
B running totals without a leading 0: request r owns positions start(r) .. cu[r] - 1, where start(0) = 0
and start(r) = cu[r-1], so n[r] = cu[r] - start(r). Exclusive offsets (`query_start_loc`) hold B + 1
entries starting at 0: request r owns qsl[r] .. qsl[r+1] - 1.

**Token ids.** -1 is the placeholder: a slot with no token (rejected, not emitted, padding). An id is
valid when 0 <= id < V. Ids >= V (out of vocabulary) are legal input, since engines produce them (padded
vocabularies, NaN rows); a stage that reads probabilities never reads them at such an id. Ids below -1
are invalid input.

**Calling convention (destination passing).** An implementation is a function called with keyword
arguments only, named exactly as the stage's fields: arrays as tensors on the device under test (NumPy
arrays for the oracle), integer and boolean scalars as Python values, `None` for an absent optional
field. Outputs are buffers the caller allocated; the function writes into them and returns nothing.
A host stage instead takes its arrays in the containers an engine passes (lists, ndarrays, CPU tensors)
and returns Python values, compared by value and by type.

**Defined region.** Each output has a defined region, the elements the contract writes (stated per stage
below). Every other element must be left exactly as it was. The harness fills each output buffer with
the byte 0x{POISON_A:02X} before the call and reads back the whole buffer, so a missing write and a
stray write are both caught (the oracle also runs over 0x{POISON_B:02X}: the elements that differ
between its two runs are the ones it leaves alone). In the worked examples `{UNTOUCHED}` marks an element
the stage leaves untouched.

**Guard bytes.** Every array, input or output, contiguous or strided, is handed over as a view that
starts {GUARD_BYTES} bytes into a larger allocation and ends {GUARD_BYTES} bytes before its end. Around
an input's view (and between the elements of a strided view) those bytes hold 0x{GUARD:02X}; around an
output they hold its poison. A write there is a failure ("write past the end of `x` by 1 element"), and
so is any change to an input. When a failure is found, on every example in the conformance profile and
on the first of every four in the ci and nightly profiles, the call is repeated with the inputs' guard
bytes changed to 0x{GUARD_B:02X}: an output that changes, or a call that now fails (raises, dies, hangs),
reads outside an input, and the input is named. Inputs are read-only unless their field is marked
in/out.

**Strides.** A field marked *strided* may arrive as a non-contiguous view (rows further apart than their
length, steps over elements); use its strides. Other fields arrive contiguous.

**Byte identity.** On valid input the defined region must equal the oracle's bytes: same dtype, same
shape, same bits (so -0.0 differs from 0.0 and NaN payloads count). A dtype written `int32 or int64`
accepts either; an output whose meaning says "dtype of X" takes X's dtype. Randomness (uniforms, noise)
is an input, so every stage is a deterministic function. Float arithmetic named in a contract is IEEE
single precision with round to nearest; a division must be correctly rounded, not approximate.

**Input tiers.** The suite draws three kinds of input:
- *valid*: the contract's domain; byte identity with the oracle is required.
- *hazard*: in the domain but pathological (NaN or infinite probabilities, out-of-vocabulary drafts
  where probabilities are read); the exact bytes are not compared, but the stage must stay memory safe,
  leave its inputs and every guard byte unchanged, keep the invariants its text states (for example:
  every emitted id is valid), and write nothing outside the rows (first axis) the oracle writes to: the
  gaps of strided outputs and untouched rows keep their poison.
- *invalid*: outside the domain; the oracle and the Torch kernels raise `ValueError` or `TypeError`
  whose message names the offending field. Kernels check argument values on CUDA only in checked mode
  (`SPECVERIFY_CHECKED=1`), since reading values synchronizes the device. Outside implementations
  (`--impl`) are not required to validate, and this tier is skipped for them.
"""



# --- values -------------------------------------------------------------------------------------------

def number(value: Any) -> str:
    """One scalar as a reader wants it: ints plain, floats in the shortest form that round-trips."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, np.generic) and value.dtype.kind == "V" and value.dtype.itemsize <= 2:
        value = np.float64(float(value))    # bfloat16 and fp8 (ml_dtypes): their exact value
    if isinstance(value, (float, np.floating)):
        x = value if isinstance(value, np.floating) else np.float64(value)
        if np.isfinite(x) and x != 0 and not 1e-4 <= abs(x) < 1e7:
            return np.format_float_scientific(x, unique=True, trim="0")
        return np.format_float_positional(x, unique=True, trim="0")
    return repr(value)


def row_text(values, untouched) -> str:
    cells = [UNTOUCHED if u else number(v) for v, u in zip(values[:MAX_ROW], untouched[:MAX_ROW])]
    return "[" + ", ".join(cells) + (", ..." if len(values) > MAX_ROW else "") + "]"


def array_lines(a: np.ndarray, untouched: np.ndarray | None = None) -> list[str]:
    """An array as text: a 0-d or 1-d array on one line, a larger one a row per line with its index."""
    if untouched is None:
        untouched = np.zeros(a.shape, bool)
    if a.ndim == 0:
        return [UNTOUCHED if untouched else number(a[()])]
    if a.ndim == 1:
        return [row_text(a, untouched)]
    lead = list(np.ndindex(*a.shape[:-1]))
    lines = [f"[{', '.join(map(str, i))}] {row_text(a[i], untouched[i])}" for i in lead[:MAX_ROWS]]
    if len(lead) > MAX_ROWS:
        lines.append(f"... {len(lead) - MAX_ROWS} more rows")
    return lines


def host_lines(value: Any) -> list[str]:
    """A host stage's Python value: one line, or one line per item of a long list."""
    text = repr(value)
    if len(text) <= 88 or not isinstance(value, (list, tuple)):
        return [text]
    return [repr(item) + "," for item in value[:MAX_ROWS]] + (
        [f"... {len(value) - MAX_ROWS} more"] if len(value) > MAX_ROWS else [])




def entry(name: str, kind: str, lines: list[str], note: str = "") -> dict:
    """One named value of a worked example: its kind (dtype and shape, or type) and its lines."""
    return {"name": name, "kind": kind, "lines": lines, "note": note}


def kind_of(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}[{', '.join(map(str, value.shape))}]"
    return "" if value is None else type(value).__name__


def strides_note(value: np.ndarray, layout) -> str:
    """The element strides of the view an input or output is handed over as."""
    base = np.empty(layout.base_shape(tuple(value.shape)), np.uint8)
    view = base[layout.view_index(tuple(value.shape))]
    return f"strided view, element strides ({', '.join(map(str, view.strides))})"


# --- the worked example -------------------------------------------------------------------------------

def worked_data(stage: Stage, example: Example, caption: str | None) -> dict:
    """The example's caption, its inputs and the outputs the oracle computes from them (sections of
    named values)."""
    from specverify.judge.harness import output_views, run_oracle

    inputs = []
    for name, value in example.inputs.items():
        notes = []
        if name in example.layouts and isinstance(value, np.ndarray):
            notes.append(strides_note(value, example.layouts[name]))
        if name in example.containers and value is not None:
            container = example.containers[name]
            notes.append(f"passed as {'an' if container[0] in 'aeiou' else 'a'} {container}")
        shown = array_lines(value) if isinstance(value, np.ndarray) else [number(value) if value is not None
                                                                         else "None"]
        inputs.append(entry(name, kind_of(value), shown, "; ".join(notes)))
    sections = [{"title": "inputs", "entries": inputs}]
    if stage.host:
        *_, result = run_oracle(stage, example, POISON_A)
        parts = result if isinstance(result, tuple) and len(result) == len(stage.outputs) else (result,)
        names = [f.name for f in stage.outputs] if len(parts) == len(stage.outputs) else ["result"]
        sections.append({"title": "returns", "entries": [entry(name, type(part).__name__, host_lines(part))
                                                         for name, part in zip(names, parts)]})
        return {"caption": caption or "", "sections": sections}
    plan_a, _, after_a, _ = run_oracle(stage, example, POISON_A)
    plan_b, _, after_b, _ = run_oracle(stage, example, POISON_B)
    views_a, views_b = output_views(plan_a, after_a), output_views(plan_b, after_b)
    outputs = []
    for name, view in views_a.items():
        other = views_b[name]
        untouched = (view.reshape(-1, 1).view(np.uint8) != other.reshape(-1, 1).view(np.uint8)).any(1)
        note = "in/out: after the call" if name not in example.outputs else ""
        buffer = example.outputs.get(name)
        if buffer is not None and buffer.layout is not None:
            note = strides_note(view, buffer.layout)
        outputs.append(entry(name, kind_of(view), array_lines(view, untouched.reshape(view.shape)), note))
    sections.append({"title": f"outputs ({UNTOUCHED} = left untouched)", "entries": outputs})
    return {"caption": caption or "", "sections": sections}


# --- one stage ----------------------------------------------------------------------------------------

def dtype_text(dtype: str) -> str:
    names = dtype.split("|")
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def field_data(f: Field, role: str) -> dict:
    return {"name": f.name, "role": "in/out" if f.inout else role, "dtype": dtype_text(f.dtype),
            "shape": f.shape, "optional": f.optional, "strided": f.strided, "doc": f.doc}


def stage_data(stage: Stage) -> dict:
    """One stage's contract as plain data (what `contract_text` renders): doc line, call, fields,
    semantics, tiers, worked example, what a declared domain may restrict, dialects."""
    drawn = [t for t in TIERS if stage.strategy(t) is not None]
    names = [f.name for f in stage.inputs] + ([] if stage.host else [f.name for f in stage.outputs])
    result = ("(" + ", ".join(f.name for f in stage.outputs) + ")" if len(stage.outputs) > 1
              else stage.outputs[0].name) if stage.host and stage.outputs else "None"
    return {"name": stage.name, "doc": stage.doc, "host": stage.host,
            "call": {"arguments": names, "returns": result},
            "fields": [field_data(f, "in") for f in stage.inputs] + [field_data(f, "out") for f in stage.outputs],
            "semantics": stage.semantics.strip(),
            "tiers": [[t, stage.tiers.get(t, "(not described yet)").strip()] for t in TIERS
                      if t in stage.tiers or t in drawn],
            "not_drawn": [t for t in TIERS if t not in drawn and t not in stage.tiers],
            "worked": None if stage.worked is None else worked_data(stage, stage.worked(),
                                                                     inspect.getdoc(stage.worked)),
            "declarable": declarable_items(stage), "dialects": dialect_data(stage),
            "randomness": randomness_text(stage), "requests": requests_text(stage), "reached": reached_items(stage)}


def reached_items(stage: Stage) -> list[str]:
    """The input classes the record names (`Stage.floors`): what every ci run draws, and why each matters."""
    from specverify.runs.profiles import PROFILES

    count = PROFILES["ci"].examples
    return [f"{floor.tier}: {floor.label} (in at least {floor.least} of {count[floor.tier]} examples"
            f"{', also at the Triton interpreter sizes' if floor.interpreted else ''}): {floor.why}"
            for floor in stage.floors]


def requests_text(stage: Stage) -> str:
    """What the record promises of its requests' independence ("" where it promises nothing)."""
    if stage.twin is None:
        return ""
    return ("Requests are independent: each request's outputs depend on its own inputs and the shared scalars "
            "only. The `independent` check calls every drawn valid case twice, the second time with one request's "
            "inputs changed, and requires every other request's output bytes to stay the same, whatever rule the "
            "implementation follows (a dialect that pools the requests is not asked).")


def randomness_text(stage: Stage) -> str:
    """What a sampling stage's random numbers are and how an implementation declares its own ("" for none)."""
    from specverify.judge.laws import FAMILY_ALPHA

    source = stage.randomness
    if source is None:
        return ""
    if source.protocol is None:
        replay = (f"The oracle uses the uniforms it is given ({', '.join(f'`{f}`' for f in source.fields)}): an "
                  f"implementation that uses them is judged byte for byte (declare nothing, or "
                  f"`randomness = \"inputs\"`).")
    else:
        table = ", ".join(f'{k} = "{v}"' for k, v in vars(source.protocol).items())
        replay = (f"The oracle regenerates the stream: {source.replayed()}. An implementation that draws exactly "
                  f"this stream is judged byte for byte (declare nothing, or the protocol table `[randomness]` "
                  f"{table}; a table with any other value is refused).")
    return (f"{replay} An implementation with random numbers of its own declares `randomness = \"own\"`: the "
            f"`distribution` check then judges its outputs by the laws of speculative sampling on fixed panels "
            f"(the accepted-length law, the acceptance and the emitted token's law at every position, rows of one "
            f"launch and successive calls independent, the same bytes for the same seed and offset where they key "
            f"the generator; a family-wise false-alarm rate of {FAMILY_ALPHA:g}), and every other check judges by "
            f"bytes only what no draw decides: inputs unchanged, nothing written outside the rows the contract "
            f"writes, guards and gaps intact. `--check distribution` asks it of any implementation.")


def declarable_items(stage: Stage) -> list[str]:
    """What an outside implementation's declared domain may say of this stage (`specverify.records.domain`)."""
    from specverify.records.domain import declarable

    allowed, items = declarable(stage), []
    for name, f in allowed["fields"].items():
        if f["layouts"]:
            items.append(f"`{name}`: layout `contiguous` or `rows` (unit column step)")
        if f["dtypes"] and not f["dtype_follows"]:
            items.append(f"`{name}`: dtypes, a part of {', '.join(f['dtypes'])}")
        if f["dtype_follows"]:
            items.append(f"`{name}`: has the dtype of `{f['dtype_follows']}`")
        if f["optional"]:
            items.append(f"`{name}`: `given = false` (always None) or `given = true` (always given)")
    items += [f"bound on `{name}` (the contract: `{name} >= {low}`)" if name not in allowed["measured"] else
              f"upper bound on `{name}`, {MEASURED_WORDS.get(name, 'a most over the call')} (the contract: none)"
              for name, low in allowed["bounds"].items()]
    items += [f"`{name}`: values, a part of {{{', '.join(str(v) for v in values)}}}"
              for name, values in allowed["values"].items()]
    items += [f"excludes `{klass}` ({field}: {CLASS_WORDS[kind]})"
              for klass, (field, kind) in allowed["classes"].items()]
    return items


MEASURED_WORDS = {"max_spec_len": "the most tokens of one request"}
CLASS_WORDS = {"oov": "an id >= V", "placeholder": "a -1", "true": "a True entry"}


def dialect_data(stage: Stage) -> list[dict]:
    """Each dialect of the record: its doc, its rule, our implementations of it and its worked example,
    whose outputs its own oracle computes."""
    from specverify.records.dialects import judged

    return [{"name": name, "doc": d.doc, "rule": d.rule.strip(), "impls": dict(d.impls),
             "worked": worked_data(judged(stage, name), d.worked(), inspect.getdoc(d.worked))}
            for name, d in stage.dialects.items()]


# --- every stage --------------------------------------------------------------------------------------

def contract_data() -> dict:
    """The conventions and every registered stage, in registry order (what `contracts.json` holds)."""
    from specverify.records import registry

    return {"conventions": CONVENTIONS, "stages": [stage_data(s) for s in registry.all_stages().values()]}


def packaged_text(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def render(stage: Stage) -> str:
    """One stage's contract as Markdown."""
    return contract_text.stage_markdown(stage_data(stage))


def render_all() -> str:
    """docs/stages.md: the conventions, an index and every registered stage."""
    return contract_text.all_markdown(contract_data())


def show_text(stages: list[Stage] | None) -> str:
    """`specverify show --markdown` of these records: the named stages with a pointer to the conventions,
    or everything."""
    if not stages:
        return render_all()
    return contract_text.show_markdown([stage_data(s) for s in stages])


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(prog=REGENERATE, description="write docs/stages.md and the packaged "
                                                                "contracts from the stage records")
    args.add_argument("--check", action="store_true", help="exit 1 if a file is out of date, write nothing")
    args.add_argument("--path", type=Path, default=DOCS, help="the Markdown (default docs/stages.md)")
    args.add_argument("--packaged", type=Path, default=PACKAGED,
                      help="what `specverify show` reads (default specverify/contracts.json)")
    opts = args.parse_args(argv)
    data = contract_data()
    wanted = {opts.path: contract_text.all_markdown(data), opts.packaged: packaged_text(data)}
    stale = [path for path, text in wanted.items() if (path.read_text() if path.exists() else None) != text]
    if opts.check:
        for path in stale:
            print(f"{path} is out of date: run `{REGENERATE}`", file=sys.stderr)
        return 1 if stale else 0
    from specverify.files.cases import write_atomic

    for path, text in wanted.items():
        if path in stale:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text.encode())
        print(f"{path}: {'written' if path in stale else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
