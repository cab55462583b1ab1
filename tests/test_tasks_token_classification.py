"""Label alignment and word/entity mapping on hand-written word_ids."""
from jobs.tasks.token_classification import (IGNORE, align_labels, continuation_map, entity_spans, is_bio,
                                             word_metrics, word_predictions)


def test_first_subtoken_gets_the_label_and_specials_are_ignored():
    # [CLS] new york ##er rocks [SEP]  → words: 0 "new", 1 "yorker" (2 pieces), 2 "rocks"
    word_ids = [None, 0, 1, 1, 2, None]
    assert align_labels(word_ids, [1, 2, 0]) == [IGNORE, 1, 2, IGNORE, 0, IGNORE]


def test_label_all_subtokens_turns_b_into_i_on_continuations():
    names = ["O", "B-LOC", "I-LOC"]
    word_ids = [None, 0, 0, 0, 1, None]
    assert align_labels(word_ids, [1, 0], True, continuation_map(names)) == [IGNORE, 1, 2, 2, 0, IGNORE]


def test_repeated_word_id_after_a_gap_is_still_a_continuation_only_when_adjacent():
    # two different words with the same index cannot happen, but a pair of sequences restarts word ids
    word_ids = [None, 0, 1, None, 0, None]
    assert align_labels(word_ids, [3, 4]) == [IGNORE, 3, 4, IGNORE, 3, IGNORE]


def test_word_predictions_take_the_first_subtoken_and_leave_truncated_words_empty():
    word_ids = [None, 0, 0, 1, None]
    assert word_predictions(word_ids, [9, 5, 6, 7, 9], n_words=3) == [5, 7, None]


def test_bio_detection():
    assert is_bio(["O", "B-PER", "I-PER"])
    assert not is_bio(["NN", "VB", "O"])


def test_entity_spans_and_metrics():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    pred = [["B-PER", "I-PER", "O", "O"]]
    assert entity_spans(gold[0]) == [{"type": "PER", "start": 0, "end": 2}, {"type": "LOC", "start": 3, "end": 4}]
    metrics, tables = word_metrics(gold, pred, bio=True)
    assert metrics["token_accuracy"] == 0.75
    assert metrics["entity_precision"] == 1.0 and metrics["entity_recall"] == 0.5
    assert abs(metrics["entity_f1"] - 2 / 3) < 1e-9
    per = {row["entity"]: row for row in tables["per_entity"]}
    assert per["LOC"]["recall"] == 0.0 and per["PER"]["f1"] == 1.0


def test_pos_tags_report_token_accuracy_only():
    metrics, _ = word_metrics([["NN", "VB"]], [["NN", "NN"]], bio=False)
    assert metrics == {"token_accuracy": 0.5}


def test_a_validation_tag_unseen_in_training_is_left_out_of_the_loss():
    from transformers import AutoTokenizer

    from jobs.training.catalogue import packaged_model_path
    from jobs.tasks.token_classification import tokenize_batch

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    out = tokenize_batch({"tokens": [["the", "dog"]], "tags": [["at", "vb+ppo"]]}, tokenizer, 16, {"at": 0, "nn": 1},
                         False, {})
    assert out["labels"][0] == [IGNORE, 0, IGNORE, IGNORE]


def test_pos_tags_get_per_tag_scores_and_a_confusion_matrix():
    """A non-BIO tag set (POS) gets the same kind of tables as classification: nothing is {}."""
    gold = [["DT", "NN", "VB", "DT", "NN"], ["NN", "VB"]]
    pred = [["DT", "NN", "NN", "DT", "JJ"], ["NN", "VB"]]
    _, tables = word_metrics(gold, pred, bio=False)
    per = {row["tag"]: row for row in tables["per_tag"]}
    assert [row["tag"] for row in tables["per_tag"]][:1] == ["NN"]  # most frequent gold tag first
    assert per["NN"]["support"] == 3 and abs(per["NN"]["recall"] - 2 / 3) < 1e-9 and abs(per["NN"]["precision"] - 2 / 3) < 1e-9
    assert per["VB"]["recall"] == 0.5 and per["JJ"]["support"] == 0 and per["JJ"]["precision"] == 0.0
    matrix = tables["confusion_matrix"]
    index = {tag: i for i, tag in enumerate(matrix["labels"])}
    assert matrix["matrix"][index["VB"]][index["NN"]] == 1 and matrix["matrix"][index["NN"]][index["JJ"]] == 1
    assert sum(map(sum, matrix["matrix"])) == 7


def test_many_tags_give_the_most_frequent_ones_and_other():
    from jobs.tasks.token_classification import OTHER, TOP_TAGS, top_tags_confusion

    tags = [f"T{i:02d}" for i in range(30)]
    gold = [tag for i, tag in enumerate(tags) for _ in range(30 - i)]  # T00 most frequent
    pred = list(gold)
    pred[0] = "T29"  # a T00 word predicted as a rare tag
    matrix = top_tags_confusion(gold, pred)
    assert matrix["labels"] == tags[:TOP_TAGS] + [OTHER] and matrix["tags"] == 30
    assert matrix["matrix"][0][TOP_TAGS] == 1  # T00 → other
    assert sum(map(sum, matrix["matrix"])) == len(gold)
    assert sum(row[-1] for row in matrix["matrix"]) == sum(30 - i for i in range(TOP_TAGS, 30)) + 1
