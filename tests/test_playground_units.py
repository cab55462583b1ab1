"""Playground pieces without a server: publishing, tokens, input checks, NER grouping, QA spans, LRU cache, attention."""
from __future__ import annotations

import hashlib
import json
import zipfile

import numpy as np
import pytest

from storage.models import FAILED, Playground, Run
from tests import playground_support as ps
from workbench.errors import ConfigError, InvalidState, ModelUnavailable, NotFound
from workbench.playground import predictors as P
from workbench.playground import service
from workbench.playground.cache import ModelCache


# ------------------------------------------------------------------ tiny untrained models (fast: no training)

@pytest.fixture(scope="module")
def random_models(tmp_path_factory):
    """Config-built, untrained models: enough for shapes, caching and publishing."""
    import transformers as tf

    tok = ps.tokenizer()
    root = tmp_path_factory.mktemp("random-models")
    out = {}
    for name, model in {
        "cls": tf.BertForSequenceClassification(ps.tiny_config(tok, id2label={0: "neg", 1: "pos"},
                                                               label2id={"neg": 0, "pos": 1})),
        "cls2": tf.BertForSequenceClassification(ps.tiny_config(tok, num_labels=3)),
        "cls3": tf.BertForSequenceClassification(ps.tiny_config(tok, num_labels=4)),
    }.items():
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out[name] = root / name
    return out


# ------------------------------------------------------------------ service

def test_publish_stores_only_the_token_hash(wb, random_models):
    run_id = ps.add_run(wb, "text-classification", random_models["cls"], name="Spam filter v2!")
    info = service.publish(wb, run_id, token="s3cret-token")
    assert info.token == "s3cret-token" and info.has_token
    assert info.slug.startswith(f"spam-filter-v2-{run_id}-") and info.url_path == f"/play/{info.slug}/"
    with wb.db.session() as session:
        row = session.query(Playground).filter_by(slug=info.slug).one()
        assert row.token_hash == hashlib.sha256(b"s3cret-token").hexdigest()
    listed = service.list_playgrounds(wb)
    assert [p.slug for p in listed] == [info.slug] and "token" not in listed[0].to_dict()

    target = service.get_target(wb, info.slug)
    service.check_token(target, "s3cret-token")
    with pytest.raises(service.AccessDenied):
        service.check_token(target, "wrong-token")
    with pytest.raises(service.AccessDenied):
        service.check_token(target, None)

    second = service.publish(wb, run_id)
    assert second.slug != info.slug and not second.has_token
    service.check_token(service.get_target(wb, second.slug), None)

    service.unpublish(wb, info.slug)
    with pytest.raises(NotFound):
        service.get_target(wb, info.slug)
    assert [p.slug for p in service.list_playgrounds(wb)] == [second.slug]
    assert len(service.list_playgrounds(wb, include_inactive=True)) == 2


def test_publish_refuses_unfinished_or_modelless_runs(wb, tmp_path):
    with pytest.raises(NotFound):
        service.publish(wb, 999)
    with wb.db.session() as session:
        failed = Run(task="text-classification", model="m", status=FAILED, spec={})
        empty = Run(task="text-classification", model="m", status="succeeded", spec={}, output_dir=str(tmp_path))
        session.add_all([failed, empty])
        session.flush()
        failed_id, empty_id = failed.id, empty.id
    with pytest.raises(InvalidState, match="failed"):
        service.publish(wb, failed_id)
    with pytest.raises(InvalidState, match="no saved model"):
        service.publish(wb, empty_id)
    with pytest.raises(NotFound):
        service.unpublish(wb, "nope")


def test_card_and_examples(wb, random_models):
    run_id = ps.add_run(wb, "text-pair-classification", random_models["cls"])
    slug = service.publish(wb, run_id).slug
    card = service.get_card(wb, slug)
    assert card["task"] == "text-classification" and card["base_model"] == "tiny-bert"
    assert card["dataset"] == "tiny text-pair-classification set" and card["validation_examples"] == 2
    assert card["metrics"] == {"accuracy": 0.75, "f1_macro": 0.7} and card["date"]
    examples = service.validation_examples(wb, slug)
    assert examples[0] == {"text": "a man is playing a guitar", "text_pair": "someone plays music"}
    assert P.resolve_kind("text-classification", examples) == P.PAIR


