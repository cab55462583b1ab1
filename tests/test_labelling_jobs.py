"""A labelling project's background jobs (jobs.labelling.job) through the real job process: the pool embedded
with a tiny BERT saved to disk, the cold start, the refit, and kill -9 in the middle of each."""
from __future__ import annotations

import csv
import datetime as dt
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select, update

from jobs.labelling.cache import EmbeddingCache, load_array
from jobs.labelling.encoder import load_encoder
from jobs.labelling.job import PREDICTIONS, mix_random_share, run_label_job
from jobs.predict.spec import PredictSpec
from jobs.process import run_job
from jobs.queue import table as queue
from storage.models import (FAILED, KIND_LABEL_EMBED, KIND_LABEL_REFIT, KIND_PREDICT, RUNNING, SUCCEEDED, LabelClass, LabelEstimate,
                            LabelItem, LabelProject, Run, utcnow)
from tests.conftest import ROOT
from tests.queue_support import qwb  # noqa: F401 - the SQLite / PostgreSQL workbench fixture
from tests.tiny_models import classification_records, distinct, tiny_bert

CLASSES = ("pos", "neg")
DESCRIPTIONS = ("a review that liked the film", "a review that disliked the film")


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("labelling") / "bert")


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return distinct(classification_records(40, seed=3))


def make_project(wb, bert: Path, records: list[dict], *, descriptions=DESCRIPTIONS, multi_label=False,
                 random_share=0.1) -> int:
    with wb.db.session() as session:
        project = LabelProject(name="reviews", folder="", model=str(bert), multi_label=multi_label,
                               random_share=random_share, refit_every=10)
        session.add(project)
        session.flush()
        project.folder = str(wb.settings.home / "labelling" / str(project.id))
        session.add_all(LabelClass(project_id=project.id, position=i, name=name, description=descriptions[i])
                        for i, name in enumerate(CLASSES))
        session.add_all(LabelItem(project_id=project.id, position=i, external_id=str(i), text=r["text"])
                        for i, r in enumerate(records))
        return project.id


def run_now(wb, kind: str, project_id: int) -> tuple[int, int]:
    """Queue, claim and execute one labelling job in this process; (run id, exit code)."""
    run_id = queue.submit_label_job(wb.db, kind, project_id, wb.settings.home / "runs")
    return run_id, execute(wb, run_id)


def execute(wb, run_id: int, embedder=None) -> int:
    """Claim queued run ``run_id`` and execute it in this process (with ``embedder`` as the frozen encoder)."""
    claimed = queue.claim(wb.db, "test-worker", only=[run_id])

    def label_fn(*args, **kwargs):
        return run_label_job(*args, **kwargs, embedder=embedder)
    return run_job.execute(wb, run_id, claimed.attempt, train_fn=None, label_fn=label_fn if embedder else None)


def give_labels(wb, project_id: int, positions, gold: list, user: str = "ann") -> None:
    with wb.db.session() as session:
        for position in positions:
            session.execute(update(LabelItem).where(LabelItem.project_id == project_id,
                                                    LabelItem.position == int(position))
                            .values(label=gold[position], labelled_by=user, labelled_at=utcnow()))


def items(wb, project_id: int) -> list[dict]:
    columns = (LabelItem.id, LabelItem.position, LabelItem.label, LabelItem.labelled_by, LabelItem.labelled_at,
               LabelItem.embedded, LabelItem.cluster, LabelItem.rank, LabelItem.random_pick, LabelItem.suggestion,
               LabelItem.confidence)
    with wb.db.session() as session:
        rows = session.execute(select(*columns).where(LabelItem.project_id == project_id)
                               .order_by(LabelItem.position)).mappings().all()
    return [dict(r) for r in rows]


def project_row(wb, project_id: int) -> dict:
    with wb.db.session() as session:
        row = session.get(LabelProject, project_id)
        estimates = session.scalar(select(func.count()).where(LabelEstimate.project_id == project_id))
        return {"folder": Path(row.folder), "ranked_at_labels": row.ranked_at_labels, "estimates": estimates}


def status_of(wb, run_id: int) -> tuple[str, dict, str]:
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        return run.status, dict(run.metrics or {}), run.error or ""


def ranked_by(rows: list[dict]) -> list[int]:
    return [r["position"] for r in sorted((r for r in rows if r["rank"] is not None), key=lambda r: r["rank"])]


# ------------------------------------------------------------------ embed and cold start

