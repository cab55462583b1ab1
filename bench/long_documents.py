"""Long documents: truncation against chunking (windows pooled), TF-IDF + LR and frozen embeddings + LR.

Data: ``movie_reviews_long`` (Pang & Lee full movie reviews, /work/shared/data; not copied into the project):
train on its 1,200 training reviews, score accuracy on dev + test (300 reviews). Rows:

- ``tfidf``: TF-IDF (words and bigrams) + logistic regression;
- ``frozen-trunc`` / ``frozen-chunks``: the packaged MiniLM's sentence embedding (mean pooling) of the first
  256 tokens, or the mean of the embeddings of every 256-token window (stride 64), + logistic regression;
- ``trunc-default`` / ``trunc-512``: the workbench run with chunking off, at the default max length or at 512;
- ``chunk-mean`` / ``chunk-max`` / ``chunk-attention``: the workbench run reading every window, pooled.

Each row runs in its own process (its peak RSS is that process's own); ``--rows`` picks them, ``--seeds`` the
seeds. The CPU rows for workbench runs are long (a run reads ~7 windows per review at the default length):
``--threads`` and ``nice`` keep them polite on a shared machine. Writes ``bench/results/long_documents_cpu.json``
(merged with what is there: rows run later add to it).

    nice -n 10 python bench/long_documents.py --rows tfidf frozen-trunc frozen-chunks --seeds 0 1 2
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

DATA = Path(os.environ.get("LONG_DOCS", "/work/shared/data/movie_reviews_long"))
RESULTS = Path(__file__).parent / "results" / "long_documents_cpu.json"
ROWS = ("tfidf", "frozen-trunc", "frozen-chunks", "trunc-default", "trunc-512", "chunk-mean", "chunk-max",
        "chunk-attention", "predict-100", "predict-250", "predict-1000")


def read(name: str) -> list[dict]:
    with (DATA / f"{name}.csv").open(encoding="utf-8", newline="") as handle:
        return [{"text": r["text"], "label": r["label"]} for r in csv.DictReader(handle)]


def splits() -> tuple[list[dict], list[dict]]:
    return read("train"), read("dev") + read("test")


def accuracy(gold: list[str], predicted: list[str]) -> float:
    return sum(g == p for g, p in zip(gold, predicted)) / len(gold)


def row_tfidf(seed: int) -> dict:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    train, test = splits()
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    x = vectorizer.fit_transform([r["text"] for r in train])
    model = LogisticRegression(C=10.0, max_iter=2000, random_state=seed).fit(x, [r["label"] for r in train])
    predicted = model.predict(vectorizer.transform([r["text"] for r in test]))
    return {"accuracy": accuracy([r["label"] for r in test], list(predicted))}


def _embed(texts: list[str], chunked: bool) -> "object":
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from jobs.training.catalogue import packaged_model_path
    from jobs.training.chunking import split_windows, window_batch

    path = str(packaged_model_path())
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    out = []
    for start in range(0, len(texts), 16):
        part = texts[start:start + 16]
        windows = split_windows(tokenizer, part, None, 256, 64, max_windows=10**9 if chunked else 1)
        enc = window_batch(tokenizer, windows)
        with torch.inference_mode():
            hidden = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).float()
        vectors = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        document = np.asarray(windows.document)
        for d in range(len(part)):
            out.append(vectors[document == d].mean(0))
    return np.stack(out)


def _embedded(records: list[dict], chunked: bool, name: str):
    """The embeddings of ``records``, kept in the temporary folder: the seeds of a row share them (only the
    logistic regression is seeded), so the row's wall time is that of its first seed."""
    import numpy as np

    cache = Path(tempfile.gettempdir()) / f"long_documents_{name}_{'chunks' if chunked else 'trunc'}.npy"
    if cache.is_file():
        return np.load(cache)
    vectors = _embed([r["text"] for r in records], chunked)
    np.save(cache, vectors)
    return vectors


def row_frozen(seed: int, chunked: bool) -> dict:
    from sklearn.linear_model import LogisticRegression

    train, test = splits()
    x_train, x_test = _embedded(train, chunked, "train"), _embedded(test, chunked, "test")
    model = LogisticRegression(C=10.0, max_iter=5000, random_state=seed).fit(x_train, [r["label"] for r in train])
    return {"accuracy": accuracy([r["label"] for r in test], list(model.predict(x_test)))}


