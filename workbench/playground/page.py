"""The playground page: model card, task widgets, attention heat-maps. Nothing of the workbench.

The page is a thin Gradio layer over ``Playgrounds`` (runtime.py). Access
control is not done here: every request to ``/play/<slug>/...`` has already
passed the token gate in mount.py before it reaches these Blocks.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Optional

import gradio as gr

from storage.context import Workbench
from workbench.errors import WorkbenchError
from workbench.playground import service
from workbench.playground.attention import plot_head, plot_layer, to_html
from workbench.playground.predictors import MASK_PLACEHOLDER, MLM, PAIR, QA, TOKENS
from workbench.playground.runtime import Playgrounds
from workbench.ui import format as fmt
from workbench.ui.edge import quiet_user_errors

log = logging.getLogger(__name__)

TASK_TITLES = {"text-classification": "Text classification", PAIR: "Text-pair classification",
               TOKENS: "Token classification (NER / POS)", QA: "Question answering",
               MLM: "Masked language model"}
_FIELD_LABELS = {"text": "Text", "text_pair": "Second text", "question": "Question", "context": "Context"}
_FIELDS = {PAIR: ("text", "text_pair"), QA: ("question", "context")}
COPY_LINK_JS = "() => { navigator.clipboard && navigator.clipboard.writeText(window.location.href); }"


_METRIC_NAMES = {"accuracy": "accuracy", "f1_macro": "macro F1", "entity_f1": "entity F1",
                 "token_accuracy": "token accuracy", "f1": "F1", "exact_match": "exact match",
                 "perplexity": "perplexity", "nsp_accuracy": "NSP accuracy"}


def _metric_value(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3f}"


def card_markdown(card: dict[str, Any], kind: str) -> str:
    """The model card as Markdown (pure, so tests can check it says what it should). A score with a stored
    interval reads ``accuracy **0.912 ± 0.011** (95 % CI, n = 500)``.

    Facts on one line each rather than a table: narrow table cells broke words ("classific ation").
    """
    size = ", ".join(f"{n} {what}" for n, what in ((card["train_examples"], "training"),
                                                  (card["validation_examples"], "validation")) if n is not None)
    intervals = {k: ci for k, ci in (card.get("metrics_ci") or {}).items() if fmt.interval_bounds(ci)}
    metrics = " · ".join(f"{_METRIC_NAMES.get(k, k.replace('_', ' '))} "
                         f"**{fmt.metric_with_ci(v, intervals[k]) if k in intervals else _metric_value(v)}**"
                         for k, v in card["metrics"].items()) or "none recorded"
    shown = [intervals[k] for k in card["metrics"] if k in intervals]
    if shown:
        metrics += f" ({fmt.ci_note(shown[0], card.get('validation_examples'))})"
    trained = f"{card['dataset']} ({size} examples)" if size else card["dataset"]
    date = f" · {card['date']}" if card["date"] else ""
    return (f"# {card['title']}\n"
            f"**{TASK_TITLES.get(kind, kind)}** with `{card['base_model']}`, fine-tuned on {trained}{date}\n\n"
            f"Validation scores: {metrics}"
            + (f"  \nBaselines on the same split: {card['baselines']}" if card.get("baselines") else "")
            + (f"\n\n⚠ This model {card['verdict']}" if card.get("verdict") else ""))


RUNTIME_NAMES = {"pytorch": "PyTorch", "onnx-fp32": "ONNX fp32", "onnx-int8": "ONNX int8 (quantized)",
                 "onnx-fp16": "ONNX fp16"}


def runtime_line(runtime: str) -> str:
    """The card's line on what answers: ``Served by ONNX int8 (quantized)``."""
    return f"Served by {RUNTIME_NAMES.get(runtime, runtime)}"


def fields_of(kind: str) -> tuple[str, ...]:
    return _FIELDS.get(kind, ("text",))


