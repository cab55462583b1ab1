"""Today's encoders: ModernBERT, DeBERTa-v3 and XLM-R in the catalogue, their tokenizers, LoRA and the attention path.

Tiny models are built from each architecture's config with a tokenizer trained
locally (tests/tiny_models.py); nothing is downloaded.
"""
from __future__ import annotations

import json

import pytest
import torch

from jobs.tasks.common import model_uses_token_type_ids
from jobs.tasks.qa import answer_token_positions, trim_span
from jobs.tasks.token_classification import IGNORE, align_labels
from jobs.training import catalogue, lora
from jobs.training.attention import PaddingFreeCollator, choose_attention, flatten_batch
from tests.tiny_models import TINY_ARCHITECTURES
from workbench.errors import ModelUnavailable, TrainingError

NEW_MODELS = {"ModernBERT-base": "answerdotai/ModernBERT-base", "ModernBERT-large": "answerdotai/ModernBERT-large",
              "deberta-v3-base": "microsoft/deberta-v3-base", "deberta-v3-large": "microsoft/deberta-v3-large",
              "mdeberta-v3-base": "microsoft/mdeberta-v3-base", "xlm-roberta-base": "FacebookAI/xlm-roberta-base",
              "xlm-roberta-large": "FacebookAI/xlm-roberta-large", "mmBERT-small": "jhu-clsp/mmBERT-small"}


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("architectures")
    return {family: build(root / family) for family, build in TINY_ARCHITECTURES.items()}


# --- catalogue ---------------------------------------------------------------------------------------

def test_catalogue_has_todays_encoders_with_documented_figures():
    entries = {m.name: m for m in catalogue.list_models()}
    for name, source in NEW_MODELS.items():
        info = entries[name]
        assert info.source == source
        assert info.layers and info.hidden and info.heads and info.parameters > 100_000_000
        assert info.context_length >= 512 and info.licence and info.languages and info.documented_by
    assert entries["ModernBERT-base"].context_length == entries["mmBERT-small"].context_length == 8192
    assert (entries["ModernBERT-large"].layers, entries["ModernBERT-large"].hidden) == (28, 1024)
    assert entries["mdeberta-v3-base"].family == entries["deberta-v3-base"].family == "deberta-v2"
    assert "1800" in entries["mmBERT-small"].languages and entries["xlm-roberta-base"].licence == "MIT"


def test_new_entry_offline_says_how_to_get_the_weights(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailable, match="huggingface-cli download answerdotai/ModernBERT-base"):
        catalogue.resolve_model("ModernBERT-base")