def row_workbench(seed: int, row: str, preset: str) -> dict:
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.training.engine import run_training

    train, test = splits()
    chunking = {"trunc-default": "off", "trunc-512": "off"}.get(row, row.replace("chunk-", ""))
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        for name, records in (("train", train), ("test", test)):
            (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        # dev + test is only scored: the last checkpoint is kept, none is picked on it
        spec = RunSpec(task="text-classification", model="all-MiniLM-L6-v2",
                       data=DataSpec(train_path=str(folder / "train.jsonl"), validation_path=str(folder / "test.jsonl")),
                       train=TrainSpec(preset=preset, seed=seed, chunking=chunking, select_by="last",
                                       method="finetune", max_length=512 if row == "trunc-512" else None))
        metrics = run_training(spec, folder / "run", RecordingReporter(), device="cpu")
    return {"accuracy": metrics["accuracy"], "steps": metrics["steps"], "train_seconds": metrics["train_seconds"],
            "chunking": metrics.get("chunking", "off"), "windows_dropped": metrics.get("windows_dropped", 0)}


def row_predict(seed: int, documents: int) -> dict:
    """A prediction job (``jobs.predict.job.run_prediction``) over ``documents`` reviews with a chunked model
    (the packaged MiniLM, a fresh seeded head, mean pooling over windows of 128 tokens): one output row per
    document, in order; docs/s of the whole job, model loading included."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from jobs.predict.job import run_prediction
    from jobs.predict.spec import ModelRef, PredictSpec
    from jobs.progress import RecordingReporter
    from jobs.training.catalogue import packaged_model_path
    from jobs.training.chunking import Chunking, save_config

    reviews = [r["text"] for r in read("train") + read("dev") + read("test")]
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        torch.manual_seed(seed)
        model_dir = folder / "model"
        AutoModelForSequenceClassification.from_pretrained(
            str(packaged_model_path()), num_labels=2, id2label={0: "negative", 1: "positive"},
            label2id={"negative": 0, "positive": 1}).save_pretrained(model_dir)
        AutoTokenizer.from_pretrained(str(packaged_model_path())).save_pretrained(model_dir)
        save_config(model_dir, Chunking("mean", 128, 32))
        source = folder / "input.csv"
        with source.open("w", encoding="utf-8", newline="") as handle:
            out = csv.writer(handle)
            out.writerow(["id", "text"])
            for i in range(documents):
                out.writerow([i, reviews[i % len(reviews)]])
        spec = PredictSpec(kind="predict", run_id=0, input_path=str(source), output_format="csv")
        reporter, samples, done = RecordingReporter(), [], threading.Event()

        def sample() -> None:  # (rows done, RSS now) every 0.2 s while the job runs
            while not done.wait(0.2):
                rows = reporter.steps[-1][0] if reporter.steps else 0
                samples.append((rows, _rss_mb()))

        sampler = threading.Thread(target=sample, daemon=True)
        started = time.perf_counter()
        sampler.start()
        result = run_prediction(spec, ModelRef(0, "text-classification", str(model_dir), {"max_length": 128}),
                                folder / "out", reporter, device="cpu")
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
        with Path(result["output"]).open(encoding="utf-8", newline="") as handle:
            ids = [int(r["id"]) for r in csv.DictReader(handle)]
    # the highest RSS in each quarter of the documents: flat in the number of documents if the quarters agree
    quarters = [max((rss for rows, rss in samples if q * documents / 4 <= rows < (q + 1) * documents / 4),
                    default=None) for q in range(4)]
    return {"documents": documents, "rows_out": len(ids), "in_order": ids == list(range(documents)),
            "docs_per_second": round(documents / seconds, 2), "truncated": result["truncated"],
            "rss_mb_by_quarter": [round(q, 1) if q is not None else None for q in quarters]}


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_row(row: str, seed: int, preset: str) -> dict:
    started = time.perf_counter()
    if row.startswith("predict-"):
        result = row_predict(seed, int(row.split("-")[1]))
    elif row == "tfidf":
        result = row_tfidf(seed)
    elif row.startswith("frozen"):
        result = row_frozen(seed, row == "frozen-chunks")
    else:
        result = row_workbench(seed, row, preset)
    result.update(wall_seconds=round(time.perf_counter() - started, 1),
                  peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
    return result


LABELS = {"tfidf": "TF-IDF + LR", "frozen-trunc": "frozen MiniLM embeddings + LR, first 256 tokens",
          "frozen-chunks": "frozen MiniLM embeddings + LR, mean of 256-token windows",
          "trunc-default": "workbench, truncated at the default 128 tokens", "trunc-512": "workbench, truncated at 512",
          "chunk-mean": "workbench, windows of 128, mean pooling (the default on long texts)",
          "chunk-max": "workbench, windows of 128, max pooling",
          "chunk-attention": "workbench, windows of 128, attention pooling"}


def table(results: dict) -> str:
    """The accuracy rows as a markdown table: mean ± sd over the seeds that ran, the first seed's wall time and
    peak RSS (later seeds of the frozen rows reuse its embeddings), and the rows that did not run."""
    import statistics

    lines = ["| method | accuracy (dev + test, 300) | seeds | wall time, first seed | peak RSS, first seed |",
             "|---|---|---|---|---|"]
    for row, label in LABELS.items():
        seeds = results.get("rows", {}).get(row)
        if not seeds:
            lines.append(f"| {label} | not run | 0 | – | – |")
            continue
        scores = [r["accuracy"] for r in seeds.values()]
        first = seeds[min(seeds, key=int)]
        spread = f" ± {statistics.stdev(scores):.3f}" if len(scores) > 1 else ""
        lines.append(f"| {label} | {statistics.mean(scores):.3f}{spread} | {len(scores)} | "
                     f"{first['wall_seconds']:,.0f} s | {first['peak_rss_mb']:,.0f} MB |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--preset", default="standard")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--one", nargs=2, metavar=("ROW", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument("--table", action="store_true", help="print the results as a markdown table and stop")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(RESULTS.read_text())))
        return
    if args.one:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps({**run_row(args.one[0], int(args.one[1]), args.preset), "torch_threads": args.threads}))
        return
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": {}}
    results.update(data="movie_reviews_long: train 1,200 reviews, scored on dev + test (300)",
                   machine=f"{os.cpu_count()} CPUs (shared); torch threads per row in torch_threads (2 where absent)",
                   preset=args.preset)
    for row in args.rows:
        for seed in args.seeds:
            done = subprocess.run([sys.executable, __file__, "--one", row, str(seed), "--threads", str(args.threads),
                                   "--preset", args.preset], capture_output=True, text=True)
            if done.returncode != 0:
                print(f"{row} seed {seed} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            result = json.loads(done.stdout.strip().splitlines()[-1])
            print(row, seed, result, flush=True)
            # read again before writing: another invocation may have added rows meanwhile
            results["rows"] = (json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": {}})["rows"]
            results["rows"].setdefault(row, {})[str(seed)] = result
            RESULTS.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
