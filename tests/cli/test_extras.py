"""The install of `specverify check` (requirements-cpu.txt) has none of the extras: `check` runs without
them, and a command that needs one says in one line which to install (exit 2, no traceback). SciPy is no extra
(the distribution tier needs it). Each run is a process of its own in which the extras' modules cannot be
imported."""
import os
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("libcst", "matplotlib", "ray", "pytest", "xdist")


def without_extras(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`specverify ARGV` in a process where no extra imports."""
    blocked = "".join(f"sys.modules[{name!r}] = None; " for name in EXTRAS)
    code = f"import sys; {blocked}from specverify.cli import main; sys.exit(main({argv!r}))"
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "SPECVERIFY_FINDINGS": str(tmp_path)})


def test_the_check_install_leaves_the_extras_out():
    """requirements-cpu.txt: the pinned CPU torch and the package alone; its dependencies name no extra's
    package, which the `test` extra (requirements-test.txt) brings."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {d.split(">")[0].split("=")[0].split(";")[0].strip().lower() for d in project["dependencies"]}
    extras = {"libcst", "matplotlib", "ray", "pytest", "pytest-xdist"}
    assert not core & extras
    test = {d.split(">")[0].strip().lower() for d in project["optional-dependencies"]["test"]}
    assert extras <= test
    lines = [l.strip() for l in (ROOT / "requirements-cpu.txt").read_text().splitlines() if l.strip()[:1] not in "#"]
    assert lines == ["torch==2.13.0", "-e ."]
    lines = [l.strip() for l in (ROOT / "requirements-test.txt").read_text().splitlines() if l.strip()[:1] not in "#"]
    assert lines == ["torch==2.13.0", "-e .[test]"]


def test_check_needs_no_extra(tmp_path):
    done = without_extras(["check", "--stage", "rejection.expand", "--stage", "rejection.greedy", "--examples", "4",
                           "--report", str(tmp_path / "r.json")], tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (tmp_path / "r.json").exists()


def test_mutate_without_libcst_is_one_line(tmp_path):
    done = without_extras(["mutate", "--backend", "torch", "--stage", "rejection.expand", "--list"], tmp_path)
    assert done.returncode == 2
    assert done.stdout.strip().splitlines() == [
        "specverify mutate: error: libcst is not installed (mutation runs need it): pip install 'specverify[mutate]'"]
    assert "Traceback" not in done.stderr