def test_new_entry_online_resolves_to_the_hub_id_for_download(monkeypatch):
    """WORKBENCH_OFFLINE=false leaves HF_HUB_OFFLINE unset: the entry resolves to its hub id to download."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    info = catalogue.resolve_model("deberta-v3-base")
    assert info.needs_download and catalogue.load_path(info) == "microsoft/deberta-v3-base"


def test_local_folder_reports_its_context_length(tiny_folders):
    xlmr = catalogue.resolve_model(str(tiny_folders["xlm-roberta"]))
    assert xlmr.family == "xlm-roberta" and xlmr.context_length == 128  # 130 positions minus the padding offset
    assert catalogue.resolve_model(str(tiny_folders["modernbert"])).context_length == 256


# --- tokenizers ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", list(TINY_ARCHITECTURES))
def test_tokenizer_word_ids_offsets_mask_and_no_segment_ids(tiny_folders, family):
    from transformers import AutoConfig

    from jobs.training.tokenizers import load_tokenizer

    folder = str(tiny_folders[family])
    config = AutoConfig.from_pretrained(folder)
    tokenizer = load_tokenizer(folder, config, "token-classification")
    assert tokenizer.is_fast  # word_ids and offsets need it; DeBERTa/XLM-R were converted from SentencePiece
    words = ["alice", "flew", "to", "new", "york"]
    encoded = tokenizer(words, is_split_into_words=True)
    word_ids = encoded.word_ids()
    assert word_ids[0] is None and word_ids[-1] is None and sorted({w for w in word_ids if w is not None}) == [0, 1, 2, 3, 4]
    if family == "modernbert":  # byte-level BPE: every pre-split word starts like a word of running text
        starts = [encoded.word_to_tokens(i).start for i in range(len(words))]
        assert all(tokenizer.convert_ids_to_tokens(encoded["input_ids"][k]).startswith("Ġ") for k in starts)
    labels = align_labels(word_ids, [1, 0, 0, 2, 3])
    assert [label for label in labels if label != IGNORE] == [1, 0, 0, 2, 3]
    # each word's tokens decode back to the word: the words were split where the caller split them
    for index, word in enumerate(words):
        ids = [encoded["input_ids"][k] for k, w in enumerate(word_ids) if w == index]
        assert tokenizer.decode(ids).strip() == word

    plain = load_tokenizer(folder, config, "question-answering")
    context = "the weather was fine alice lives in rome ."
    qa = plain("where does alice live ?", context, return_offsets_mapping=True)
    start_char = context.index("rome")
    first, last = answer_token_positions(qa["offset_mapping"], qa.sequence_ids(), start_char, start_char + 4)
    assert 0 < first <= last and qa.sequence_ids()[first] == 1
    span = trim_span(context, qa["offset_mapping"][first][0], qa["offset_mapping"][last][1])
    assert context[slice(*span)] == "rome"  # the answer's characters map to context tokens and back

    assert tokenizer.mask_token is not None and tokenizer.mask_token_id not in (None, tokenizer.unk_token_id)
    assert tokenizer.convert_ids_to_tokens(tokenizer.mask_token_id) == tokenizer.mask_token
    assert not model_uses_token_type_ids(tokenizer, config)


# --- LoRA ----------------------------------------------------------------------------------------------

def _tiny_config(family: str):
    from transformers import AutoConfig

    sizes = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48)
    if family == "distilbert":
        sizes = dict(vocab_size=120, dim=32, n_layers=2, n_heads=2, hidden_dim=48)
    if family == "albert":
        sizes["embedding_size"] = 16
    if family == "modernbert":
        sizes.update(global_attn_every_n_layers=2, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                     sep_token_id=2)
    return AutoConfig.for_model(family, **sizes)


_TASK_CLASSES = {"text-classification": "AutoModelForSequenceClassification",
                 "token-classification": "AutoModelForTokenClassification",
                 "question-answering": "AutoModelForQuestionAnswering", "masked-lm": "AutoModelForMaskedLM"}


@pytest.mark.parametrize("family", sorted({m.family for m in catalogue.list_models()}))
@pytest.mark.parametrize("task", list(_TASK_CLASSES))
def test_every_catalogue_architecture_gets_adapters_on_real_modules(family, task):
    import transformers

    config = _tiny_config(family)
    model = getattr(transformers, _TASK_CLASSES[task]).from_config(config)
    layers = getattr(config, "num_hidden_layers", getattr(config, "n_layers", 0))
    targets = lora.target_modules(family)
    wrapped = lora.wrap(model, task, family, r=4, alpha=8, dropout=0.0)
    adapted = [name for name, module in wrapped.named_modules() if hasattr(module, "lora_A") and module.lora_A]
    per_target = {t: [n for n in adapted if n.endswith("." + t)] for t in targets}
    # ALBERT shares one layer across the stack: its adapters exist once
    expected = 1 if family == "albert" else layers
    assert all(len(names) == expected for names in per_target.values()), per_target
    heads = lora.present_modules(model, lora.head_modules(task, family))
    assert heads, f"no head of {family}/{task} is trained in full"
    trainable = {n for n, p in wrapped.named_parameters() if p.requires_grad}
    assert all(any(f".{h}." in n or n.startswith(h + ".") for n in trainable) for h in heads)
    assert all("lora_" in n or "modules_to_save" in n for n in trainable)


def test_lora_target_that_names_no_module_is_a_clear_error():
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_config(_tiny_config("modernbert"))
    with pytest.raises(TrainingError, match="query"):
        lora.wrap(model, "text-classification", "modernbert", 4, 8, 0.0, targets=["query", "Wqkv"])


# --- attention path ------------------------------------------------------------------------------------

def test_attention_chooser():
    yes, no = (lambda: True), (lambda: False)
    path = choose_attention("modernbert", "token-classification", "cuda", True, flash_available=yes)
    assert (path.implementation, path.padding_free) == ("flash_attention_2", True)
    assert choose_attention("modernbert", "masked-lm", "cuda:1", True, flash_available=yes).padding_free
    path = choose_attention("modernbert", "text-classification", "cuda", True, flash_available=yes)
    assert (path.implementation, path.padding_free) == ("flash_attention_2", False)
    for args, flash in ((("modernbert", "masked-lm", "cuda", True), no), (("modernbert", "masked-lm", "cpu", True), yes),
                        (("modernbert", "masked-lm", "cuda", False), yes), (("bert", "masked-lm", "cuda", True), yes)):
        path = choose_attention(*args, flash_available=flash)
        assert (path.implementation, path.padding_free) == ("sdpa", False) and path.reason
    assert choose_attention("modernbert", "masked-lm", "cpu", False, supports_sdpa=False).implementation == "eager"
    record = choose_attention("modernbert", "masked-lm", "cuda", True, flash_available=yes).as_metrics()
    assert record["attention"] == "flash_attention_2" and record["padding"] == "free"


def test_flatten_batch_keeps_real_tokens_and_restarts_positions():
    batch = {"input_ids": torch.tensor([[1, 5, 6, 2], [1, 7, 2, 0]]),
             "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
             "labels": torch.tensor([[-100, 3, 4, -100], [9, 8, -100, -100]])}
    flat = flatten_batch(batch)
    assert "attention_mask" not in flat
    assert flat["input_ids"].tolist() == [[1, 5, 6, 2, 1, 7, 2]]
    assert flat["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2]]
    assert flat["labels"].tolist() == [[-100, 3, 4, -100, -100, 8, -100]]  # no loss across the boundary


def test_padding_free_collator_pads_while_evaluating():
    def inner(features):
        return {"input_ids": torch.tensor([[1, 2], [3, 0]]), "attention_mask": torch.tensor([[1, 1], [1, 0]])}

    collator = PaddingFreeCollator(inner)
    assert collator([])["input_ids"].shape == (1, 3)
    with collator.padded():
        assert collator([])["input_ids"].shape == (2, 2)
    assert collator.flatten


# --- every task, every architecture, end to end ----------------------------------------------------------

def _run(task, folder, tmp_path, train, validation, lora_on=False, **train_kw):
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, LoraSpec, RunSpec, TrainSpec
    from jobs.training.engine import run_training
    from tests.tiny_models import write_jsonl

    tmp_path.mkdir(parents=True, exist_ok=True)
    train_kw.setdefault("learning_rate", 2e-3)
    train_kw.setdefault("epochs", 2)
    train_kw.setdefault("batch_size", 8)
    spec = RunSpec(task=task, model=str(folder),
                   data=DataSpec(train_path=write_jsonl(tmp_path / "train.jsonl", train).as_posix(),
                                 validation_path=write_jsonl(tmp_path / "validation.jsonl", validation).as_posix()),
                   train=TrainSpec(**train_kw), lora=LoraSpec(enabled=lora_on))
    reporter = RecordingReporter()
    metrics = run_training(spec, tmp_path / "run", reporter)
    assert metrics["attention"] in ("sdpa", "eager") and metrics["padding"] == "dynamic"  # CPU path
    assert reporter.facts["attention"] == metrics["attention"]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["attention"] == metrics["attention"]
    return metrics




def _pairs(folder, tmp_path, family):
    from transformers import pipeline

    from tests.tiny_models import classification_records

    metrics = _run("text-classification", folder, tmp_path, classification_records(16, pair=True),
                   classification_records(8, 1, pair=True), epochs=1)
    assert 0.0 <= metrics["accuracy"] <= 1.0
    classify = pipeline("text-classification", model=str(tmp_path / "run" / "model"))
    out = classify({"text": "a joy to watch", "text_pair": "boring and dull"})
    assert (out[0] if isinstance(out, list) else out)["label"] in ("pos", "neg")


def _ner(folder, tmp_path, family):
    from tests.tiny_models import ner_records

    metrics = _run("token-classification", folder, tmp_path, ner_records(32), ner_records(8, 1), epochs=2)
    assert {"entity_f1", "token_accuracy"} <= set(metrics)
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(len(r["predicted"]) == len(r["tokens"]) for r in rows)


def _qa(folder, tmp_path, family):
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from tests.tiny_models import qa_records

    metrics = _run("question-answering", folder, tmp_path, qa_records(16), qa_records(8, 1), max_length=48, epochs=1)
    assert 0 <= metrics["exact_match"] <= metrics["f1"] <= 100
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(r["predicted"] == r["predicted"].strip() for r in rows)
    model_dir = str(tmp_path / "run" / "model")
    model, tokenizer = AutoModelForQuestionAnswering.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    out = model(**tokenizer("where does alice live ?", "alice lives in rome .", return_tensors="pt"))
    assert out.start_logits.shape == out.end_logits.shape


def _mlm(folder, tmp_path, family):
    from transformers import pipeline

    from tests.tiny_models import documents

    metrics = _run("masked-lm", folder, tmp_path, documents(24), documents(8, 1), epochs=2)
    assert metrics["perplexity"] < metrics["perplexity_before"]
    fill = pipeline("fill-mask", model=str(tmp_path / "run" / "model"))
    assert len(fill(f"the cat sat on the {fill.tokenizer.mask_token} .")) > 0


def _lora(folder, tmp_path, family):
    from tests.tiny_models import classification_records

    metrics = _run("text-classification", folder, tmp_path, classification_records(16), classification_records(8, 1),
                   lora_on=True, epochs=1)
    assert metrics["trainable_parameters"] < metrics["total_parameters"]
    adapter = json.loads((tmp_path / "run" / "adapter" / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) == set(lora.target_modules(family))
    assert set(adapter["modules_to_save"]) == set(lora.head_modules("text-classification", family))


_CASES = {"text-pairs": _pairs, "ner": _ner, "qa": _qa, "masked-lm": _mlm, "lora": _lora}


@pytest.mark.e2e
@pytest.mark.parametrize("case", list(_CASES))
@pytest.mark.parametrize("family", list(TINY_ARCHITECTURES))
def test_every_task_and_lora_trains_end_to_end(tiny_folders, family, case, tmp_path):
    _CASES[case](tiny_folders[family], tmp_path, family)


def test_qa_span_is_trimmed_of_the_space_byte_level_offsets_include():
    context = "alice lives in rome ."
    assert trim_span(context, 14, 19) == (15, 19)  # " rome" as a Ġrome token covers the space before it
    assert trim_span(context, 15, 20) == (15, 19)
    assert trim_span("   ", 0, 3) == (3, 3)