def test_embed_job_caches_the_pool_then_the_cold_start_asks_one_item_per_cluster_first(wb, bert, records):
    from workbench.services import runs as runs_service

    project_id = make_project(wb, bert, records)
    run_id, code = run_now(wb, KIND_LABEL_EMBED, project_id)
    status, metrics, error = status_of(wb, run_id)
    assert code == run_job.EXIT_SUCCEEDED and status == SUCCEEDED, error
    assert metrics["embedded"] == 40 and metrics["ranked"] == 40 and metrics["zero_shot"] is True
    folder = project_row(wb, project_id)["folder"]
    cache = EmbeddingCache(folder)
    assert json.loads((folder / "embedded.json").read_text()) == {"rows": 40, "model": str(bert), "dim": 32}
    emb = np.asarray(cache.load())
    assert emb.shape == (40, 32) and np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    fresh = load_encoder(str(bert))([r["text"] for r in records])
    assert np.allclose(emb, fresh / np.linalg.norm(fresh, axis=1, keepdims=True), atol=1e-4)

    rows = items(wb, project_id)
    assert all(r["embedded"] for r in rows) and all(r["cluster"] is not None for r in rows)
    assert sorted(r["rank"] for r in rows) == list(range(40))
    order = ranked_by(rows)
    clusters = {r["position"]: r["cluster"] for r in rows}
    n_clusters = len(set(clusters.values()))
    assert n_clusters >= 2
    first = [p for p in order if not rows[p]["random_pick"]][:n_clusters]
    assert len({clusters[p] for p in first}) == n_clusters, "coverage: one item from each cluster first"
    assert sum(r["random_pick"] for r in rows) == 4  # 10 % of the queries, one in each ten
    assert all(r["suggestion"] in CLASSES and 0.5 <= r["confidence"] <= 1.0 for r in rows)
    assert project_row(wb, project_id)["ranked_at_labels"] == 0

    # The Runs list shows training runs and their jobs; a project's own jobs only when asked for by kind.
    assert run_id not in [r["id"] for r in runs_service.list_runs(wb)]
    assert run_id in [r["id"] for r in runs_service.list_runs(wb, kind=KIND_LABEL_EMBED)]


def test_without_a_description_for_every_label_the_cold_start_suggests_nothing(wb, bert, records):
    project_id = make_project(wb, bert, records[:12], descriptions=("liked it", ""))
    run_id, code = run_now(wb, KIND_LABEL_EMBED, project_id)
    assert code == run_job.EXIT_SUCCEEDED, status_of(wb, run_id)
    rows = items(wb, project_id)
    assert sorted(r["rank"] for r in rows) == list(range(12))
    assert all(r["suggestion"] is None and r["confidence"] is None for r in rows)


def test_random_share_takes_evenly_spaced_slots_and_keeps_every_item_once():
    order = np.arange(100)[::-1]
    mixed, picks = mix_random_share(order, 0.1, seed=1)
    assert sorted(mixed.tolist()) == list(range(100))
    assert np.flatnonzero(picks).tolist() == list(range(9, 100, 10))
    assert mixed[~picks].tolist() == [p for p in order.tolist() if p not in set(mixed[picks].tolist())]
    none, no_picks = mix_random_share(order, 0.0)
    assert none.tolist() == order.tolist() and not no_picks.any()


# ------------------------------------------------------------------ refit

@pytest.mark.parametrize("multi_label", [False, True])
def test_refit_ranks_the_unlabelled_items_writes_suggestions_and_a_curve_point(wb, bert, records, multi_label):
    project_id = make_project(wb, bert, records, multi_label=multi_label)
    assert run_now(wb, KIND_LABEL_EMBED, project_id)[1] == run_job.EXIT_SUCCEEDED
    gold = [([r["label"]] if multi_label else r["label"]) for r in records]
    give_labels(wb, project_id, range(12), gold)
    before = items(wb, project_id)

    run_id, code = run_now(wb, KIND_LABEL_REFIT, project_id)
    status, metrics, error = status_of(wb, run_id)
    assert code == run_job.EXIT_SUCCEEDED and status == SUCCEEDED, error
    assert metrics["labels"] == 12 and metrics["ranked"] == 28 and metrics["agreement"] is None
    assert {"fit_seconds", "predict_seconds", "estimate_seconds", "rank_seconds", "write_seconds"} <= set(metrics)
    rows = items(wb, project_id)
    for old, new in zip(before[:12], rows[:12]):  # the labelled items: nothing of theirs is touched
        assert {k: new[k] for k in ("label", "labelled_by", "labelled_at", "rank", "suggestion")} == \
            {k: old[k] for k in ("label", "labelled_by", "labelled_at", "rank", "suggestion")}
    assert sorted(r["rank"] for r in rows[12:]) == list(range(28))
    for r in rows[12:]:
        if multi_label:
            assert isinstance(r["suggestion"], list) and set(r["suggestion"]) <= set(CLASSES)
        else:
            assert r["suggestion"] in CLASSES
        assert 0.0 < r["confidence"] <= 1.0
    project = project_row(wb, project_id)
    assert project["ranked_at_labels"] == 12 and project["estimates"] == 1
    assert load_array(project["folder"] / PREDICTIONS).shape[0] == 40

    give_labels(wb, project_id, range(12, 22), gold)
    run_id, code = run_now(wb, KIND_LABEL_REFIT, project_id)
    status, metrics, error = status_of(wb, run_id)
    assert code == run_job.EXIT_SUCCEEDED, error
    with wb.db.session() as session:
        points = session.execute(select(LabelEstimate).where(LabelEstimate.project_id == project_id)
                                 .order_by(LabelEstimate.id)).scalars().all()
        assert [p.labels for p in points] == [12, 22]
        assert points[0].agreement is None and 0.0 <= points[1].agreement <= 1.0
        assert points[1].metric == ("macro_f1" if multi_label else "accuracy") and points[1].source
    assert sorted(r["rank"] for r in items(wb, project_id)[22:]) == list(range(18))


