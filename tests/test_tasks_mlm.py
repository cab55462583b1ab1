"""BERT masking proportions over 100k tokens, with the tokenizer's own special-tokens mask."""
import numpy as np
import pytest

from jobs.tasks.mlm import IGNORE, mask_tokens

VOCAB, MASK = 30522, 103


@pytest.fixture(scope="module")
def masked():
    from transformers import AutoTokenizer

    from jobs.training.catalogue import packaged_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    sentence = "the quick brown fox jumps over the lazy dog while it rains in the city of london today"
    encoded = tokenizer([sentence] * 6000, return_special_tokens_mask=True)
    ids = np.array(encoded["input_ids"])
    special = np.array(encoded["special_tokens_mask"])
    new_ids, labels = mask_tokens(ids, special, np.random.default_rng(0), len(tokenizer), tokenizer.mask_token_id)
    return tokenizer, ids, special, new_ids, labels


def test_fifteen_percent_of_ordinary_tokens_are_selected(masked):
    _, ids, special, _, labels = masked
    ordinary = special == 0
    assert ordinary.sum() >= 100_000
    share = (labels[ordinary] != IGNORE).mean()
    assert abs(share - 0.15) < 0.005


def test_special_tokens_are_never_selected_or_changed(masked):
    _, ids, special, new_ids, labels = masked
    assert (labels[special == 1] == IGNORE).all()
    assert (new_ids[special == 1] == ids[special == 1]).all()


def test_eighty_ten_ten(masked):
    tokenizer, ids, _, new_ids, labels = masked
    selected = labels != IGNORE
    masked_share = (new_ids[selected] == tokenizer.mask_token_id).mean()
    unchanged = (new_ids[selected] == ids[selected]).mean()
    random_share = 1 - masked_share - unchanged
    assert abs(masked_share - 0.8) < 0.01
    # a random replacement can draw the original token (1 in 30k), so "unchanged" is ~10% + a sliver
    assert abs(unchanged - 0.1) < 0.01 and abs(random_share - 0.1) < 0.01
    assert (labels[selected] == ids[selected]).all()  # the loss target is the original token


def test_padding_marked_special_is_never_selected():
    ids = np.array([[101, 5, 6, 102, 0, 0]] * 2000)
    special = np.array([[1, 0, 0, 1, 1, 1]] * 2000)
    _, labels = mask_tokens(ids, special, np.random.default_rng(1), VOCAB, MASK)
    assert (labels[:, [0, 3, 4, 5]] == IGNORE).all() and (labels[:, 1:3] != IGNORE).any()


def test_whole_word_masking_selects_all_pieces_of_a_word():
    # word 0 has three pieces, word 1 one piece
    ids = np.array([[101, 7, 8, 9, 10, 102]] * 3000)
    special = np.array([[1, 0, 0, 0, 0, 1]] * 3000)
    words = np.array([[-1, 0, 0, 0, 1, -1]] * 3000)
    _, labels = mask_tokens(ids, special, np.random.default_rng(2), VOCAB, MASK, 0.15, words)
    pieces = labels[:, 1:4] != IGNORE
    assert (pieces.all(axis=1) == pieces.any(axis=1)).all()
    assert abs(pieces.any(axis=1).mean() - 0.15) < 0.03
