"""Each accepted format, read through the service on real and hand-made files."""
from __future__ import annotations

import json

import pytest

from storage.datasets import ColumnMapping
from tests.conftest import DATA_DIR
from workbench.services.datasets import EXAMPLES, example_path, inspect_file

D = DATA_DIR / "datasets"


def check(path, task, **kwargs):
    kwargs.setdefault("tokenizer", False)
    return inspect_file(path, task, **kwargs)


def test_sms_csv_detects_columns_and_counts_labels():
    report = check(D / "real/sms_spam.csv", "text-classification")
    assert report.format == "csv"
    assert report.columns == {"text": "text", "label": "label"}
    assert set(report.labels) == {"ham", "spam"}
    assert sum(report.labels.values()) == report.examples == report.train + report.validation
    assert report.preview[0] == {"text": report.preview[0]["text"], "label": report.preview[0]["label"]}


def test_trec_prefers_label_over_label_fine():
    report = check(D / "real/trec.csv", "text-classification")
    assert report.columns["label"] == "label"
    assert set(report.labels) <= {"ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"}
    fine = check(D / "real/trec.csv", "text-classification", columns=ColumnMapping(label="label_fine"))
    assert all(":" in label for label in fine.labels)


def test_tsv_with_unbalanced_quotes_and_review_sentiment_names():
    report = check(D / "formats/reviews.tsv", "text-classification")
    assert report.format == "tsv"
    assert report.columns == {"text": "review", "label": "sentiment"}
    assert report.preview[0]["text"] == 'A "great" film'


def test_text_pairs_detected_from_premise_hypothesis():
    report = check(D / "formats/pairs.csv", "text-classification")
    assert report.columns == {"text": "premise", "text_pair": "hypothesis", "label": "label"}
    assert report.preview[0]["text_pair"] == "A person makes music."


def test_int_labels_become_strings():
    report = check(D / "formats/int_labels.jsonl", "text-classification")
    assert report.format == "jsonl"
    assert report.labels == {"0": 2, "1": 2}


def test_multi_label_as_list_and_with_separator():
    listed = check(D / "formats/multilabel_list.jsonl", "text-classification", validation_fraction=0)
    assert listed.labels == {"acting": 2, "music": 2, "plot": 2}
    assert listed.preview[0]["label"] == ["acting", "plot"]
    separated = check(D / "formats/multilabel_sep.csv", "text-classification", validation_fraction=0,
                      columns=ColumnMapping(label_separator="|"))
    assert separated.labels == {"acting": 2, "music": 2, "plot": 2}
    assert separated.preview[1]["label"] == ["music"]


@pytest.mark.parametrize("name", ["wnut16.conll", "wnut16.jsonl"])
def test_wnut_conll_and_jsonl_agree(name):
    report = check(D / "real" / name, "token-classification")
    assert report.format == name.rsplit(".", 1)[1]
    assert "person" in report.labels  # counted per entity type, not per tag
    assert all(not k.startswith(("B-", "I-")) for k in report.labels)
    assert "O" in report.details["tags"]
    record = report.preview[0]
    assert len(record["tokens"]) == len(record["tags"])


def test_conll_sample_counts_match_jsonl_sample():
    conll = check(D / "real/wnut16.conll", "token-classification")
    jsonl = check(D / "real/wnut16.jsonl", "token-classification")
    assert (conll.examples, conll.labels) == (jsonl.examples, jsonl.labels)


def test_brown_pos_tags_are_counted_per_tag():
    report = check(D / "real/brown_pos.conll", "token-classification")
    assert "nn" in report.labels and "at" in report.labels


def test_conll2003_docstart_skipped_and_last_column_is_the_tag():
    report = check(D / "formats/conll2003.conll", "token-classification", validation_fraction=0)
    assert report.examples == 3
    assert report.preview[0] == {"tokens": ["EU", "rejects", "German", "call", "."],
                                 "tags": ["B-ORG", "O", "B-MISC", "O", "O"]}
    assert report.labels == {"LOC": 1, "MISC": 1, "ORG": 1, "PER": 1}


def test_squad_v1_real_sample():
    report = check(D / "real/squad_v1.json", "question-answering")
    assert report.format == "squad"
    assert report.labels is None
    first = report.preview[0]
    assert set(first) == {"id", "title", "context", "question", "answers"}
    assert report.details["answerable"] == report.examples


def test_squad_v2_impossible_questions_have_empty_answers():
    report = check(D / "formats/squad_v2.json", "question-answering", validation_fraction=0)
    by_id = {r["id"]: r for r in report.preview}
    assert by_id["v2-2"]["answers"] == {"text": [], "answer_start": []}
    assert report.details == {"encoding": "utf-8", "duplicates_dropped": 0, "answerable": 2, "unanswerable": 1}