def test_texts_added_later_are_embedded_alone_and_ranked_by_the_fast_model(wb, bert, records):
    project_id = make_project(wb, bert, records[:30])
    assert run_now(wb, KIND_LABEL_EMBED, project_id)[1] == run_job.EXIT_SUCCEEDED
    give_labels(wb, project_id, range(10), [r["label"] for r in records])
    assert run_now(wb, KIND_LABEL_REFIT, project_id)[1] == run_job.EXIT_SUCCEEDED
    with wb.db.session() as session:
        session.add_all(LabelItem(project_id=project_id, position=i, external_id=str(i), text=records[i]["text"])
                        for i in range(30, 40))
    encoder, seen = load_encoder(str(bert)), []

    def counting(texts):
        seen.extend(texts)
        return encoder(texts)

    run_id = queue.submit_label_job(wb.db, KIND_LABEL_EMBED, project_id, wb.settings.home / "runs")
    assert execute(wb, run_id, embedder=counting) == run_job.EXIT_SUCCEEDED, status_of(wb, run_id)
    assert seen == [r["text"] for r in records[30:40]]
    rows = items(wb, project_id)
    assert all(r["embedded"] for r in rows) and sorted(r["rank"] for r in rows[10:]) == list(range(30))
    assert all(r["suggestion"] in CLASSES for r in rows[30:])
    assert EmbeddingCache(project_row(wb, project_id)["folder"]).rows() == 40
    assert project_row(wb, project_id)["estimates"] == 1  # no curve point: no new label


def test_a_refit_of_a_deleted_project_fails_with_a_sentence(wb, bert, records):
    project_id = make_project(wb, bert, records[:4])
    run_id = queue.submit_label_job(wb.db, KIND_LABEL_REFIT, project_id, wb.settings.home / "runs")
    claimed = queue.claim(wb.db, "test-worker", only=[run_id])
    with wb.db.session() as session:
        session.delete(session.get(LabelProject, project_id))
    assert run_job.execute(wb, run_id, claimed.attempt, train_fn=None) == run_job.EXIT_FAILED
    status, _, error = status_of(wb, run_id)
    assert status == FAILED and f"labelling project {project_id} no longer exists" in error


# ------------------------------------------------------------------ kill -9

def _subprocess_env(wb) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_HOME": str(wb.settings.home),
            "WORKBENCH_DATABASE_URL": wb.settings.database_url}


# The job process, SIGKILLed by itself right after the refit's bulk UPDATE of the ranking ran and before its
# transaction commits: the worst moment for a refit to die.
KILL_IN_REFIT = """
import os, signal, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine

@event.listens_for(Engine, "after_cursor_execute")
def kill(conn, cursor, statement, parameters, context, executemany):
    if executemany and statement.lstrip().upper().startswith("UPDATE LABEL_ITEMS"):
        os.kill(os.getpid(), signal.SIGKILL)

from jobs.process.run_job import main
sys.exit(main([sys.argv[1], "--attempt", sys.argv[2]]))
"""


