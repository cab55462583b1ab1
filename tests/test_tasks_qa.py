"""QA feature labels, n-best span search and SQuAD scoring on hand-written offsets and logits."""
import numpy as np

from jobs.tasks.qa import answer_token_positions, best_spans, f1_score, normalize_answer, postprocess, squad_scores

# window: [CLS] q q [SEP] c0 c1 c2 c3 [SEP]; context "alice lives in paris" → char offsets below
OFFSETS = [None, None, None, None, (0, 5), (6, 11), (12, 14), (15, 20), None]
CONTEXT = "alice lives in paris"


def test_answer_inside_the_window_maps_to_its_tokens():
    seq = [None, 0, 0, None, 1, 1, 1, 1, None]
    raw = [(0, 0), (0, 1), (2, 3), (0, 0), (0, 5), (6, 11), (12, 14), (15, 20), (0, 0)]
    assert answer_token_positions(raw, seq, 15, 20) == (7, 7)
    assert answer_token_positions(raw, seq, 6, 14) == (5, 6)


def test_answer_outside_the_window_points_at_cls():
    seq = [None, 0, None, 1, 1, None]
    raw = [(0, 0), (0, 1), (0, 0), (30, 35), (36, 40), (0, 0)]
    assert answer_token_positions(raw, seq, 0, 5, cls_index=0) == (0, 0)
    assert answer_token_positions(raw, seq, None, None) == (0, 0)


def test_best_end_before_best_start_is_not_returned():
    start = np.array([0, 0, 0, 0, 1.0, 0, 0, 5.0, 0])  # best start: token 7 ("paris")
    end = np.array([0, 0, 0, 0, 0, 6.0, 0, 2.5, 0])  # best end: token 5, before the best start
    spans = best_spans(start, end, OFFSETS)
    score, s, e = spans[0]
    assert (s, e) == (7, 7) and score == 7.5  # 5 + 2.5 beats 1 + 6 (the span 4..5)
    assert all(e >= s for _, s, e in spans)
    # two independent argmaxes would give start 7, end 5: an invalid span


def test_spans_outside_the_context_and_too_long_are_rejected():
    start = np.array([9.0, 9.0, 0, 0, 0, 0, 0, 0, 0])  # question tokens score high
    end = np.array([9.0, 0, 9.0, 0, 0, 0, 0, 1.0, 0])
    spans = best_spans(start, end, OFFSETS, max_answer_length=2)
    assert all(OFFSETS[s] is not None and OFFSETS[e] is not None and e - s < 2 for _, s, e in spans)


def test_postprocess_picks_the_best_window_and_maps_back_to_characters():
    example = {"id": "q1", "context": CONTEXT}
    weak = np.zeros(9)
    strong_start, strong_end = np.zeros(9), np.zeros(9)
    strong_start[4], strong_end[5] = 3.0, 3.0
    answers = postprocess([example], ["q1", "q1"], [OFFSETS, OFFSETS], np.stack([weak, strong_start]),
                          np.stack([weak, strong_end]))
    assert answers["q1"]["text"] == "alice lives" and answers["q1"]["start"] == 0


def test_null_answer_wins_when_cls_scores_higher():
    start, end = np.zeros((1, 9)), np.zeros((1, 9))
    start[0, 0], end[0, 0] = 5.0, 5.0
    start[0, 7], end[0, 7] = 1.0, 1.0
    example = {"id": "q", "context": CONTEXT}
    assert postprocess([example], ["q"], [OFFSETS], start, end, allow_null=True)["q"]["text"] == ""
    assert postprocess([example], ["q"], [OFFSETS], start, end, allow_null=False)["q"]["text"] == "paris"


def test_official_normalisation_and_scores():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert f1_score("Denver Broncos", "the Denver Broncos team") == 2 * (1.0 * 2 / 3) / (1.0 + 2 / 3)
    assert squad_scores("broncos", ["Denver Broncos", "Broncos"]) == (1.0, 1.0)
    assert squad_scores("", []) == (1.0, 1.0)  # SQuAD v2: no answer predicted for an unanswerable question
    assert squad_scores("paris", []) == (0.0, 0.0)
