"""Few-shot text classification with SetFit (Tunstall et al., 2022), as a training method of the engine.

SetFit tunes a sentence encoder on pairs of training texts (same class: close, different class: far),
then fits a logistic regression on the tuned embeddings. From a few dozen examples per class it
learns where a classification head fine-tuned for a few dozen steps stays at the majority class.

Training goes through the ``setfit`` library. The run's ``model/`` folder is what
``SetFitModel.save_pretrained`` writes (a sentence-transformers folder plus ``model_head.pkl``) and
beside it ``setfit_head.safetensors`` + ``setfit.json``: the head as plain weights, so that the
workbench loads a SetFit model without unpickling anything (``SetFitClassifier``). The classifier
is an ``nn.Module`` that answers like a transformers sequence classifier (``.logits``,
``.attentions``, ``.config.id2label``): evaluation, audits, playgrounds and the API use it as they
use any run's model. A SetFit run keeps no checkpoints: stopped or crashed, it starts again
(it takes minutes).

The same classifier is what a fine-tuning run of a sentence-transformers model trains
(``build_sentence_classifier``): the encoder with its own pooling and a linear head started from a
logistic regression on the frozen embeddings, tuned end to end by the engine's Trainer and saved in
this layout (``setfit.json`` says ``"method": "finetune"``).
"""
from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from jobs.progress import EVALUATING, SAVING_MODEL, TRAINING, WRITING_PREDICTIONS, Cancelled, report_phase
from storage.errors import TrainingError

log = logging.getLogger(__name__)

CONFIG_FILE, HEAD_FILE = "setfit.json", "setfit_head.safetensors"
POOLING_MODES = ("mean", "cls")


