"""Vendors: one name for a whole set of outside implementations.

A vendor package declares in one place which stages it implements, as a mapping of stage name to
"module:function" (or to the function itself, when it is a module-level function):

    # acme_kernels/specverify_vendor.py
    IMPLEMENTATIONS = {"rejection.expand": "acme_kernels.rejection:expand", ...}

A stage's value may instead be a table naming the implementation and what it declares about it (see
`specverify.records.domain`): its declared domain, the rule dialect it follows, and whether it validates its
arguments (then the invalid tier is asked of it). The declaration must be JSON-safe data:

    IMPLEMENTATIONS = {"eagle.next_token_padded": {
        "impl": "acme_kernels.eagle:next_token", "validates": True,
        "domain": {"fields": {"sampled_token_ids": {"layout": "rows", "reason": "the caller passes [B, K+1]"}},
                   "bounds": {"B <= 4096": "the scheduler's max_num_seqs"}}}}

and registers the declaration under the entry-point group `specverify.files.vendors` in its pyproject.toml:

    [project.entry-points."specverify.files.vendors"]
    acme = "acme_kernels.specverify_vendor:IMPLEMENTATIONS"

`specverify check --vendor acme` finds the entry point by name (reading installed metadata only);
`--vendor MODULE` or `--vendor MODULE:ATTR` names a declaration directly (ATTR defaults to
IMPLEMENTATIONS). The declaration is read in a worker process, like every call of the implementations:
the judge never imports vendor code. An empty name, a name that resolves to nothing, a declaration that
does not import or is not such a mapping, or one naming a stage this suite does not know is a
VendorError (one line, exit status 2); a declared domain the stage's record does not allow is a
DomainError (the same).
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Mapping

GROUP = "specverify.files.vendors"
DEFAULT_ATTR = "IMPLEMENTATIONS"
IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
MAX_ANSWER = 1 << 20
READ_TIMEOUT = 300.0     # seconds to import a declaration, where the run sets no per-call limit


class VendorError(LookupError):
    """A vendor that cannot be resolved (bad usage)."""


@dataclass(frozen=True)
class Vendor:
    name: str
    declaration: str                    # "module:attr" the implementations were read from
    distribution: str                   # "name version" of the installed package registering it ("" if none)
    implementations: dict[str, str]     # stage -> "module:function", in the suite's stage order
    declarations: dict[str, dict] = field(default_factory=dict)   # stage -> {"domain", "dialect", "validates"}


def registered() -> dict[str, list]:
    """Every entry point of the group, by name (metadata only: nothing is imported)."""
    found: dict[str, list] = {}
    for ep in entry_points(group=GROUP):
        found.setdefault(ep.name, []).append(ep)
    return found


def resolve(name: str, known: list[str], timeout: float = READ_TIMEOUT) -> Vendor:
    """The vendor `name` (an entry point of the group, else a module path) and the stages it implements."""
    if not name.strip():
        raise VendorError("--vendor: an empty name names no vendor")
    eps = registered().get(name, [])
    if len({ep.value for ep in eps}) > 1:
        raise VendorError(f"--vendor {name}: registered by {len(eps)} installed packages with different "
                          f"declarations ({', '.join(ep.value for ep in eps)})")
    if eps:
        ep = eps[0]
        ref = f"{ep.module}:{ep.attr or DEFAULT_ATTR}"
        dist = getattr(ep, "dist", None)
        distribution = f"{dist.name} {dist.version}" if dist is not None else ""
    else:
        ref = name if ":" in name else f"{name}:{DEFAULT_ATTR}"
        distribution = ""
        if not IMPORT_PATH.match(ref):
            raise VendorError(f"--vendor {name}: no vendor of that name is installed "
                              f"(registered: {', '.join(sorted(registered())) or 'none'}) and it is not a module path")
    declared = read_declaration(ref, timeout)
    if isinstance(declared, str):
        hint = "" if eps else (f" (no vendor named {name!r} is installed; registered: "
                               f"{', '.join(sorted(registered())) or 'none'})")
        raise VendorError(f"--vendor {name}: {declared}{hint}")
    unknown = sorted(set(declared) - set(known))
    if unknown:
        raise VendorError(f"--vendor {name}: {ref} declares stages this version of specverify does not know: "
                          f"{', '.join(unknown)}")
    if not declared:
        raise VendorError(f"--vendor {name}: {ref} declares no implementation")
    entries = {s: declared[s] for s in known if s in declared}
    return Vendor(name, ref, distribution, {s: e["impl"] for s, e in entries.items()},
                  {s: {k: v for k, v in e.items() if k != "impl"} for s, e in entries.items() if len(e) > 1})


def read_declaration(ref: str, timeout: float) -> dict[str, dict] | str:
    """The declared mapping as stage -> {"impl": "module:function", and what else it declares}, read by
    a contained worker process within `timeout` seconds; a one-line problem (str) when there is none."""
    from specverify.judge.worker import ask_once

    answer = ask_once(declaration_main, (ref,), timeout, MAX_ANSWER)
    if isinstance(answer, str):
        return f"reading {ref}: {answer}"
    if not answer.get("ok"):
        return str(answer.get("error"))[:300]
    found = answer.get("implementations")
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, dict) and
                                              isinstance(v.get("impl"), str) and IMPORT_PATH.match(v["impl"])
                                              for k, v in found.items()):
        return f"{ref}: every implementation must be named 'module:function'"
    return found


def missing_sources(sources: list[str], timeout: float) -> dict[str, str]:
    """{source: one line} for each "module:function" whose module or function does not exist, looked up by a
    contained worker process within `timeout` seconds. A module that exists but fails while importing is
    not missing (that is the implementation's failure, reported by the run); a worker that does not answer
    finds nothing missing (the run then reports what happens)."""
    from specverify.judge.worker import ask_once

    if not sources:
        return {}
    answer = ask_once(sources_main, (list(sources),), timeout, MAX_ANSWER)
    found = answer.get("missing") if isinstance(answer, dict) else None
    if not isinstance(found, dict):
        return {}
    return {s: str(found[s])[:300] for s in sources if isinstance(found.get(s), str)}


def sources_main(conn, sources: list[str]) -> None:
    """In a contained worker: import each source's module and find its function; answer with those missing."""
    from specverify import env
    from specverify.judge import sandbox

    sandbox.contain([conn.fileno()], None, "cpu")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    env.prepare()
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    missing = {}
    for source in sources:
        problem = source_problem(source)
        if problem:
            missing[source] = problem
    conn.send_bytes(json.dumps({"missing": missing}).encode())


def source_problem(source: str) -> str | None:
    """Why "module:function" names nothing here (None when it does, or when its module fails on import)."""
    import importlib

    module_name, sep, attr = source.partition(":")
    if not sep or not IMPORT_PATH.match(source):
        return "expected MODULE:FUNCTION (a dotted module path, a colon, a function name)"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            return f"no module named {exc.name!r} (looked for on this Python's path and in the current folder)"
        return None
    except BaseException:  # it exists and breaks on import: the run reports that as the target's failure
        return None
    if not hasattr(module, attr):
        return f"module {module_name} has no attribute {attr!r}"
    if not callable(getattr(module, attr)):
        return f"{attr} in module {module_name} is not callable"
    return None


class Declared(Exception):
    """What is wrong with a declaration, in words (no exception class name)."""


def declaration_main(conn, ref: str) -> None:
    """In a contained worker: import the declaration and answer with its stage -> "module:function" mapping."""
    from specverify import env
    from specverify.judge import sandbox
    from specverify.judge.calls import error_text
    from specverify.judge.worker import forget_inherited

    sandbox.contain([conn.fileno()], None, "cpu")
    forget_inherited()      # its socket is its only way to the judge
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        env.prepare()
        if os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        import importlib

        module_name, _, attr = ref.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not exc.name or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
                raise
            raise Declared(f"no module named {exc.name!r}") from None
        except BaseException as exc:  # the vendor's own code failed while it was imported
            raise Declared(f"importing {module_name} raised {error_text(exc)}") from None
        if not hasattr(module, attr):
            raise Declared(f"module {module_name} has no attribute {attr!r}")
        declared = getattr(module, attr)
        if not isinstance(declared, Mapping):
            raise Declared(f"{ref} is not a mapping of stage names to implementations (a {type(declared).__name__})")
        answer: dict[str, Any] = {"ok": True, "implementations": {str(k): entry(k, v) for k, v in declared.items()}}
        json_safe(answer)
    except Declared as exc:
        answer = {"ok": False, "error": str(exc)}
    except BaseException as exc:  # whatever importing vendor code does is reported, never raised here
        answer = {"ok": False, "error": error_text(exc)}
    conn.send_bytes(json.dumps(answer).encode())


def entry(stage: Any, value: Any) -> dict:
    """A declared stage as {"impl": "module:function", ...}: a plain implementation, or a table naming it."""
    if isinstance(value, Mapping):
        if "impl" not in value:
            raise Declared(f"{stage}: a declaration table must name its implementation under 'impl'")
        return {**{str(k): v for k, v in value.items()}, "impl": import_path(value["impl"])}
    return {"impl": import_path(value)}


def import_path(impl: Any) -> str:
    """ "module:function" of a declared implementation (a string is kept as it is)."""
    if isinstance(impl, str):
        return impl
    module, name = getattr(impl, "__module__", None), getattr(impl, "__qualname__", "")
    if module is None or getattr(sys.modules.get(module), name, None) is not impl:
        raise Declared(f"{impl!r} is not a module-level function: name it as 'module:function'")
    return f"{module}:{name}"


def json_safe(answer: dict) -> None:
    try:
        json.dumps(answer, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise Declared(f"the declaration must be JSON-safe data (tables, lists, strings, numbers, "
                       f"booleans): {exc}") from None
