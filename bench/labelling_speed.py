"""How fast a labelling project's background jobs are on a 10,000-text pool: the embedding of the pool, and a
refit plus the re-ranking of the pool with the embeddings cached.

    python bench/labelling_speed.py [--rows 10000] [--labels 100 1000] [--repeats 5] [--data ../shared/data]
                                    [--random-vectors | --reuse-embeddings]

The pool: the texts of the shared SMS Spam Collection and TREC question sets (train, dev, test), unique,
shuffled once (seed 13), the first ``--rows``; each text's gold label is its set's label (ham, spam and the six
TREC types: 8 classes). A labelling project is made of it in a fresh SQLite workbench, exactly as the jobs
find one (items, classes, a folder), then every job runs as the worker runs it, in its own process
(``python -m jobs.process.run_job RUN --attempt N``), so the times include the process start and the peak RSS
is the job's own:

1. label-embed with the packaged all-MiniLM-L6-v2 (torch threads = 2): the embedding of the pool (written to the
   cache in chunks), then the cold start (clusters, coverage order, no zero-shot: the labels have no
   descriptions). The pool's embeddings are kept in bench/.cache; with ``--reuse-embeddings`` the project's
   cache is filled from there, the job only does the cold start, and the embedding figures of the previous
   results are kept. With ``--random-vectors`` the cache is filled with random unit vectors (dim 384) instead
   and no embedding time is measured.
2. For each ``--labels`` N: the first N items of the cold-start ranking are given their gold label (about 10 %
   of them random-share picks, as a labeller answering the queue in order leaves them), then ``--repeats``
   label-refit jobs: fit, predict over the pool, estimate, rank, one DB transaction. The job's own split of
   its time comes from its metrics (``*_seconds``).

Results go to bench/results/labelling_speed.json, with the machine's load average before and after (the
machine is shared: other work on the cores slows every figure).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.shared_data import DEFAULT_DATA  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "labelling_speed.json"
CACHE = ROOT / "bench" / ".cache"
SETS = {"sms_spam_collection": "ham/spam", "trec_question_type_train5500": "TREC-6"}
TORCH_THREADS = 2

# The job process, as the worker starts it, plus one line with its peak RSS when it ends. Torch takes its thread
# count from OMP_NUM_THREADS (set to TORCH_THREADS in the job's environment).
JOB = """
import json, resource, sys
from jobs.process.run_job import main
code = main([sys.argv[1], "--attempt", sys.argv[2]])
torch = sys.modules.get("torch")
print("THREADS " + json.dumps(torch.get_num_threads() if torch else None))
print("RSS " + json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
sys.exit(code)
"""


def pool(data: Path, rows: int) -> list[tuple[str, str]]:
    """(text, gold label) of the shared sets' unique texts, shuffled once, the first ``rows``."""
    seen, out = set(), []
    for folder in SETS:
        for split in ("train", "dev", "test"):
            with (data / folder / f"{split}.csv").open(encoding="utf-8", newline="") as handle:
                for row in csv.DictReader(handle):
                    if row["text"] not in seen:
                        seen.add(row["text"])
                        out.append((row["text"], row["label"]))
    random.Random(13).shuffle(out)
    if len(out) < rows:
        raise SystemExit(f"the shared sets hold {len(out)} unique texts, fewer than {rows}")
    return out[:rows]


def make_project(wb, texts: list[str], classes: list[str], folder: Path) -> int:
    from sqlalchemy import insert

    from jobs.training.catalogue import packaged_model_path
    from storage.models import LabelClass, LabelItem, LabelProject

    with wb.db.session() as session:
        project = LabelProject(name="bench", folder=str(folder), model=str(packaged_model_path()))
        session.add(project)
        session.flush()
        session.add_all(LabelClass(project_id=project.id, position=i, name=name) for i, name in enumerate(classes))
        session.execute(insert(LabelItem), [{"project_id": project.id, "position": i, "external_id": str(i),
                                             "text": text} for i, text in enumerate(texts)])
        return project.id


def run_job(wb, kind: str, project_id: int) -> dict:
    """One job of ``kind`` in its own process, as a worker runs it: wall time, peak RSS and its metrics."""
    from jobs.queue import table as queue
    from storage.models import Run

    run_id = queue.submit_label_job(wb.db, kind, project_id, wb.settings.home / "runs")
    claimed = queue.claim(wb.db, "bench", only=[run_id])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_HOME": str(wb.settings.home),
           "OMP_NUM_THREADS": str(TORCH_THREADS), "MKL_NUM_THREADS": str(TORCH_THREADS)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", JOB, str(run_id), str(claimed.attempt)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        status, metrics, error = run.status, dict(run.metrics or {}), run.error
    if proc.returncode != 0 or status != "succeeded":
        raise SystemExit(f"{kind} job failed ({status}): {error}\n{proc.stderr[-3000:]}")
    said = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("RSS ", "THREADS ")))
    rss, threads = json.loads(said.get("RSS", "null")), json.loads(said.get("THREADS", "null"))
    return {"wall_seconds": round(wall, 3), "peak_rss_mb": round(rss, 1) if rss else None,
            "torch_threads": threads, "metrics": metrics}