def test_examples_spread_over_the_gold_classes(wb, random_models):
    """Issue 25: the first validation lines were all spam, and so were all the page's example buttons."""
    run_id = ps.add_run(wb, "text-classification", random_models["cls"])
    slug = service.publish(wb, run_id).slug
    rows = ([{"text": f"spam {i}", "gold": "spam", "predicted": "spam"} for i in range(6)]
            + [{"text": f"ham {i}", "gold": "ham", "predicted": "spam"} for i in range(3)]
            + [{"text": "promo 0", "gold": "promo", "predicted": "spam"}])
    predictions = service.get_target(wb, slug).output_dir / "predictions.jsonl"
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    texts = [e["text"] for e in service.validation_examples(wb, slug)]
    assert texts == ["spam 0", "ham 0", "promo 0", "spam 1", "ham 1"]
    assert service.validation_examples(wb, slug) == service.validation_examples(wb, slug)  # deterministic
    assert [e["text"] for e in service.validation_examples(wb, slug, limit=3)] == ["spam 0", "ham 0", "promo 0"]


def test_gold_classes_of_records_and_the_round_robin():
    assert service.gold_class({"text": "x", "label": 3}) == "3"
    assert service.gold_class({"text": "x", "text_pair": "y", "gold": "entailment"}) == "entailment"
    # A multi-label set is one class, whatever the order of its labels.
    assert service.gold_class({"text": "x", "gold": ["b", "a"]}) == service.gold_class({"label": ["a", "b"]})
    # Tags, answers and plain documents carry no single class: their examples keep the file's order.
    assert service.gold_class({"tokens": ["a"], "gold": ["O"]}) is None
    assert service.gold_class({"question": "q", "context": "c", "gold": ["x"]}) is None
    assert service.gold_class({"text": "a document"}) is None
    plain = [(None, {"text": str(i)}) for i in range(8)]
    assert service.across_classes(plain, 5) == [{"text": str(i)} for i in range(5)]
    labelled = [("a", {"n": 1}), ("a", {"n": 2}), ("b", {"n": 3}), ("a", {"n": 4}), ("c", {"n": 5}), ("b", {"n": 6})]
    assert [e["n"] for e in service.across_classes(labelled, 10)] == [1, 3, 5, 2, 6, 4]
    assert service.across_classes([], 5) == []


def test_card_shows_scores_not_housekeeping():
    from workbench.playground.page import card_markdown

    recorded = {"accuracy": 0.98924, "f1_macro": 0.9712, "eval_and_checkpoint_seconds": 41.2, "peak_gpu_mb": 0.0,
                "trainable_parameters": 22714000.0, "train_samples_per_second": 51.0, "eval_loss": 0.04}
    assert service.card_metrics("text-classification", recorded) == {"accuracy": 0.98924, "f1_macro": 0.9712}
    # A task without headline metrics recorded keeps its scores, never timings, memory, sizes or losses.
    assert service.card_metrics("masked-lm", {"mlm_accuracy": 0.41, "peak_rss_mb": 900.0, "train_seconds": 3.0,
                                              "eval_loss": 2.0}) == {"mlm_accuracy": 0.41}
    card = {"title": "Reviews", "base_model": "all-MiniLM-L6-v2", "dataset": "sms", "train_examples": 1935,
            "validation_examples": 516, "date": "2026-12-01 12:00 UTC",
            "metrics": service.card_metrics("text-classification", recorded)}
    text = card_markdown(card, "text-classification")
    assert "accuracy **0.989** · macro F1 **0.971**" in text
    assert "|" not in text and "Text classification" in text and "1935 training, 516 validation" in text
    for housekeeping in ("seconds", "peak", "2.2714e+07", "parameters", "e+0"):
        assert housekeeping not in text


