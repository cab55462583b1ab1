"""The `workbench data` contract that scripts depend on: names, exit codes, JSON keys, no tracebacks."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import DATA_DIR, ROOT
from workbench.cli import main

D = DATA_DIR / "datasets"


@pytest.fixture
def cli(settings, monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_HOME", str(settings.home))

    def run(*argv):
        with pytest.raises(SystemExit) as info:
            main(list(argv))
        out, err = capsys.readouterr()
        return info.value.code, out, err

    return run


def test_validate_json_contract(cli):
    code, out, err = cli("data", "validate", str(D / "real/sms_spam.csv"), "--task", "text-classification", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert {"task", "format", "examples", "labels", "warnings"} <= set(report)
    assert report["task"] == "text-classification" and report["format"] == "csv"
    assert set(report["labels"]) == {"ham", "spam"} and isinstance(report["warnings"], list)


def test_validate_without_labels_for_qa_and_human_summary(cli):
    code, out, _ = cli("data", "validate", str(D / "real/squad_v1.json"), "--task", "question-answering", "--json")
    assert code == 0 and "labels" not in json.loads(out)
    code, out, _ = cli("data", "validate", str(D / "real/trec.csv"), "--task", "text-classification")
    assert code == 0 and "valid text-classification data (csv)" in out and "labels: ABBR" in out


def test_validate_invalid_data_exits_2_with_one_line_per_problem(cli):
    code, out, err = cli("data", "validate", str(D / "broken/ragged.csv"), "--task", "text-classification")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith("ragged.csv:3: error: ragged row") and lines[1].startswith("ragged.csv:6: error:")
    assert "Traceback" not in err


def test_validate_names_the_record_for_squad(cli):
    code, _, err = cli("data", "validate", str(D / "broken/squad_bad_start.json"), "--task", "question-answering")
    assert code == 2 and "squad_bad_start.json (record q-bad-1)" in err


def test_column_options(cli):
    code, out, err = cli("data", "validate", str(D / "formats/multilabel_sep.csv"), "--task", "text-classification",
                         "--label-separator", "|", "--json")
    assert code == 0, err
    assert json.loads(out)["labels"] == {"acting": 2, "music": 2, "plot": 2}
    code, out, err = cli("data", "validate", str(D / "real/trec.csv"), "--task", "text-classification",
                         "--label-column", "label_fine", "--text-column", "text", "--json")
    assert code == 0 and all(":" in k for k in json.loads(out)["labels"])


def test_import_list_show_delete(cli):
    code, out, err = cli("data", "import", str(D / "real/trec.csv"), "--task", "text-classification",
                         "--name", "trec", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert {"id", "name", "task", "format", "examples", "train", "validation", "labels", "warnings",
            "reused"} <= set(summary)
    assert summary["name"] == "trec" and summary["reused"] is False
    code, out, _ = cli("data", "import", str(D / "real/trec.csv"), "--task", "text-classification")
    assert code == 0 and out.strip() == summary["id"]
    code, out, _ = cli("data", "list", "--json")
    assert [d["id"] for d in json.loads(out)] == [summary["id"]]
    code, out, _ = cli("data", "list")
    assert summary["id"] in out and "trec" in out
    code, out, _ = cli("data", "show", "trec", "--json")
    assert json.loads(out)["id"] == summary["id"]
    code, out, _ = cli("data", "delete", summary["id"])
    assert code == 0 and "deleted" in out
    code, out, err = cli("data", "show", summary["id"])
    assert code == 3 and "no dataset" in err


def test_import_with_validation_file_fraction_and_seed(cli):
    code, out, err = cli("data", "import", str(D / "real/wnut16.jsonl"), "--task", "token-classification",
                         "--validation", str(D / "formats/conll2003.conll"), "--seed", "5", "--json")
    assert code == 0, err
    assert json.loads(out)["validation"] == 3
    code, out, err = cli("data", "import", str(D / "real/sms_spam.csv"), "--task", "text-classification",
                         "--validation-fraction", "0.5", "--json")
    summary = json.loads(out)
    assert abs(summary["validation"] - summary["train"]) <= 2


@pytest.mark.parametrize("argv, code, text", [
    (["data", "validate", "missing.csv", "--task", "text-classification"], 3, "no such file"),
    (["data", "validate", "{broken}", "--task", "ner"], 2, "unknown task 'ner'"),
    (["data", "validate", "{broken}", "--task", "text-classification", "--format", "squad"], 2, "does not fit"),
])
def test_usage_errors_have_no_traceback(cli, argv, code, text):
    argv = [a.replace("{broken}", str(D / "broken/ragged.csv")) for a in argv]
    got, _, err = cli(*argv)
    assert got == code and text in err and "Traceback" not in err


def test_subprocess_invalid_file_exit_code_and_clean_stderr(tmp_path):
    env = {**os.environ, "WORKBENCH_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", "from workbench.cli import entry; entry()", "data", "validate",
                           str(D / "broken/cp1252.csv"), "--task", "token-classification"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "cp1252.csv:1: error:" in proc.stderr


def test_stderr_has_exactly_one_line_per_problem(cli):
    code, _, err = cli("data", "import", str(D / "broken/squad_bad_start.json"), "--task", "question-answering")
    assert code == 2
    assert err.strip().splitlines() == [
        "squad_bad_start.json (record q-bad-1), column 'answer_start': error: question q-bad-1: answer_start 40 "
        "does not match the answer text 'Seine' (the context there reads ' the ') — the text occurs at "
        "answer_start=45"]


def test_validate_prints_a_conll_column_count_error_with_its_line(cli, tmp_path):
    path = tmp_path / "ner.conll"
    path.write_text("John\tB-PER\nlives\tO\n\nin\tO\nBerlin B-LOC extra junk\nnow\tO\n")
    code, out, err = cli("data", "validate", str(path), "--task", "token-classification")
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("ner.conll:5: error: found 4 space-separated columns in 'Berlin B-LOC extra junk'")
