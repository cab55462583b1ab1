"""A sentence-transformers encoder with a linear head, as one ``nn.Module`` that answers like a transformers
sequence classifier (``.logits``, ``.attentions``, ``.config.id2label``): how SetFit runs and fine-tuned
sentence heads are saved, loaded and pooled.

The run's ``model/`` folder holds the sentence-transformers files plus ``setfit_head.safetensors`` and
``setfit.json`` (the head as plain weights, the labels, the pooling, the method), so the workbench loads such
a model without unpickling anything. Evaluation, audits, playgrounds, the API and ONNX export use it as they
use any run's model.
"""
from __future__ import annotations

import json
import functools
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

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


def read_sentence_layout(model_dir: Path) -> tuple[str, bool]:
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


def classifier_class():
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
    model = classifier_class()(body, head["weight"], head["bias"], config["pooling"], config["normalize"],
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
    return read_sentence_layout(path)


def pools_as_supported(path: str | Path) -> bool:
    """Whether the sentence encoder in ``path`` pools by mean or [CLS], the two ``pool`` computes."""
    try:
        return sentence_layout(path) is not None
    except TrainingError:
        return False



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


def frozen_embeddings(records: Sequence[Mapping[str, Any]], model_path: str, device: str = "cpu", *,
                      max_length: Optional[int] = None, chunking=None) -> np.ndarray:
    """Frozen sentence embeddings of ``records`` (one row each) from the encoder in ``model_path``, each text read
    as the run reads it.

    A text pair is read as the model reads it (both texts in one input). Pooled as the model's
    sentence-transformers layout says (mean or [CLS]); any other encoder by the masked mean, which gives a
    plain BERT far better sentence features than its untrained [CLS] state. A text is cut at ``max_length``
    tokens (the run's; ``FROZEN_MAX_LENGTH`` when not given). Given ``chunking`` (a run that reads long documents
    in windows, ``jobs.training.chunking.Chunking``), each document is read in the run's windows and its row is
    the mean of its windows' embeddings: on 100 long movie reviews that is 0.67 where the first 128 tokens alone
    give 0.58 (docs/training.md). Longest inputs first, so each batch pads little.
    """
    from transformers import AutoModel, AutoTokenizer

    from jobs.evaluation.baselines import FROZEN_BATCH, FROZEN_MAX_LENGTH
    from storage.errors import TrainingError

    if not records:
        return np.zeros((0, 0), dtype=np.float32)
    try:
        mode = (sentence_layout(model_path) or ("mean", False))[0]
    except TrainingError:  # a pooling SetFit does not support: the masked mean still gives features
        mode = "mean"
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path).to(device).eval()
    texts = [str(r.get("text", "")) for r in records]
    pairs = [r.get("text_pair") for r in records]
    if chunking is not None:
        from jobs.training.chunking import split_windows

        windows = split_windows(tokenizer, texts, pairs if any(pairs) else None, chunking.window, chunking.stride,
                                chunking.max_windows)
        features, document = windows.features, windows.document
    else:
        features = dict(tokenizer(texts, [str(p or "") for p in pairs] if any(pairs) else None, truncation=True,
                                  max_length=int(max_length or FROZEN_MAX_LENGTH)))
        document = range(len(records))
    return embed_documents(model, tokenizer, features, document, len(records), mode, device, FROZEN_BATCH)


def embed_documents(model, tokenizer, features: Mapping[str, list], document: Sequence[int], documents: int,
                    mode: str, device: str, batch_size: int) -> np.ndarray:
    """One embedding per document: the mean of the pooled embeddings of its rows of tokenized ``features``
    (lists of ids per row; ``document[i]``, the document row ``i`` reads: a window of it, or all of it), the
    longest rows first in batches of ``batch_size`` so that each pads little. ``(0, 0)`` for no documents.
    Frozen baselines and the labelling loop's encoder (``jobs.labelling.encoder``) embed through it."""
    import torch

    ids = features["input_ids"]
    if not documents or not len(ids):
        return np.zeros((0, 0), dtype=np.float32)
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    sums, counts = None, np.zeros(documents, dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            encoded = tokenizer.pad({name: [values[i] for i in rows] for name, values in features.items()
                                     if name in ("input_ids", "attention_mask", "token_type_ids")},
                                    return_tensors="pt").to(device)
            pooled = pool(model(**encoded).last_hidden_state, encoded["attention_mask"], mode).float().cpu().numpy()
            if sums is None:
                sums = np.zeros((documents, pooled.shape[-1]), dtype=np.float32)
            at = np.asarray([document[i] for i in rows], dtype=np.int64)
            np.add.at(sums, at, pooled)
            np.add.at(counts, at, 1.0)
    return sums / np.maximum(counts, 1.0)[:, None]


def frozen_embedder(model_path: str, device: str = "cpu", *, max_length: Optional[int] = None,
                    chunking=None) -> Callable[[Sequence[Mapping[str, Any]]], np.ndarray]:
    """``frozen_embeddings`` of the model in ``model_path``, reading texts as a run with ``max_length`` and
    ``chunking`` does, as the baselines take it (``jobs.evaluation.baselines.fit``'s ``embed``)."""
    from jobs.evaluation.baselines import FROZEN_MAX_LENGTH

    embed = functools.partial(frozen_embeddings, model_path=model_path, device=device, max_length=max_length,
                              chunking=chunking)
    # how it reads a text, for the baseline's scores (``jobs.evaluation.baselines``: "read")
    embed.reading = (f"windows of {chunking.window} tokens overlapping by {chunking.stride}, at most "
                     f"{chunking.max_windows} a text, their embeddings averaged" if chunking is not None
                     else f"the first {int(max_length or FROZEN_MAX_LENGTH)} tokens")
    return embed
