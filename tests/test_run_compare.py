"""Per-example outcomes (jobs.evaluation.outcomes), metrics_ci, and `workbench runs compare` (workbench.services.comparisons)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jobs.evaluation import outcomes, stats
from jobs.tasks import classification, token_classification
from jobs.tasks.common import Evaluation
from storage.models import SUCCEEDED
from tests.tiny_models import classification_records, tiny_bert, write_jsonl
from workbench.errors import ConfigError, InvalidState
from workbench.services import comparisons, runs


def test_classification_outcomes_reproduce_the_run_metrics():
    names = ["neg", "neutral", "pos"]
    records = [{"text": f"t{i}", "label": names[i % 3]} for i in range(12)]
    logits = np.random.default_rng(0).normal(size=(12, 3))
    metrics, tables = classification.compute_metrics_arrays(logits, np.arange(12) % 3, names, False)
    found = outcomes.outcomes_from_rows(classification.prediction_rows(records, logits, names, False), tables)
    assert str(found["task"]) == "text-classification" and len(set(found["ids"].tolist())) == 12
    for name, (statistic, columns) in outcomes.metric_columns(found).items():
        assert stats.STATISTICS[statistic](columns.sum(axis=0)) == pytest.approx(metrics[name]), name
    ci = outcomes.intervals(found)
    assert set(ci) == {"accuracy", "f1_macro"}
    for name, interval in ci.items():
        assert interval["low"] <= metrics[name] <= interval["high"]
        assert (interval["resamples"], interval["level"]) == (1000, 0.95)


def test_entity_outcomes_per_sentence_sum_to_seqevals_scores():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG"], ["B-LOC", "O", "B-PER"]]
    predicted = [["B-PER", "I-PER", "O", "O"], ["O", "B-LOC"], ["B-LOC", "O", "B-PER"]]
    rows = [{"tokens": [f"w{i}" for i in range(len(g))], "gold": g, "predicted": p,
             "gold_entities": token_classification.entity_spans(g),
             "predicted_entities": token_classification.entity_spans(p)} for g, p in zip(gold, predicted)]
    metrics, _ = token_classification.word_metrics(gold, predicted, True, with_tables=False)
    found = outcomes.outcomes_from_rows(rows, {})
    assert found["tp"].tolist() == [1, 0, 2] and found["fp"].tolist() == [0, 1, 0] and found["fn"].tolist() == [1, 1, 0]
    for name, (statistic, columns) in outcomes.metric_columns(found).items():
        assert stats.STATISTICS[statistic](columns.sum(axis=0)) == pytest.approx(metrics[name]), name


def test_qa_outcomes_are_per_question_and_repeated_examples_get_their_own_ids():
    rows = [{"id": "q1", "question": "who?", "context": "Ada wrote it.", "gold": ["Ada"], "predicted": "Ada"},
            {"id": "q2", "question": "what?", "context": "Ada wrote it.", "gold": ["it"], "predicted": "wrote it"},
            {"id": "q2", "question": "what?", "context": "Ada wrote it.", "gold": ["it"], "predicted": ""}]
    found = outcomes.outcomes_from_rows(rows, {})
    assert found["exact_match"].tolist() == [1.0, 0.0, 0.0]
    assert found["f1"].tolist() == pytest.approx([1.0, 2 / 3, 0.0])
    assert found["ids"][2] == found["ids"][1] + "#2"
    assert outcomes.outcomes_from_rows([], {}) is None  # masked-LM: no rows, no outcomes


def test_outcomes_file_round_trips(tmp_path):
    names = ["neg", "pos"]
    records = [{"text": f"t{i}", "label": names[i % 2]} for i in range(6)]
    logits = np.random.default_rng(1).normal(size=(6, 2))
    _, tables = classification.compute_metrics_arrays(logits, np.arange(6) % 2, names, False)
    evaluation = Evaluation({}, tables, classification.prediction_rows(records, logits, names, False))
    added = outcomes.save_outcomes(tmp_path, evaluation)
    assert set(added["metrics_ci"]) == {"accuracy", "f1_macro"}
    back = outcomes.read_outcomes(tmp_path / outcomes.OUTCOMES_FILE)
    assert back["ids"].tolist() == outcomes.unit_ids(evaluation.predictions, "text-classification")
    assert back["labels"].tolist() == names and back["gold"].tolist() == [0, 1, 0, 1, 0, 1]


def _unique(n: int, tag: str, seed: int = 0) -> list[dict]:
    # the dataset store drops duplicate texts, and validation texts seen in training
    return [{**r, "text": f"{r['text']} {tag}{i}"} for i, r in enumerate(classification_records(n, seed))]


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_two_tiny_runs_get_intervals_and_compare(cli, wb, tmp_path):
    model = tiny_bert(tmp_path / "tiny-bert")
    train = write_jsonl(tmp_path / "train.jsonl", _unique(32, "t"))
    dev = write_jsonl(tmp_path / "dev.jsonl", _unique(24, "v"))
    other_dev = write_jsonl(tmp_path / "other.jsonl", _unique(24, "o", seed=1))
    finished = []
    for lr, validation in (("5e-4", dev), ("1e-5", dev), ("5e-4", other_dev)):
        code, out, err = cli("train", "--task", "text-classification", "--data", str(train), "--eval",
                             str(validation), "--model", str(model), "--method", "finetune", "--epochs", "1",
                             "--batch-size", "16", "--max-length", "16", "--lr", lr, "--wait", "--json")
        assert code == 0, err
        finished.append(json.loads(out))
    a, b, elsewhere = (run["id"] for run in finished)
    for run in finished:
        assert run["status"] == SUCCEEDED
        # metrics_ci is missing only when saving the outcomes raised (logged in the run's train.log); failed once
        # in a clean-clone run on a busy machine and not reproduced, so the log is what the failure shows
        if "metrics_ci" not in run["metrics"]:
            log = Path(run["output_dir"], "train.log")
            pytest.fail(log.read_text(errors="replace")[-3000:] if log.is_file() else f"no {log}")
        interval = run["metrics"]["metrics_ci"]["accuracy"]
        assert interval["low"] <= run["metrics"]["accuracy"] <= interval["high"]
        assert (interval["resamples"], interval["level"]) == (1000, 0.95)
        assert len(outcomes.read_outcomes(Path(run["output_dir"], outcomes.OUTCOMES_FILE))["ids"]) == 24

    code, out, _ = cli("runs", "show", str(a), "--json")
    assert code == 0 and json.loads(out)["metrics_ci"] == finished[0]["metrics"]["metrics_ci"]
    code, out, err = cli("runs", "compare", str(a), str(b), "--json")
    assert code == 0, err
    found = json.loads(out)
    assert {"metric", "a", "b", "difference", "ci", "p_value", "verdict"} <= set(found)
    assert found["metric"] == "accuracy" and found["examples"] == 24
    assert found["a"]["value"] == pytest.approx(finished[0]["metrics"]["accuracy"])
    assert found["difference"] == pytest.approx(finished[1]["metrics"]["accuracy"] - finished[0]["metrics"]["accuracy"])
    assert found["ci"][0] <= found["difference"] <= found["ci"][1] and 0 < found["p_value"] <= 1
    assert {"only_a", "only_b", "p_value"} == set(found["mcnemar"])
    code, out, _ = cli("runs", "compare", str(a), str(b), "--metric", "f1_macro")
    assert code == 0 and ("no detectable difference in f1_macro" in out or "better than" in out)
    assert f"run {a}: " in out

    code, _, err = cli("runs", "compare", str(a), str(elsewhere))
    assert code == 4 and f"runs {a} and {elsewhere} were not evaluated on the same examples" in err
    code, _, err = cli("runs", "compare", str(a), str(b), "--metric", "entity_f1")
    assert code == 2 and "no per-example 'entity_f1'" in err
    with pytest.raises(ConfigError, match=f"run {a} is named twice: a run cannot be compared with itself"):
        comparisons.rank_runs(wb, [a, b, a])  # against itself a run is "not distinguishable" by construction
    code, _, err = cli("runs", "compare", str(a), str(a))
    assert code == 2 and "cannot be compared with itself" in err

    # an evaluation job of run A on its own validation file: the same examples, the same answers
    code, out, err = cli("evaluate", str(a), "--data", str(dev), "--wait", "--json")
    assert code == 0, err
    job = json.loads(out)
    assert job["metrics"]["metrics_ci"] == finished[0]["metrics"]["metrics_ci"]
    found = comparisons.compare_runs(wb, a, job["id"])
    assert (found["difference"], found["ci"], found["p_value"]) == (0.0, [0.0, 0.0], 1.0)

    Path(finished[1]["output_dir"], outcomes.OUTCOMES_FILE).unlink()
    with pytest.raises(InvalidState, match=f"run {b} was trained before per-example results were saved; retry it"):
        comparisons.compare_runs(wb, a, b)
    assert runs.get_run(wb, b)["status"] == SUCCEEDED
