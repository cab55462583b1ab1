"""The export job's core: ONNX variants of a tiny run of each task, their parity with PyTorch, the speed report,
and what it refuses (an untraceable model, a full disk, fp16 without a GPU, a graph that disagrees)."""
from __future__ import annotations

import errno
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pytest

from jobs.export import speed
from jobs.export.job import run_export, verdict, wanted_variants
from jobs.export.onnx import UnsupportedArchitecture
from jobs.export.parity import CHECKING_PARITY, Parity, mask_words
from jobs.export.runtime import OnnxModel, load_onnx_model
from jobs.export.spec import ExportSpec
from jobs.progress import Cancelled, RecordingReporter
from storage.errors import ConfigError, TrainingError
from tests.export_support import build_model, tiny_run

REPORT_FIELDS = {"name", "path", "status", "reason", "agreement", "max_abs_diff", "metric", "metric_drop", "p50_ms",
                 "p95_ms", "rows_per_s", "bytes"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Each kind's tiny model, trained once for the module: ``models(kind)`` is its folder."""
    built: dict[str, Path] = {}
    root = tmp_path_factory.mktemp("export-models")

    def get(kind: str) -> Path:
        if kind not in built:
            built[kind] = build_model(kind, root / kind)
        return built[kind]

    return get


@pytest.fixture(autouse=True)
def quick_timing(monkeypatch):
    """A handful of timed calls: the tests check the report's shape, not the figures."""
    monkeypatch.setattr(speed, "SINGLE_CALLS", 4)
    monkeypatch.setattr(speed, "BATCH", 8)
    monkeypatch.setattr(speed, "BATCH_ROWS", 16)


def fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def export(run, reporter=None, **spec):
    return run_export(ExportSpec(run_id=1, **spec), run.model, run.run_spec, run.output_dir,
                      reporter or RecordingReporter(), device="cpu")


@pytest.mark.parametrize("kind,metric", [
    ("text-classification", "accuracy"), ("text-pair-classification", "accuracy"),
    ("multi-label-classification", "f1_micro"), ("token-classification", "entity_f1"),
    ("question-answering", "squad_f1"), ("masked-lm", "mask_accuracy")])
def test_each_task_exports_with_fp32_parity_an_int8_variant_and_a_speed_report(tmp_path, models, monkeypatch, kind,
                                                                              metric):
    run = tiny_run(tmp_path, kind, model_source=models(kind))
    before = fingerprint(run.run_dir / "model")
    reporter = RecordingReporter()
    report = export(run, reporter)

    assert report["metric"] == metric and report["validation_rows"] == 12 and report["device"] == "cpu"
    assert json.loads((run.output_dir / "export.json").read_text()) == report
    fp32, int8 = report["variants"]
    assert (fp32["name"], int8["name"]) == ("onnx-fp32", "onnx-int8")
    assert fp32["status"] == "ok" and fp32["agreement"] >= 0.999 and fp32["max_abs_diff"] < 1e-4
    assert fp32["metric"] == pytest.approx(report["pytorch"]["metric"], abs=1e-6) and fp32["metric_drop"] == 0
    assert REPORT_FIELDS <= set(int8) and int8["status"] in ("ok", "check before use")
    assert 0 <= int8["agreement"] <= 1 and int8["max_abs_diff"] >= 0 and 0 <= int8["metric"] <= 1
    assert int8["bytes"] < fp32["bytes"] / 2  # int8 weights
    for line in (report["pytorch"], fp32, int8):
        assert line["p50_ms"] > 0 and line["p95_ms"] >= line["p50_ms"] and line["rows_per_s"] > 0 and line["bytes"] > 0

    onnx_dir = run.output_dir / "onnx"
    files = {p.name for p in onnx_dir.iterdir()}
    assert {"model.onnx", "model_quantized.onnx", "config.json", "tokenizer.json", "README.md"} <= files
    assert not any(name.endswith((".safetensors", ".partial")) for name in files)
    readme = (onnx_dir / "README.md").read_text()
    snippet = readme.split("```python\n")[1].split("```")[0]  # the onnxruntime example runs as written
    monkeypatch.chdir(run.output_dir)
    exec(compile(snippet, "README.md", "exec"), {})  # noqa: S102 - our own README's example
    parity_phases = [p for p in reporter.phases if p[0] == CHECKING_PARITY]
    assert parity_phases[-1][1] == parity_phases[-1][2] == 12 * 3  # pytorch and two variants, every row
    assert fingerprint(run.run_dir / "model") == before  # the run's model is only read


def test_an_export_reports_each_stage_as_rising_progress_under_a_named_phase(tmp_path, models):
    """Stages done of all, as training reports steps (the Runs tab's bar and `runs show` read it): fp32 and int8
    written, then for PyTorch and each variant its parity check and its timing."""
    class PhaseAtProgress(RecordingReporter):
        def progress(self, step, total_steps, epoch):
            super().progress(step, total_steps, epoch)
            self.at = [*getattr(self, "at", []), (step / total_steps, self.phases[-1][0])]

    run = tiny_run(tmp_path, "text-classification", model_source=models("text-classification"))
    reporter = PhaseAtProgress()
    export(run, reporter)
    assert {total for _, total, _ in reporter.steps} == {2 + 2 * 3}
    fractions = [fraction for fraction, _ in reporter.at]
    assert fractions == sorted(fractions) and fractions[0] == 0 and fractions[-1] == 1
    assert len(set(fractions)) == 2 + 2 * 3 + 1  # every stage moves it
    # the phase under way as each stage ends
    assert [phase for _, phase in reporter.at] == [
        "preparing", "exporting onnx-fp32", "quantizing onnx-int8", CHECKING_PARITY, "timing pytorch",
        CHECKING_PARITY, "timing onnx-fp32", CHECKING_PARITY, "timing onnx-int8"]


def test_a_setfit_model_exports_as_one_graph_returning_the_heads_logits(tmp_path, models):
    import torch
    from transformers import AutoTokenizer

    from jobs.training.sentence_model import load_classifier

    run = tiny_run(tmp_path, "setfit", model_source=models("setfit"))
    report = export(run, int8=False)
    assert [v["name"] for v in report["variants"]] == ["onnx-fp32"] and report["variants"][0]["status"] == "ok"
    onnx_dir = run.output_dir / "onnx"
    assert (onnx_dir / "setfit.json").is_file() and "SetFit" in (onnx_dir / "README.md").read_text()

    tokenizer = AutoTokenizer.from_pretrained(str(onnx_dir))
    enc = tokenizer(["great film loved it", "boring and dull", "a joy"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = load_classifier(run.model.model_dir)(**enc).logits.numpy()
    model = load_onnx_model(run.model.model_dir, onnx_dir, "onnx-fp32")
    assert model.config.id2label == {0: "neg", 1: "pos"}
    assert np.allclose(model(**enc).logits.numpy(), expected, atol=1e-5)


def test_a_model_the_tracer_cannot_follow_is_refused_naming_its_architecture(tmp_path, models, monkeypatch):
    import torch

    def fail(*_args, **_kwargs):
        raise RuntimeError("unsupported operator aten::magic")

    monkeypatch.setattr(torch.onnx, "export", fail)
    run = tiny_run(tmp_path, "text-classification", model_source=models("text-classification"))
    with pytest.raises(UnsupportedArchitecture, match=r"BertForSequenceClassification \(bert\).*aten::magic"):
        export(run)
    assert list((run.output_dir / "onnx").iterdir()) == []
    assert not (run.output_dir / "export.json").exists()


def _fill_the_disk(path: str) -> None:
    Path(path).write_bytes(b"half a graph")
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_leaves_no_partial_graph_and_the_model_untouched(tmp_path, models, monkeypatch):
    import torch

    run = tiny_run(tmp_path, "text-classification", model_source=models("text-classification"))
    before = fingerprint(run.run_dir / "model")
    monkeypatch.setattr(torch.onnx, "export", lambda _model, _args, path, **_kw: _fill_the_disk(path))
    with pytest.raises(TrainingError, match="disk filled while writing model.onnx"):
        export(run)
    assert list((run.output_dir / "onnx").iterdir()) == []
    assert fingerprint(run.run_dir / "model") == before


def test_a_disk_that_fills_during_int8_removes_only_the_int8_file(tmp_path, models, monkeypatch):
    import onnxruntime.quantization

    run = tiny_run(tmp_path, "text-classification", model_source=models("text-classification"))
    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", lambda _src, dst, **_kw: _fill_the_disk(dst))
    with pytest.raises(TrainingError, match="model_quantized.onnx"):
        export(run)
    assert {p.name for p in (run.output_dir / "onnx").iterdir()} == {"model.onnx"}


def test_fp16_is_refused_without_a_gpu_and_chosen_on_one():
    with pytest.raises(ConfigError, match="fp16 needs a GPU"):
        wanted_variants(ExportSpec(run_id=3, fp16=True), "cpu")
    assert wanted_variants(ExportSpec(run_id=3), "cpu") == ["onnx-fp32", "onnx-int8"]
    assert wanted_variants(ExportSpec(run_id=3), "cuda") == ["onnx-fp32", "onnx-int8", "onnx-fp16"]
    assert wanted_variants(ExportSpec(run_id=3, int8=False, fp16=False), "cuda") == ["onnx-fp32"]


def test_fp16_without_a_gpu_fails_the_job_before_anything_is_written(tmp_path, models):
    run = tiny_run(tmp_path, "text-classification", model_source=models("text-classification"))
    with pytest.raises(ConfigError, match="fp16 needs a GPU"):
        export(run, fp16=True)
    assert not (run.output_dir / "onnx").exists()


def test_an_fp32_graph_that_disagrees_fails_the_job_after_writing_the_report(tmp_path, models, monkeypatch):
    answer = OnnxModel.__call__

    def flipped(self, **inputs):
        out = answer(self, **inputs)
        out.logits = -out.logits
        return out

    monkeypatch.setattr(OnnxModel, "__call__", flipped)
    run = tiny_run(tmp_path, "text-classification", model_source=models("text-classification"))
    with pytest.raises(TrainingError, match=r"does not answer as PyTorch does: it decides as PyTorch does on 0\.00%"):
        export(run)
    report = json.loads((run.output_dir / "export.json").read_text())
    assert [(v["name"], v["status"]) for v in report["variants"]] == [("onnx-fp32", "failed")]
    assert "99.9%" in report["variants"][0]["reason"] and report["pytorch"]["p50_ms"] > 0


def test_a_cancel_stops_the_parity_check_between_batches(tmp_path, models):
    class CancelInParity(RecordingReporter):
        def cancel_requested(self):
            return any(name == CHECKING_PARITY for name, _done, _total in self.phases)

    run = tiny_run(tmp_path, "text-classification", model_source=models("text-classification"))
    with pytest.raises(Cancelled):
        export(run, CancelInParity())
    assert not (run.output_dir / "export.json").exists()


def test_statuses_follow_agreement_for_fp32_and_the_metric_for_the_others():
    assert verdict("onnx-fp32", Parity(metric=0.9, agreement=0.999), 0.9, "accuracy") == ("ok", "")
    status, reason = verdict("onnx-fp32", Parity(metric=0.9, agreement=0.998, max_abs_diff=0.2), 0.9, "accuracy")
    assert status == "failed" and "99.80%" in reason and "0.2" in reason
    assert verdict("onnx-int8", Parity(metric=0.895, agreement=0.97), 0.9, "accuracy")[0] == "ok"
    status, reason = verdict("onnx-int8", Parity(metric=0.88, agreement=0.97), 0.9, "accuracy")
    assert status == "check before use" and "2.0 points below" in reason


def test_an_unsupported_task_or_a_missing_model_is_refused(tmp_path):
    from jobs.predict.spec import ModelRef
    from jobs.specs.run import DataSpec, RunSpec

    spec = RunSpec(task="text-classification", data=DataSpec(train_path=str(tmp_path / "t.jsonl")))
    missing = ModelRef(run_id=7, task="text-classification", model_dir=str(tmp_path / "gone"), hyperparameters={})
    with pytest.raises(TrainingError, match="run 7 has no saved model"):
        run_export(ExportSpec(run_id=7), missing, spec, tmp_path / "out", RecordingReporter(), device="cpu")
    other = ModelRef(run_id=7, task="summarization", model_dir=str(tmp_path), hyperparameters={})
    with pytest.raises(ConfigError, match="does not handle the task 'summarization'"):
        run_export(ExportSpec(run_id=7), other, spec, tmp_path / "out", RecordingReporter(), device="cpu")


def test_the_export_spec_round_trips_and_rejects_unknown_keys():
    from storage.models import KIND_EXPORT

    spec = ExportSpec(run_id=4, int8=False, name="ship it")
    assert ExportSpec.from_dict(spec.to_dict()) == spec and spec.kind == KIND_EXPORT and spec.fp16 is None
    with pytest.raises(ConfigError, match="unknown key"):
        ExportSpec.from_dict({"run_id": 4, "int4": True})
    with pytest.raises(ConfigError, match="run_id is missing"):
        ExportSpec.from_dict({"int8": True})
    with pytest.raises(ConfigError, match="kind must be 'export'"):
        ExportSpec(run_id=4, kind="predict")


def test_masked_words_are_seeded_one_token_words_with_their_gold():
    from transformers import AutoTokenizer

    from jobs.training.catalogue import packaged_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    texts = ["the cat sat on a mat while dogs ran in parks and birds sang songs .", "42 !", "Paris is big."]
    rows, gold = mask_words(texts, tokenizer, seed=1)
    assert (rows, gold) == mask_words(texts, tokenizer, seed=1)
    assert len(rows) == 2  # "42 !" has no word
    for row, words, text in zip(rows, gold, (texts[0], texts[2])):
        assert 1 <= row["text"].count("[MASK]") == len(words) <= 3
        for word in words:  # the tokenizer's spelling of a word of the text (lower case, for this one)
            assert word in text.lower().split() or word + "." in text.lower().split()


def test_the_timing_cycles_through_a_small_split():
    class Counting:
        def __init__(self):
            self.calls: list[int] = []

        def predict(self, rows):
            self.calls.append(len(rows))
            time.sleep(0.001)  # a measurable call: speed rounds to the microsecond, and a no-op can round to 0
            return [{} for _ in rows]

    predictor = Counting()
    found = speed.measure(predictor, [{"text": "a"}, {"text": "b"}, {"text": "c"}], RecordingReporter(),
                          single_calls=7, batch=4, batch_rows=10)
    assert predictor.calls == [1, 4] + [1] * 7 + [4, 4, 2]
    assert 0 < found.p50_ms <= found.p95_ms and found.rows_per_s > 0


def test_validation_records_are_the_split_training_made(tmp_path):
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.training.data import split_validation
    from jobs.training.data import validation_records
    from tests.tiny_models import classification_records, write_jsonl

    records = classification_records(30)
    train = write_jsonl(tmp_path / "train.jsonl", records)
    spec = RunSpec(task="text-classification", data=DataSpec(train_path=str(train)), train=TrainSpec(seed=5))
    assert validation_records(spec) == split_validation(records, 5)[1] and len(validation_records(spec)) == 3  # a tenth of 30


def _tiny_family(folder: Path, family: str) -> Path:
    """A 2-layer masked LM of ``family`` (hidden 32) with the packaged MiniLM tokenizer, or the locally built
    tokenizer of the families that need their own (``tests.tiny_models.TINY_ARCHITECTURES``)."""
    import transformers as tf

    from tests.tiny_models import TINY_ARCHITECTURES

    if family in TINY_ARCHITECTURES:
        return TINY_ARCHITECTURES[family](folder)
    tok = tf.AutoTokenizer.from_pretrained(str(_minilm()))
    size = {"vocab_size": len(tok), "max_position_embeddings": 130}
    config = {"bert": lambda: tf.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                            intermediate_size=64, **size),
              "roberta": lambda: tf.RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                  intermediate_size=64, pad_token_id=tok.pad_token_id, **size),
              "albert": lambda: tf.AlbertConfig(embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, intermediate_size=64, **size),
              "distilbert": lambda: tf.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, **size),
              "electra": lambda: tf.ElectraConfig(embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                                  num_attention_heads=2, intermediate_size=64, **size)}[family]()
    tf.AutoModelForMaskedLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _minilm() -> Path:
    from jobs.training.catalogue import packaged_model_path

    return Path(packaged_model_path())


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "distilbert", "electra", "deberta-v2", "xlm-roberta",
                                    "modernbert"])
def test_every_catalogue_architecture_traces_with_dynamic_batch_and_length(tmp_path, family):
    """The exporter's claim: each family of the catalogue traces, and the graph answers a batch of another size
    and length than the trace's as the torch model does (padding included)."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from jobs.export.onnx import export_fp32

    folder = _tiny_family(tmp_path / family, family)
    names = export_fp32(folder, "masked-lm", tmp_path / "model.onnx")
    tok = AutoTokenizer.from_pretrained(str(folder))
    enc = tok(["the cat sat on a mat", "where does alice live ?", "see you soon"], padding=True, return_tensors="pt")
    reference = AutoModelForMaskedLM.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        expected = reference(**{k: v for k, v in enc.items() if k in names}).logits.numpy()
    got = OnnxModel(tmp_path / "model.onnx", reference.config)(**enc).logits.numpy()
    real = enc["attention_mask"].numpy().astype(bool)  # padded positions' outputs are nobody's
    assert got.shape == expected.shape and np.abs(got - expected)[real].max() < 1e-4
