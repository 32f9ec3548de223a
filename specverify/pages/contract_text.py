"""Stage contracts as Markdown, from the data `python -m specverify.pages.contract_data` generates from the records
and ships in the package (`contracts.json`): `docs/stages.md` and `specverify show --markdown`; and
reading that file, with the stage selection of `specverify show` (`contract_terminal` lays it out for
a terminal).

Only the standard library is imported here: reading the contracts loads neither the records nor NumPy
nor torch. The prose of a record (semantics, tiers, rules, captions) is Markdown of a small kind:
paragraphs, `- ` items, `code`, **strong** and *emphasis*; the terminal layout reads that kind.
"""
from __future__ import annotations

import difflib
import fnmatch
import json
import re
import textwrap
from pathlib import Path

PACKAGED = Path(__file__).resolve().parents[1] / "contracts.json"
UNTOUCHED = "-"          # an output element the stage leaves as it found it
WIDTH = 108              # Markdown prose is wrapped to this many characters
POINTER = ("Conventions every stage follows (offsets, placeholders, destination passing, poison and guard "
           "bytes, tiers): `specverify show` without a stage, or docs/stages.md in the repository.")


def load(path: Path | None = None) -> dict:
    """The packaged contracts (or those at `path`): {"conventions": Markdown, "stages": [stage data, in
    registry order]}."""
    data = json.loads((path or PACKAGED).read_text(encoding="utf-8"))
    stages = data.get("stages") if isinstance(data, dict) else None
    if not (isinstance(stages, list) and isinstance(data.get("conventions"), str)
            and all(isinstance(s, dict) and "name" in s for s in stages)):
        raise ValueError("not the contracts python -m specverify.pages.contract_data writes")
    return data


def select(data: dict, patterns: list[str]) -> list[dict]:
    """The stages matching any of the names or glob patterns, in the order asked; LookupError naming the
    closest stages for a pattern that matches none."""
    by_name = {s["name"]: s for s in data["stages"]}
    chosen: dict[str, dict] = {}
    for pattern in patterns:
        found = [name for name in by_name if fnmatch.fnmatchcase(name, pattern)]
        if not found:
            raise LookupError(no_stage(pattern, list(by_name)))
        chosen.update((name, by_name[name]) for name in found)
    return list(chosen.values())


def no_stage(pattern: str, names: list[str]) -> str:
    """One line for a pattern that matches no stage: the closest names, else the stages of its family,
    else the families."""
    family, _, short = pattern.rpartition(".")
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.split(".", 1)[0], []).append(name.split(".", 1)[1])
    if pattern in groups:
        return f"{pattern!r} is a family, not a stage; '{pattern}.*' selects its stages ({', '.join(groups[pattern])})"
    if family and family not in groups:      # a misspelt family: the closest one
        family = next(iter(difflib.get_close_matches(family, list(groups), n=1, cutoff=0.6)), family)
    if family in groups:
        close = [f"{family}.{s}" for s in difflib.get_close_matches(short, groups[family], n=3, cutoff=0.6)]
    else:
        shorts = {s: f"{f}.{s}" for f, found in groups.items() for s in found}
        close = [shorts[s] for s in difflib.get_close_matches(short, list(shorts), n=3, cutoff=0.75)]
    if close:
        return f"{pattern!r} is not a stage; did you mean {' or '.join(close[:3])}?"
    if family in groups:
        return f"{pattern!r} matches no stage ({family} has {', '.join(groups[family])})"
    return f"{pattern!r} matches no stage (families: {', '.join(sorted(groups))}; 'FAMILY.*' selects one)"


# --- Markdown -------------------------------------------------------------------------------------------

RISKY = re.compile(r"([-+*>]|\d+[.)])(\s|=|$)")    # would open a list or a quote at the start of a line
# the inline markup of a record's prose: a code span, **strong**, *emphasis* (a `*` inside a word, as in
# b*N or 2**31, is arithmetic)
INLINE = re.compile(r"(?P<ticks>`+)(?P<code>.+?)(?P=ticks)"
                    r"|(?<![\w*])\*\*(?P<strong>\S(?:.*?\S)?)\*\*(?![\w*])"
                    r"|(?<![\w*])\*(?P<em>[^\s*](?:[^*]*?[^\s*])?)\*(?![\w*])")


STAR = re.compile(r"(?<!\s)\*|\*(?!\s)")    # a `*` that could open or close emphasis (not spaced: u * q)


def prose(text: str) -> str:
    """A record's prose for Markdown: each `*` of its arithmetic that a renderer could read as emphasis
    (b*N, 2**31) escaped; its code spans and markup (INLINE) kept."""
    out, pos = [], 0
    for m in INLINE.finditer(text):
        out += [STAR.sub(r"\\*", text[pos:m.start()]), m.group(0)]
        pos = m.end()
    return "".join(out) + STAR.sub(r"\\*", text[pos:])


def wrap(text: str, indent: str = "") -> list[str]:
    """Prose wrapped to WIDTH, no line starting with something Markdown reads as a list or a quote."""
    lines = textwrap.wrap(" ".join(text.split()), WIDTH, subsequent_indent=indent, break_long_words=False,
                          break_on_hyphens=False)
    for i in range(1, len(lines)):
        while RISKY.match(lines[i].lstrip()) and " " in lines[i - 1].strip():
            head, word = lines[i - 1].rsplit(" ", 1)
            lines[i - 1], lines[i] = head, indent + word + " " + lines[i].lstrip()
    return lines