def _widget_value(kind: str, prediction: dict[str, Any], item: dict[str, str]) -> Any:
    """The raw prediction shaped for the output widget of the kind."""
    if kind in ("text-classification", PAIR):
        return prediction["scores"]
    if kind == TOKENS:
        return {"text": item["text"], "entities": [
            {"entity": e["entity"], "start": e["start"], "end": e["end"]} for e in prediction["entities"]]}
    if kind == QA:
        if not prediction["answer"]:
            return {"text": item["context"], "entities": []}
        label = f"answer {prediction['score']:.2f}"
        return {"text": item["context"], "entities": [
            {"entity": label, "start": prediction["start"], "end": prediction["end"]}]}
    rows = []
    for mask in prediction["masks"]:
        for c in mask["candidates"]:
            rows.append([mask["mask"] + 1, c["token"], round(c["score"], 4), c["sequence"]])
    return rows


def _output_widget(kind: str):
    if kind in ("text-classification", PAIR):
        return gr.Label(label="Label probabilities", num_top_classes=10)
    if kind in (TOKENS, QA):
        label = "Entities" if kind == TOKENS else "Answer in the context"
        return gr.HighlightedText(label=label, show_legend=True, combine_adjacent=False)
    return gr.Dataframe(headers=["mask", "fill", "score", "sentence"], label="Top fills", interactive=False,
                        wrap=True)


def masked_example(text: str, max_chars: int = 200) -> Optional[str]:
    """A masked-LM example from a plain validation document: its first sentence with its longest word masked."""
    if MASK_PLACEHOLDER in text:
        return text
    sentence = re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0][:max_chars]
    words = list(re.finditer(r"[^\W\d_]{3,}", sentence))
    if not words:
        return None
    word = max(words, key=lambda m: len(m.group()))
    return sentence[:word.start()] + MASK_PLACEHOLDER + sentence[word.end():]


def _example_rows(examples: list[dict], fields: tuple[str, ...], kind: str) -> list[list[str]]:
    rows = [[str(e.get(f, "")) for f in fields] for e in examples if all(e.get(f) for f in fields)]
    if kind == MLM:
        rows = [[masked] for masked in (masked_example(r[0]) for r in rows) if masked]
    return rows