def fill_cache(folder: Path, vectors) -> None:
    from jobs.labelling.cache import EmbeddingCache
    from jobs.training.catalogue import packaged_model_path

    EmbeddingCache(folder).append(0, vectors, str(packaged_model_path()))


def random_vectors(rows: int, dim: int = 384):
    import numpy as np

    return np.random.default_rng(13).standard_normal((rows, dim)).astype(np.float32)


def label_first(wb, project_id: int, gold: list[str], n: int) -> dict:
    """Label the pool up to ``n`` labels in the order of the current ranking (each item its gold label), as a
    labeller answering the queue would; how many of the labelled items were random-share picks."""
    from sqlalchemy import func, select, update

    from storage.models import LabelItem, utcnow

    mine = LabelItem.project_id == project_id
    with wb.db.session() as session:
        labelled = session.scalar(select(func.count()).where(mine, LabelItem.labelled_by.is_not(None)))
        wanted = session.execute(select(LabelItem.id, LabelItem.position)
                                 .where(mine, LabelItem.labelled_by.is_(None), LabelItem.rank.is_not(None))
                                 .order_by(LabelItem.rank).limit(max(0, n - labelled))).all()
        session.execute(update(LabelItem), [{"id": r.id, "label": gold[r.position], "labelled_by": "bench",
                                             "labelled_at": utcnow()} for r in wanted])
        picks = session.scalar(select(func.count()).where(mine, LabelItem.labelled_by.is_not(None),
                                                          LabelItem.random_pick.is_(True)))
    return {"labels": n, "random_picks_labelled": int(picks)}


