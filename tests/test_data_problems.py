"""Every problem the issue names: reported with file, line or record, column and a hint."""
from __future__ import annotations

import pytest

from storage.datasets.problems import MAX_ERRORS
from tests.conftest import DATA_DIR
from workbench.errors import DataValidationError
from workbench.services.datasets import inspect_file

B = DATA_DIR / "datasets" / "broken"


def errors_of(path, task, **kwargs):
    with pytest.raises(DataValidationError) as info:
        inspect_file(path, task, tokenizer=False, **kwargs)
    problems = info.value.problems
    assert problems and all(p.severity == "error" and p.hint for p in problems[:-1] or problems)
    return problems


def test_empty_file():
    (problem,) = errors_of(B / "empty.csv", "text-classification")
    assert problem.file == "empty.csv" and "empty" in problem.message


def test_header_only():
    (problem,) = errors_of(B / "header_only.csv", "text-classification")
    assert "header row but no examples" in problem.message and problem.line == 1


def test_missing_column_names_the_columns_present_and_the_option():
    (problem,) = errors_of(B / "missing_column.csv", "text-classification")
    assert "missing column" in problem.message and "'stars'" in problem.message
    assert "--label-column" in problem.hint


def test_explicit_column_that_does_not_exist():
    from storage.datasets import ColumnMapping

    (problem,) = errors_of(B / "missing_column.csv", "text-classification", columns=ColumnMapping(label="rating"))
    assert problem.column == "rating" and "not in the file" in problem.message


def test_every_ragged_row_is_reported_with_its_line():
    problems = errors_of(B / "ragged.csv", "text-classification")
    assert [(p.line, "ragged row" in p.message) for p in problems] == [(3, True), (6, True)]
    assert "quote" in problems[0].hint


def test_broken_json_names_line_3():
    (problem,) = errors_of(B / "broken_json.jsonl", "text-classification")
    assert problem.line == 3 and problem.message.startswith("broken JSON on line 3")
    assert str(problem).startswith("broken_json.jsonl:3: error: broken JSON on line 3")


def test_tokens_and_tags_of_different_length():
    (problem,) = errors_of(B / "length_mismatch.jsonl", "token-classification")
    assert problem.line == 2 and "3 tokens, 2 tags" in problem.message and problem.column == "tags"


def test_conll_line_without_tag():
    (problem,) = errors_of(B / "conll_one_column.conll", "token-classification")
    assert problem.line == 2 and "token and a tag" in problem.message


def test_squad_answer_start_mismatch_names_the_question_id_and_the_right_offset():
    (problem,) = errors_of(B / "squad_bad_start.json", "question-answering")
    assert problem.record == "q-bad-1" and "q-bad-1" in problem.message
    assert "answer_start 40" in problem.message and "answer_start=45" in problem.hint
    assert "(record q-bad-1)" in str(problem)


def test_fewer_than_two_classes():
    (problem,) = errors_of(B / "one_class.csv", "text-classification")
    assert "fewer than 2 classes" in problem.message and "greeting" in problem.message


def test_single_tag_token_file_is_rejected(tmp_path):
    path = tmp_path / "all_o.conll"
    path.write_text("a\tO\nb\tO\n\nc\tO\n")
    (problem,) = errors_of(path, "token-classification")
    assert "fewer than 2 classes" in problem.message


@pytest.mark.parametrize("name, what", [("spreadsheet.xlsx", "ZIP archive"), ("nul_bytes.csv", "NUL bytes")])
def test_binary_content(name, what):
    (problem,) = errors_of(B / name, "text-classification")
    assert "not a text file" in problem.message and what in problem.message and "UTF-8" in problem.hint


def test_cp1252_file_is_decoded_with_a_warning_naming_the_encoding():
    report = inspect_file(B / "cp1252.csv", "text-classification", tokenizer=False, validation_fraction=0)
    assert report.details["encoding"] == "cp1252"
    assert report.preview[0]["text"] == "“Café” was great"
    assert report.preview[1]["text"] == "the crème brûlée was cold"
    (warning,) = [w for w in report.warnings if "not UTF-8" in w.message]
    assert warning.line == 2 and "cp1252" in warning.message and "UTF-8" in warning.hint


def test_utf16_with_bom_is_decoded(tmp_path):
    path = tmp_path / "utf16.csv"
    path.write_text("text,label\nhé,a\nho,b\n", encoding="utf-16")
    report = inspect_file(path, "text-classification", tokenizer=False, validation_fraction=0)
    assert report.preview[0]["text"] == "hé"
    assert any("utf-16" in w.message for w in report.warnings)


def test_repairable_problems_are_warnings_with_lines():
    report = inspect_file(B / "repairable.csv", "text-classification", tokenizer=False, validation_fraction=0)
    found = {(w.line, w.message.split(";")[0]) for w in report.warnings}
    assert found == {(4, "blank label"), (6, "blank text"), (5, "duplicate of line 2")}
    assert report.examples == 4 and report.labels == {"neg": 2, "pos": 2}
    assert report.details["duplicates_dropped"] == 1


