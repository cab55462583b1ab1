"""Prediction jobs without a model: input formats, bad input, chunked output, resume after a kill, cancel.

A fake predictor stands in for the model (``jobs.predict.job``'s protocol), so every test here runs the
real reading, batching, chunk and output code in milliseconds.
"""
from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from jobs.evaluation.postprocess import join_tokens, pseudo_perplexity, top_fills
from jobs.predict import writer
from jobs.predict.inputs import iter_rows, open_input
from jobs.predict.job import predict_file
from jobs.predict.spec import ModelRef, PredictSpec
from jobs.process.fake_runner import LengthPredictor, fake_predict
from jobs.progress import Cancelled, RecordingReporter
from storage.datasets import read_tokens
from storage.datasets.problems import ProblemLog
from storage.errors import ConfigError, DataValidationError

ROOT = Path(__file__).resolve().parents[1]


def _spec(path: Path, **kw) -> PredictSpec:
    kw.setdefault("input_name", path.name)
    return PredictSpec(kind="predict", run_id=1, input_path=str(path), **kw)


def _write(tmp_path: Path, name: str, text: str, encoding: str = "utf-8") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return path


def _rows(path: Path, task: str, **kw):
    source = open_input(_spec(path, **kw), task)
    return source, list(iter_rows(source))


class Echo:
    """A fake classifier whose label is the row's own text: any mix-up of rows shows in the output."""

    task, labels, batch_size = "text-classification", ("a", "b"), 3

    def __init__(self):
        self.seen: list[str] = []

    def predict(self, rows):
        self.seen.extend(r["text"] for r in rows)
        return [{"label": r["text"], "score": 0.5, "scores": {"a": 0.25, "b": 0.75}} for r in rows]


class Crash(Exception):
    pass


def _numbered_csv(tmp_path: Path, n: int) -> Path:
    # lengths vary so that the length sort reorders rows inside a chunk
    lines = ["id,text"] + [f"{i},row {i} {'x' * ((i * 7) % 13)}" for i in range(n)]
    return _write(tmp_path, "numbered.csv", "\n".join(lines) + "\n")


def _read_output(path: Path) -> list[dict]:
    if path.suffix == ".csv":
        return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


# ------------------------------------------------------------------ input formats, with and without labels

@pytest.mark.parametrize("with_label", [False, True])
def test_csv_and_tsv_rows_keep_their_own_columns(tmp_path, with_label):
    label = ",label" if with_label else ""
    path = _write(tmp_path, "in.csv", f"id,text{label}\n1,\"hello, world\"{',pos' if with_label else ''}\n"
                                      f"2,second{',neg' if with_label else ''}\n")
    source, rows = _rows(path, "text-classification")
    assert source.format == "csv" and source.rows == 2 and source.mapping == {"text": "text"}
    assert [r.features for r in rows] == [{"text": "hello, world"}, {"text": "second"}]
    assert rows[0].columns == ({"id": "1", "text": "hello, world", "label": "pos"} if with_label
                               else {"id": "1", "text": "hello, world"})
    assert rows[0].line == 2 and rows[1].index == 1
    tsv = _write(tmp_path, "in.tsv", "text\tlabel\nfirst\tx\n" if with_label else "text\nfirst\n")
    assert [r.features for r in _rows(tsv, "text-classification")[1]] == [{"text": "first"}]


def test_a_single_unusual_column_is_the_text_and_pairs_are_found(tmp_path):
    one = _write(tmp_path, "one.csv", "msg\nhi there\n")
    assert _rows(one, "text-classification")[1][0].features == {"text": "hi there"}
    pairs = _write(tmp_path, "pairs.csv", "sentence1,sentence2,label\na,b,entail\n")
    source, rows = _rows(pairs, "text-classification")
    assert rows[0].features == {"text": "a", "text_pair": "b"} and source.mapping["text_pair"] == "sentence2"
    named = _write(tmp_path, "named.csv", "title,body\nT,the body\n")
    assert _rows(named, "text-classification", columns={"text": "body"})[1][0].features == {"text": "the body"}


def test_jsonl_keeps_every_key_and_the_union_of_columns(tmp_path):
    path = _write(tmp_path, "in.jsonl", '{"text": "a", "meta": 1}\n\n{"text": "b", "other": [1, 2]}\n')
    source, rows = _rows(path, "text-classification")
    assert source.format == "jsonl" and source.columns == ("text", "meta", "other")
    assert rows[1].columns == {"text": "b", "other": [1, 2]} and rows[1].line == 3