def test_kill_9_mid_refit_keeps_the_labels_and_the_previous_ranking_and_a_rerun_succeeds(qwb, bert, records):
    wb = qwb
    project_id = make_project(wb, bert, records)
    assert run_now(wb, KIND_LABEL_EMBED, project_id)[1] == run_job.EXIT_SUCCEEDED
    gold = [r["label"] for r in records]
    give_labels(wb, project_id, range(10), gold)
    assert run_now(wb, KIND_LABEL_REFIT, project_id)[1] == run_job.EXIT_SUCCEEDED
    give_labels(wb, project_id, range(10, 20), gold, user="bob")
    before, project_before = items(wb, project_id), project_row(wb, project_id)

    run_id = queue.submit_label_job(wb.db, KIND_LABEL_REFIT, project_id, wb.settings.home / "runs")
    claimed = queue.claim(wb.db, "test-worker", only=[run_id])
    proc = subprocess.run([sys.executable, "-c", KILL_IN_REFIT, str(run_id), str(claimed.attempt)], cwd=ROOT,
                          env=_subprocess_env(wb), capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert items(wb, project_id) == before, "labels and the previous ranking are intact"
    assert project_row(wb, project_id) == project_before
    assert status_of(wb, run_id)[0] == RUNNING  # the worker's lease expiry puts it back in the queue

    later = utcnow() + dt.timedelta(seconds=60)
    assert queue.reclaim_expired(wb.db, lease_seconds=1, now=later, max_attempts=3) == [(run_id, "queued")]
    assert execute(wb, run_id) == run_job.EXIT_SUCCEEDED
    after = items(wb, project_id)
    assert [(r["label"], r["labelled_by"]) for r in after] == [(r["label"], r["labelled_by"]) for r in before]
    assert sorted(r["rank"] for r in after[20:]) == list(range(20))
    assert project_row(wb, project_id)["ranked_at_labels"] == 20
    assert project_row(wb, project_id)["estimates"] == project_before["estimates"] + 1


# The embed job in a real process with the tiny encoder, SIGKILLed by itself when asked for its third chunk.
KILL_IN_EMBED = """
import os, signal, sys
from jobs.labelling.encoder import load_encoder
from jobs.labelling.job import run_label_job
from jobs.process.run_job import main

encoder, calls = load_encoder(sys.argv[3]), []

def embed(texts):
    calls.append(len(texts))
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return encoder(texts)

sys.exit(main([sys.argv[1], "--attempt", sys.argv[2]],
              label_fn=lambda *args, **kwargs: run_label_job(*args, **kwargs, embedder=embed)))
"""


def test_an_embed_job_killed_mid_pool_resumes_from_the_cache(wb, bert, records):
    project_id = make_project(wb, bert, records)
    run_id = queue.submit_label_job(wb.db, KIND_LABEL_EMBED, project_id, wb.settings.home / "runs")
    with wb.db.session() as session:  # ten texts a chunk: the cache is written after each ten
        session.execute(update(Run).where(Run.id == run_id).values(spec={"project_id": project_id,
                                                                         "chunk_rows": 10}))
    claimed = queue.claim(wb.db, "test-worker", only=[run_id])
    proc = subprocess.run([sys.executable, "-c", KILL_IN_EMBED, str(run_id), str(claimed.attempt), str(bert)],
                          cwd=ROOT, env=_subprocess_env(wb), capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    folder = project_row(wb, project_id)["folder"]
    assert EmbeddingCache(folder).rows() == 20
    rows = items(wb, project_id)
    assert [r["embedded"] for r in rows] == [True] * 20 + [False] * 20
    assert all(r["rank"] is None for r in rows), "no ranking before the whole pool is embedded"

    encoder, seen = load_encoder(str(bert)), []

    def counting(texts):
        seen.extend(texts)
        return encoder(texts)

    later = utcnow() + dt.timedelta(seconds=60)
    assert queue.reclaim_expired(wb.db, lease_seconds=1, now=later, max_attempts=3) == [(run_id, "queued")]
    code = execute(wb, run_id, embedder=counting)
    status, metrics, error = status_of(wb, run_id)
    assert code == run_job.EXIT_SUCCEEDED, error
    assert seen[:20] == [r["text"] for r in records[20:]], "only the texts past the cache are embedded"
    assert seen[20:] == list(DESCRIPTIONS)  # then the labels' descriptions, for the zero-shot suggestions
    assert metrics["newly_embedded"] == 20 and metrics["embedded"] == 40
    emb = np.asarray(EmbeddingCache(folder).load())
    fresh = encoder([r["text"] for r in records])
    assert np.allclose(emb, fresh / np.linalg.norm(fresh, axis=1, keepdims=True), atol=1e-4)
    assert sorted(r["rank"] for r in items(wb, project_id)) == list(range(40))


# ------------------------------------------------------------------ a real run's predictions over the pool

def test_a_real_runs_prediction_over_the_pool_drives_the_suggestions_and_the_curve_stays_the_fast_models(
        wb, bert, records, tmp_path):
    project_id = make_project(wb, bert, records)
    gold = [r["label"] for r in records]
    assert run_now(wb, KIND_LABEL_EMBED, project_id)[1] == run_job.EXIT_SUCCEEDED
    give_labels(wb, project_id, range(10), gold)
    assert run_now(wb, KIND_LABEL_REFIT, project_id)[1] == run_job.EXIT_SUCCEEDED
    (tmp_path / "run" / "model").mkdir(parents=True)  # all a prediction job needs of its model's run here
    with wb.db.session() as session:
        trained = Run(name="from labels", task="text-classification", model="m", status=SUCCEEDED, spec={},
                      output_dir=str(tmp_path / "run"), label_project_id=project_id)
        session.add(trained)
        session.flush()
        trained_id = trained.id
    spec = PredictSpec(kind="predict", run_id=trained_id, input_path=str(tmp_path / "unlabelled.csv"))
    job_id = queue.submit_job(wb.db, KIND_PREDICT, spec.to_dict(), wb.settings.home / "runs",
                              parent_run_id=trained_id, task="text-classification", model="m")
    with wb.db.session() as session:
        session.execute(update(Run).where(Run.id == job_id).values(label_project_id=project_id))
    said = {i: ("neg", 0.9) if i % 2 else ("pos", 0.8) for i in range(10, 40)}

    def predict(spec, model, output_dir, reporter, device=None):
        out = Path(output_dir) / "predictions.csv"
        with out.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["id", "text", "predicted_label", "score", "prob_pos", "prob_neg", "truncated"])
            for i, (label, p) in said.items():
                pos = p if label == "pos" else 1 - p
                writer.writerow([str(i), records[i]["text"], label, p, pos, 1 - pos, False])
        return {"output": str(out), "rows": len(said)}

    claimed = queue.claim(wb.db, "test-worker", only=[job_id])
    assert run_job.execute(wb, job_id, claimed.attempt, train_fn=None, predict_fn=predict) == run_job.EXIT_SUCCEEDED
    rows = items(wb, project_id)
    assert [(r["suggestion"], round(r["confidence"], 4)) for r in rows[10:]] == list(said.values())
    assert sorted(r["rank"] for r in rows[10:]) == list(range(30))
    assert project_row(wb, project_id)["estimates"] == 1

    give_labels(wb, project_id, range(10, 16), gold)
    run_id, code = run_now(wb, KIND_LABEL_REFIT, project_id)
    assert code == run_job.EXIT_SUCCEEDED and status_of(wb, run_id)[1]["run_scored"] == 30
    rows = items(wb, project_id)
    assert [r["suggestion"] for r in rows[16:]] == [said[i][0] for i in range(16, 40)]
    assert project_row(wb, project_id)["estimates"] == 2  # the fast model's curve goes on


def test_a_long_text_is_embedded_as_the_mean_of_its_windows_and_a_short_one_as_before(bert):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from jobs.labelling.encoder import MAX_LENGTH
    from jobs.training.sentence_model import pool

    tokenizer, model = AutoTokenizer.from_pretrained(str(bert)), AutoModel.from_pretrained(str(bert)).eval()

    def one_window(text: str) -> np.ndarray:  # the encoder before windows: the first MAX_LENGTH tokens
        encoded = tokenizer([text], truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
        with torch.inference_mode():
            return pool(model(**encoded).last_hidden_state, encoded["attention_mask"], "mean")[0].numpy()

    words = [f"w{i % 50}" for i in range(400)]
    short, long_a = "w1 w2 w3 w4", " ".join(words)
    long_b = " ".join(words[:MAX_LENGTH] + ["w7"] * 272)  # the same first window, another ending
    embedded = load_encoder(str(bert), batch_size=3)([short, long_a, long_b, ""])
    assert np.allclose(embedded[0], one_window(short), atol=1e-5)
    # the first window alone would make the two long texts one point; their windows tell them apart
    assert np.allclose(one_window(long_a), one_window(long_b), atol=1e-5)
    assert not np.allclose(embedded[1], embedded[2], atol=1e-3)
    assert embedded.shape == (4, one_window(short).shape[0]) and np.isfinite(embedded).all()
    capped = load_encoder(str(bert), max_windows=1)([long_a])
    assert np.allclose(capped[0], one_window(long_a), atol=1e-5)
