"""Attention maps of an input, per layer and head, and their pictures.

``attention_maps`` is the data (numpy, layers x heads x tokens x tokens, plus
the tokens); ``plot_head`` and ``plot_layer`` draw it with matplotlib's
non-interactive backend so the server never needs a display; ``to_html`` puts
a picture inline in the page.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from workbench.playground.predictors import PAIR, QA, Predictor

MAX_TOKENS = 64


@dataclasses.dataclass(frozen=True)
class AttentionMaps:
    tokens: list[str]
    weights: np.ndarray  # (layers, heads, tokens, tokens); row = query token, column = attended token
    # a long text read in windows: which window is shown (the one that mattered most, 0-based) and how many
    window: Optional[int] = None
    windows: Optional[int] = None

    @property
    def layers(self) -> int:
        return int(self.weights.shape[0])

    @property
    def heads(self) -> int:
        return int(self.weights.shape[1])


def attention_maps(predictor: Predictor, text: str, text_pair: Optional[str] = None,
                   max_tokens: int = MAX_TOKENS) -> AttentionMaps:
    """Attention weights of every layer and head for one input (truncated to ``max_tokens`` for legibility).

    For pair and QA models the second text goes in as the second segment, as in training. Only
    this uses the predictor's eager twin: SDPA, which predictions use, returns no weights.
    """
    text = predictor.model_text(text)
    window = windows = None
    if getattr(predictor, "chunking", None) is not None:  # a long text: the window that mattered most
        enc, window, windows = _weightiest_window(predictor, text, text_pair, max_tokens)
    else:
        enc = predictor.encode(text, text_pair, max_length=max_tokens)
    out = predictor.forward(enc, model=predictor.attention_model(), output_attentions=True)
    if not out.attentions:
        raise RuntimeError("the model returned no attentions; the eager twin must compute attention eagerly")
    weights = np.stack([a[0].float().cpu().numpy() for a in out.attentions])
    tokens = predictor.tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())
    return AttentionMaps(tokens=[str(t) for t in tokens], weights=weights, window=window, windows=windows)


def _weightiest_window(predictor: Predictor, text: str, text_pair: Optional[str], max_tokens: int):
    """The window of a long text that weighed most in its score (its attention weight, or for mean and max
    pooling its largest logit), cut to ``max_tokens``; with its index and the number of windows."""
    from workbench.services.serving import most_attended, outputs_of, window_batch

    windows = predictor.windows([text], [text_pair] if text_pair else None)
    with predictor._tok_lock:
        enc = window_batch(predictor.tokenizer, windows)
    outputs = predictor._arrays(enc, *outputs_of(predictor.chunking))
    best = most_attended(len(windows.document), outputs[1] if len(outputs) > 1 else None, outputs[0],
                         predictor.chunking.pooling)
    one = {k: v[best:best + 1, :max_tokens] for k, v in enc.items()}
    keep = int(one["attention_mask"].sum())  # the window without its padding
    return {k: v[:, :keep] for k, v in one.items()}, best, len(windows.document)


def second_text(kind: str, text_pair: Optional[str]) -> Optional[str]:
    """Which kinds feed a second segment to the model."""
    return text_pair if kind in (PAIR, QA) and text_pair else None


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _check(maps: AttentionMaps, layer: int, head: Optional[int] = None) -> None:
    if not 0 <= layer < maps.layers:
        raise ValueError(f"layer {layer} is out of range 0..{maps.layers - 1}")
    if head is not None and not 0 <= head < maps.heads:
        raise ValueError(f"head {head} is out of range 0..{maps.heads - 1}")


def tick_font_size(tokens: int) -> float:
    """Points for the token labels: 13 up to 24 tokens, shrinking to 9 at 64 and more. The picture is shown
    shrunk to the page's width, so 8 points (as before) read as 5-pixel text."""
    return float(max(9.0, min(13.0, 13.0 - (tokens - 24) * 0.1)))


def plot_head(maps: AttentionMaps, layer: int, head: int):
    """One head's heat-map with the tokens on both axes (a matplotlib Figure)."""
    _check(maps, layer, head)
    n = len(maps.tokens)
    size = tick_font_size(n)
    side = min(12.0, 3.0 + 0.03 * size * n)  # room for each label at its size
    fig = _figure(side + 1.2, side)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(maps.weights[layer, head], cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(n), maps.tokens, rotation=90, fontsize=size)
    ax.set_yticks(range(n), maps.tokens, fontsize=size)
    ax.set_xlabel("attended token")
    ax.set_ylabel("query token")
    ax.set_title(f"layer {layer + 1}, head {head + 1}")
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def plot_layer(maps: AttentionMaps, layer: int, columns: int = 4):
    """All heads of one layer as a grid of small heat-maps: one panel per head."""
    _check(maps, layer)
    heads = maps.heads
    columns = max(1, min(columns, heads))
    rows = (heads + columns - 1) // columns
    fig = _figure(2.6 * columns, 2.6 * rows + 0.4)
    fig.suptitle(f"layer {layer + 1}: all {heads} heads")
    for head in range(heads):
        ax = fig.add_subplot(rows, columns, head + 1)
        ax.imshow(maps.weights[layer, head], cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(f"head {head + 1}", fontsize=12)
        ax.set_xticks([])
        ax.set_yticks([])
    return fig


def to_png(fig) -> bytes:
    """A matplotlib Figure as PNG bytes."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def to_html(fig, alt: str, filename: str) -> str:
    """A Figure as an inline ``<img>`` with a download link: the picture travels in the page, never as a file.

    A playground serves no files at all (see mount.py), so its heat-maps cannot be Gradio images.
    """
    import base64
    import html

    data = "data:image/png;base64," + base64.b64encode(to_png(fig)).decode("ascii")
    return (f'<figure class="pg-heatmap" style="margin:0"><img src="{data}" alt="{html.escape(alt)}" '
            f'style="max-width:100%;height:auto"><figcaption><a href="{data}" download="{html.escape(filename)}">'
            f"Download PNG</a></figcaption></figure>")
