"""The floors (pyproject.toml, ``[tool.importlinter]``) hold on the real tree, and imports the wrong
way break them: a copy of the three packages with bad imports added fails ``lint-imports``, naming
each one under the contract it breaks.

``lint-imports`` runs in a subprocess: in this process ``workbench``, ``jobs`` and ``storage`` are
already imported from the checkout, and the import graph would be built from them, not from the copy.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("workbench", "jobs", "storage")
FLOORS = "Floors: top (UI, CLI, playgrounds, server) > services > jobs > storage"


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    assert LINT_IMPORTS.exists(), "lint-imports is missing: `pip install -e '.[dev]'` installs import-linter"
    # lint-imports puts its working directory first on sys.path, so it reads the packages found there.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def _only_python(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or (not n.endswith(".py") and not Path(folder, n).is_dir())}


def test_the_real_tree_keeps_every_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken" in result.stdout


# Each mistake, and the contract that must name it (the import's first hop as lint-imports prints it).
MISTAKES = [
    ("storage/db.py", "import workbench.ui", FLOORS, "storage.db -> workbench.ui"),
    ("workbench/services/runs.py", "import workbench.ui.app", FLOORS, "workbench.services.runs -> workbench.ui.app"),
    ("storage/datasets/store.py", "import jobs.queue", "storage imports nothing of jobs or workbench",
     "storage.datasets.store -> jobs.queue"),
    ("jobs/queue.py", "import workbench.errors", "jobs imports nothing of workbench", "jobs.queue -> workbench.errors"),
    ("jobs/spec.py", "import gradio", "jobs never imports gradio", "jobs.spec -> gradio"),
]


def broken_contracts(report: str) -> dict[str, str]:
    """The "Broken contracts" part of a report, by contract name: each name is underlined with dashes."""
    lines = report.split("Broken contracts", 1)[-1].splitlines()
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for line, next_line in zip(lines, lines[1:] + [""]):
        if line.strip() and set(next_line.strip()) == {"-"} and len(next_line.strip()) == len(line.strip()):
            current = sections.setdefault(line.strip(), [])
        current.append(line)
    return {name: "\n".join(text) for name, text in sections.items()}


def test_wrong_way_imports_fail_naming_the_broken_contract(tmp_path):
    """One copy with every mistake at once: one lint-imports run, each mistake named under its contract."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=_only_python)
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for module, bad_import, _contract, _chain in MISTAKES:
        with (tmp_path / module).open("a", encoding="utf-8") as fh:
            fh.write(f"\n{bad_import}  # on purpose: the floors must catch this\n")

    result = lint_imports(tmp_path)

    assert result.returncode != 0, result.stdout
    broken = broken_contracts(result.stdout)
    for module, _bad_import, contract, chain in MISTAKES:
        assert f"{contract} BROKEN" in result.stdout, result.stdout
        assert chain in broken.get(contract, ""), f"{module}: {chain!r} not under {contract!r}\n{result.stdout}"