def test_model_zip_and_offline_push(wb, random_models, monkeypatch):
    from workbench.services import exports

    run_id = ps.add_run(wb, "text-classification", random_models["cls"])
    path = exports.model_zip(wb, run_id)
    with zipfile.ZipFile(path) as archive:
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(archive.namelist())
    assert exports.model_zip(wb, run_id) == path  # reused while the model is unchanged
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailable, match="needs internet"):
        service.push_to_hub(wb, run_id, "someone/model", token="hf_x")
    with pytest.raises(InvalidState, match="user-or-org"):
        service.push_to_hub(wb, run_id, "not a repo id")


# ------------------------------------------------------------------ input validation

@pytest.mark.parametrize("kind, raw, needle", [
    (P.TEXT, None, 'missing "inputs"'),
    (P.TEXT, 3, "expected a string"),
    (P.TEXT, "  ", "non-empty"),
    (P.TEXT, "x" * (P.MAX_CHARS + 1), "limit is"),
    (P.PAIR, "only one", 'expected {"text"'),
    (P.PAIR, {"text": "a"}, "'text_pair' must be a non-empty string"),
    (P.QA, {"question": "q"}, "'context'"),
    (P.QA, {"question": "q", "context": "c", "extra": 1}, "unknown field(s) extra"),
    (P.MLM, "no mask here", "has no [MASK]"),
    (P.TEXT, [], "empty"),
    (P.TEXT, ["a"] * (P.MAX_BATCH + 1), "limit is 64"),
    (P.TEXT, ["fine", 5], "inputs[1]"),
])
def test_bad_inputs_are_rejected_with_where_and_what(kind, raw, needle):
    with pytest.raises(P.InvalidInput) as info:
        P.normalize_inputs(kind, raw)
    assert needle in str(info.value)


@pytest.mark.parametrize("kind, body, needles", [
    (P.TEXT, b'{"text": "hello"}', ['"inputs" is missing', 'it has "text"',
                                     '"inputs" holds a string, or {"text": str}']),
    (P.QA, b'{"question": "q", "context": "c"}', ['"inputs" is missing', '{"question": str, "context": str}']),
    (P.PAIR, b"{}", ["the object is empty", '{"text": str, "text_pair": str}']),
    (P.MLM, b'{"input": "a [MASK]"}', ['"inputs" is missing', "[MASK]"]),
    (P.TEXT, b'["hello"]', ['must be a JSON object like {"inputs": ...}', "not a list", "or {\"text\": str}"]),
])
def test_a_predict_body_without_inputs_says_what_inputs_should_hold(kind, body, needles):
    """Issue 25: a JSON object without "inputs" was told it "must be a JSON object"."""
    from workbench.playground.api import parse_body

    with pytest.raises(ConfigError) as info:
        parse_body(body, kind)
    for needle in needles:
        assert needle in str(info.value)
    assert parse_body(b'{"inputs": "hi"}', kind) == "hi"


def test_inputs_single_batch_and_pairs():
    assert P.normalize_inputs(P.TEXT, "hi") == ([{"text": "hi"}], False)
    assert P.normalize_inputs(P.TEXT, ["a", {"text": "b"}]) == ([{"text": "a"}, {"text": "b"}], True)
    assert P.normalize_inputs(P.PAIR, ["a", "b"]) == ([{"text": "a", "text_pair": "b"}], False)
    items, batch = P.normalize_inputs(P.PAIR, [["a", "b"], {"text": "c", "text_pair": "d"}])
    assert batch and items[1] == {"text": "c", "text_pair": "d"}


# ------------------------------------------------------------------ NER grouping (hand-made offsets)

