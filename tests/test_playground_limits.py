"""What a playground prediction may cost, without a server: slots, per-address rates, lengths, passes, attention."""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from tests import playground_support as ps
from workbench.playground import predictors as P
from workbench.playground import service
from workbench.playground.limits import Busy, ForwardSlots, RateLimit, RateLimited


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Config-built, untrained models (no training: shapes and memory paths only)."""
    import transformers as tf

    tok = ps.tokenizer()
    root = tmp_path_factory.mktemp("limit-models")
    out = {}
    for name, model in {"cls": tf.BertForSequenceClassification(ps.tiny_config(tok, num_labels=2)),
                        "mlm": tf.BertForMaskedLM(ps.tiny_config(tok)),
                        "qa": tf.BertForQuestionAnswering(ps.tiny_config(tok))}.items():
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out[name] = root / name
    return out


# ------------------------------------------------------------------ forward-pass slots

def _occupy(slots, release):
    """A thread whose prediction holds a slot of ``slots`` until ``release`` is set."""
    thread = threading.Thread(target=slots.run, args=(release.wait, 5))
    thread.start()
    return thread


def _until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition()


def test_slots_refuse_at_once_beyond_the_queue():
    slots = ForwardSlots(concurrency=1, queue=1, max_wait_s=60)
    release = threading.Event()
    threads = [_occupy(slots, release)]
    _until(lambda: slots.running == 1)
    threads.append(_occupy(slots, release))
    _until(lambda: slots.waiting == 1)
    started = time.monotonic()
    with pytest.raises(Busy, match="1 predictions are running and 1 waiting") as refused:
        slots.run(lambda: "never runs")
    # refused at once, not after max_wait_s (the bound leaves room for a thread switch on a loaded machine)
    assert time.monotonic() - started < 10
    assert refused.value.retry_after >= 1
    release.set()
    for thread in threads:
        thread.join(5)
    assert slots.run(lambda: "ran") == "ran" and slots.running == 0 and slots.waiting == 0


def test_slots_give_up_after_the_longest_wait_and_run_on_their_own_threads():
    slots = ForwardSlots(concurrency=1, queue=4, max_wait_s=0.2)
    release = threading.Event()
    holder = _occupy(slots, release)
    _until(lambda: slots.running == 1)
    with pytest.raises(Busy, match="within 0.2 s"):
        slots.run(lambda: "never runs")
    assert slots.waiting == 0
    release.set()
    holder.join(5)
    names = {slots.run(lambda: threading.current_thread().name) for _ in range(5)}
    assert len(names) == 1 and names.pop().startswith("playground-forward")  # one arena's worth of threads
    with pytest.raises(ZeroDivisionError):  # a prediction's own error reaches the caller
        slots.run(lambda: 1 / 0)


def test_retry_after_grows_with_a_slow_running_prediction():
    now = [100.0]
    slots = ForwardSlots(concurrency=1, queue=0, clock=lambda: now[0])
    release = threading.Event()
    holder = _occupy(slots, release)
    _until(lambda: slots.running == 1)
    now[0] += 42.0
    with pytest.raises(Busy) as refused:
        slots.run(lambda: "never runs")
    release.set()
    holder.join(5)
    assert refused.value.retry_after == 42


# ------------------------------------------------------------------ per-address rate

def test_rate_limit_per_address_refills_and_says_when():
    now = [0.0]
    rate = RateLimit(per_minute=3, clock=lambda: now[0])
    for _ in range(3):
        rate.take("10.0.0.1")
    with pytest.raises(RateLimited, match="limit is 3 a minute") as refused:
        rate.take("10.0.0.1")
    assert refused.value.retry_after == 20  # one prediction comes back every 60/3 s
    rate.take("10.0.0.2")  # another address has its own bucket
    now[0] += 20.0
    rate.take("10.0.0.1")
    with pytest.raises(RateLimited):
        rate.take("10.0.0.1")
    RateLimit(per_minute=0).take("anyone")  # 0: no limit


def test_rate_limit_keeps_a_bounded_number_of_addresses():
    now = [0.0]
    rate = RateLimit(per_minute=2, max_keys=10, clock=lambda: now[0])
    for i in range(100):
        rate.take(f"10.0.{i}.1")
        now[0] += 0.1
    assert len(rate) <= 11


# ------------------------------------------------------------------ what one prediction holds

def test_predictions_use_sdpa_and_the_runs_trained_length(wb, tiny):
    """Eager attention held layers x heads x tokens x tokens per input (1.8 GB for 64 x 512): predictions use SDPA,
    and cut inputs at the run's training length, not at 512."""
    from workbench.playground.runtime import Playgrounds

    run_id = ps.add_run(wb, "token-classification", tiny["cls"])
    slug = service.publish(wb, run_id).slug
    target = service.get_target(wb, slug)
    (target.output_dir / "metrics.json").write_text(json.dumps({"hyperparameters": {"max_length": 24}}))
    runtime = Playgrounds(wb)
    predictor = runtime.predictor(target)
    assert predictor.max_length == 24
    assert predictor.model.config._attn_implementation == "sdpa"
    assert predictor.encode(["word " * 300])["input_ids"].shape == (1, 24)
    assert runtime.predict(slug, "word " * 300)["predictions"][0]["text"].startswith("word")


def test_spec_length_applies_when_metrics_say_nothing(wb, tiny):
    run_id = ps.add_run(wb, "text-classification", tiny["cls"])
    with wb.db.session() as session:
        from storage.models import Run

        run = session.get(Run, run_id)
        run.spec = {**run.spec, "train": {"max_length": 40, "doc_stride": 10}}
    target = service.get_target(wb, service.publish(wb, run_id).slug)
    assert service.trained_lengths(wb, target) == (40, 10)
    (target.output_dir / "metrics.json").write_text(json.dumps({"hyperparameters": {"max_length": 32}}))
    assert service.trained_lengths(wb, target) == (32, 10)


