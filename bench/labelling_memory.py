"""A labelling project of 100,000 short texts: how long creating it takes, the peak memory of the process that
serves it, and how long a label plus the next item take.

    python bench/labelling_memory.py [--data ../shared/data] [--texts 100000] [--labels 200] [--database-url URL]

The texts are the short texts of ../shared/data (SMS, TREC questions, VADER tweets and Amazon snippets), cycled
with a number appended until there are ``--texts`` distinct ones, written as a CSV with an id column. A child
process plays the server: it imports the web app's modules first (``workbench.ui.app``: the server's own
footprint), then creates the project through ``workbench.services.labelling`` (read, validate, insert in
chunks, queue the embed job; no job runs here), then labels ``--labels`` items as a labeller would:
``give_label`` (which records the event, releases the claim and claims the next item) after one first
``next_item``. Half of the labels are given before the pool is ranked (the unranked tier, by position), then
every item gets a rank (a permutation of the positions, written by one UPDATE in this process without holding
the rows in memory: the job that ranks a pool runs in the worker, not the server), and the other half are
given from the ranking. ``project_status`` (what the Label tab polls) is timed too.

Peak RSS is the child's ``ru_maxrss`` (the high-water mark of its resident memory). Results go to
bench/results/labelling_memory.json. SQLite in a temporary home unless ``--database-url`` names another
database (a fresh PostgreSQL database, for instance).
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
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.shared_data import DEFAULT_DATA  # noqa: E402
RESULTS = ROOT / "bench" / "results" / "labelling_memory.json"
RANK_STRIDE = 7919
SOURCES = ("sms_spam_collection", "trec_question_type_train5500", "vader_tweets", "vader_amazon")


def short_texts(data: Path) -> list[str]:
    """The distinct short texts of the shared sets' CSV files."""
    texts: dict[str, None] = {}
    for name in SOURCES:
        for path in sorted((data / name).glob("*.csv")):
            with path.open(encoding="utf-8", newline="") as handle:
                texts.update((row["text"].strip(), None) for row in csv.DictReader(handle) if row["text"].strip())
    if not texts:
        raise SystemExit(f"no shared data sets in {data}; give --data")
    return list(texts)


def write_pool(path: Path, n: int, data: Path) -> dict:
    base = short_texts(data)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "text"])
        for i in range(n):
            writer.writerow([f"item-{i}", f"{base[i % len(base)]} #{i // len(base)}"])
    lengths = sorted(len(t) for t in base)
    return {"distinct_source_texts": len(base), "median_chars": lengths[len(lengths) // 2],
            "bytes": path.stat().st_size}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000, 2)


def child(pool: Path, home: Path, labels: int, url: str) -> dict:
    """The server's side: import the app, create the project, label; returns the measurements."""
    import resource

    from sqlalchemy import update

    import workbench.ui.app  # noqa: F401 - the server's own modules, loaded before anything is measured
    from storage.context import open_workbench
    from storage.models import LabelItem
    from storage.settings import Settings
    from workbench.services import labelling

    rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # noqa: E731 - MiB (Linux: KiB)
    baseline = rss()
    wb = open_workbench(Settings.from_env({}, home=str(home), **({"database_url": url} if url else {})))
    start = time.perf_counter()
    project = labelling.create_project(wb, pool, ["positive: a good thing", "negative", "question"], user="bench")
    create_s = time.perf_counter() - start
    after_create = rss()
    pid = project["id"]
    rng = random.Random(13)
    label_s: list[float] = []
    phases = {"unranked": [], "ranked": []}
    item = labelling.next_item(wb, pid, "bench")
    for n in range(labels):
        if n == labels // 2:
            start = time.perf_counter()
            with wb.db.session() as session:  # a permutation of the positions (for a size no multiple of 7919)
                session.execute(update(LabelItem).where(LabelItem.project_id == pid)
                                .values(rank=(LabelItem.position * RANK_STRIDE) % project["pool"]))
            rank_s = time.perf_counter() - start
            item = labelling.next_item(wb, pid, "bench")
        start = time.perf_counter()
        item = labelling.give_label(wb, pid, item["item_id"], rng.choice(["positive", "negative", "question"]),
                                    "bench")["next"]
        took = time.perf_counter() - start
        label_s.append(took)
        phases["unranked" if n < labels // 2 else "ranked"].append(took)
    status_s = []
    for _ in range(10):
        start = time.perf_counter()
        status = labelling.project_status(wb, pid)
        status_s.append(time.perf_counter() - start)
    start = time.perf_counter()
    labelling.export_labels(wb, pid, home / "export.csv")
    export_s = time.perf_counter() - start
    wb.close()
    return {"pool": project["pool"], "labelled": status["labelled"], "create_seconds": round(create_s, 2),
            "rank_write_seconds": round(rank_s, 2), "export_seconds": round(export_s, 2),
            "rss_mib": {"after_imports": round(baseline), "after_create": round(after_create),
                        "peak": round(rss())},
            "label_plus_next_ms": {"p50": pct(label_s, 0.5), "p95": pct(label_s, 0.95), "max": pct(label_s, 1.0),
                                   "n": len(label_s)},
            "by_tier_ms": {k: {"p50": pct(v, 0.5), "p95": pct(v, 0.95), "n": len(v)} for k, v in phases.items()},
            "project_status_ms": {"p50": pct(status_s, 0.5), "max": pct(status_s, 1.0), "n": len(status_s)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--texts", type=int, default=100_000)
    parser.add_argument("--labels", type=int, default=200)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[0]), Path(args.child[1]), args.labels, args.database_url)))
        return
    with tempfile.TemporaryDirectory(prefix="labelling-memory-") as tmp:
        pool = Path(tmp) / "pool.csv"
        written = write_pool(pool, args.texts, args.data)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, __file__, "--texts", str(args.texts), "--labels", str(args.labels),
                              "--database-url", args.database_url, "--child", str(pool), str(Path(tmp) / "home")],
                             cwd=ROOT, env=env, check=True, capture_output=True, text=True)
        measured = json.loads(out.stdout.strip().splitlines()[-1])
    result = {"texts": args.texts, "file": written,
              "database": "postgresql" if args.database_url.startswith("postgresql") else "sqlite",
              **measured, "goal": "server RSS < 2 GB with a 100,000-text project",
              "meets_goal": measured["rss_mib"]["peak"] < 2048,
              "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              # The machine is shared: the load average after the run says how busy it was meanwhile.
              "load_average_1min": round(os.getloadavg()[0], 2), "python": platform.python_version(),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    previous[result["database"]] = result
    RESULTS.write_text(json.dumps(previous, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