def test_txt_is_one_text_per_line(tmp_path):
    path = _write(tmp_path, "in.txt", "first text\n\n  second text  \n")
    source, rows = _rows(path, "masked-lm")
    assert source.format == "txt" and [r.features["text"] for r in rows] == ["first text", "second text"]
    assert [r.line for r in rows] == [1, 3]


@pytest.mark.parametrize("tagged", [False, True])
def test_conll_with_and_without_tags(tmp_path, tagged):
    tag = lambda t: f"\t{t}" if tagged else ""  # noqa: E731
    path = _write(tmp_path, "in.conll", f"-DOCSTART-\n\nalice{tag('B-PER')}\nflew{tag('O')}\n\nbob{tag('B-PER')}\n")
    source, rows = _rows(path, "token-classification")
    assert source.format == "conll" and source.rows == 2
    assert rows[0].features == {"tokens": ["alice", "flew"]} and rows[0].line == 3
    assert rows[0].columns == ({"tokens": ["alice", "flew"], "tags": ["B-PER", "O"]} if tagged
                               else {"tokens": ["alice", "flew"]})


def test_the_data_tab_still_needs_a_tag_in_conll(tmp_path):
    problems = ProblemLog()
    records = list(read_tokens.read_conll(io.StringIO("alice\nflew\tO\n"), "x.conll", problems))
    assert problems.has_errors and records == []


@pytest.mark.parametrize("answered", [False, True])
def test_squad_questions_with_and_without_answers(tmp_path, answered):
    answers = [{"text": "paris", "answer_start": 15}] if answered else []
    doc = {"version": "1.1", "data": [{"title": "T", "paragraphs": [{
        "context": "alice lives in paris .", "qas": [{"id": "q1", "question": "where?", "answers": answers}]}]}]}
    path = _write(tmp_path, "dev.json", json.dumps(doc, indent=1))
    source, rows = _rows(path, "question-answering")
    assert source.format == "squad"
    assert rows[0].features == {"question": "where?", "context": "alice lives in paris ."}
    assert ("answers" in rows[0].columns) is answered and rows[0].columns["id"] == "q1"


def test_flat_qa_files_and_token_lists(tmp_path):
    qa = _write(tmp_path, "qa.csv", "question,context\nwho?,alice is here\n")
    assert _rows(qa, "question-answering")[1][0].features == {"question": "who?", "context": "alice is here"}
    tokens = _write(tmp_path, "tok.jsonl", '{"tokens": ["a", "b"], "tags": ["O", "O"]}\n')
    assert _rows(tokens, "token-classification")[1][0].features == {"tokens": ["a", "b"]}
    text = _write(tmp_path, "tok2.jsonl", '{"text": "alice flew"}\n')
    assert _rows(text, "token-classification")[1][0].features == {"text": "alice flew"}


def test_conll_named_txt_is_read_as_conll(tmp_path):
    path = _write(tmp_path, "sentences.txt", "alice\tB-PER\nflew\tO\n\nbob\tB-PER\nran\tO\n")
    assert open_input(_spec(path), "token-classification").format == "conll"
    with pytest.raises(ConfigError, match="CoNLL"):
        open_input(_spec(path), "masked-lm")
    assert open_input(_spec(path, input_format="txt"), "masked-lm").rows == 4  # unless the user says it is text


def test_messages_name_the_file_as_the_user_named_it(tmp_path):
    stored = _write(tmp_path, "upload-7f3a.bin", "id,text\n1,a\n2,b,c\n")
    with pytest.raises(DataValidationError, match=r"^tickets\.csv:3: error: ragged row"):
        open_input(_spec(stored, input_name="tickets.csv"), "text-classification")
    with pytest.raises(ConfigError, match="unknown column role"):
        open_input(_spec(stored, columns={"question": "q"}), "text-classification")


# ------------------------------------------------------------------ bad input

def _refused(path: Path, task: str, error, *needles: str, **kw) -> str:
    with pytest.raises(error) as caught:
        predict_file(_spec(path, **kw), LengthPredictor() if task == "text-classification" else _Typed(task),
                     path.parent / "out", RecordingReporter())
    message = str(caught.value)
    for needle in (path.name, *needles):
        assert needle in message, message
    assert not list((path.parent / "out").glob("predictions*")) if (path.parent / "out").exists() else True
    return message


