"""A 12-trial sweep (2 in parallel) on TREC-6 against the default run, with and without pruning.

    python bench/sweep_trec.py [--data ../shared/data] [--train 2000] [--dev 546] [--trials 12]
                               [--model small|minilm] [--epochs 1]

Everything goes through the product: a temporary workbench (SQLite), the dataset
store, ``workbench.services.sweeps.create_sweep`` and one worker with 2 slots that
runs each trial as its own training subprocess, exactly as ``workbench serve`` does.
Batch 32, max length 32, evaluated every 16 steps (about 4 times an epoch of 2,000
questions) so the median pruner has something to act on. The default run is the same
base spec with the workbench's own learning rate, warm-up and weight decay.

``--model minilm`` (the default) is the packaged MiniLM. ``--model small`` is a 4-layer BERT
(hidden 128) built from a config and trained from scratch, quicker per step; in one epoch of
1,200 questions its first trials (learning rates 5e-5 to 4.5e-4) stayed at the majority class (0.23), so
it shows the mechanics, not a search. The figures in docs/sweeps.md: ``--concurrent --train 320 --dev 120
--max-length 24 --eval-steps 3`` (a MiniLM step took 6–13 s on the shared 2-core machine).

Results go to bench/results/sweep_trec.json after each phase, with ``uptime``'s load
average at the start and end of each phase (the 2 cores are shared, so wall times move).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.shared_data import DEFAULT_DATA, read_csv, write_jsonl  # noqa: E402

log = logging.getLogger("bench.sweep_trec")
RESULTS = Path(__file__).parent / "results"


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def subset(rows: list[dict], n: int, seed: int = 13) -> list[dict]:
    """``n`` rows, stratified by label (every class keeps its share), in a seeded order."""
    by_label: dict[str, list[dict]] = {}
    for row in rows:
        by_label.setdefault(row["label"], []).append(row)
    rng = random.Random(seed)
    out = []
    for label, group in sorted(by_label.items()):
        rng.shuffle(group)
        out += group[:max(1, round(n * len(group) / len(rows)))]
    rng.shuffle(out)
    return out[:n]


def small_bert(folder: Path) -> str:
    """A 4-layer BERT (hidden 128, 4 heads) with the packaged MiniLM tokenizer, randomly initialised."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from jobs.training.catalogue import packaged_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=128, num_hidden_layers=4,
                        num_attention_heads=4, intermediate_size=256, max_position_embeddings=128)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def wait_for_sweep(wb, worker, sweep_id: int) -> dict:
    from workbench.services import sweeps

    while True:
        worker.loop_once()
        shown = sweeps.get_sweep(wb, sweep_id)
        if shown["status"] in ("finished", "cancelled"):
            return shown
        time.sleep(1.0)


def wait_for_run(wb, worker, run_id: int) -> dict:
    from workbench.services import runs

    while True:
        worker.loop_once()
        record = runs.get_run(wb, run_id)
        if record["status"] in ("succeeded", "failed", "cancelled"):
            return record
        time.sleep(1.0)


def trained_steps(wb, sweep_id: int) -> int:
    """Optimizer steps the sweep's trials ran (pruned trials stop early): the work pruning saves,
    independent of how loaded the machine was."""
    from sqlalchemy import func, select

    from storage.models import Run

    with wb.db.session() as session:
        return int(session.scalar(select(func.coalesce(func.sum(Run.step), 0)).where(Run.sweep_id == sweep_id)))


def sweep_result(wb, shown: dict, pruner: str, seconds: float, load_before: str) -> dict:
    best = shown["best"] or {}
    return {"pruner": pruner, "wall_seconds": round(seconds, 1), "best_accuracy": best.get("value"),
            "best_params": best.get("params"), "counts": shown["counts"],
            "trained_steps": trained_steps(wb, shown["id"]),
            "trials": [{k: t[k] for k in ("trial", "state", "value", "params", "steps_reported")}
                       for t in shown["trials"]],
            "load_before": load_before, "load_after": load_average()}