def build_playground(wb: Workbench, slug: str, runtime: Optional[Playgrounds] = None) -> gr.Blocks:
    """The Blocks of one published playground; raises NotFound for an unknown or unpublished slug."""
    runtime = runtime or Playgrounds(wb)
    target = runtime.target(slug, check=False)
    shape = runtime.shape(target)
    kind, fields = shape.kind, fields_of(shape.kind)
    card = service.get_card(wb, slug)
    examples = _example_rows(service.validation_examples(wb, slug), fields, kind)

    def page_input(values: tuple[str, ...]) -> Any:
        """The widgets' values as a prediction's ``inputs``; asks for what is missing first."""
        missing = [_FIELD_LABELS[f].lower() for f, v in zip(fields, values) if not (v or "").strip()]
        if missing:
            raise gr.Error(f"Type {' and '.join('a ' + m for m in missing)} first." if len(fields) > 1
                           else "Type some text first.")
        return dict(zip(fields, values)) if len(fields) > 1 else values[0]

    # The request comes first: Gradio hands a gr.Request only to a parameter before the *values.
    def predict(request: gr.Request, *values: str):
        raw = page_input(values)
        try:
            with runtime.admit(runtime.target(slug, check=False), _client_address(request)) as meter:
                result = runtime.predict(slug, raw, check=False, meter=meter)
        except WorkbenchError as exc:
            raise gr.Error(str(exc)) from None
        prediction = result["predictions"][0]
        item = dict(zip(fields, values))
        return _widget_value(kind, prediction, {**item, "text": values[0]}), {
            **prediction, "runtime": result["runtime"], "latency_ms": result["latency_ms"]}

    def served_by() -> str:
        """What answers this playground now (read on each page load: the runtime can be switched meanwhile)."""
        try:
            return runtime_line(runtime.target(slug, check=False).runtime)
        except WorkbenchError:
            return ""

    def attention(layer: float, head: float, *values: str):
        raw = page_input(values)
        try:
            maps = runtime.attention(slug, raw)
            layer_index = min(int(layer), maps.layers) - 1
            head_index = min(int(head), maps.heads) - 1
            where = f"layer {layer_index + 1}"
            if maps.windows:  # a long text read in windows: the one that weighed most in its score is drawn
                where += f", window {maps.window + 1} of {maps.windows} (the one that weighed most)"
            return (to_html(plot_head(maps, layer_index, head_index), f"attention of {where}, head {head_index + 1}",
                            f"attention-layer{layer_index + 1}-head{head_index + 1}.png"),
                    to_html(plot_layer(maps, layer_index), f"attention of every head of {where}",
                            f"attention-layer{layer_index + 1}.png"))
        except WorkbenchError as exc:
            raise gr.Error(str(exc)) from None

    with gr.Blocks(title=card["title"], analytics_enabled=False) as blocks:
        gr.Markdown(card_markdown(card, kind), elem_id="pg-card")
        served = gr.Markdown(runtime_line(target.runtime), elem_id="pg-runtime")
        with gr.Row():
            link = gr.Textbox(label="Link to this playground", interactive=False, buttons=["copy"], scale=4,
                              elem_id="pg-link")
            copy = gr.Button("Copy link", scale=1, elem_id="pg-copy")
        inputs = [gr.Textbox(label=_FIELD_LABELS[f], lines=4 if f == "context" else 2,
                             placeholder="Write [MASK] where a word should be filled in" if kind == MLM else None,
                             elem_id=f"pg-input-{f}") for f in fields]
        run = gr.Button("Predict", variant="primary", elem_id="pg-predict")
        output = _output_widget(kind)
        with gr.Accordion("Raw prediction (JSON)", open=False):
            raw_json = gr.JSON(label="prediction")
        if examples:
            gr.Examples(examples=examples, inputs=inputs, label="Examples from the validation set")
        with gr.Accordion("Attention heat-map", open=False):
            gr.Markdown("How much each token (row) attends to each other token (column), for the input above.")
            with gr.Row():
                layer = gr.Slider(1, shape.layers, value=shape.layers, step=1, label="Layer")
                head = gr.Slider(1, shape.heads, value=1, step=1, label="Head")
            show = gr.Button("Show attention")
            with gr.Row():
                head_image = gr.HTML(label="Selected head", elem_id="pg-head-map")
                layer_image = gr.HTML(label="All heads of the layer", elem_id="pg-layer-map")

        run.click(predict, inputs, [output, raw_json], api_name="predict")
        for box in inputs:
            box.submit(predict, inputs, [output, raw_json], api_visibility="private")
        attention_args = dict(fn=attention, inputs=[layer, head, *inputs], outputs=[head_image, layer_image],
                              api_visibility="private")
        show.click(**attention_args)
        layer.release(**attention_args)
        head.release(**attention_args)
        blocks.load(None, None, link, js="() => window.location.href", api_visibility="private")
        blocks.load(served_by, None, served, api_visibility="private")
        copy.click(None, None, None, js=COPY_LINK_JS, api_visibility="private")
    # A bounded queue: events beyond it are refused (503) instead of held; every event then waits for
    # the runtime's forward-pass slots, which the REST API shares. api_open=False: the direct run/ and
    # api/ routes (the page fills in examples through them) never run a queued function, so no prediction
    # skips the queue.
    settings = wb.settings
    blocks.queue(api_open=False, max_size=max(1, settings.playground_queue),
                 default_concurrency_limit=settings.playground_concurrency)
    return quiet_user_errors(blocks)


def _client_address(request: Optional[gr.Request]) -> Optional[str]:
    """The client address the server gave the request (behind a trusted proxy, the forwarded one)."""
    client = getattr(request, "client", None) if request is not None else None
    return getattr(client, "host", None)