class _Typed:
    labels, batch_size = (), 4

    def __init__(self, task):
        self.task = task

    def predict(self, rows):
        raise AssertionError("a refused file is never predicted")


def test_empty_files_and_files_without_rows(tmp_path):
    _refused(_write(tmp_path, "empty.csv", ""), "text-classification", DataValidationError, "empty")
    _refused(_write(tmp_path, "header.csv", "text,label\n"), "text-classification", DataValidationError,
             "header.csv:1", "no rows")
    _refused(_write(tmp_path, "blank.txt", "\n\n"), "masked-lm", DataValidationError, "no text")


def test_a_named_column_that_is_not_there(tmp_path):
    path = _write(tmp_path, "in.csv", "body,label\nhello,x\n")
    message = _refused(path, "text-classification", DataValidationError, "in.csv:1", "'review'", "'body'",
                       columns={"text": "review"})
    assert "--text-column" in message
    qa = _write(tmp_path, "qa.csv", "question,answer\nwho?,me\n")
    _refused(qa, "question-answering", DataValidationError, "context")


def test_broken_rows_name_their_line(tmp_path):
    _refused(_write(tmp_path, "ragged.csv", "id,text\n1,a\n2,b,extra\n"), "text-classification",
             DataValidationError, "ragged.csv:3", "ragged row")
    _refused(_write(tmp_path, "broken.jsonl", '{"text": "a"}\n{"text": \n'), "text-classification",
             DataValidationError, "broken.jsonl:2", "broken JSON")
    _refused(_write(tmp_path, "keys.jsonl", '{"text": "a"}\n{"body": "b"}\n'), "text-classification",
             DataValidationError, "keys.jsonl:2", "'text'")


def test_a_file_of_the_wrong_shape_for_the_task(tmp_path):
    conll = _write(tmp_path, "tags.conll", "alice\tB-PER\n\nbob\tB-PER\n")
    _refused(conll, "text-classification", ConfigError, "CoNLL", "text-classification")
    squad = _write(tmp_path, "dev.json", json.dumps({"data": [{"paragraphs": []}]}, indent=1))
    _refused(squad, "text-classification", ConfigError, "SQuAD")
    _refused(_write(tmp_path, "q.txt", "who is alice?\n"), "question-answering", ConfigError, "question")


def test_undecodable_and_binary_files(tmp_path):
    _refused(_write(tmp_path, "sheet.csv", "PK\x03\x04 not text"), "text-classification", DataValidationError,
             "ZIP")
    bad_utf16 = tmp_path / "u16.csv"
    bad_utf16.write_bytes(b"\xff\xfe" + "text\nok\n".encode("utf-16-le") + b"\x00\xd8")
    _refused(bad_utf16, "text-classification", DataValidationError, "u16.csv:", "utf-16")
    latin = _write(tmp_path, "latin.csv", "text\ncaf\u00e9 cr\u00e8me\n", encoding="latin-1")
    source, rows = _rows(latin, "text-classification")
    assert rows[0].features["text"] == "café crème" and any("latin.csv:2" in w for w in source.warnings)


# ------------------------------------------------------------------ chunks, order, resume, cancel

def test_rows_come_back_in_input_order_in_every_format(tmp_path):
    path = _numbered_csv(tmp_path, 23)
    texts = [r.features["text"] for r in _rows(path, "text-classification")[1]]
    outputs = {}
    for fmt in ("csv", "jsonl", "parquet"):
        predictor = Echo()
        result = predict_file(_spec(path, chunk_rows=5, output_format=fmt), predictor, tmp_path / fmt,
                              RecordingReporter())
        assert predictor.seen != texts and sorted(predictor.seen) == sorted(texts)  # sorted by length, not input
        assert result["rows"] == 23 and result["truncated"] == 0 and Path(result["output"]).name == f"predictions.{fmt}"
        outputs[fmt] = _read_output(Path(result["output"]))
        assert not list((tmp_path / fmt / "chunks").glob("chunk-*"))
    for fmt, rows in outputs.items():
        assert [r["predicted_label"] for r in rows] == texts, fmt
        assert [str(r["id"]) for r in rows] == [str(i) for i in range(23)]
    assert list(outputs["csv"][0]) == ["id", "text", "predicted_label", "score", "prob_a", "prob_b", "truncated"]
    assert outputs["parquet"][0]["prob_b"] == 0.75 and outputs["parquet"][0]["truncated"] is False
    assert outputs["csv"][0]["truncated"] == "false" and outputs["jsonl"][0]["prob_a"] == 0.25