def run_concurrently(wb, worker, base: dict, space: dict, args) -> dict:
    """The default run and both sweeps queued together; each one's wall time ends when it does."""
    from jobs.specs.run import RunSpec
    from jobs.specs.sweep import SweepSpec
    from workbench.services import runs, sweeps

    load_before, started = load_average(), time.perf_counter()
    default_id = runs.submit_run(wb, RunSpec.from_dict(base))
    ids = {label: sweeps.create_sweep(wb, SweepSpec.from_dict({
        "base": base, "space": space, "n_trials": args.trials, "parallelism": args.parallel, "pruner": pruner,
        "seed": 0, "name": f"trec {label}"})) for label, pruner in (("pruned", "median"), ("unpruned", "none"))}
    done: dict = {}
    while len(done) < 3:
        worker.loop_once()
        elapsed = time.perf_counter() - started
        if "default_run" not in done:
            record = runs.get_run(wb, default_id)
            if record["status"] in ("succeeded", "failed", "cancelled"):
                done["default_run"] = {"status": record["status"], "accuracy": record["metrics"].get("accuracy"),
                                       "steps": record["step"], "wall_seconds": round(elapsed, 1),
                                       "load_before": load_before, "load_after": load_average()}
                log.info("default run: %s", done["default_run"])
        for label, sweep_id in ids.items():
            key = f"sweep_{label}"
            if key not in done:
                shown = sweeps.get_sweep(wb, sweep_id)
                if shown["status"] in ("finished", "cancelled"):
                    done[key] = sweep_result(wb, shown, "median" if label == "pruned" else "none", elapsed,
                                             load_before)
                    log.info("sweep %s: %s", label, {k: v for k, v in done[key].items() if k != "trials"})
        time.sleep(1.0)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--dev", type=int, default=546)
    parser.add_argument("--model", choices=("small", "minilm"), default="minilm")
    parser.add_argument("--epochs", type=float, default=1)
    parser.add_argument("--eval-steps", type=int, default=16)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--only", default="default,pruned,unpruned")
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--concurrent", action="store_true",
                        help="Start the default run and both sweeps at once (one worker, a slot for each); "
                             "the wall times then share the machine, the trained steps do not.")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)

    from jobs.queue.worker import Worker
    from jobs.specs.sweep import SweepSpec
    from storage.context import open_workbench
    from storage.settings import Settings
    from workbench.services import datasets, runs, sweeps

    work = Path(tempfile.mkdtemp(prefix="sweep-trec-"))
    trec = args.data / "trec_question_type_train5500"
    train = write_jsonl(work / "train.jsonl", subset(read_csv(trec / "train.csv"), args.train))
    dev = write_jsonl(work / "dev.jsonl", subset(read_csv(trec / "dev.csv"), args.dev))
    wb = open_workbench(Settings.from_env({}, home=str(work / "home")))
    dataset = datasets.import_dataset(wb, Path(train), "text-classification", validation_path=Path(dev))
    model = small_bert(work / "small-bert") if args.model == "small" else "all-MiniLM-L6-v2"
    base = {"task": "text-classification", "data": {"dataset_id": dataset.id}, "model": model,
            "train": {"epochs": args.epochs, "batch_size": 32, "max_length": args.max_length,
                      "eval_steps": args.eval_steps}}
    low, high = ("1e-5", "1e-2") if args.model == "small" else ("1e-5", "1e-3")
    space = {"learning_rate": f"{low}..{high}:log", "warmup_ratio": "0.0..0.2", "weight_decay": "0.0..0.1"}
    results: dict = {"protocol": {"train": args.train, "dev": args.dev, "trials": args.trials,
                                  "parallel": args.parallel, "base": base, "space": space,
                                  "model": args.model, "epochs": args.epochs}}
    out = RESULTS / "sweep_trec.json"
    RESULTS.mkdir(exist_ok=True)
    worker = Worker(wb, max_jobs=2 * args.parallel + 1 if args.concurrent else args.parallel, gpus=[])
    try:
        if args.concurrent:
            results.update(run_concurrently(wb, worker, base, space, args))
            out.write_text(json.dumps(results, indent=2, default=str))
        elif "default" in args.only:
            from jobs.specs.run import RunSpec

            load_before, started = load_average(), time.perf_counter()
            record = wait_for_run(wb, worker, runs.submit_run(wb, RunSpec.from_dict(base)))
            results["default_run"] = {"status": record["status"], "accuracy": record["metrics"].get("accuracy"),
                                      "wall_seconds": round(time.perf_counter() - started, 1),
                                      "load_before": load_before, "load_after": load_average()}
            out.write_text(json.dumps(results, indent=2))
            log.info("default run: %s", results["default_run"])
        for label, pruner in (("pruned", "median"), ("unpruned", "none")):
            if args.concurrent or label not in args.only:
                continue
            spec = SweepSpec.from_dict({"base": base, "space": space, "n_trials": args.trials,
                                        "parallelism": args.parallel, "pruner": pruner, "seed": 0,
                                        "name": f"trec {label}"})
            load_before, started = load_average(), time.perf_counter()
            shown = wait_for_sweep(wb, worker, sweeps.create_sweep(wb, spec))
            best = shown["best"] or {}
            results[f"sweep_{label}"] = {
                "pruner": pruner, "wall_seconds": round(time.perf_counter() - started, 1),
                "best_accuracy": best.get("value"), "best_params": best.get("params"), "counts": shown["counts"],
                "trials": [{k: t[k] for k in ("trial", "state", "value", "params", "steps_reported")}
                           for t in shown["trials"]],
                "load_before": load_before, "load_after": load_average()}
            out.write_text(json.dumps(results, indent=2, default=str))
            log.info("sweep %s: %s", label, {k: v for k, v in results[f"sweep_{label}"].items() if k != "trials"})
    finally:
        worker.shutdown()
        wb.close()
    if "sweep_pruned" in results and "sweep_unpruned" in results:
        saved = results["sweep_unpruned"]["wall_seconds"] - results["sweep_pruned"]["wall_seconds"]
        results["pruning_saved_seconds"] = round(saved, 1)
        out.write_text(json.dumps(results, indent=2, default=str))
    print(json.dumps({k: v for k, v in results.items() if k != "protocol"}, indent=2, default=str))


if __name__ == "__main__":
    main()
