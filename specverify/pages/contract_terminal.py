"""Stage contracts for a terminal: the packaged contract data (`contract_text`) laid out for people and
wrapped to a width (`specverify show`).

Every line is at most the width (a word longer than the room left is folded). Headings, field names and
inline code carry rich styles, which reach the screen only when the output is a terminal. A field's
meaning stands beside its name where the width leaves it MIN_ROOM columns, else under it; a worked
example's values stand beside their names where they fit, else under them, long rows folded after a
comma.
"""
from __future__ import annotations

import io
import re
import shutil
import textwrap

from rich.console import Console
from rich.text import Text

from specverify.pages.contract_text import INLINE, POINTER, REACHED_NOTE, sentence, signature

MAX_WIDTH = 120          # the text is wrapped to the terminal's width, at most this
MIN_ROOM = 36            # fewest columns a field's meaning gets beside its name before it goes below
CODE, STRONG, HEADING = "cyan", "bold", "bold"

HEAD = re.compile(r"#+ ")
ROW_START = re.compile(r"(\[[\d, ]+\] )?\[")     # "[0] [" or "[" before an array row's values


def inline(text: str) -> Text:
    """Markdown inline text as styled text: code spans, strong and emphasis, their markers dropped."""
    out, pos = Text(), 0
    text = " ".join(text.split())
    for m in INLINE.finditer(text):
        out.append(text[pos:m.start()])
        if m["code"] is not None:
            code = m["code"]
            out.append(code[1:-1] if len(code) > 2 and code[0] == code[-1] == " " else code, style=CODE)
        elif m["strong"] is not None:
            out.append(m["strong"], style=STRONG)
        else:
            out.append(m["em"], style="italic")
        pos = m.end()
    out.append(text[pos:])
    return out


class Page:
    """Lines of styled text, each at most `width` cells."""

    def __init__(self, width: int):
        self.width = width
        self.lines: list[Text] = []
        self.headings: set[int] = set()      # indices of heading lines: no blank line after one
        self.console = Console(width=width, file=io.StringIO())   # measures; prints nothing

    def blank(self) -> None:
        if self.lines and self.lines[-1].plain and len(self.lines) - 1 not in self.headings:
            self.lines.append(Text())

    def heading(self, text: str | Text, indent: int = 0) -> None:
        self.blank()
        self.lines += self.wrapped(text if isinstance(text, Text) else Text(text, style=HEADING), indent)
        self.headings.add(len(self.lines) - 1)

    def wrapped(self, text: Text, indent: int, first: Text | None = None) -> list[Text]:
        """`text` wrapped at column `indent` (each line at most the width), `first` before its first line
        (as wide as the indent). Where that leaves fewer than 12 columns, `first` stands on its own."""
        if self.width - indent < 12:
            alone = self.wrapped(first, 0) if first is not None and first.plain.strip() else []
            return alone + self.wrapped(text, min(6, self.width - 12))
        lines = text.wrap(self.console, self.width - indent, overflow="fold") if text.plain else [Text()]
        out = []
        for i, line in enumerate(lines):
            line.rstrip()
            prefix = first if i == 0 and first is not None else Text(" " * indent)
            out.append(Text.assemble(prefix, line))
        return out

    def prose(self, markdown: str, indent: int = 2) -> None:
        """Paragraphs, `- ` items and headings of a record's prose, at `indent`."""
        for paragraph in markdown.strip().split("\n\n"):
            self.blank()
            for item in re.split(r"\n(?=- |#+ )", paragraph):
                if HEAD.match(item):
                    self.heading(item.split(" ", 1)[1], max(indent - 2, 0))
                elif item.startswith("- "):
                    self.lines += self.wrapped(inline(item[2:]), indent + 2, Text(" " * indent + "- "))
                else:
                    self.lines += self.wrapped(inline(item), indent)

    def folded(self, text: str, indent: int, hang: int, style: str = "") -> None:
        """Preformatted text at `indent`, broken at spaces where it is too wide, later lines at `hang`."""
        hang = hang if self.width - hang >= 16 else indent + 4
        for line in textwrap.wrap(text, max(self.width, indent + 8), initial_indent=" " * indent,
                                  subsequent_indent=" " * hang, break_long_words=True, break_on_hyphens=False,
                                  drop_whitespace=True) or [""]:
            self.lines.append(Text(line, style=style))

    def title(self, text: str) -> None:
        """A title underlined with "=" (what sets it apart where there are no styles)."""
        self.blank()
        self.lines += self.wrapped(Text(text, style=HEADING), 0)
        self.lines.append(Text("=" * min(len(text), self.width), style=HEADING))
        self.headings.add(len(self.lines) - 1)

    def text(self) -> Text:
        """The lines as one text, ending in a newline."""
        while self.lines and not self.lines[-1].plain:
            self.lines.pop()
        return Text("\n").join(self.lines + [Text()])