def test_ner_groups_subtokens_to_whole_words_and_spans():
    text = "Johnathan Smithers visited New York."
    words = P.split_words(text)
    assert [text[s:e] for s, e in words] == ["Johnathan", "Smithers", "visited", "New", "York", "."]
    # Sub-tokens as a WordPiece tokenizer cuts them: john ##athan smith ##ers visited new york .
    offsets = [(0, 0), (0, 4), (4, 9), (10, 15), (15, 18), (19, 26), (27, 30), (31, 35), (35, 36), (0, 0)]
    word_ids = P.word_ids_from_offsets(offsets, words)
    assert word_ids == [None, 0, 0, 1, 1, 2, 3, 4, 5, None]
    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    # Later sub-tokens carry nonsense labels: only the first sub-token of a word counts.
    token_labels = [0, 1, 3, 2, 0, 0, 3, 4, 0, 0]
    token_scores = [1.0, 0.9, 0.1, 0.8, 0.1, 0.99, 0.7, 0.6, 0.95, 1.0]
    per_word = P.word_labels(word_ids, token_labels, token_scores, len(words))
    labels = [(names[i], s) for i, s in per_word]
    entities = P.group_entities(text, words, labels)
    assert entities == [
        {"entity": "PER", "word": "Johnathan Smithers", "start": 0, "end": 18, "score": 0.85},
        {"entity": "LOC", "word": "New York", "start": 27, "end": 35, "score": 0.65},
    ]


def test_grouping_breaks_on_new_entity_and_handles_plain_pos_tags():
    text = "Paris London go"
    words = P.split_words(text)
    bio = [("B-LOC", 1.0), ("B-LOC", 1.0), ("O", 1.0)]
    assert [e["word"] for e in P.group_entities(text, words, bio)] == ["Paris", "London"]
    stray_i = [("I-LOC", 1.0), ("I-PER", 1.0), None]
    assert [(e["entity"], e["word"]) for e in P.group_entities(text, words, stray_i)] == [("LOC", "Paris"),
                                                                                          ("PER", "London")]
    pos = [("PROPN", 0.9), ("PROPN", 0.8), ("VERB", 0.7)]
    assert [(e["entity"], e["word"]) for e in P.group_entities(text, words, pos)] == [
        ("PROPN", "Paris"), ("PROPN", "London"), ("VERB", "go")]


def test_best_span_stays_in_context_forward_and_short():
    context_mask = np.array([0, 0, 0, 1, 1, 1, 1, 0])
    start = np.array([0, 9, 0, 1, 5, 0, 0, 9.0])  # the question token 1 and [SEP] 7 must be ignored
    end = np.array([0, 0, 0, 4, 0, 0, 3, 9.0])
    s, e, score, null = P.best_span(start, end, context_mask)
    assert (s, e) == (4, 6) and 0 < score <= 1 and null < score
    s, e, _, _ = P.best_span(start, end, context_mask, max_answer_tokens=1)
    assert s == e


# ------------------------------------------------------------------ cache

class Item:
    def __init__(self, mb):
        self.nbytes = mb * 2**20


def test_cache_evicts_least_recently_used():
    cache = ModelCache(memory_mb=10)
    loads = []

    def loader(key, mb):
        return lambda: loads.append(key) or Item(mb)

    cache.get("a", loader("a", 4))
    cache.get("b", loader("b", 4))
    cache.get("a", loader("a", 4))  # hit: a becomes most recent
    cache.get("c", loader("c", 4), estimate_bytes=4 * 2**20)
    assert cache.keys() == ["a", "c"] and loads == ["a", "b", "c"] and cache.evictions == 1
    with pytest.raises(ModelUnavailable, match="WORKBENCH_PLAYGROUND_MEMORY_MB"):
        cache.get("huge", loader("huge", 11), estimate_bytes=11 * 2**20)