def last_estimate(wb, project_id: int) -> dict:
    from sqlalchemy import select

    from storage.models import LabelEstimate

    with wb.db.session() as session:
        point = session.scalars(select(LabelEstimate).where(LabelEstimate.project_id == project_id)
                                .order_by(LabelEstimate.id.desc()).limit(1)).first()
        return {"metric": point.metric, "estimate": point.estimate, "low": point.low, "high": point.high,
                "majority": point.majority, "source": point.source, "agreement": point.agreement}


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--labels", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--random-vectors", action="store_true",
                        help="fill the cache with random unit vectors instead of embedding the pool")
    parser.add_argument("--reuse-embeddings", action="store_true",
                        help="fill the cache from bench/.cache (a previous run's MiniLM embeddings of the pool)")
    args = parser.parse_args()
    import numpy as np

    kept = CACHE / f"labelling_speed_minilm_{args.rows}.npy"
    earlier = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    if args.reuse_embeddings and not kept.is_file():
        raise SystemExit(f"no embeddings kept at {kept}: run once without --reuse-embeddings")

    from storage.context import open_workbench
    from storage.models import KIND_LABEL_EMBED, KIND_LABEL_REFIT
    from storage.settings import Settings

    items = pool(args.data, args.rows)
    texts, gold = [t for t, _ in items], [g for _, g in items]
    classes = sorted(set(gold))
    results: dict = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_before": Path("/proc/loadavg").read_text().strip()},
        "pool": {"rows": len(texts), "classes": len(classes), "sets": list(SETS.values()),
                 "mean_chars": round(statistics.mean(len(t) for t in texts), 1)},
        "embeddings": "random unit vectors (dim 384)" if args.random_vectors else
                      "all-MiniLM-L6-v2 (packaged), computed by the label-embed job" +
                      (" of an earlier run (kept in bench/.cache)" if args.reuse_embeddings else " below"),
        "torch_threads": TORCH_THREADS,
    }
    with tempfile.TemporaryDirectory(prefix="labelling-speed-") as tmp:
        home = Path(tmp) / "home"
        wb = open_workbench(Settings.from_env({}, home=str(home)))
        folder = home / "labelling" / "1"
        project_id = make_project(wb, texts, classes, folder)
        if args.random_vectors:
            fill_cache(folder, random_vectors(len(texts)))
        elif args.reuse_embeddings:
            fill_cache(folder, np.load(kept))
        load_before = Path("/proc/loadavg").read_text().split()[0]
        embed = run_job(wb, KIND_LABEL_EMBED, project_id)
        metrics = embed["metrics"]
        results["embed_job"] = {
            "wall_seconds": embed["wall_seconds"], "peak_rss_mb": embed["peak_rss_mb"],
            "embedded_texts": metrics.get("newly_embedded"), "embed_seconds": metrics.get("embed_seconds"),
            "texts_per_second": round(metrics["newly_embedded"] / metrics["embed_seconds"], 1)
            if metrics.get("newly_embedded") else None,
            "torch_threads": embed["torch_threads"], "cold_start_seconds": metrics.get("cold_start_seconds"),
            "clusters": metrics.get("clusters"), "loadavg_1min_before": float(load_before),
            "loadavg_1min_after": float(Path("/proc/loadavg").read_text().split()[0])}
        if args.reuse_embeddings:  # the job only ranked the pool: keep the embedding measured before
            before = earlier.get("embed_job") or {}
            results["embed_job"] = {**{k: v for k, v in before.items() if k != "cold_start_seconds"},
                                    "measured_at": before.get("measured_at"),
                                    "cold_start_seconds": metrics.get("cold_start_seconds"),
                                    "cold_start_job_wall_seconds": embed["wall_seconds"],
                                    "cold_start_peak_rss_mb": embed["peak_rss_mb"],
                                    "cold_start_loadavg_1min_before": float(load_before)}
        else:
            results["embed_job"]["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            if not args.random_vectors:
                from jobs.labelling.cache import EmbeddingCache

                CACHE.mkdir(parents=True, exist_ok=True)
                np.save(kept, np.asarray(EmbeddingCache(folder).load()))
        print(json.dumps(results["embed_job"]), flush=True)
        results["refit"] = {}
        for n in args.labels:
            labelled = label_first(wb, project_id, gold, n)
            runs = [run_job(wb, KIND_LABEL_REFIT, project_id) for _ in range(args.repeats)]
            parts = {name: summary([r["metrics"][f"{name}_seconds"] for r in runs])
                     for name in ("read", "fit", "predict", "estimate", "rank", "write")}
            in_job = [sum(r["metrics"][f"{name}_seconds"] for name in parts) for r in runs]
            results["refit"][str(n)] = {
                **labelled, "repeats": args.repeats,
                "job_wall_seconds": summary([r["wall_seconds"] for r in runs]),
                "refit_in_job_seconds": summary(in_job), "parts_seconds": parts,
                "peak_rss_mb": max(r["peak_rss_mb"] or 0 for r in runs),
                "last_estimate": last_estimate(wb, project_id),
                "loadavg": Path("/proc/loadavg").read_text().strip()}
            print(n, json.dumps(results["refit"][str(n)]), flush=True)
        wb.close()
    results["machine"]["loadavg_after"] = Path("/proc/loadavg").read_text().strip()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
