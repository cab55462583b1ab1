"""A tiny config-built classifier saved with a ``calibration.json``, its raw logits, and the ways it predicts:
a prediction job, the playground predictor and the REST API (``jobs.evaluation.postprocess.load_calibration`` in each)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

TEXTS = ["what a wonderful and great film", "terrible boring awful movie", "great acting, I loved it",
         "awful plot and bad actors", "a film", "it was fine I suppose"]


def tiny_classifier(folder: Path, names: list[str], multi_label: bool = False,
                    calibration: dict | None = None) -> Path:
    """An untrained tiny BERT classifier whose head is scaled up, so its logits are far from 0 and a
    temperature visibly changes its probabilities."""
    import torch
    import transformers

    from tests.playground_support import tiny_config, tokenizer

    torch.manual_seed(0)
    tok = tokenizer()
    config = tiny_config(tok, id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)},
                         num_labels=len(names),
                         problem_type="multi_label_classification" if multi_label else "single_label_classification")
    model = transformers.BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    if calibration is not None:
        (folder / "calibration.json").write_text(json.dumps(calibration))
    return folder


def raw_logits(folder: Path, texts: list[str]) -> np.ndarray:
    """The model's logits for ``texts``, computed here with plain transformers (no workbench code)."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        return model(**tok(texts, padding=True, return_tensors="pt")).logits.double().numpy()


def job_rows(folder: Path, texts: list[str], tmp_path: Path) -> tuple[dict, list[dict]]:
    """A prediction job over ``texts`` (a text file, one per line): its result and its JSONL rows."""
    from jobs.predict.job import run_prediction
    from jobs.predict.spec import ModelRef, PredictSpec
    from jobs.progress import RecordingReporter

    path = tmp_path / "in.txt"
    path.write_text("".join(t + "\n" for t in texts))
    spec = PredictSpec(kind="predict", run_id=1, input_path=str(path), output_format="jsonl")
    model = ModelRef(run_id=1, task="text-classification", model_dir=str(folder),
                     hyperparameters={"max_length": 64})
    result = run_prediction(spec, model, tmp_path / "out", RecordingReporter(), device="cpu")
    rows = [json.loads(line) for line in Path(result["output"]).read_text(encoding="utf-8").splitlines()]
    return result, rows


def api_predict(wb, folder: Path, inputs) -> dict:
    """``POST /api/v1/predict/<slug>`` of a playground published for a run whose model is ``folder``."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from tests import playground_support as ps
    from workbench.playground import service
    from workbench.playground.api import build_router
    from workbench.playground.runtime import Playgrounds

    slug = service.publish(wb, ps.add_run(wb, "text-classification", folder)).slug
    app = FastAPI()
    app.include_router(build_router(Playgrounds(wb)))
    with TestClient(app) as client:
        response = client.post(f"{service.API_PREFIX}/{slug}", json={"inputs": inputs})
    assert response.status_code == 200, response.text
    return response.json()
