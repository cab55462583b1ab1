"""Baselines beside every classification score and the "did not learn" verdict (jobs.evaluation.baselines)."""
from __future__ import annotations

import random

import pytest

from jobs.evaluation import baselines
from workbench.ui import format as fmt


def _records(n, seed, learnable=True, share_a=0.7):
    """Texts whose words give the label away (learnable) or labels drawn independently of the text."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        label = "a" if rng.random() < share_a else "b"
        word = {"a": "apple", "b": "banana"}[label] if learnable else rng.choice(["apple", "banana"])
        out.append({"text": f"{word} {rng.choice(['one', 'two', 'three'])} {i % 7}", "label": label})
    return out


def test_majority_and_tfidf_baselines_on_a_learnable_set():
    found = baselines.fit_baselines(_records(200, 0), _records(100, 1))
    share_a = sum(r["label"] == "a" for r in _records(100, 1)) / 100
    assert found["majority"]["accuracy"] == pytest.approx(share_a, abs=1e-4)
    assert found["tfidf_logreg"]["accuracy"] == 1.0 and found["tfidf_logreg"]["seconds"] >= 0
    assert 0 < found["majority"]["f1_macro"] < 0.5


def test_multi_label_baselines_score_exact_sets_and_macro_f1():
    train = [{"text": "red thing", "label": ["red"]}, {"text": "blue thing", "label": ["blue"]},
             {"text": "red blue thing", "label": ["red", "blue"]}] * 10
    found = baselines.fit_baselines(train, train[:3])
    assert found["tfidf_logreg"]["accuracy"] == 1.0 and found["majority"]["accuracy"] < 1.0


def test_verdict_says_did_not_learn_for_one_class_or_majority_level_and_below_for_tfidf():
    found = {"majority": {"accuracy": 0.6}, "tfidf_logreg": {"accuracy": 0.8}}
    gold = ["a"] * 6 + ["b"] * 4
    one_class = baselines.verdict({"accuracy": 0.6}, found, ["a"] * 10, gold)
    assert one_class["status"] == "did_not_learn" and "predicts 'a' for 100%" in one_class["message"]
    at_majority = baselines.verdict({"accuracy": 0.6}, found, ["a"] * 8 + ["b"] * 2, gold)
    assert at_majority["status"] == "did_not_learn" and "majority class (0.600)" in at_majority["message"]
    # on 10 examples one answer decides it: the message says so before suggesting changes
    assert "10 examples are too few to tell the two apart" in at_majority["message"]
    many = baselines.verdict({"accuracy": 0.6}, found, ["a"] * 80 + ["b"] * 20, ["a"] * 60 + ["b"] * 40)
    assert many["status"] == "did_not_learn" and many["message"].endswith(baselines.HINT)
    below = baselines.verdict({"accuracy": 0.7}, found, ["a"] * 7 + ["b"] * 3, gold)
    assert below["status"] == "below_baseline" and "0.700 vs 0.800" in below["message"]
    learned = baselines.verdict({"accuracy": 0.9}, found, ["a"] * 6 + ["b"] * 4, gold)
    assert learned == {"status": "learned", "message": "", "top_label": "a", "top_share": 0.6}
    # a set where one class is nearly everything: predicting it is not "one class" of a model that failed
    skewed = baselines.verdict({"accuracy": 0.97}, {"majority": {"accuracy": 0.96}},
                               ["a"] * 100, ["a"] * 96 + ["b"] * 4)
    assert skewed["status"] == "learned"


def test_the_views_put_the_baseline_beside_the_score_and_warn():
    metrics = {"accuracy": 0.6, "baselines": {"majority": {"accuracy": 0.6, "f1_macro": 0.37},
                                              "tfidf_logreg": {"accuracy": 0.8, "f1_macro": 0.78}},
               "verdict": {"status": "did_not_learn", "message": "did not learn: predicts 'a' for 100% ..."}}
    assert fmt.metric_cell("text-classification", metrics) == "⚠ accuracy 0.6000 (baseline 0.800)"
    html = fmt.baseline_html(metrics)
    assert "majority class 0.600 · TF-IDF + logistic regression 0.800" in html and "run-verdict" in html
    assert baselines.summary({"accuracy": 0.9}) == "" and fmt.baseline_html({}) == ""
    assert fmt.metric_cell("text-classification", {"accuracy": 0.9}) == "accuracy 0.9000"


@pytest.mark.e2e
def test_a_run_that_cannot_beat_the_majority_says_so_in_its_metrics_and_log(tmp_path):
    """Labels drawn independently of the texts: no model beats the majority class, and the run says so in
    its metrics (which every view reads: see the format test above) and in its log."""
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.training.engine import run_training
    from tests.tiny_models import tiny_bert, write_jsonl

    model = tiny_bert(tmp_path / "tiny")
    spec = RunSpec(task="text-classification", model=str(model),
                   data=DataSpec(train_path=str(write_jsonl(tmp_path / "t.jsonl", _records(80, 2, learnable=False))),
                                 validation_path=str(write_jsonl(tmp_path / "v.jsonl",
                                                                 _records(40, 3, learnable=False)))),
                   train=TrainSpec(method="finetune", max_steps=2, batch_size=8, learning_rate=1e-7))
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    assert metrics["verdict"]["status"] == "did_not_learn", metrics["verdict"]
    assert "did not learn" in metrics["verdict"]["message"]
    assert set(metrics["baselines"]) == {"majority", "tfidf_logreg", "frozen_embeddings"}
    assert metrics["baselines"]["frozen_embeddings"]["examples"] == 40  # the run's own model, frozen
    assert "did not learn" in (tmp_path / "run" / "train.log").read_text()


def test_a_sweep_whose_trials_all_sit_at_the_baseline_says_no_trial_learned():
    from workbench.services.sweeps import sweep_verdict

    stuck = [{"learned": "did_not_learn", "baseline": 0.633}] * 4
    message = sweep_verdict(stuck + [{"learned": "", "baseline": None}])
    assert message.startswith("No trial learned: 4 of 4 finished trial(s) did not learn") and "0.633" in message
    assert "learning-rate range" in message
    assert sweep_verdict(stuck + [{"learned": "learned", "baseline": 0.633}]) == ""
    assert sweep_verdict([{"learned": "", "baseline": None}]) == ""  # nothing finished yet: no verdict
    below = sweep_verdict([{"learned": "below_baseline", "baseline": 0.8}] * 2)
    assert "none of the 2 finished trial(s) beats its baselines" in below


def test_an_audit_compares_its_fold_models_with_baselines_on_the_same_folds():
    import numpy as np

    from workbench.services.audits import held_out_baselines

    records = _records(90, 4)
    oos = {"task": "text-classification", "records": records, "fold": [i % 3 for i in range(90)],
           "given": np.array([0 if r["label"] == "a" else 1 for r in records])}
    found = held_out_baselines(oos)
    assert found["tfidf_logreg"] == 1.0
    assert found["majority"] == pytest.approx(sum(r["label"] == "a" for r in records) / 90, abs=0.02)
    tags = {"task": "token-classification", "records": [], "fold": [], "given": np.array([0, 0, 0, 1])}
    assert held_out_baselines(tags) == {"majority": 0.75}


# --- the frozen-embedding baseline, and better / level / worse by a paired test (issues 38 and 39) ----------

def test_the_frozen_embedding_baseline_embeds_the_runs_own_model_capped_and_reads_pairs(tmp_path, monkeypatch):
    from tests.tiny_models import classification_records, tiny_bert

    from jobs.training.sentence_model import frozen_embedder, frozen_embeddings

    model = str(tiny_bert(tmp_path / "tiny"))
    monkeypatch.setattr(baselines, "FROZEN_MAX_TRAIN", 30)
    found = baselines.fit_baselines(_records(60, 0), _records(20, 1), embed=frozen_embedder(model))
    frozen = found["frozen_embeddings"]
    assert (frozen["train_examples"], frozen["examples"]) == (30, 20) and frozen["seconds"] > 0
    assert 0 <= frozen["accuracy"] <= 1 and "frozen embeddings + logistic regression" in baselines.summary(
        {"baselines": found})
    # a pair is embedded as the model reads it: the second text changes the embedding
    single, pair = frozen_embeddings([{"text": "great film"}, {"text": "great film", "text_pair": "awful plot"}], model)
    assert single.shape == (32,) and not (single == pair).all()
    pairs = baselines.fit_baselines(classification_records(24, pair=True), classification_records(8, 1, pair=True),
                                    embed=frozen_embedder(model))
    assert pairs["frozen_embeddings"]["examples"] == 8
    multi = baselines.fit_baselines(classification_records(24, multi_label=True),
                                    classification_records(8, 1, multi_label=True), embed=frozen_embedder(model))
    assert 0 <= multi["frozen_embeddings"]["f1_macro"] <= 1
    # no model (the label audit's folds) or one that cannot load: the other baselines stand
    assert set(baselines.fit_baselines(_records(20, 0), _records(10, 1))) == {"majority", "tfidf_logreg"}
    assert set(baselines.fit_baselines(_records(20, 0), _records(10, 1), embed=frozen_embedder(str(tmp_path / "none")))) == {
        "majority", "tfidf_logreg"}


def test_a_run_that_ties_a_baseline_is_level_with_it_not_beating_it():
    """Issue 39: 0.700 against TF-IDF's 0.700 was "beats the baselines" in Compare, with no ⚠ in the Runs table."""
    train, validation = _records(200, 0, False, share_a=0.5), _records(100, 1, False, share_a=0.5)  # chance
    fitted = baselines.fit(train, validation)
    tfidf = fitted.predicted["tfidf_logreg"]
    run = [fitted.labels[i] for i in tfidf]  # the run answers as TF-IDF does: the same score, a tie
    fitted.scores["majority"]["accuracy"] = 0.0  # only the tie is judged here, not the majority class
    baselines.compare_with_run(fitted, run)
    accuracy = fitted.scores["tfidf_logreg"]["accuracy"]
    assert fitted.scores["tfidf_logreg"]["paired"] == {"run": "level", "p_value": 1.0, "examples": 100,
                                                       "run_only": 0, "baseline_only": 0}
    found = baselines.verdict({"accuracy": accuracy}, {"tfidf_logreg": fitted.scores["tfidf_logreg"]},
                              run, [r["label"] for r in validation])
    assert found["status"] == "level_with_baseline" and found["baseline"] == "tfidf_logreg"
    assert found["message"].startswith(f"is level with the TF-IDF + logistic regression baseline: no better on "
                                       f"these examples (accuracy {accuracy:.3f} vs {accuracy:.3f}; McNemar")
    metrics = {"accuracy": accuracy, "baselines": {"tfidf_logreg": fitted.scores["tfidf_logreg"]}, "verdict": found}
    assert fmt.metric_cell("text-classification", metrics).startswith("⚠ accuracy")
    assert baselines.verdict_cell(metrics).startswith("⚠ level with the TF-IDF")
    assert "<b>⚠ This run is level with the TF-IDF" in fmt.baseline_html(metrics)


