"""Serving an exported ONNX variant: playgrounds (REST API, attention maps, switching) and prediction jobs.

The models are the playgrounds' tiny trained BERTs (tests/playground_support.py); an export is the real
exporter's output (``export_fp32`` + ``quantize_int8``) in the folder of a succeeded Run row of kind
"export", as the export job leaves one, without running the job.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import inspect, select, text

from jobs.export.onnx import export_fp32, quantize_int8
from jobs.export.runtime import ONNX_DIR, VARIANT_FILES
from storage.errors import ConfigError, InvalidState, ModelUnavailable, TrainingError
from storage.models import KIND_EXPORT, SUCCEEDED, Playground, Run
from tests import playground_support as ps
from workbench.playground import service

pytestmark = pytest.mark.e2e

TASKS = ("text-classification", "token-classification")
INPUTS = {"text-classification": ["a great film, I loved it", "awful plot and bad actors", "boring"],
          "token-classification": ["John Smithers lives in New York.", "Mary visited Paris yesterday"]}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-models")
    return {task: ps.train_tiny(task, root / task) for task in TASKS}


@pytest.fixture(scope="module")
def module_wb(tmp_path_factory):
    from storage.context import open_workbench
    from storage.settings import Settings

    wb = open_workbench(Settings.from_env({}, home=str(tmp_path_factory.mktemp("home"))))
    yield wb
    wb.close()


def add_export(wb, run_id: int, model_dir: Path, task: str, *, int8: bool = True) -> Path:
    """A succeeded export job of run ``run_id`` whose ``onnx/`` holds fp32 (and int8) variants; its folder."""
    with wb.db.session() as session:
        job = Run(name=f"export run {run_id}", task=task, model="tiny-bert", status=SUCCEEDED, spec={},
                  kind=KIND_EXPORT, parent_run_id=run_id)
        session.add(job)
        session.flush()
        folder = wb.settings.runs_dir / str(job.id)
        job.output_dir = str(folder)
    onnx_dir = folder / ONNX_DIR
    onnx_dir.mkdir(parents=True)
    export_fp32(model_dir, task, onnx_dir / VARIANT_FILES["onnx-fp32"])
    if int8:
        quantize_int8(onnx_dir / VARIANT_FILES["onnx-fp32"], onnx_dir / VARIANT_FILES["onnx-int8"])
    return folder


@pytest.fixture(scope="module")
def exported(module_wb, models):
    """Per task: a run with a model and an export (fp32 + int8)."""
    out = {}
    for task in TASKS:
        run_id = ps.add_run(module_wb, task, models[task])
        add_export(module_wb, run_id, models[task], task)
        out[task] = run_id
    return out


@pytest.fixture(scope="module")
def client(module_wb):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from workbench.playground.api import build_router
    from workbench.playground.runtime import Playgrounds

    app = FastAPI()
    playgrounds = Playgrounds(module_wb)
    app.include_router(build_router(playgrounds))
    with TestClient(app) as test_client:
        test_client.playgrounds = playgrounds
        yield test_client


def _post(client, slug: str, inputs) -> dict:
    response = client.post(f"{service.API_PREFIX}/{slug}", json={"inputs": inputs})
    assert response.status_code == 200, response.text
    return response.json()


def _scores(task: str, prediction: dict) -> list[float]:
    if task == "text-classification":
        return list(prediction["scores"].values())
    return [entity["score"] for entity in prediction["entities"]]


def _decisions(task: str, prediction: dict):
    if task == "text-classification":
        return prediction["label"]
    return [(e["entity"], e["start"], e["end"]) for e in prediction["entities"]]


@pytest.mark.parametrize("task", TASKS)
def test_onnx_fp32_answers_like_pytorch_and_says_so(module_wb, exported, client, task):
    torch_slug = service.publish(module_wb, exported[task]).slug
    onnx = service.publish(module_wb, exported[task], runtime="onnx-fp32")
    assert onnx.runtime == "onnx-fp32"
    by_torch, by_onnx = _post(client, torch_slug, INPUTS[task]), _post(client, onnx.slug, INPUTS[task])
    assert by_torch["runtime"] == "pytorch" and by_onnx["runtime"] == "onnx-fp32"
    assert len(by_onnx["predictions"]) == len(INPUTS[task])
    for a, b in zip(by_torch["predictions"], by_onnx["predictions"]):
        assert _decisions(task, a) == _decisions(task, b)
        assert _scores(task, a) == pytest.approx(_scores(task, b), abs=1e-4)
    if task == "token-classification":  # the comparison compared something
        assert any(p["entities"] for p in by_onnx["predictions"])


def test_switching_the_runtime_takes_effect_on_the_next_request(module_wb, exported, client):
    run_id = exported["text-classification"]
    slug = service.publish(module_wb, run_id).slug
    assert _post(client, slug, "a great film")["runtime"] == "pytorch"
    info = service.set_runtime(module_wb, slug, "onnx-int8")
    assert info.runtime == "onnx-int8"
    quantized = _post(client, slug, "a great film")
    assert quantized["runtime"] == "onnx-int8"
    assert set(quantized["predictions"][0]["scores"]) == {"neg", "pos"}
    listed = {p.slug: p.runtime for p in service.list_playgrounds(module_wb, run_id=run_id)}
    assert listed[slug] == "onnx-int8" and listed[slug] == info.to_dict()["runtime"]
    # the cache counts the ONNX variant by its file size
    predictor = client.playgrounds.predictor(service.get_target(module_wb, slug))
    assert predictor.nbytes == predictor.model.nbytes == predictor.model.path.stat().st_size
    service.set_runtime(module_wb, slug, "pytorch")
    assert _post(client, slug, "a great film")["runtime"] == "pytorch"


def test_a_runtime_without_an_export_is_refused_with_what_to_do(module_wb, models, exported):
    bare = ps.add_run(module_wb, "text-classification", models["text-classification"])
    with pytest.raises(InvalidState, match=rf"run {bare} has no ONNX export .*export it first"):
        service.publish(module_wb, bare, runtime="onnx-fp32")
    slug = service.publish(module_wb, bare).slug
    with pytest.raises(InvalidState, match="export it first"):
        service.set_runtime(module_wb, slug, "onnx-int8")
    with pytest.raises(ConfigError, match="unknown runtime 'tensorrt'"):
        service.publish(module_wb, bare, runtime="tensorrt")
    # an export without the int8 variant serves fp32 but not int8
    add_export(module_wb, bare, models["text-classification"], "text-classification", int8=False)
    assert service.set_runtime(module_wb, slug, "onnx-fp32").runtime == "onnx-fp32"
    with pytest.raises(InvalidState, match="no usable onnx-int8 variant"):
        service.set_runtime(module_wb, slug, "onnx-int8")
    from workbench.services.predictions import served_runtimes

    assert served_runtimes(module_wb, bare) == ["pytorch", "onnx-fp32"]
    assert served_runtimes(module_wb, exported["text-classification"]) == ["pytorch", "onnx-fp32", "onnx-int8"]


def test_a_deleted_export_makes_the_playground_unavailable_not_broken(module_wb, models, client, tmp_path):
    run_id = ps.add_run(module_wb, "text-classification", models["text-classification"])
    folder = add_export(module_wb, run_id, models["text-classification"], "text-classification", int8=False)
    slug = service.publish(module_wb, run_id, runtime="onnx-fp32").slug
    (folder / ONNX_DIR / VARIANT_FILES["onnx-fp32"]).rename(tmp_path / "moved.onnx")
    response = client.post(f"{service.API_PREFIX}/{slug}", json={"inputs": "a great film"})
    assert response.status_code == 503 and "served by onnx-fp32, which is gone" in response.json()["error"]
    with pytest.raises(ModelUnavailable):
        client.playgrounds.predict(slug, "a great film")


def test_attention_maps_still_come_from_pytorch(module_wb, exported, client):
    slug = service.publish(module_wb, exported["token-classification"], runtime="onnx-fp32").slug
    playgrounds = client.playgrounds
    predictor = playgrounds.predictor(service.get_target(module_wb, slug))
    before = predictor.nbytes
    maps = playgrounds.attention(slug, "John lives in Paris")
    assert (maps.layers, maps.heads) == (2, 2)
    assert maps.tokens[0] == "[CLS]" and maps.weights.shape[-1] == len(maps.tokens)
    assert maps.weights[0, 0].sum(-1) == pytest.approx(1.0, abs=1e-4)  # each row a distribution
    assert predictor.nbytes > before  # the torch model loaded for the maps is counted too


def test_a_page_names_its_runtime(module_wb, exported):
    from workbench.playground.page import build_playground, runtime_line

    slug = service.publish(module_wb, exported["text-classification"], runtime="onnx-int8").slug
    blocks = build_playground(module_wb, slug)
    texts = [getattr(block, "value", None) for block in blocks.blocks.values()]
    assert runtime_line("onnx-int8") in texts and "int8" in runtime_line("onnx-int8")


# -- prediction jobs ------------------------------------------------------------------------------------------

def _job_rows(module_wb, run_id: int, folder: Path, runtime: str) -> tuple[dict, list[dict]]:
    from jobs.predict.job import run_prediction
    from jobs.predict.spec import PredictSpec
    from jobs.process.run_job import resolve_model
    from jobs.progress import RecordingReporter

    source = folder / "input.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n"
                              for i, t in enumerate(INPUTS["text-classification"] * 3)))
    spec = PredictSpec(kind="predict", run_id=run_id, input_path=str(source), output_format="jsonl",
                       runtime=runtime)
    result = run_prediction(spec, resolve_model(module_wb, run_id), folder / runtime, RecordingReporter(),
                            device="cpu")
    rows = [json.loads(line) for line in Path(result["output"]).read_text().splitlines()]
    return result, rows


def test_a_prediction_job_with_onnx_writes_the_same_labels(module_wb, exported, tmp_path):
    run_id = exported["text-classification"]
    by_torch, torch_rows = _job_rows(module_wb, run_id, tmp_path, "pytorch")
    by_onnx, onnx_rows = _job_rows(module_wb, run_id, tmp_path, "onnx-fp32")
    assert by_torch["runtime"] == "pytorch" and by_onnx["runtime"] == "onnx-fp32"
    assert len(onnx_rows) == 9 and list(onnx_rows[0]) == list(torch_rows[0])  # the same columns
    assert [r["predicted_label"] for r in onnx_rows] == [r["predicted_label"] for r in torch_rows]
    assert {r["predicted_label"] for r in torch_rows} == {"neg", "pos"}  # both classes: a real comparison
    assert [r["prob_pos"] for r in onnx_rows] == pytest.approx([r["prob_pos"] for r in torch_rows], abs=1e-4)


def test_a_prediction_job_fails_clearly_when_the_export_is_gone(module_wb, models, tmp_path):
    from jobs.predict.infer import load_predictor
    from jobs.process.run_job import resolve_model

    run_id = ps.add_run(module_wb, "text-classification", models["text-classification"])
    model = resolve_model(module_wb, run_id)
    assert model.onnx_dir is None
    with pytest.raises(TrainingError, match=rf"run {run_id} has no onnx-int8 export any more") as failure:
        load_predictor(model, device="cpu", runtime="onnx-int8")
    assert "workbench export" in failure.value.hint


def test_queueing_a_prediction_checks_the_runtime(module_wb, models, exported, tmp_path):
    from workbench.services import predictions

    source = tmp_path / "reviews.csv"
    source.write_text("text\nwhat a film\nawful\n")
    bare = ps.add_run(module_wb, "text-classification", models["text-classification"])
    with pytest.raises(InvalidState, match="export it first"):
        predictions.submit_prediction(module_wb, bare, source, runtime="onnx-fp32")
    job_id = predictions.submit_prediction(module_wb, exported["text-classification"], source, runtime="onnx-int8")
    job = predictions.get_job(module_wb, job_id)
    assert job["runtime"] == "onnx-int8" and job["name"].endswith("(onnx-int8)")


def test_the_prediction_spec_refuses_an_unknown_runtime():
    from jobs.predict.spec import PredictSpec

    with pytest.raises(ConfigError, match="unknown runtime 'gguf': choose one of pytorch, onnx-fp32"):
        PredictSpec(kind="predict", run_id=1, input_path="x.csv", runtime="gguf")
    assert PredictSpec.from_dict({"kind": "predict", "run_id": 1, "input_path": "x.csv"}).runtime == "pytorch"


# -- the migration --------------------------------------------------------------------------------------------

def _downgrade(engine, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    from storage.db import MIGRATIONS_DIR

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def test_the_migration_adds_the_runtime_and_existing_playgrounds_keep_pytorch(tmp_path):
    from sqlalchemy import insert

    from storage.db import make_engine, upgrade

    engine = make_engine(f"sqlite:///{tmp_path / 'wb.db'}")
    upgrade(engine, "0008_seed_groups")
    with engine.begin() as c:
        run_id = c.execute(insert(Run.__table__).values(name="", task="text-classification", model="m", spec={})
                           .returning(Run.id)).scalar_one()
        c.execute(text("INSERT INTO playgrounds (slug, run_id, active, created_at) "
                       "VALUES ('demo', :run, 1, '2026-01-01 00:00:00')"), {"run": run_id})
    upgrade(engine)
    column = {c["name"]: c for c in inspect(engine).get_columns("playgrounds")}["runtime"]
    assert column["nullable"] is False
    with engine.begin() as c:
        assert c.execute(select(Playground.runtime)).scalar_one() == "pytorch"
    _downgrade(engine, "0008_seed_groups")
    assert "runtime" not in {c["name"] for c in inspect(engine).get_columns("playgrounds")}
    engine.dispose()


# -- the UI's controls ----------------------------------------------------------------------------------------

def test_the_share_tab_publishes_with_a_runtime_and_changes_it(module_wb, models, exported):
    from workbench.ui import runs_tab

    run_id = exported["text-classification"]
    assert runs_tab.runtime_choices(module_wb, run_id) == [("pytorch", "pytorch"), ("onnx-fp32", "onnx-fp32"), ("onnx-int8", "onnx-int8")]
    message = runs_tab.publish_playground(module_wb, run_id, False, "onnx-int8")
    assert "Playground published" in message
    newest = runs_tab.playground_rows(module_wb, run_id)[0]
    assert newest[4] == "onnx-int8"
    said = runs_tab.change_runtime(module_wb, newest[0], "onnx-fp32")
    assert "now served by **onnx-fp32**" in said
    assert runs_tab.playground_rows(module_wb, run_id)[0][4] == "onnx-fp32"
    bare = ps.add_run(module_wb, "text-classification", models["text-classification"])
    assert runs_tab.runtime_choices(module_wb, bare) == [("pytorch", "pytorch")]
    refused = runs_tab.inline(runs_tab.publish_playground, module_wb, bare, False, "onnx-fp32")
    assert refused.startswith("✘") and "export it first" in refused


def test_the_predict_tab_queues_with_the_picked_runtime(module_wb, models, exported, tmp_path, monkeypatch):
    from workbench.services import predictions
    from workbench.ui import predict_panel

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))  # only files under it count as uploaded
    source = tmp_path / "a1b2" / "reviews.csv"
    source.parent.mkdir()
    source.write_text("text\nwhat a film\nawful\n")
    run_id = exported["text-classification"]
    assert predict_panel.runtime_choices(module_wb, run_id) == [("pytorch", "pytorch"), ("onnx-fp32", "onnx-fp32"), ("onnx-int8", "onnx-int8")]
    message = predict_panel.said(predict_panel.queue_prediction, module_wb, run_id, str(source), "auto-detect",
                                 "", "", "csv", None, "onnx-fp32")
    assert message.startswith("✔"), message
    assert predictions.list_jobs(module_wb, run_id=run_id)[0]["runtime"] == "onnx-fp32"
    bare = ps.add_run(module_wb, "text-classification", models["text-classification"])
    refused = predict_panel.said(predict_panel.queue_prediction, module_wb, bare, str(source), "auto-detect",
                                 "", "", "csv", None, "onnx-int8")
    assert refused.startswith("✘") and "export it first" in refused


# -- the command line -----------------------------------------------------------------------------------------

def _cli(home, *args):
    import os
    import subprocess
    import sys

    env = {**os.environ, "WORKBENCH_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", "from workbench.cli import entry; entry()", *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


def test_the_cli_publishes_switches_and_predicts_with_a_runtime(module_wb, models, exported, tmp_path):
    home, run_id = module_wb.settings.home, exported["text-classification"]
    published = _cli(home, "publish", str(run_id), "--runtime", "onnx-int8", "--json")
    assert published.returncode == 0, published.stderr
    slug = json.loads(published.stdout)["slug"]
    assert json.loads(published.stdout)["runtime"] == "onnx-int8"
    switched = _cli(home, "playground-runtime", slug, "onnx-fp32")
    assert switched.returncode == 0 and f"{slug} is now served by onnx-fp32" in switched.stdout, switched.stderr
    assert {p.slug: p.runtime for p in service.list_playgrounds(module_wb)}[slug] == "onnx-fp32"
    source = tmp_path / "reviews.csv"
    source.write_text("text\nwhat a film\nawful\n")
    bare = ps.add_run(module_wb, "text-classification", models["text-classification"])
    refused = _cli(home, "predict", str(bare), "--input", str(source), "--runtime", "onnx-int8")
    assert refused.returncode != 0 and "export it first" in refused.stderr and "Traceback" not in refused.stderr


def test_the_menus_say_which_variant_to_check_and_leave_out_a_failed_one(module_wb, models):
    from workbench.services import predictions

    run_id = ps.add_run(module_wb, "text-classification", models["text-classification"])
    folder = add_export(module_wb, run_id, models["text-classification"], "text-classification")
    (folder / "export.json").write_text(json.dumps({"variants": [{"name": "onnx-fp32", "status": "ok"},
                                                                 {"name": "onnx-int8", "status": "check before use"}]}))
    assert predictions.runtime_options(module_wb, run_id) == [
        ("pytorch", "pytorch"), ("onnx-fp32", "onnx-fp32"), ("onnx-int8 (check before use)", "onnx-int8")]
    (folder / "export.json").write_text(json.dumps({"variants": [{"name": "onnx-fp32", "status": "ok"},
                                                                 {"name": "onnx-int8", "status": "failed"}]}))
    assert predictions.served_runtimes(module_wb, run_id) == ["pytorch", "onnx-fp32"]
    with pytest.raises(InvalidState, match="no usable onnx-int8"):
        predictions.runtime_dir(module_wb, run_id, "onnx-int8")


def test_every_onnx_run_gives_its_arena_growth_back():
    """ONNX Runtime's CPU arena kept the largest it grew to: a served variant stayed at its peak RSS for good
    (1.55 GB after concurrent maximum-size requests, bench/onnx_memory.py). Each run now shrinks it again."""
    import numpy as np

    from jobs.export import runtime

    calls = []

    class Session:
        def run(self, names, feed, options=None):
            calls.append(options)
            return [np.zeros((len(feed["input_ids"]), 2), dtype=np.float32)]

    model = runtime.OnnxModel.__new__(runtime.OnnxModel)
    model.session, model.input_names, model.output_names = Session(), ("input_ids",), ("logits",)
    out = model(input_ids=np.ones((3, 4), dtype=np.int64))
    assert out.logits.shape == (3, 2)
    assert calls[0] is not None
    assert calls[0].get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
