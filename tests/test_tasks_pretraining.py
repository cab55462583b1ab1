"""The NSP pair builder and the [CLS] A [SEP] B [SEP] layout with segment ids."""
import numpy as np
import pytest

from jobs.tasks.pretraining import IS_NEXT, IS_RANDOM, build_nsp_pairs, split_sentences, tokenize_pairs
from workbench.errors import TrainingError


def _documents(n_docs=200, n_sentences=6):
    return [[f"doc{d} sentence{s}." for s in range(n_sentences)] for d in range(n_docs)]


def test_half_of_the_pairs_are_true_next_sentences():
    docs = _documents()
    pairs = build_nsp_pairs(docs, np.random.default_rng(0))
    assert len(pairs) == 200 * 5
    share_next = np.mean([label == IS_NEXT for _, _, label in pairs])
    assert abs(share_next - 0.5) < 0.05
    for a, b, label in pairs:
        doc_a, sent_a = a.split()
        doc_b, sent_b = b.split()
        if label == IS_NEXT:
            assert doc_a == doc_b and int(sent_b[8:-1]) == int(sent_a[8:-1]) + 1
        else:
            assert label == IS_RANDOM and doc_a != doc_b  # the random sentence comes from another document


def test_a_single_document_is_refused():
    with pytest.raises(TrainingError):
        build_nsp_pairs([["one.", "two."]], np.random.default_rng(0))


def test_sentence_splitter():
    assert split_sentences("First one. Second? Third!\nFourth") == ["First one.", "Second?", "Third!", "Fourth"]


def test_pairs_are_cls_a_sep_b_sep_with_segments():
    from transformers import AutoTokenizer

    from jobs.training.catalogue import packaged_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    encoded = tokenizer.convert_ids_to_tokens(
        tokenize_pairs({"a": ["the cat"], "b": ["a dog"], "label": [1]}, tokenizer, 32)["input_ids"][0])
    out = tokenize_pairs({"a": ["the cat"], "b": ["a dog"], "label": [1]}, tokenizer, 32)
    assert encoded == [tokenizer.cls_token, "the", "cat", tokenizer.sep_token, "a", "dog", tokenizer.sep_token]
    assert out["token_type_ids"][0] == [0, 0, 0, 0, 1, 1, 1]
    assert out["special_tokens_mask"][0] == [1, 0, 0, 1, 0, 0, 1]
    assert out["next_sentence_label"] == [1]