def fields(page: Page, stage: dict) -> None:
    """The fields: name, in/out, dtype and shape, flags; the meaning beside them or under them."""
    page.heading("Fields")
    heads = []
    for f in stage["fields"]:
        kind = f["dtype"] + (f" [{f['shape']}]" if f["shape"] else ", a scalar")
        flags = [flag for flag in ("optional", "strided") if f[flag]]
        heads.append((f["name"], f["role"], kind + "".join(f", {flag}" for flag in flags)))
    name_w = max(len(h[0]) for h in heads)
    kind_w = max(len(h[2]) for h in heads)
    column = 2 + name_w + 2 + 6 + 2 + kind_w + 2
    beside = page.width - column >= MIN_ROOM
    for (name, role, kind), f in zip(heads, stage["fields"]):
        head = Text.assemble("  ", (f"{name:<{name_w}}", CODE), f"  {role:<6}  ")
        if beside:
            page.lines += page.wrapped(inline(f["doc"]), column, Text.assemble(head, f"{kind:<{kind_w}}  "))
        else:
            page.lines += page.wrapped(Text(kind), len(head.plain), head)
            page.lines += page.wrapped(inline(f["doc"]), 6)


def worked(page: Page, example: dict) -> None:
    """A worked example: its caption, then its sections of named values."""
    if example["caption"]:
        page.prose(example["caption"])
    entries = [e for section in example["sections"] for e in section["entries"]]
    name_w = max((len(e["name"]) for e in entries), default=0)
    kind_w = max((len(e["kind"]) for e in entries), default=0)
    for section in example["sections"]:
        page.heading(section["title"], 2)
        for e in section["entries"]:
            head = f"{e['name']:<{name_w}}  {e['kind']:<{kind_w}}"
            note = f"  ({e['note']})" if e["note"] else ""
            one = f"    {head}  {e['lines'][0]}{note}" if len(e["lines"]) == 1 else ""
            if one and len(one) <= page.width:
                page.lines.append(Text(one))
                continue
            page.folded((head + note).rstrip(), 4, 8)
            for line in e["lines"]:
                start = ROW_START.match(line)
                page.folded(line, 8, 8 + (start.end() if start else 4))


def stage_page(page: Page, stage: dict) -> None:
    """One stage: doc line, call, fields, contract, tiers, worked example, declarable, dialects."""
    page.title(stage["name"])
    if stage["doc"]:
        page.lines += page.wrapped(inline(sentence(stage["doc"])), 0)
    kind = "host stage: returns Python values" if stage["host"] else "device stage: writes its output buffers"
    page.heading(f"Call ({kind})")
    for line in signature(stage, max(page.width - 2, 24)):
        page.folded(line, 2, 10)
    fields(page, stage)
    page.heading("Contract")
    page.prose(stage["semantics"] or "(not written yet)")
    page.heading("Input tiers")
    for tier, text in stage["tiers"]:
        page.lines += page.wrapped(Text.assemble((tier, STRONG), ": ", inline(text)), 4, Text("  - "))
    if stage["not_drawn"]:
        page.lines += page.wrapped(Text(f"not drawn for this stage: {', '.join(stage['not_drawn'])}"), 4,
                                   Text("  - "))
    page.heading("Worked example")
    if stage["worked"] is None:
        page.prose("(none yet)")
    else:
        worked(page, stage["worked"])
    if stage["declarable"]:
        page.heading("What a declared domain may restrict")
        page.prose("Each with its reason, in a `--declare` file or a vendor's table (README: Declared domains):\n"
                   + "\n".join(f"- {item}" for item in stage["declarable"]))
    if stage.get("randomness"):
        page.heading("Random numbers")
        page.prose(stage["randomness"])
    if stage.get("requests"):
        page.heading("Requests")
        page.prose(stage["requests"])
    if stage.get("reached"):
        page.heading("Input classes every run reaches")
        page.prose(REACHED_NOTE + "\n" + "\n".join(f"- {item}" for item in stage["reached"]))
    for d in stage["dialects"]:
        page.heading(Text.assemble(("Dialect ", HEADING), (d["name"], f"{HEADING} {CODE}")))
        page.prose(sentence(d["doc"]))
        page.prose(d["rule"])
        found = ", ".join(f"{backend} (`{path}`)" for backend, path in d["impls"].items())
        page.prose(f"Our implementations of it: {found}." if found else "No implementation of ours follows it.")
        worked(page, d["worked"])


def terminal_text(data: dict, stages: list[dict] | None, width: int) -> Text:
    """What `specverify show` prints: the named stages and where the conventions are, or (none named)
    the conventions, an index and every stage."""
    page = Page(width)
    if stages:
        for stage in stages:
            stage_page(page, stage)
        page.prose(POINTER, 0)
        return page.text()
    page.title("specverify stage contracts")
    page.prose(data["conventions"], 2)
    page.heading("Stages")
    name_w = max(len(s["name"]) for s in data["stages"])
    for s in data["stages"]:
        head = Text.assemble("  ", (f"{s['name']:<{name_w}}", CODE), "  ")
        if page.width - len(head.plain) >= MIN_ROOM:
            page.lines += page.wrapped(inline(s["doc"]), len(head.plain), head)
        else:
            page.lines += page.wrapped(head, 0) + page.wrapped(inline(s["doc"]), 6)
    for stage in data["stages"]:
        stage_page(page, stage)
    return page.text()


def width_here() -> int:
    """The width to wrap to: COLUMNS, else the terminal's, else 80 (output that is no terminal), at most
    MAX_WIDTH and at least 20."""
    return max(20, min(shutil.get_terminal_size((80, 24)).columns, MAX_WIDTH))


def show(data: dict, stages: list[dict]) -> None:
    """Print `terminal_text` to stdout, wrapped to `width_here()` (styles only on a terminal)."""
    console = Console(highlight=False, emoji=False, soft_wrap=True)
    console.print(terminal_text(data, stages, width_here()), end="")