def test_progress_counts_rows_up_to_the_total(tmp_path):
    reporter = RecordingReporter()
    predict_file(_spec(_numbered_csv(tmp_path, 11), chunk_rows=4), Echo(), tmp_path / "out", reporter)
    done = [step for step, total, _ in reporter.steps]
    assert done == sorted(done) and done[-1] == 11 and {total for _, total, _ in reporter.steps} == {11}
    assert reporter.facts["total_steps"] == 11


def test_a_crash_between_chunks_resumes_after_the_last_one(tmp_path):
    path = _numbered_csv(tmp_path, 23)
    texts = [r.features["text"] for r in _rows(path, "text-classification")[1]]
    spec = _spec(path, chunk_rows=5, output_format="jsonl")

    def crash_after_two(k):
        if k == 1:
            raise Crash()

    first = Echo()
    with pytest.raises(Crash):
        predict_file(spec, first, tmp_path / "out", RecordingReporter(), after_chunk=crash_after_two)
    assert sorted(first.seen) == sorted(texts[:10])
    assert not (tmp_path / "out" / "predictions.jsonl").exists()
    (tmp_path / "out" / "chunks" / "chunk-000002.jsonl.tmp").write_text('{"half": ')  # a chunk cut short
    second = Echo()
    result = predict_file(spec, second, tmp_path / "out", RecordingReporter())
    assert sorted(second.seen) == sorted(texts[10:])  # only the rows after chunk 1
    rows = _read_output(Path(result["output"]))
    assert [r["predicted_label"] for r in rows] == texts and result["rows"] == 23 and result["resumed_rows"] == 10
    assert os.listdir(tmp_path / "out" / "chunks") == ["manifest.json"]


def test_chunks_of_another_input_or_size_are_not_reused(tmp_path):
    path = _numbered_csv(tmp_path, 12)
    with pytest.raises(Crash):
        predict_file(_spec(path, chunk_rows=5), Echo(), tmp_path / "out", RecordingReporter(),
                     after_chunk=lambda k: (_ for _ in ()).throw(Crash()))
    again = Echo()
    result = predict_file(_spec(path, chunk_rows=4), again, tmp_path / "out", RecordingReporter())
    assert len(again.seen) == 12 and result["rows"] == 12


def test_a_finished_job_started_again_predicts_nothing(tmp_path):
    spec = _spec(_numbered_csv(tmp_path, 7), chunk_rows=3)
    first = predict_file(spec, Echo(), tmp_path / "out", RecordingReporter())
    again = Echo()
    second = predict_file(spec, again, tmp_path / "out", RecordingReporter())
    assert again.seen == [] and second["rows"] == first["rows"] == 7 and second["output"] == first["output"]


def test_cancel_stops_between_batches_and_keeps_finished_chunks(tmp_path):
    path = _numbered_csv(tmp_path, 20)
    spec = _spec(path, chunk_rows=6, batch_size=2)
    with pytest.raises(Cancelled):
        predict_file(spec, Echo(), tmp_path / "out", RecordingReporter(cancel_after_step=9))
    assert sorted(p.name for p in (tmp_path / "out" / "chunks").glob("chunk-*")) == ["chunk-000000.jsonl"]
    assert not (tmp_path / "out" / "predictions.csv").exists()
    rest = Echo()
    result = predict_file(spec, rest, tmp_path / "out", RecordingReporter())
    assert len(rest.seen) == 14 and result["rows"] == 20


def test_a_job_killed_between_chunks_loses_no_row_and_repeats_none(tmp_path):
    """The fake runner's prediction in a real process, SIGKILLed after its first chunk, then run again."""
    path = _numbered_csv(tmp_path, 40)
    spec = _spec(path, chunk_rows=10, output_format="jsonl")
    out = tmp_path / "out"
    code = ("import json, sys; from jobs.process.fake_runner import fake_predict; from jobs.predict.spec import PredictSpec, "
            "ModelRef; from jobs.progress import RecordingReporter; "
            "fake_predict(PredictSpec.from_dict(json.loads(sys.argv[1])), ModelRef(1, 'text-classification', '', {}), "
            "sys.argv[2], RecordingReporter())")
    env = {**os.environ, "FAKE_PREDICT_SECONDS_PER_CHUNK": "30", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(spec.to_dict()), str(out)], env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (out / "chunks" / "chunk-000000.jsonl").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the job never finished a chunk"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not (out / "predictions.jsonl").exists()
    result = fake_predict(spec, ModelRef(1, "text-classification", "", {}), out, RecordingReporter())
    rows = _read_output(Path(result["output"]))
    assert result["rows"] == 40 and result["resumed_rows"] == 10
    assert [r["id"] for r in rows] == [str(i) for i in range(40)]
    assert all(r["predicted_label"] == ("long" if len(r["text"]) > 20 else "short") for r in rows)