def test_a_request_over_the_token_cap_is_refused(tiny):
    predictor = P.Predictor(tiny["cls"], P.TEXT, max_length=64, max_tokens=256)
    assert len(predictor.predict([{"text": "word " * 100}] * 4)) == 4  # 4 x 64 = 256 tokens: fits
    with pytest.raises(P.InvalidInput, match=r"5 sequence\(s\) of 64 tokens .* the limit is 256 tokens"):
        predictor.predict([{"text": "word " * 100}] * 5)


def test_a_prediction_counts_the_model_tokens_it_ran(tiny):
    """What a client's token budget is charged: rows x padded length of every pass, QA windows included."""
    predictor = P.Predictor(tiny["cls"], P.TEXT, max_length=64)
    _, tokens = predictor.predict_counted([{"text": "word " * 100}, {"text": "short"}])
    assert tokens == 2 * 64  # the short text is padded to the long one's truncated length
    _, tokens = predictor.predict_counted([{"text": "short"}])
    assert 2 < tokens < 10  # counted afresh for each prediction
    qa = P.Predictor(tiny["qa"], P.QA, max_length=32, doc_stride=8)
    _, tokens = qa.predict_counted([{"question": "who?", "context": "word " * 60}])
    assert tokens % 32 == 0 and tokens >= 3 * 32  # several windows of 32 tokens


def test_a_question_that_leaves_no_room_for_the_context_is_refused(tiny):
    """The tokenizer used to abort (a Rust panic, HTTP 500) when the question filled the window."""
    predictor = P.Predictor(tiny["qa"], P.QA, max_length=64)
    fine = predictor.predict([{"question": "where is it?", "context": "it is in paris. " * 100}])
    assert fine[0]["end"] <= len("it is in paris. " * 100)
    with pytest.raises(P.InvalidInput, match="inputs\\[1\\]: the question has 50 tokens; this model reads at most "
                                             "39 beside its context"):
        predictor.predict([{"question": "where?", "context": "here"}, {"question": "what " * 50, "context": "x " * 100}])


def test_forward_passes_split_a_batch_and_give_the_same_answers(tiny, monkeypatch):
    texts = [{"text": f"the cat [MASK] on mat number {i}."} for i in range(6)]
    predictor = P.Predictor(tiny["mlm"], P.MLM)
    whole = predictor.predict(texts)
    enc = predictor.encode([predictor.model_text(t["text"]) for t in texts])
    assert len(list(predictor.passes(enc))) == 1
    # One row per pass: a masked LM's vocabulary-wide logits of a pass are reduced before the next is run.
    monkeypatch.setattr("jobs.evaluation.postprocess.PASS_FLOATS", 1)  # the budget lives a floor down (jobs.evaluation.postprocess)
    assert [part for part, _ in predictor.passes(enc)] == [slice(i, i + 1) for i in range(6)]
    split = predictor.predict(texts)
    for a, b in zip(whole, split):
        assert [c["token"] for c in a["masks"][0]["candidates"]] == [c["token"] for c in b["masks"][0]["candidates"]]
        assert np.allclose([c["score"] for c in a["masks"][0]["candidates"]],
                           [c["score"] for c in b["masks"][0]["candidates"]], atol=1e-5)


def test_rows_per_pass_follows_length_and_width():
    assert P.rows_per_pass(512, 4 * 1536 + 2) == 10  # MiniLM classifier at 512 tokens
    assert P.rows_per_pass(128, 4 * 1536 + 30522) == 7  # MiniLM masked LM: the vocabulary dominates
    assert P.rows_per_pass(512, 10**9) == 1


def test_masks_per_text_are_bounded():
    with pytest.raises(P.InvalidInput, match="6 \\[MASK\\]s; the limit is 5"):
        P.normalize_inputs(P.MLM, "a [MASK] " * 6)


# ------------------------------------------------------------------ attention maps

def test_attention_maps_come_from_an_eager_twin_sharing_the_weights(tiny):
    from workbench.playground.attention import attention_maps

    predictor = P.Predictor(tiny["cls"], P.TEXT)
    maps = attention_maps(predictor, "the quick brown fox")
    assert maps.weights.shape[:2] == (2, 2) and np.allclose(maps.weights.sum(-1), 1.0, atol=1e-4)
    twin = predictor.attention_model()
    assert twin is predictor.attention_model()  # made once
    assert twin.config._attn_implementation == "eager" and predictor.model.config._attn_implementation == "sdpa"
    shared = {p.data_ptr() for p in predictor.model.parameters()}
    assert {p.data_ptr() for p in twin.parameters()} == shared  # no second copy of the weights


def test_page_attention_checks_inputs_as_predict_does(wb, tiny):
    """The heat-map handler used to hand any text to the tokenizer and show the tokenizer's own message."""
    import gradio as gr

    from workbench.playground.page import build_playground
    from workbench.playground.runtime import Playgrounds

    slug = service.publish(wb, ps.add_run(wb, "text-classification", tiny["cls"])).slug
    blocks = build_playground(wb, slug, Playgrounds(wb))
    attention = next(f.fn for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == "attention")
    head_html, layer_html = attention(2, 1, "a fine film")
    assert "data:image/png;base64," in head_html and "data:image/png;base64," in layer_html
    for text, needle in (("bad \ud800 text", "lone surrogate"), ("x" * (P.MAX_CHARS + 1), "the limit is 20000"),
                         ("   ", "Type some text first.")):
        with pytest.raises(gr.Error) as refused:
            attention(2, 1, text)
        assert needle in str(refused.value.message)