def is_setfit_model(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` holds a SetFit run's model (``setfit.json`` beside the encoder)."""
    return (Path(model_dir) / CONFIG_FILE).is_file()


def head_weights(coef: np.ndarray, intercept: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """A logistic regression's ``coef_``/``intercept_`` as a linear layer whose softmax is its ``predict_proba``.

    A binary regression has one row: ``p(1) = sigmoid(z)`` is the softmax of the logits ``[0, z]``.
    """
    coef, intercept = np.atleast_2d(np.asarray(coef, dtype=np.float32)), np.atleast_1d(np.asarray(intercept, np.float32))
    if n_classes == 2 and coef.shape[0] == 1:
        return np.vstack([np.zeros_like(coef), coef]), np.concatenate([np.zeros(1, np.float32), intercept])
    if coef.shape[0] != n_classes:
        raise TrainingError(f"the SetFit head has {coef.shape[0]} rows for {n_classes} classes",
                            "every class needs training examples")
    return coef, intercept


def pool(hidden, attention_mask, mode: str):
    """Sentence embeddings from token states: the masked mean (sentence-transformers' default) or [CLS]."""
    if mode == "cls":
        return hidden[:, 0]
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def _sentence_transformers_layout(model_dir: Path) -> tuple[str, bool]:
    """(pooling mode, normalised?) from a sentence-transformers folder's modules.json."""
    modules_file = model_dir / "modules.json"
    if not modules_file.is_file():
        return "mean", False
    modules = json.loads(modules_file.read_text(encoding="utf-8"))
    mode, normalize = "mean", False
    for module in modules:
        kind = module.get("type", "")
        if kind.endswith("Pooling"):
            config = json.loads((model_dir / module.get("path", "") / "config.json").read_text(encoding="utf-8"))
            if config.get("pooling_mode_cls_token"):
                mode = "cls"
            elif not config.get("pooling_mode_mean_tokens", True):
                raise TrainingError(f"{model_dir}: only mean or [CLS] pooling is supported by SetFit runs here",
                                    "use a sentence-transformers model with mean pooling")
        elif kind.endswith("Normalize"):
            normalize = True
    return mode, normalize


def _torch_module():
    import torch

    class SetFitClassifier(torch.nn.Module):
        """Encoder + pooling (+ L2 normalisation) + a linear head, as one torch module: a SetFit run's model,
        or a sentence-transformers model being fine-tuned (given ``labels``, ``forward`` returns the loss)."""

        # the loss is a mean over the batch: the Trainer divides it for gradient accumulation itself
        accepts_loss_kwargs = False

        def __init__(self, body, weight, bias, pooling: str, normalize: bool, labels: Sequence[str],
                     method: str = "setfit", max_length: int = 512, source: Optional[str] = None):
            super().__init__()
            self.body, self.pooling, self.normalize = body, pooling, normalize
            self.method, self.max_length, self.labels = method, max_length, list(labels)
            self.source = source  # the sentence-transformers folder it was built from, whose files it saves
            self.head = torch.nn.Linear(weight.shape[1], weight.shape[0])
            with torch.no_grad():
                self.head.weight.copy_(torch.as_tensor(weight))
                self.head.bias.copy_(torch.as_tensor(bias))
            self.config = body.config
            self.config.id2label = dict(enumerate(labels))
            self.config.label2id = {name: i for i, name in enumerate(labels)}
            self.config.problem_type = "single_label_classification"

        def embed(self, input_ids, attention_mask=None, token_type_ids=None, output_attentions=False):
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                inputs["token_type_ids"] = token_type_ids
            out = self.body(**inputs, output_attentions=output_attentions)
            mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
            embeddings = pool(out.last_hidden_state, mask, self.pooling)
            if self.normalize:
                embeddings = torch.nn.functional.normalize(embeddings, p=2, dim=1)
            return embeddings, out

        def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                    output_attentions=False, **_):
            from transformers.modeling_outputs import SequenceClassifierOutput

            embeddings, out = self.embed(input_ids, attention_mask, token_type_ids, output_attentions)
            logits = self.head(embeddings)
            loss = torch.nn.functional.cross_entropy(logits, labels) if labels is not None else None
            return SequenceClassifierOutput(loss=loss, logits=logits,
                                            attentions=out.attentions if output_attentions else None)

        def set_attn_implementation(self, implementation: str) -> None:
            self.body.set_attn_implementation(implementation)

        def save_pretrained(self, model_dir, **_) -> None:
            """The encoder as a transformers folder, the head and its pooling in ``setfit.json``; a model
            fine-tuned from a sentence-transformers folder stays one (its module files are copied)."""
            self.body.save_pretrained(model_dir)
            if self.source:
                copy_sentence_modules(Path(self.source), Path(model_dir))
            save_head(Path(model_dir), self.head.weight.detach().cpu().numpy(),
                      self.head.bias.detach().cpu().numpy(), self.labels, self.pooling, self.normalize,
                      self.max_length, method=self.method)

    return SetFitClassifier


def load_classifier(model_dir: str | Path, attn_implementation: Optional[str] = None):
    """The SetFit run's model in ``model_dir`` as a ``SetFitClassifier`` (no pickle is read)."""
    from safetensors.numpy import load_file
    from transformers import AutoModel

    model_dir = Path(model_dir)
    config = json.loads((model_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    head = load_file(str(model_dir / HEAD_FILE))
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    body = AutoModel.from_pretrained(str(model_dir), **kwargs)
    model = _torch_module()(body, head["weight"], head["bias"], config["pooling"], config["normalize"],
                            config["labels"], config.get("method", "setfit"), config.get("max_length", 512))
    return model.eval()


_HEADS = {"setfit": "logistic regression (scikit-learn), stored as a linear layer",
          "finetune": "linear layer, started from a logistic regression on the frozen embeddings and "
                      "fine-tuned with the encoder"}


def save_head(model_dir: Path, weight: np.ndarray, bias: np.ndarray, labels: Sequence[str], pooling: str,
              normalize: bool, max_length: int, method: str = "setfit") -> None:
    from safetensors.numpy import save_file

    save_file({"weight": np.ascontiguousarray(weight, dtype=np.float32),
               "bias": np.ascontiguousarray(bias, dtype=np.float32)}, str(model_dir / HEAD_FILE))
    (model_dir / CONFIG_FILE).write_text(json.dumps(
        {"method": method, "labels": list(labels), "pooling": pooling, "normalize": normalize,
         "max_length": max_length, "head": _HEADS[method]}, indent=2), encoding="utf-8")


_SENTENCE_FILES = ("modules.json", "config_sentence_transformers.json", "sentence_bert_config.json")


def copy_sentence_modules(source: Path, target: Path) -> None:
    """sentence-transformers' own files (modules.json, the pooling and normalisation folders) from
    ``source`` to ``target``, so the fine-tuned encoder loads as a ``SentenceTransformer`` too."""
    import shutil

    if not (source / "modules.json").is_file():
        return
    for name in _SENTENCE_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)
    for module in json.loads((source / "modules.json").read_text(encoding="utf-8")):
        folder = module.get("path", "")
        if folder and (source / folder).is_dir():
            shutil.copytree(source / folder, target / folder, dirs_exist_ok=True)


def sentence_layout(path: str | Path) -> Optional[tuple[str, bool]]:
    """(pooling, normalised?) of the sentence encoder in ``path``: a run's ``setfit.json``, else a
    sentence-transformers ``modules.json``; None for any other model."""
    path = Path(path)
    if is_setfit_model(path):
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
        return config["pooling"], bool(config["normalize"])
    if not (path / "modules.json").is_file():
        return None
    return _sentence_transformers_layout(path)


def pools_as_supported(path: str | Path) -> bool:
    """Whether the sentence encoder in ``path`` pools by mean or [CLS], the two ``pool`` computes."""
    try:
        return sentence_layout(path) is not None
    except TrainingError:
        return False


# The linear probe that starts a fine-tuned sentence head: fitted on at most this many training examples.
PROBE_MAX_EXAMPLES = 1000


def build_sentence_classifier(path: str, labels: Sequence[str], max_length: int, train_dataset, collator, *,
                              balanced: bool, seed: int):
    """A sentence-transformers model ready to fine-tune for ``labels``: its encoder, its own pooling and a
    linear head whose start is a logistic regression on the frozen embeddings of (up to
    ``PROBE_MAX_EXAMPLES``) training examples — linear probing, then fine-tuning (Kumar et al., 2022).

    The model was trained to embed sentences by pooling its token states; a classifier reading its [CLS]
    state with a new random head starts from a much weaker representation. TREC-6, 300 questions, test
    files: logistic regression on frozen mean-pooled embeddings 0.71, on [CLS] states 0.41; probe runs
    fine-tuned at the same settings (seeds 0/1/2): 0.903/0.892/0.893 with this head, 0.888/0.875/0.893
    with the [CLS] classifier, 0.904/0.875/0.890 with this head started from zeros.
    """
    import random

    import torch
    from sklearn.linear_model import LogisticRegression
    from transformers import AutoModel

    pooling, normalize = sentence_layout(path)
    body = AutoModel.from_pretrained(path)
    n = len(labels)
    model = _torch_module()(body, np.zeros((n, body.config.hidden_size), np.float32), np.zeros(n, np.float32),
                            pooling, normalize, labels, "finetune", max_length, source=path)
    chosen = sorted(random.Random(seed).sample(range(len(train_dataset)),
                                               min(len(train_dataset), PROBE_MAX_EXAMPLES)))
    features, targets = [], []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(chosen), 64):
            batch = collator([train_dataset[i] for i in chosen[start:start + 64]])
            embeddings, _ = model.embed(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
            features.append(embeddings.float().numpy())
            targets.append(batch["labels"].numpy())
    model.train()
    x, y = np.concatenate(features), np.concatenate(targets)
    if len(set(y.tolist())) < 2:  # one class seen: the zero head (the loss moves it at once)
        return model
    probe = LogisticRegression(max_iter=1000, class_weight="balanced" if balanced else None).fit(x, y)
    weight, bias = np.zeros((n, x.shape[1]), np.float32), np.zeros(n, np.float32)
    # the rows of the classes the probe saw; a class absent from the sample keeps a zero row
    weight[probe.classes_], bias[probe.classes_] = head_weights(probe.coef_, probe.intercept_, len(probe.classes_))
    with torch.no_grad():
        model.head.weight.copy_(torch.from_numpy(weight))
        model.head.bias.copy_(torch.from_numpy(bias))
    return model


def predict_logits(model, tokenizer, texts: Sequence[str], max_length: int, batch_size: int = 64) -> np.ndarray:
    """Logits for ``texts`` in their order (batches sorted by length inside, restored after)."""
    import torch

    order = np.argsort([len(t) for t in texts], kind="stable")
    out = np.zeros((len(texts), model.head.out_features), dtype=np.float32)
    device = next(model.parameters()).device
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            chosen = order[start:start + batch_size]
            enc = tokenizer([texts[i] for i in chosen], padding=True, truncation=True, max_length=max_length,
                            return_tensors="pt").to(device)
            out[chosen] = model(**{k: v for k, v in enc.items()
                                   if k in ("input_ids", "attention_mask", "token_type_ids")}).logits.float().cpu().numpy()
    return out


class _ReporterCallback:
    """SetFit's trainer calls transformers callbacks with its own arguments; progress and cancel only."""

    def __init__(self, reporter):
        from transformers import TrainerCallback

        self.reporter, self.cancelled = reporter, False
        outer = self

        class Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                outer.reporter.progress(state.global_step, state.max_steps, float(state.epoch or 0.0))
                if outer.reporter.cancel_requested():
                    outer.cancelled = True
                    control.should_training_stop = True
                return control

            def on_log(self, args, state, control, logs=None, **kwargs):
                log.info("step %d: %s", state.global_step, logs)
                loss = (logs or {}).get("embedding_loss", (logs or {}).get("loss"))
                if isinstance(loss, (int, float)):
                    outer.reporter.metrics(state.global_step, state.epoch, {"train/loss": float(loss)})

        self.callback = Callback()


def train_setfit(spec, output_dir: Path, reporter, hp: dict, path: str, train: list[dict],
                 validation: list[dict], facts: dict, setup_started: float) -> dict:
    """Train ``spec`` with SetFit; writes the same outputs as a fine-tuned run (see ``jobs.engine``)."""
    from datasets import Dataset
    from setfit import SetFitModel
    from setfit import Trainer as SetFitTrainer
    from setfit import TrainingArguments as SetFitArguments
    from transformers import AutoTokenizer, set_seed

    from jobs.engine import HELDOUT_FILE, assess_run, peak_rss_mb, write_heldout, write_outputs
    from jobs.tasks import classification
    from jobs.tasks.common import Evaluation

    if any(r.get("text_pair") for r in train):
        raise TrainingError("SetFit takes single texts, and this dataset has text pairs",
                            "choose the finetune method (or auto) for text-pair classification")
    if classification.is_multi_label(train):
        raise TrainingError("SetFit runs here take one label per example", "choose the finetune method")
    names = classification.collect_labels(train, False)
    label2id = {name: i for i, name in enumerate(names)}
    set_seed(hp["seed"])
    # balanced classes: with 4 spam among 32 messages an unweighted head leans to the majority class
    model = SetFitModel.from_pretrained(path, labels=names, head_params={"class_weight": "balanced", "max_iter": 1000})
    args = SetFitArguments(output_dir=str(output_dir / "checkpoints"), batch_size=(hp["batch_size"], 16),
                           num_epochs=(1, 16), max_steps=hp["max_steps"], body_learning_rate=hp["learning_rate"],
                           warmup_proportion=hp["warmup_ratio"], seed=hp["seed"], max_length=hp["max_length"],
                           report_to="none", show_progress_bar=False, save_strategy="no",
                           logging_steps=max(1, min(25, hp["max_steps"] // 20)), sampling_strategy="oversampling")
    callback = _ReporterCallback(reporter)
    dataset = Dataset.from_list([{"text": r["text"], "label": label2id[str(r["label"])]} for r in train])
    trainer = SetFitTrainer(model=model, args=args, train_dataset=dataset, callbacks=[callback.callback])
    trainer.st_trainer.args.disable_tqdm = True  # progress goes through the reporter; no bars in the run log
    parameters = sum(p.numel() for p in model.model_body.parameters())
    facts = {**facts, "total_steps": hp["max_steps"], "method": "setfit", "trainable_parameters": parameters,
             "total_parameters": parameters}
    reporter.info(facts)
    log.info("run starts (SetFit): %s", json.dumps(facts, default=str))
    started = time.perf_counter()
    report_phase(reporter, TRAINING)
    trainer.train_embeddings(list(dataset["text"]), list(dataset["label"]), args=args)
    if callback.cancelled:
        raise Cancelled("cancelled during SetFit's pair training (a SetFit run restarts from the beginning)")
    trainer.train_classifier(list(dataset["text"]), list(dataset["label"]), args=args)
    train_seconds = time.perf_counter() - started
    steps = int(trainer.st_trainer.state.global_step)
    train_loss = _last_loss(trainer.st_trainer.state.log_history)

    report_phase(reporter, SAVING_MODEL)
    model_dir = output_dir / "model"
    model.save_pretrained(str(model_dir))
    pooling, normalize = _sentence_transformers_layout(model_dir)
    weight, bias = head_weights(model.model_head.coef_, model.model_head.intercept_, len(names))
    save_head(model_dir, weight, bias, names, pooling, normalize, hp["max_length"])
    classifier = load_classifier(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))

    final_started = time.perf_counter()
    report_phase(reporter, EVALUATING, 0, len(validation))
    logits = predict_logits(classifier, tokenizer, [r["text"] for r in validation], hp["max_length"])
    gold = np.asarray([classification.encode_label(r["label"], label2id, False) for r in validation])
    metrics, tables = classification.compute_metrics_arrays(logits, gold, names, False)
    # the head's logits get a temperature and a positive-class threshold as a fine-tuned run's do
    classification.merge_calibration(metrics, tables, *classification.calibrate(
        logits, gold, names, False, spec.train.calibrate, spec.train.threshold))
    rows = classification.prediction_rows(validation, logits, names, False)
    final_eval_seconds = time.perf_counter() - final_started
    if spec.data.predict_path:
        held = classification.read(spec.data.predict_path)
        probs = classification.softmax(predict_logits(classifier, tokenizer, [r["text"] for r in held],
                                                      hp["max_length"]))
        write_heldout(output_dir / HELDOUT_FILE, {"probs": probs, "labels": names, "record": list(range(len(held))),
                                                  "word": [-1] * len(held)})
    evaluation = Evaluation(dict(metrics), tables, rows)
    pairs = steps * hp["batch_size"]
    metrics.update({
        "train_loss": train_loss, "steps": steps, "method": "setfit",
        "trainable_parameters": parameters, "total_parameters": parameters,
        "peak_rss_mb": round(peak_rss_mb(), 1), "peak_gpu_mb": 0.0,
        "train_seconds": round(train_seconds, 2),
        # a pair is two texts through the encoder: comparable with a fine-tuned run's examples per second
        "samples_per_second": round(2 * pairs / max(train_seconds, 1e-9), 3),
        "eval_and_checkpoint_seconds": 0.0, "train_examples": 2 * pairs, "train_records": len(train),
        "validation_examples": len(validation), "validation_records": len(validation),
        "setup_seconds": round(started - setup_started, 2), "evaluations": 0, "evaluation_seconds": 0.0,
        "checkpoints": 0, "checkpoint_seconds": 0.0, "final_eval_seconds": round(final_eval_seconds, 2),
        "device": facts.get("device", "cpu"), "processes": 1,
    })
    reporter.metrics(steps, 1.0, {f"eval/{k}": v for k, v in evaluation.metrics.items() if isinstance(v, (int, float))})
    report_phase(reporter, WRITING_PREDICTIONS, 0, len(rows))
    metrics.update(assess_run(spec, train, validation, evaluation, model_path=path, device=metrics["device"]))
    metrics["finish_seconds"] = round(time.perf_counter() - final_started - final_eval_seconds, 2)
    metrics["wall_seconds"] = round(time.perf_counter() - setup_started, 2)
    write_outputs(output_dir, metrics, hp, evaluation)
    log.info("run finished (SetFit): %s", json.dumps(evaluation.metrics))
    return metrics


def _last_loss(history: list[dict]) -> float:
    for entry in reversed(history or []):
        for key in ("embedding_loss", "loss", "train_loss"):
            if isinstance(entry.get(key), (int, float)) and math.isfinite(entry[key]):
                return float(entry[key])
    return float("nan")