# ------------------------------------------------------------------ output layout per task

def test_output_columns_per_task_and_name_clashes():
    layout = writer.Layout("text-classification", ("score", "text"), ("a", "b"))
    assert layout.columns == ["score_input", "text", "predicted_label", "score", "prob_a", "prob_b", "truncated"]
    from jobs.predict.inputs import InputRow

    row = InputRow(0, 2, {"score": "5", "text": "t"}, {"text": "t"})
    out = layout.row(row, {"label": ["a", "b"], "score": 0.9, "scores": {"a": 0.9, "b": 0.6}, "truncated": True})
    assert out["predicted_label"] == "a|b" and out["score_input"] == "5" and out["truncated"] is True
    qa = writer.Layout("question-answering", ("question", "context"))
    abstained = qa.row(InputRow(0, 1, {"question": "q", "context": "c"}, {}),
                       {"answer": "x", "score": 0.7, "start": 0, "end": 1, "no_answer": True})
    assert abstained["answer"] == "" and abstained["start"] is None and abstained["no_answer"] is True
    tokens = writer.Layout("token-classification", ("tokens",), pre_split=True)
    assert tokens.columns == ["tokens", "entities", "predicted_tags", "truncated"]
    assert writer.Layout("masked-lm", ("text",)).columns == ["text", "fills", "pseudo_perplexity", "truncated"]


class _Tagger:
    task, labels, batch_size = "token-classification", ("O", "B-PER"), 4

    def predict(self, rows):
        out = []
        for row in rows:
            text, spans = join_tokens(row["tokens"])
            tags = ["B-PER" if t[0].isupper() else "O" for t in row["tokens"]]
            entities = [{"text": text[s:e], "label": "PER", "start": s, "end": e, "score": 1.0}
                        for (s, e), tag in zip(spans, tags) if tag != "O"]
            out.append({"entities": entities, "tags": tags})
        return out


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_conll_in_gives_entities_and_a_conll_file_back(tmp_path, fmt):
    path = _write(tmp_path, "in.conll", "Alice\nflew\nto\nParis\n\nbob\nran\n")
    result = predict_file(_spec(path, output_format=fmt), _Tagger(), tmp_path / "out", RecordingReporter())
    rows = _read_output(Path(result["output"]))
    entities = rows[0]["entities"] if fmt == "jsonl" else json.loads(rows[0]["entities"])
    assert entities == [{"text": "Alice", "label": "PER", "start": 0, "end": 5, "score": 1.0},
                        {"text": "Paris", "label": "PER", "start": 14, "end": 19, "score": 1.0}]
    conll = Path(result["outputs"]["conll"])
    assert conll.name == "predictions.conll"
    assert conll.read_text() == "Alice\tB-PER\nflew\tO\nto\tO\nParis\tB-PER\n\nbob\tO\nran\tO\n\n"
    problems = ProblemLog()
    back = list(read_tokens.read_conll(io.StringIO(conll.read_text()), "predictions.conll", problems))
    assert not problems.has_errors and [r.data["tokens"] for r in back] == [["Alice", "flew", "to", "Paris"],
                                                                            ["bob", "ran"]]


# ------------------------------------------------------------------ shared pure functions

def test_join_tokens_spans_point_at_each_token():
    text, spans = join_tokens(["New", "York", "!"])
    assert text == "New York !" and [text[s:e] for s, e in spans] == ["New", "York", "!"]


def test_top_fills_skip_special_tokens_and_pseudo_perplexity():
    logits = np.array([5.0, 1.0, 3.0, 2.0])
    top, probs = top_fills(logits, special_ids=[0], k=2)
    assert top.tolist() == [2, 3] and probs[0] > probs[1] > 0
    assert pseudo_perplexity([np.log(0.5), np.log(0.5)]) == pytest.approx(2.0)
