"""Tiny models and data for the engine's end-to-end tests: built from a config, no downloads."""
from __future__ import annotations

import json
import random
from pathlib import Path

from jobs.training.catalogue import packaged_model_path


def tiny_bert(folder: Path, **overrides) -> Path:
    """A 2-layer BERT (hidden 32) with the packaged MiniLM tokenizer, saved like any local model.

    ``overrides`` are BertConfig fields (``hidden_dropout_prob=0.0`` for a run that must be
    reproducible across processes)."""
    from transformers import AutoTokenizer, BertConfig, BertForPreTraining

    if (folder / "config.json").is_file():
        return folder
    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, **overrides)
    BertForPreTraining(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_sentence_model(folder: Path) -> Path:
    """``tiny_bert`` as a sentence-transformers folder (mean pooling, normalised), as SetFit takes it."""
    from sentence_transformers import SentenceTransformer, models

    if (folder / "modules.json").is_file():
        return folder
    body = models.Transformer(str(tiny_bert(folder.parent / (folder.name + "-bert"))), max_seq_length=64)
    dimension = getattr(body, "get_embedding_dimension", None) or body.get_word_embedding_dimension
    pooling = models.Pooling(dimension(), pooling_mode="mean")
    SentenceTransformer(modules=[body, pooling, models.Normalize()]).save(str(folder))
    return folder


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


_POS = ["great film loved it", "wonderful acting and story", "a joy to watch", "brilliant and moving"]
_NEG = ["terrible film hated it", "awful acting and story", "a pain to watch", "boring and dull"]


def classification_records(n: int, seed: int = 0, pair: bool = False, multi_label: bool = False) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        positive = i % 2 == 0
        text = rng.choice(_POS if positive else _NEG)
        record = {"text": text, "label": "pos" if positive else "neg"}
        if pair:
            record["text_pair"] = rng.choice(_POS + _NEG)
        if multi_label:
            record["label"] = ["pos"] if positive else (["neg", "long"] if i % 4 == 1 else ["neg"])
        out.append(record)
    return out


def ner_records(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    names, places = ["alice", "bob", "carol"], ["paris", "london", "new york"]
    out = []
    for _ in range(n):
        name, place = rng.choice(names), rng.choice(places)
        tokens = [name, "flew", "to"] + place.split()
        tags = ["B-PER", "O", "O"] + ["B-LOC"] + ["I-LOC"] * (len(place.split()) - 1)
        out.append({"tokens": tokens, "tags": tags})
    return out


def qa_records(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        city = rng.choice(["paris", "london", "berlin", "rome"])
        filler = " ".join(rng.choice(["the", "weather", "was", "fine", "today"]) for _ in range(rng.randint(5, 40)))
        context = f"{filler} alice lives in {city} . {filler}"
        start = context.index(f"in {city}") + 3
        out.append({"id": f"q{i}", "title": "t", "context": context, "question": "where does alice live ?",
                    "answers": {"text": [city], "answer_start": [start]}})
    return out


def documents(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    words = "the cat sat on a mat while dogs ran in parks and birds sang songs".split()
    return [{"text": " ".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))) + "."
                             for _ in range(rng.randint(2, 5)))} for _ in range(n)]


# --- today's architectures: tiny configs and tokenizers built locally --------------------------------
#
# Each tokenizer is built the way its family's real checkpoint ships one: DeBERTa-v3 and XLM-R as a bare
# SentencePiece model (the fast tokenizer is converted from it at load time, which needs sentencepiece
# and protobuf), ModernBERT as a byte-level BPE tokenizer.json. Vocabularies are trained on the words of
# the test records below (plus some non-English text for the multilingual ones) in well under a second.

_EXTRA_TEXT = ["où est la gare ? die katze schläft . el perro corre en el parque .",
               "what is the weather like today ? the movie was long but fine ."]


def corpus_lines() -> list[str]:
    """Every text the tiny-model tests feed a tokenizer, so their words are in the vocabulary."""
    lines = [r["text"] for r in classification_records(16)] + _POS + _NEG
    lines += [" ".join(r["tokens"]) for r in ner_records(16)]
    lines += [r["context"] + " " + r["question"] for r in qa_records(16)]
    lines += [r["text"] for r in documents(16)] + _EXTRA_TEXT
    lines += ["win cash prize now call", "see you soon", "alice lives in rome ."]
    return lines


def _train_sentencepiece(prefix: Path, vocab_size: int, **special) -> Path:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus_lines() * 4), model_prefix=str(prefix),
                                   vocab_size=vocab_size, model_type="unigram", character_coverage=1.0,
                                   hard_vocab_limit=False, num_threads=1, minloglevel=2, **special)
    return prefix.with_suffix(".model")


def _write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=1))