def test_cache_loads_a_cold_model_once_under_concurrency():
    import threading
    import time

    cache = ModelCache(memory_mb=10)
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.2)
        return Item(1)

    threads = [threading.Thread(target=cache.get, args=("m", slow)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1


def test_runtime_evicts_real_models_under_a_tiny_bound(wb, random_models):
    from workbench.playground.runtime import Playgrounds

    slugs = [service.publish(wb, ps.add_run(wb, "text-classification", random_models[n])).slug
             for n in ("cls", "cls2", "cls3")]
    one_model_mb = 5  # each tiny model is ~4 MB of weights (mostly the 30522-token embedding)
    runtime = Playgrounds(wb, memory_mb=one_model_mb)
    for slug in slugs:
        assert runtime.predict(slug, "hello")["predictions"][0]["label"]
    assert runtime.cache.loads == 3 and runtime.cache.evictions == 2
    assert len(runtime.cache.keys()) == 1 and runtime.cache.used_bytes <= one_model_mb * 2**20
    assert runtime.cache.keys()[0][0] == str(service.get_target(wb, slugs[-1]).model_dir)
    runtime.predict(slugs[0], "hello")  # evicted models come back on demand
    assert runtime.cache.loads == 4 and len(runtime.cache.keys()) == 1


# ------------------------------------------------------------------ attention

def test_attention_shapes_and_overview_panels(random_models):
    from workbench.playground.attention import attention_maps, plot_head, plot_layer, to_html, to_png
    from workbench.playground.predictors import Predictor

    predictor = Predictor(random_models["cls"], P.TEXT)
    maps = attention_maps(predictor, "the quick brown fox")
    n = len(maps.tokens)
    assert maps.tokens[0] == "[CLS]" and maps.tokens[-1] == "[SEP]" and n == 6
    assert maps.weights.shape == (2, 2, n, n)  # layers x heads x tokens x tokens
    assert np.allclose(maps.weights.sum(-1), 1.0, atol=1e-4)  # each row is a distribution

    head = plot_head(maps, layer=1, head=0)
    assert [t.get_text() for t in head.axes[0].get_xticklabels()] == maps.tokens
    overview = plot_layer(maps, layer=0)
    assert len([ax for ax in overview.axes if ax.images]) == maps.heads
    png = to_png(overview)
    assert png.startswith(b"\x89PNG") and len(png) > 1000
    page = to_html(overview, 'layer 1 <all heads>', "layer1.png")
    assert page.count("data:image/png;base64,") == 2 and 'download="layer1.png"' in page
    assert "<all heads>" not in page and "&lt;all heads&gt;" in page
    with pytest.raises(ValueError, match="out of range"):
        plot_head(maps, layer=2, head=0)

    long_maps = attention_maps(predictor, "word " * 200, max_tokens=16)
    assert long_maps.weights.shape[-1] == 16


def test_masked_lm_examples_are_made_from_plain_documents():
    from workbench.playground.page import masked_example

    assert masked_example("The committee approved the proposal. Then more text.") == \
        "The [MASK] approved the proposal."
    assert masked_example("already has a [MASK] here") == "already has a [MASK] here"
    assert masked_example("a b c 1234") is None


def test_short_token_is_refused(wb, random_models):
    from workbench.errors import ConfigError

    run_id = ps.add_run(wb, "text-classification", random_models["cls"])
    with pytest.raises(ConfigError, match="at least 8"):
        service.publish(wb, run_id, token="short")


def test_the_server_starts_without_torch(tmp_path):
    """The web app, its playgrounds mounted and its serving threads configured, imports torch only when a model
    first loads: a server start took about 2 s of CPU and 180 MB more with it (4.2-4.8 s against 6.4-7.7 s to its
    first answer, 223 MB against 402 MB)."""
    import os
    import subprocess
    import sys

    code = ("import sys; from storage.context import open_workbench; from storage.settings import Settings; "
            "from workbench.server import create_app; from workbench.playground.cache import configure_serving_threads; "
            "wb = open_workbench(Settings.from_env({}, home=sys.argv[1])); create_app(wb, worker=False); "
            "configure_serving_threads(); assert 'torch' not in sys.modules, 'torch was imported'")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")})
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("omp, expected", [("", "max(1, os.cpu_count() // 4)"), ("2", "2")])
def test_serving_threads_leave_cores_to_training(omp, expected, random_models):
    """Run in a child process: torch's thread count is process-wide. The server chooses it at start without
    importing torch; torch takes it when the first model loads."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if omp:
        env["OMP_NUM_THREADS"] = omp
    code = ("import os, sys; from workbench.playground.cache import configure_serving_threads as c; "
            "n = c(); assert 'torch' not in sys.modules; "
            "from workbench.playground.predictors import Predictor; Predictor(sys.argv[1], 'text-classification'); "
            f"import torch; assert n == torch.get_num_threads() == {expected}, n")
    done = subprocess.run([sys.executable, "-c", code, str(random_models["cls"])], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