def reflow(text: str) -> str:
    """Paragraphs and "- " bullet items of plain prose, rewrapped to WIDTH."""
    blocks = []
    for paragraph in prose(text).strip().split("\n\n"):
        items = re.split(r"\n(?=- )", paragraph)
        blocks.append("\n".join(line for item in items
                                 for line in wrap(item, "  " if item.startswith("- ") else "")))
    return "\n\n".join(blocks) + "\n"


def sentence(text: str) -> str:
    return text + ("" if text.endswith(".") else ".")


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def signature(stage: dict, width: int) -> list[str]:
    """The call an implementation must accept, wrapped to `width`."""
    call = stage["call"]
    return textwrap.wrap(f"impl(*, {', '.join(call['arguments'])}) -> {call['returns']}", width,
                         subsequent_indent=" " * 8, break_long_words=False, break_on_hyphens=False)


def field_row(f: dict) -> str:
    shape = f"`[{f['shape']}]`" if f["shape"] else "scalar"
    return (f"| `{f['name']}` | {f['role']} | {cell(f['dtype'])} | {cell(shape)} | {'yes' if f['optional'] else ''} "
            f"| {'yes' if f['strided'] else ''} | {cell(prose(f['doc']))} |")


def entry_lines(e: dict) -> list[str]:
    """`name  kind  value` with a multi-line value indented under it."""
    head = f"  {e['name']:<28} {e['kind']:<14}"
    note = f"   ({e['note']})" if e["note"] else ""
    if len(e["lines"]) == 1 and len(e["lines"][0]) <= 60:
        return [f"{head} {e['lines'][0]}{note}".rstrip()]
    return [f"{head}{note}".rstrip()] + [f"      {line}" for line in e["lines"]]


def worked_markdown(worked: dict) -> list[str]:
    out = [*wrap(prose(worked["caption"])), ""] if worked["caption"] else []
    body = [line for section in worked["sections"]
            for line in [section["title"], *(x for e in section["entries"] for x in entry_lines(e))]]
    return out + ["```", *body, "```", ""]


def stage_markdown(s: dict) -> str:
    """One stage's contract as Markdown: doc line, call, fields, semantics, tiers, worked example."""
    out = [f"## {s['name']}", ""]
    if s["doc"]:
        out += [sentence(prose(s["doc"])), ""]
    kind = "host stage: returns Python values" if s["host"] else "device stage: writes its output buffers"
    out += [f"Call ({kind}):", "", "```", *signature(s, WIDTH), "```", ""]
    out += ["| field | in/out | dtype | shape | optional | strided | meaning |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    out += [field_row(f) for f in s["fields"]]
    out += ["", "### Contract", "", prose(s["semantics"]) or "(not written yet)", "", "### Input tiers", ""]
    for tier, text in s["tiers"]:
        out += wrap(f"- **{tier}**: {prose(text)}", "  ")
    if s["not_drawn"]:
        out.append(f"- not drawn for this stage: {', '.join(s['not_drawn'])}")
    out += ["", "### Worked example", ""]
    out += ["(none yet)", ""] if s["worked"] is None else worked_markdown(s["worked"])
    if s["declarable"]:
        out += ["### What a declared domain may restrict", "",
                *wrap("Each with its reason, in a `--declare` file or a vendor's table (README: Declared domains):"),
                "", *[f"- {prose(item)}" for item in s["declarable"]], ""]
    if s.get("randomness"):
        out += ["### Random numbers", "", *wrap(prose(s["randomness"])), ""]
    if s.get("requests"):
        out += ["### Requests", "", *wrap(prose(s["requests"])), ""]
    if s.get("reached"):
        out += ["### Input classes every run reaches", "", *wrap(prose(REACHED_NOTE)), "",
                *[line for item in s["reached"] for line in wrap(f"- {prose(item)}", "  ")], ""]
    for d in s["dialects"]:
        out += [f"### Dialect `{d['name']}`", "", sentence(prose(d["doc"])), "", prose(d["rule"]), "", ours(d), ""]
        out += worked_markdown(d["worked"])
    return "\n".join(out)


REACHED_NOTE = ("The classes a bug in this stage is most likely to hide in (its contract's edges and the bugs engines "
                "shipped). The draws of every run of the ci profile (seeds 0 to 3 measured, in the test suite) hold "
                "each at least as often as shown; `specverify check --coverage` prints what a run drew.")


def ours(dialect: dict) -> str:
    found = ", ".join(f"{backend} (`{path}`)" for backend, path in dialect["impls"].items())
    return f"Our implementations of it: {found}." if found else "No implementation of ours follows it."


def anchor(name: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^a-z0-9_ -]", "", name.lower()).replace(" ", "-")


def all_markdown(data: dict) -> str:
    """docs/stages.md: the conventions, an index and every stage."""
    out = ["# specverify stage contracts", "",
           "Generated from the stage records by `python -m specverify.pages.contract_data`; do not edit by hand. "
           "`specverify show STAGE` prints one stage.", "",
           reflow(data["conventions"]), "## Stages", "", "| stage | what it does |", "| --- | --- |"]
    out += [f"| [`{s['name']}`](#{anchor(s['name'])}) | {cell(prose(s['doc']))} |" for s in data["stages"]]
    out.append("")
    out += [stage_markdown(s) for s in data["stages"]]
    return "\n".join(out).rstrip("\n") + "\n"


def show_markdown(stages: list[dict]) -> str:
    """What `specverify show --markdown STAGE...` prints: the stages, then where the conventions are."""
    return "\n".join(stage_markdown(s) for s in stages) + "\n" + "\n".join(wrap(POINTER)) + "\n"