def deberta_v3_tokenizer(folder: Path) -> Path:
    """A DeBERTa-v3-style folder: spm.model + tokenizer_config.json only, as microsoft/deberta-v3-* ships."""
    folder.mkdir(parents=True, exist_ok=True)
    model = _train_sentencepiece(folder / "spm", 300, pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]",
                                 bos_piece="[CLS]", eos_piece="[SEP]", unk_piece="[UNK]",
                                 user_defined_symbols=["[MASK]"])
    assert model.name == "spm.model"
    _write_json(folder / "tokenizer_config.json", {"tokenizer_class": "DebertaV2Tokenizer", "do_lower_case": False,
                                                   "vocab_type": "spm", "split_by_punct": False,
                                                   "bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "[UNK]",
                                                   "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                                                   "mask_token": "[MASK]"})
    return folder


def xlm_roberta_tokenizer(folder: Path) -> Path:
    """An XLM-R-style folder: sentencepiece.bpe.model (fairseq ids <s> <pad> </s> <unk>, <mask> last)."""
    folder.mkdir(parents=True, exist_ok=True)
    _train_sentencepiece(folder / "sentencepiece.bpe", 300)  # sentencepiece's own ids: <unk> 0, <s> 1, </s> 2
    _write_json(folder / "tokenizer_config.json", {"tokenizer_class": "XLMRobertaTokenizer", "bos_token": "<s>",
                                                   "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
                                                   "unk_token": "<unk>", "pad_token": "<pad>",
                                                   "mask_token": "<mask>"})
    return folder


def modernbert_tokenizer(folder: Path) -> Path:
    """A ModernBERT-style tokenizer.json: GPT-style byte-level BPE, [CLS] text [SEP], no token_type_ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus_lines(), trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=True),
        processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                      special_tokens=[("[CLS]", cls), ("[SEP]", sep)])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]",
                                   model_input_names=["input_ids", "attention_mask"])
    fast.save_pretrained(folder)
    return folder


def _vocab_size(folder: Path) -> int:
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(str(folder)))


def tiny_modernbert(folder: Path) -> Path:
    """A 2-layer ModernBERT (hidden 32, one local and one global attention layer) with a byte-level BPE."""
    from transformers import AutoTokenizer, ModernBertConfig, ModernBertForMaskedLM

    if (folder / "config.json").is_file():
        return folder
    modernbert_tokenizer(folder)
    tok = AutoTokenizer.from_pretrained(str(folder))
    config = ModernBertConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                              num_attention_heads=2, max_position_embeddings=256, global_attn_every_n_layers=2,
                              local_attention=16, pad_token_id=tok.pad_token_id, cls_token_id=tok.cls_token_id,
                              sep_token_id=tok.sep_token_id, bos_token_id=tok.cls_token_id,
                              eos_token_id=tok.sep_token_id)
    ModernBertForMaskedLM(config).save_pretrained(folder)
    return folder


def tiny_deberta_v3(folder: Path) -> Path:
    """A 2-layer DeBERTa-v3 (relative attention, no absolute positions, type_vocab_size 0) with an spm.model."""
    from transformers import DebertaV2Config, DebertaV2ForMaskedLM

    if (folder / "config.json").is_file():
        return folder
    deberta_v3_tokenizer(folder)
    config = DebertaV2Config(vocab_size=_vocab_size(folder), hidden_size=32, intermediate_size=64,
                             num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=128,
                             relative_attention=True, position_buckets=32, pos_att_type=["p2c", "c2p"],
                             norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False,
                             type_vocab_size=0, pad_token_id=0)
    DebertaV2ForMaskedLM(config).save_pretrained(folder)
    return folder


def tiny_xlm_roberta(folder: Path) -> Path:
    """A 2-layer XLM-RoBERTa (type_vocab_size 1, positions offset by the padding index) with a SentencePiece model."""
    from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaForMaskedLM

    if (folder / "config.json").is_file():
        return folder
    xlm_roberta_tokenizer(folder)
    tok = AutoTokenizer.from_pretrained(str(folder))
    config = XLMRobertaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, max_position_embeddings=130, type_vocab_size=1,
                              pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                              eos_token_id=tok.eos_token_id)
    XLMRobertaForMaskedLM(config).save_pretrained(folder)
    return folder


TINY_ARCHITECTURES = {"modernbert": tiny_modernbert, "deberta-v2": tiny_deberta_v3, "xlm-roberta": tiny_xlm_roberta}


_FILLERS = ("today", "again", "really", "with friends", "yesterday", "at home", "last night", "twice", "on tv",
            "in paris", "honestly", "so far", "this week", "once more", "at last", "for sure")


def distinct(records: list[dict]) -> list[dict]:
    """The import drops duplicate texts: give each record its own pair of neutral words (drawn at
    random, so nothing about them goes with a label, flipped or not)."""
    pairs = random.Random(7).sample([(a, b) for a in _FILLERS for b in _FILLERS], len(records))
    for record, (a, b) in zip(records, pairs):
        if "text" in record:
            record["text"] = f"{record['text']} {a} {b}"
        else:
            extra = f"{a} {b}".split()
            record["tokens"] = record["tokens"] + extra
            record["tags"] = record["tags"] + ["O"] * len(extra)
    return records