def test_flat_qa_jsonl_accepts_both_answer_shapes():
    report = check(D / "formats/qa_flat.jsonl", "question-answering", validation_fraction=0)
    assert report.format == "jsonl"
    assert [r["answers"]["text"] for r in report.preview] == [["Paris"], ["Seine"], ["Berlin"]]
    assert report.preview[2]["id"] == "line-3"


def test_mlm_blank_line_separated_documents():
    report = check(D / "formats/mlm_blocks.txt", "masked-lm", validation_fraction=0)
    assert report.details["documents"] == "blank-line separated"
    assert [r["text"] for r in report.preview] == [
        "The first document.\nIt has two sentences.", "The second document is here.", "A third one.\nWith more.\nLines."]


def test_mlm_one_document_per_line():
    report = check(D / "formats/mlm_lines.txt", "masked-lm", validation_fraction=0)
    assert report.details["documents"] == "one per line"
    assert report.examples == 3


def test_token_statistics_with_the_packaged_tokenizer():
    report = inspect_file(D / "real/trec.csv", "text-classification", max_length=12)
    stats = report.token_stats
    assert stats["count"] == report.examples and stats["sampled"] is False
    assert stats["p50"] <= stats["p95"] <= stats["max"]
    assert 0 < stats["truncated_share"] < 1  # TREC questions are often longer than 12 tokens
    assert sum(stats["histogram"]["counts"]) == stats["count"]


def test_unloadable_tokenizer_is_a_warning_not_a_failure(tmp_path):
    report = inspect_file(D / "formats/pairs.csv", "text-classification", tokenizer=str(tmp_path / "no-such-model"))
    assert report.token_stats is None
    assert any("token lengths were not computed" in w.message for w in report.warnings)


@pytest.mark.parametrize("task", sorted(EXAMPLES))
def test_every_bundled_example_is_valid(task):
    report = check(example_path(task), task)
    assert report.examples >= 25
    assert not [w for w in report.warnings if "encoding" in w.message]
    json.dumps(report.to_dict())


def test_token_jsonl_prefers_list_keys_over_a_raw_text_string(tmp_path):
    path = tmp_path / "hf_style.jsonl"
    path.write_text(json.dumps({"id": "0", "text": "New York", "tokens": ["New", "York"],
                                "ner_tags": ["B-LOC", "I-LOC"]}) + "\n"
                    + json.dumps({"id": "1", "text": "hi", "tokens": ["hi"], "ner_tags": ["O"]}) + "\n")
    report = check(path, "token-classification", validation_fraction=0)
    assert report.columns == {"tokens": "tokens", "tags": "ner_tags"}
    assert report.labels == {"LOC": 1}


def test_mlm_layout_can_be_forced():
    report = check(D / "formats/mlm_blocks.txt", "masked-lm", format="text-lines", validation_fraction=0)
    assert report.details["documents"] == "one per line" and report.examples == 6


def test_quoted_multiline_fields_keep_physical_line_numbers(tmp_path):
    path = tmp_path / "multiline.csv"
    path.write_text('\n\ntext,label\n"first line\nsecond line",a\nok,b\nextra,b,c\n')
    from workbench.errors import DataValidationError

    with pytest.raises(DataValidationError) as info:
        check(path, "text-classification")
    assert [p.line for p in info.value.problems] == [7]
    path.write_text('\n\ntext,label\n"first line\nsecond line",a\nok,b\n')
    assert check(path, "text-classification", validation_fraction=0).preview[0]["text"] == "first line\nsecond line"


def test_very_large_squad_json_is_refused_with_a_pointer_to_jsonl(monkeypatch):
    from storage.datasets import read_qa
    from workbench.errors import DataValidationError

    monkeypatch.setattr(read_qa, "SQUAD_MAX_BYTES", 1000)
    with pytest.raises(DataValidationError, match="read whole into memory") as info:
        check(D / "real/squad_v1.json", "question-answering")
    assert "JSON Lines" in info.value.problems[0].hint


def test_token_statistics_on_a_seeded_sample_say_so(tmp_path):
    from storage.datasets import ReadOptions, prepare

    def run(out):
        out.mkdir()
        return prepare(D / "real/trec.csv", ReadOptions("text-classification"), out, max_bytes=10**7, sample_size=10)

    a, b = run(tmp_path / "a"), run(tmp_path / "b")
    assert a.token_stats["sampled"] is True and a.token_stats["count"] == 10
    assert a.token_stats["population"] == a.examples
    assert a.token_stats == b.token_stats  # the sample is seeded