def test_iob_violations_are_repaired_to_b_and_named_by_line():
    report = inspect_file(B / "iob.conll", "token-classification", tokenizer=False, validation_fraction=0)
    assert report.preview[0]["tags"] == ["B-PER", "O", "O", "B-LOC", "I-LOC"]
    assert report.preview[1]["tags"] == ["O", "B-LOC", "I-LOC"]
    assert sorted(w.line for w in report.warnings) == [1, 8]
    assert all("changed to B-" in w.message for w in report.warnings)


def test_many_errors_are_capped_with_a_count(tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_text("not json\n" * (MAX_ERRORS + 30))
    problems = errors_of(path, "text-classification")
    assert len(problems) == MAX_ERRORS + 1
    assert "30 more error(s)" in problems[-1].message


def test_size_limit_refuses_with_the_setting_name(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("text,label\n" + "x,y\n" * 1000)
    (problem,) = errors_of(path, "text-classification", max_bytes=1000)
    assert "limit" in problem.message and "WORKBENCH_MAX_UPLOAD_MB" in problem.hint


def test_wrong_format_for_task_is_a_config_error():
    from workbench.errors import ConfigError

    with pytest.raises(ConfigError, match="accepts: conll, jsonl"):
        inspect_file(B / "iob.conll", "token-classification", format="csv")
    with pytest.raises(ConfigError, match="unknown task"):
        inspect_file(B / "iob.conll", "ner")


def test_one_class_is_reported_together_with_other_errors(tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text("text,label\na,x\nb,x,extra\nc,x\n")
    problems = errors_of(path, "text-classification")
    assert [p.line for p in problems] == [3, None]
    assert "fewer than 2 classes" in problems[1].message


def test_same_text_with_another_label_is_called_out(tmp_path):
    path = tmp_path / "conflict.csv"
    path.write_text("text,label\ngood,pos\nbad,neg\ngood,neg\ngood,pos\n")
    report = inspect_file(path, "text-classification", tokenizer=False, validation_fraction=0)
    messages = {(w.line, w.message) for w in report.warnings}
    assert messages == {(4, "same text as line 2 but another label; dropped"), (5, "duplicate of line 2; dropped")}
    assert report.warning_counts == {"conflicting duplicate": 1, "duplicate": 1}


@pytest.mark.parametrize("text, line, found", [
    ("John\tB-PER\nlives\tO\n\nin\tO\nBerlin B-LOC extra junk\nnow\tO\n", 5, "4 space-separated columns"),
    ("EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-PER\n", 4, "3 space-separated columns"),
])
def test_conll_line_with_another_column_count_is_an_error_naming_its_line(tmp_path, text, line, found):
    path = tmp_path / "columns.conll"
    path.write_text(text)
    (problem,) = errors_of(path, "token-classification")
    assert problem.line == line and found in problem.message
    assert "the first line of the file (line 1)" in problem.message
    assert "same columns" in problem.hint


NER_WITH_SLIPS = ("John\tB-PER\nSmith\tI-PER\nlives\tO\nin\tO\nBerlin\tB-LOC\n\n"
                  "Paris\tB-LOC\nis\tjunk\nnice\tO\nMary\tB-PER\n\nin\tO\nRome\tB-LCO\n")


def test_once_only_tag_outside_the_bio_scheme_is_a_warning_naming_its_line(tmp_path):
    path = tmp_path / "slips.conll"
    path.write_text(NER_WITH_SLIPS)
    report = inspect_file(path, "token-classification", tokenizer=False, validation_fraction=0)
    slips = {w.line: w for w in report.warnings if w.message.startswith("tag ")}
    assert sorted(slips) == [8, 13] and report.warning_counts == {"odd tag": 2}
    assert "'junk'" in slips[8].message and "typo" in slips[8].message
    assert "'B-LCO'" in slips[13].message and slips[13].hint == "did you mean B-LOC?"


def test_odd_tag_in_token_jsonl_names_the_record_line_and_the_token(tmp_path):
    path = tmp_path / "slips.jsonl"
    path.write_text('{"tokens": ["John", "Smith", "lives"], "tags": ["B-PER", "I-PER", "O"]}\n'
                    '{"tokens": ["in", "Berlin", "now"], "tags": ["O", "B-LOC", "LOC"]}\n'
                    '{"tokens": ["Paris", "and", "Mary"], "tags": ["B-LOC", "O", "B-PER"]}\n')
    report = inspect_file(path, "token-classification", tokenizer=False, validation_fraction=0)
    (slip,) = report.warnings
    assert (slip.line, slip.column) == (2, "tags") and slip.message.startswith("token 3: tag 'LOC'")
    assert slip.hint == "did you mean B-LOC?"


def test_tag_checks_leave_pos_tag_sets_and_rare_bio_continuations_alone():
    """Guards against over-reach: Brown POS has many once-only tags, WNUT a lone I-company, a small file a lone type."""
    from storage.datasets.read_tokens import scheme_slips

    brown = inspect_file(DATA_DIR / "datasets/real/brown_pos.conll", "token-classification", tokenizer=False)
    assert "odd tag" not in brown.warning_counts
    assert scheme_slips({"O": 50, "B-company": 3, "I-company": 1, "B-person": 4}) == {}
    assert scheme_slips({"O": 50, "B-company": 3, "B-person": 4, "B-product": 1}) == {}  # a rare type, no typo
    assert list(scheme_slips({"O": 50, "B-company": 3, "I-company": 1, "B-persn": 1, "B-person": 4})) == ["B-persn"]
