"""The floors and the rooms inside ``jobs/`` (pyproject.toml, ``[tool.importlinter]``) hold on the real tree,
and imports the wrong way break them: a copy of the three packages with bad imports added fails
``lint-imports``, naming each one under the contract it breaks. No two modules of ``jobs/`` import each other
through any chain (``module_cycles``), and a circle added to a copy is found.

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
    ("storage/datasets/store.py", "import jobs.queue.table", "storage imports nothing of jobs or workbench",
     "storage.datasets.store -> jobs.queue.table"),
    ("jobs/queue/table.py", "import workbench.errors", "jobs imports nothing of workbench", "jobs.queue.table -> workbench.errors"),
    ("jobs/specs/run.py", "import gradio", "jobs never imports gradio", "jobs.specs.run -> gradio"),
    ("workbench/ui/format.py", "import jobs.evaluation.stats", "Floors: the edges import jobs only through the services",
     "workbench.ui.format -> jobs.evaluation.stats"),
    ("workbench/playground/cache.py", "from jobs.training import catalogue",
     "Floors: the edges import jobs only through the services", "workbench.playground.cache -> jobs.training.catalogue"),
    ("jobs/queue/worker.py", "import jobs.training.engine", "Rooms: the queue never imports the work it runs",
     "jobs.queue.worker -> jobs.training.engine"),
    ("jobs/training/trainer.py", "import jobs.queue.table", "Rooms: training never imports the queue",
     "jobs.training.trainer -> jobs.queue.table"),
    ("jobs/evaluation/stats.py", "import jobs.training.lora", "Rooms: evaluation imports neither the queue nor training",
     "jobs.evaluation.stats -> jobs.training.lora"),
    ("jobs/specs/fields.py", "import jobs.progress", "Rooms: specs and audits import nothing else of jobs",
     "jobs.specs.fields -> jobs.progress"),
    ("jobs/export/speed.py", "import jobs.process.fake_runner", "Rooms: nothing in jobs imports the job process",
     "jobs.export.speed -> jobs.process.fake_runner"),
    ("jobs/queue/states.py", "import jobs.queue.failures", "Rooms: no import circle inside a room",
     "- .states -> .failures"),
    ("jobs/labelling/__init__.py", "import jobs.sweeps.driver",
     "Rooms: labelling imports neither the queue, the sweeps nor the job process", "jobs.labelling -> jobs.sweeps.driver"),
    ("jobs/labelling/curve.py", "import jobs.training.catalogue", "Rooms: the labelling core is pure numpy / scikit-learn",
     "jobs.labelling.curve -> jobs.training.catalogue"),
]
ROOM_CIRCLE = ("jobs/queue/failures.py", "import jobs.queue.states")  # with the states -> failures mistake above


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
    for module, bad_import in [(m, b) for m, b, _c, _chain in MISTAKES] + [ROOM_CIRCLE]:
        with (tmp_path / module).open("a", encoding="utf-8") as fh:
            fh.write(f"\n{bad_import}  # on purpose: the floors must catch this\n")

    result = lint_imports(tmp_path)

    assert result.returncode != 0, result.stdout
    broken = broken_contracts(result.stdout)
    for module, _bad_import, contract, chain in MISTAKES:
        assert f"{contract} BROKEN" in result.stdout, result.stdout
        assert chain in broken.get(contract, ""), f"{module}: {chain!r} not under {contract!r}\n{result.stdout}"



def module_cycles(cwd: Path) -> list[list[str]]:
    """The circles among the modules of ``jobs`` in the tree at ``cwd``: each strongly connected set of two or
    more modules (Tarjan), found on grimp's import graph in a subprocess that imports that tree."""
    script = (
        "import grimp, json, sys\n"
        "sys.setrecursionlimit(10000)\n"
        "g = grimp.build_graph('jobs')\n"
        "edges = {m: sorted(i for i in g.find_modules_directly_imported_by(m) if i.startswith('jobs')) for m in g.modules}\n"
        "index, low, stack, on, found = {}, {}, [], set(), []\n"
        "def visit(v):\n"
        "    index[v] = low[v] = len(index); stack.append(v); on.add(v)\n"
        "    for w in edges[v]:\n"
        "        if w not in index:\n"
        "            visit(w); low[v] = min(low[v], low[w])\n"
        "        elif w in on:\n"
        "            low[v] = min(low[v], index[w])\n"
        "    if low[v] == index[v]:\n"
        "        part = []\n"
        "        while True:\n"
        "            w = stack.pop(); on.discard(w); part.append(w)\n"
        "            if w == v: break\n"
        "        if len(part) > 1: found.append(sorted(part))\n"
        "for m in sorted(edges):\n"
        "    if m not in index: visit(m)\n"
        "print(json.dumps(sorted(found)))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=120, check=True)
    import json

    return json.loads(result.stdout)


def test_no_module_of_jobs_imports_itself_through_a_chain():
    assert module_cycles(ROOT) == []


def test_a_circle_across_rooms_is_found(tmp_path):
    """engine -> setfit -> engine was the circle the rooms broke: put one like it back into a copy."""
    shutil.copytree(ROOT / "jobs", tmp_path / "jobs", ignore=_only_python)
    with (tmp_path / "jobs/training/outputs.py").open("a", encoding="utf-8") as fh:
        fh.write("\nimport jobs.training.engine  # on purpose: a circle\n")
    circles = module_cycles(tmp_path)
    assert len(circles) == 1 and {"jobs.training.engine", "jobs.training.outputs"} <= set(circles[0]), circles