def test_a_tie_on_few_examples_advises_a_larger_test_file_not_more_training():
    """A new user's 300 tweets: 0.900 against frozen embeddings' 0.900 on 30 validation examples (p = 1.0) was
    told to train longer or label more; on so few examples the tie says nothing either way."""
    def tie_on(n):
        train, validation = _records(200, 0, False, share_a=0.5), _records(n, 1, False, share_a=0.5)
        fitted = baselines.fit(train, validation)
        run = [fitted.labels[i] for i in fitted.predicted["tfidf_logreg"]]
        baselines.compare_with_run(fitted, run)
        score = fitted.scores["tfidf_logreg"]
        return baselines.verdict({"accuracy": score["accuracy"]}, {"tfidf_logreg": score}, run,
                                 [r["label"] for r in validation])["message"]

    few = tie_on(30)
    assert few.endswith("— 30 examples are too few to tell the two apart: evaluate the run on a larger labelled "
                        "file (Predict tab, \"Evaluate on a test set\"; the baselines are scored there too) before "
                        "changing it")
    assert tie_on(baselines.FEW_TO_TELL).endswith(f"— {baselines.HINT}")


def test_a_run_beats_or_falls_below_a_baseline_only_when_the_paired_test_says_so():
    validation = _records(100, 1)
    fitted = baselines.fit(_records(200, 0), validation)
    gold = [r["label"] for r in validation]
    baselines.compare_with_run(fitted, gold)  # always right: beats the majority class, level with TF-IDF's 1.0
    assert fitted.scores["majority"]["paired"]["run"] == "better"
    assert fitted.scores["majority"]["paired"]["p_value"] < 0.001
    assert fitted.scores["tfidf_logreg"]["paired"]["run"] == "level"
    wrong = [("b" if g == "a" else "a") if i < 8 else g for i, g in enumerate(gold)]  # 8 of 100 wrong
    fitted = baselines.fit(_records(200, 0), validation)
    baselines.compare_with_run(fitted, wrong)
    assert fitted.scores["tfidf_logreg"]["paired"] == {"run": "worse", "p_value": 0.0078, "examples": 100,
                                                       "run_only": 0, "baseline_only": 8}
    found = baselines.verdict({"accuracy": 0.92}, fitted.scores, wrong, gold)
    assert found["status"] == "below_baseline" and found["message"].startswith(
        "is below the TF-IDF + logistic regression baseline (accuracy 0.920 vs 1.000; McNemar's exact test on the "
        "same 100 examples: 0 only the run got right, 8 only the baseline, p = 0.008)")


def test_a_run_stored_as_learned_before_the_paired_tests_is_judged_again_on_its_interval():
    tie = {"accuracy": 0.7, "metrics_ci": {"accuracy": {"low": 0.61, "high": 0.79, "level": 0.95}},
           "baselines": {"majority": {"accuracy": 0.5}, "tfidf_logreg": {"accuracy": 0.7}},
           "verdict": {"status": "learned", "message": ""}}
    assert baselines.status(tie) == "level_with_baseline"
    assert baselines.verdict_cell(tie) == ("⚠ level with the TF-IDF + logistic regression baseline: no better on "
                                           "these examples (accuracy 0.700 vs 0.700; inside the run's 95 % interval "
                                           "0.610–0.790)")
    clear = {**tie, "accuracy": 0.9, "metrics_ci": {"accuracy": {"low": 0.85, "high": 0.95}}}
    assert baselines.status(clear) == "learned" and baselines.verdict_cell(clear) == "beats the baselines"
    # a message stored before the sentences read after "This run": it gains its verb
    old = {"baselines": tie["baselines"], "verdict": {"status": "below_baseline",
                                                      "message": "below a TF-IDF + logistic regression baseline: x"}}
    assert "⚠ This run is below a TF-IDF" in fmt.baseline_html(old)
