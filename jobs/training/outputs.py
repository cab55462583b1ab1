"""What every training method writes into a run's folder, and the run's assessment beside its score.

    write_outputs(output_dir, metrics, hp, evaluation)   outcomes.npz, calibration, metrics.json, tables.json,
                                                          predictions.jsonl
    write_heldout(path, heldout)                         heldout.npz (the predictions an audit reads)
    assess_run(spec, train, validation, evaluation)      the baselines and the verdict

Shared by the engine (fine-tuning) and SetFit, so that no method imports the engine.
"""
from __future__ import annotations

import json
import logging
import resource
from pathlib import Path
from typing import Optional

from jobs.specs.run import RunSpec

log = logging.getLogger(__name__)

HELDOUT_FILE = "heldout.npz"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def assess_run(spec: RunSpec, train: list[dict], validation: list[dict], evaluation, *,
               model_path: Optional[str] = None, device: str = "cpu", max_length: Optional[int] = None,
               chunking=None) -> dict:
    """Text classification: the baselines beside the run's score and the verdict (``jobs.evaluation.baselines``);
    nothing for other tasks. ``model_path`` is the model the run started from: its frozen embeddings are a
    baseline too, each text read as the run read it (cut at ``max_length``, or in ``chunking``'s windows). A
    baseline that fails is logged, never fails the run."""
    if spec.task != "text-classification":
        return {}
    from jobs.evaluation.baselines import assess
    from jobs.training.sentence_model import frozen_embedder

    try:
        embed = frozen_embedder(model_path, device, max_length=max_length, chunking=chunking) if model_path else None
        found = assess(train, validation, evaluation.metrics, evaluation.predictions, embed=embed,
                       seed=spec.train.seed)
    except Exception:  # noqa: BLE001 - the run's own result stands without its baselines
        log.exception("the baselines could not be fitted")
        return {}
    if found["verdict"]["message"]:
        log.warning("this run %s", found["verdict"]["message"])
    log.info("baselines: %s", json.dumps(found["baselines"]))
    return found


def write_heldout(path: Path, heldout: dict) -> None:
    """``heldout.npz``: ``probs`` (float32, one row per record, or per word for tagging), the class
    ``labels`` of its columns, and per row its ``record`` (line in the predict file) and ``word``
    (-1 for classification). Written to a temporary name and renamed, so a reader sees all or nothing."""
    import numpy as np

    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, probs=np.asarray(heldout["probs"], dtype=np.float32),
                        labels=np.asarray(heldout["labels"], dtype=str),
                        record=np.asarray(heldout["record"], dtype=np.int64),
                        word=np.asarray(heldout["word"], dtype=np.int64))
    tmp.replace(path)


def write_outputs(output_dir: Path, metrics: dict, hp: dict, evaluation) -> None:
    """``outcomes.npz``, ``model/calibration.json`` (a classification run's fitted calibration), then
    ``metrics.json``, ``tables.json`` and ``predictions.jsonl``.

    ``metrics`` gains ``metrics_ci`` (the bootstrap intervals of ``jobs.evaluation.outcomes``) in place, so the caller
    returns, and the queue records, the metrics the file holds."""
    from jobs.evaluation.outcomes import save_outcomes

    metrics.update(save_outcomes(output_dir, evaluation))
    fitted = evaluation.tables.get("calibration", {}).get("model")
    if fitted is not None and (output_dir / "model").is_dir():
        from jobs.evaluation.postprocess import CALIBRATION_FILE

        (output_dir / "model" / CALIBRATION_FILE).write_text(json.dumps(fitted, indent=2))
    (output_dir / "metrics.json").write_text(json.dumps({**metrics, "hyperparameters": hp}, indent=2, default=str))
    (output_dir / "tables.json").write_text(json.dumps(evaluation.tables, indent=2))
    with (output_dir / "predictions.jsonl").open("w", encoding="utf-8") as handle:
        for row in evaluation.predictions:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
