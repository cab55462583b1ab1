"""The README is what a newcomer reads first; docs/ holds the reference. These tests keep both honest:
every setting and every command is documented, every relative link and image resolves (anchors included),
and the README stays short and points at every page."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from storage.settings import SETTINGS
from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
README_MAX_LINES = 200


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a `# comment` in a bash block is not a heading, nor `[x](y)` a link)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


# -- settings ----------------------------------------------------------------------------------------------

def _settings_rows(text: str) -> dict[str, str]:
    """variable → its default cell, from the rows of the settings table."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\| `(WORKBENCH_[A-Z0-9_]+)` \| ([^|]*) \|", line)
        if match:
            rows[match.group(1)] = match.group(2).strip()
    return rows


def _default_cell(default) -> str:
    if default == "":
        return "(empty)"
    return f"`{str(default).lower() if isinstance(default, bool) else default}`"


def test_every_setting_is_documented_with_its_default():
    rows = _settings_rows(_read(DOCS / "settings.md"))
    assert len(SETTINGS) >= 15  # the declarations were read, so an empty loop cannot pass
    missing = [s.env for s in SETTINGS if s.env not in rows]
    assert not missing, f"settings without a row in docs/settings.md: {missing}"
    wrong = {s.env: (rows[s.env], _default_cell(s.default)) for s in SETTINGS
             if rows[s.env] != _default_cell(s.default)}
    assert not wrong, f"docs/settings.md shows another default (documented, declared): {wrong}"
    stale = sorted(set(rows) - {s.env for s in SETTINGS})
    assert not stale, f"docs/settings.md documents settings that storage/settings.py does not declare: {stale}"


# -- commands ----------------------------------------------------------------------------------------------

def _command_tree():
    """Every command of ``workbench`` as a list of words, with its click command object."""
    from workbench.cli import app
    import workbench.commands  # noqa: F401  (registers the commands on ``app``)

    found = []

    def walk(command, words):
        found.append((words, command))
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            if not sub.hidden:
                walk(sub, words + [name])

    walk(typer.main.get_command(app), ["workbench"])
    return found


def _mentions(text: str, phrase: str) -> bool:
    """``phrase`` as whole words: `workbench data audit` is not mentioned by `workbench data audit-show`."""
    return re.search(r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])", text) is not None


def test_every_command_and_subcommand_is_in_the_cli_page():
    commands = [" ".join(words) for words, _ in _command_tree() if len(words) > 1]
    for known in ("workbench data import", "workbench runs show", "workbench sweep best", "workbench publish"):
        assert known in commands  # the walk reached the subcommands
    page = _read(DOCS / "cli.md")
    missing = [c for c in commands if not _mentions(page, c)]
    assert not missing, f"commands not documented in docs/cli.md: {missing}"


def test_the_cli_page_lists_no_command_that_does_not_exist():
    commands = {" ".join(words) for words, _ in _command_tree()}
    listed = re.findall(r"^\| `(workbench [a-z -]+?)` \|", _read(DOCS / "cli.md"), re.M)
    assert len(listed) >= 20
    stale = [c for c in listed if c not in commands]
    assert not stale, f"docs/cli.md lists commands that do not exist: {stale}"


def test_every_option_is_documented():
    docs = "\n".join(_read(p) for p in [README, *PAGES])
    missing = []
    for words, command in _command_tree():
        for param in command.params:
            missing += [f"{' '.join(words)} {opt}" for opt in param.opts
                        if opt.startswith("--") and opt != "--help" and not _mentions(docs, opt)]
    assert not missing, f"options documented nowhere in README.md or docs/: {missing}"


# -- links ---------------------------------------------------------------------------------------------------

def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(_read(path)).splitlines():
        match = re.match(r"#{1,6} (.+)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    """The targets of the page's relative links and images (web addresses left out)."""
    prose = re.sub(r"`[^`\n]*`", "", _prose(_read(path)))
    targets = re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    return broken


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_image_resolves(path):
    broken = broken_links(path)
    assert not broken, f"{path.relative_to(ROOT)}: broken links: {broken}"


def test_the_link_check_finds_a_broken_link_and_a_broken_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# A page\n\n## Time estimates (`workbench/services/estimates.py`)\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#time-estimates-workbenchservicesestimatespy) [gone](missing.md) "
                    "![img](pic.png) [bad](other.md#nowhere) [web](https://example.org/x.md) "
                    "`[code](not-a-link.md)`\n\n```\n[fenced](not-a-link-either.md)\n```\n")
    assert broken_links(page) == ["missing.md (no such file)", "pic.png (no such file)",
                                  "other.md#nowhere (no heading #nowhere in other.md)"]


def test_slugs_follow_githubs_rule():
    assert slug("`workbench data`") == "workbench-data"
    assert slug("Retry, clone, continue") == "retry-clone-continue"
    assert slug("Measured: 5 % flipped labels in SMS spam") == "measured-5--flipped-labels-in-sms-spam"
    assert slug("gradio_client") == "gradio_client"


# -- the README ----------------------------------------------------------------------------------------------

def test_the_readme_stays_short_and_links_every_docs_page():
    text = _read(README)
    lines = text.count("\n") + (not text.endswith("\n"))
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference text into docs/"
    assert len(PAGES) >= 10
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    unlinked = [p.name for p in PAGES if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_the_readme_keeps_the_two_commands_ci_runs():
    """`.ci/run` runs the README's test command, `make test`; `make run` is the other one."""
    quick_start = re.search(r"## Quick start\n(.*?)\n## ", _read(README), re.S).group(1)
    block = re.search(r"```bash\n(.*?)```", quick_start, re.S).group(1)
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["make run", "make test"]
    assert re.search(r"^make test$", _read(ROOT / ".ci" / "run"), re.M)


def test_the_small_data_table_sits_between_its_markers_once():
    """bench/small_data.py --table rewrites what lies between these markers in docs/training.md."""
    texts = {p.name: _read(p) for p in [README, *PAGES]}
    for marker in ("<!-- small-data-table -->", "<!-- /small-data-table -->"):
        assert [name for name, text in texts.items() for _ in range(text.count(marker))] == ["training.md"]


def test_the_readmes_small_data_summary_sits_between_its_markers_once():
    """bench/small_data.py --table also rewrites the README's summary between these markers."""
    texts = {p.name: _read(p) for p in [README, *PAGES]}
    for marker in ("<!-- small-data-summary -->", "<!-- /small-data-summary -->"):
        assert [name for name, text in texts.items() for _ in range(text.count(marker))] == ["README.md"]
    block = _read(README).split("<!-- small-data-summary -->")[1]
    assert "| TREC-6 (accuracy) |" in block and "docs/small_data.png" in block

