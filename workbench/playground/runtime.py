"""The serving side of playgrounds, shared by the REST API and the pages: cache, kinds, limits, timing. No gradio.

Both edges go through the same ``admit`` (per-address rate of public playgrounds, and each client's
requests in flight and model tokens a minute) and the same forward-pass slots (``limits.ForwardSlots``),
so neither can bypass the bounds of the other.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from storage.context import Workbench
from workbench.playground import service
from workbench.playground.attention import AttentionMaps, attention_maps, second_text
from workbench.playground.cache import ModelCache, folder_weight_bytes, pick_device
from workbench.playground.limits import ClientBounds, ForwardSlots, RateLimit
from workbench.playground.predictors import (FIELDS, LONG_MAX_CHARS, MAX_CHARS, InvalidInput, Predictor,
                                             normalize_inputs, resolve_kind)
from workbench.services.serving import variant_path


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the page needs before any model is loaded: the kind and the attention grid size."""

    kind: str
    layers: int
    heads: int


@dataclasses.dataclass
class Meter:
    """The model input tokens one admitted request ran, for its client's token budget."""

    tokens: int = 0


def client_keys(target: service.Target, address: Optional[str]) -> tuple[tuple[str, str], ...]:
    """Who a request counts against: its address, and on a token-protected playground its token too (a token
    is handed to one person; its hash names it, the token itself is never kept)."""
    keys = (("address", address),) if address else ()
    return keys + ((("token", target.token_hash),) if target.token_hash is not None else ())


def max_chars_of(target: service.Target) -> int:
    """Characters a text may have: more for a run that reads long documents in windows (its ``chunking.json``);
    their tokens are bounded by the request's token budget, counted over the windows."""
    return LONG_MAX_CHARS if (Path(target.model_dir) / "chunking.json").is_file() else MAX_CHARS


class Playgrounds:
    """One per server: resolves slugs through the DB on every call (so unpublish is immediate) and caches models."""

    def __init__(self, wb: Workbench, memory_mb: Optional[int] = None):
        self.wb = wb
        self.cache: ModelCache[Predictor] = ModelCache(memory_mb or wb.settings.playground_memory_mb)
        self._device: Optional[str] = None  # chosen when the first model loads: torch is imported then, not at start
        self.slots = ForwardSlots(wb.settings.playground_concurrency, wb.settings.playground_queue)
        self.rate = RateLimit(wb.settings.playground_rate_limit)
        self.clients = ClientBounds(wb.settings.playground_max_in_flight, wb.settings.playground_token_budget)
        self._kinds: dict[str, str] = {}
        self._lock = threading.Lock()

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = pick_device(self.wb.settings.device)
        return self._device

    def target(self, slug: str, token: Optional[str] = None, check: bool = True) -> service.Target:
        target = service.get_target(self.wb, slug)
        if check:
            service.check_token(target, token)
        return target

    def kind(self, target: service.Target) -> str:
        with self._lock:
            known = self._kinds.get(target.slug)
        if known is None:
            known = resolve_kind(target.task, service.validation_examples(self.wb, target.slug))
            with self._lock:
                self._kinds[target.slug] = known
        return known

    def shape(self, target: service.Target) -> Shape:
        config = json.loads((target.model_dir / "config.json").read_text(encoding="utf-8"))
        layers = config.get("num_hidden_layers") or config.get("n_layers") or 1
        heads = config.get("num_attention_heads") or config.get("n_heads") or 1
        return Shape(kind=self.kind(target), layers=int(layers), heads=int(heads))

    @contextlib.contextmanager
    def admit(self, target: service.Target, address: Optional[str]) -> Iterator["Meter"]:
        """Hold one prediction of a client for the ``with`` block; the ``Meter`` to hand to ``predict``.

        On entry: the per-address rate of a public playground (token holders are not counted there),
        then the client's bounds (``limits.ClientBounds``): its requests in flight and its model tokens
        a minute, for its address and, on a token-protected playground, its token. Each refusal is
        ``RateLimited`` (429). On exit the request is given back and the tokens it ran are charged.
        ``address`` is the client address the server hands the edge (behind a trusted proxy, the
        forwarded one); without one, only the token is bounded.
        """
        if target.token_hash is None and address:
            self.rate.take(address)
        keys = client_keys(target, address)
        started = self.clients.enter(keys)
        meter = Meter()
        try:
            yield meter
        finally:
            self.clients.leave(keys, started, meter.tokens)

    def predictor(self, target: service.Target) -> Predictor:
        """The target's predictor, from the cache. The key holds the runtime and its export folder, so a
        playground switched to another runtime (or a newer export) loads it on its next request."""
        kind = self.kind(target)
        onnx_dir = service.serving_dir(self.wb, target)

        def load() -> Predictor:
            max_length, doc_stride = service.trained_lengths(self.wb, target)
            return Predictor(target.model_dir, kind, self.device, max_length=max_length, doc_stride=doc_stride,
                             max_tokens=self.wb.settings.playground_max_tokens, runtime=target.runtime,
                             onnx_dir=onnx_dir)

        estimate = (variant_path(onnx_dir, target.runtime).stat().st_size if onnx_dir is not None
                    else folder_weight_bytes(target.model_dir))
        key = (str(target.model_dir), kind, target.runtime, str(onnx_dir or ""))
        return self.cache.get(key, load, estimate_bytes=estimate)

    def predict(self, slug: str, raw: Any, token: Optional[str] = None, check: bool = True,
                meter: Optional["Meter"] = None) -> dict[str, Any]:
        """Validate, predict and time one request: ``{"predictions": [...], "calibrated": ..., "runtime": ...,
        "latency_ms": ...}`` (``calibrated``: the scores carry the run's temperature scaling; ``runtime``: what
        answered, ``pytorch`` or an ONNX variant such as ``onnx-int8``).

        Order of checks: unknown slug (404), token (401), input shape (422), a free forward-pass
        slot (503), size after tokenization (422) — so a caller without the token learns nothing
        about the expected inputs. The client's bounds are the edge's to hold (``admit``); the tokens
        the prediction ran are added to its ``meter``.
        """
        started = time.perf_counter()
        target = self.target(slug, token, check)
        kind = self.kind(target)
        items, batch = normalize_inputs(kind, raw, max_chars_of(target))
        predictor = self.predictor(target)
        predictions, tokens = self.slots.run(predictor.predict_counted, items)
        if meter is not None:
            meter.tokens += tokens
        return {"task": kind, "batch": batch, "predictions": predictions, "calibrated": predictor.calibrated,
                "runtime": predictor.runtime, "latency_ms": round((time.perf_counter() - started) * 1000, 2)}

    def attention(self, slug: str, raw: Any) -> AttentionMaps:
        """Attention maps of one input, checked as a prediction's input is (422 with the same messages)."""
        target = self.target(slug, check=False)
        kind = self.kind(target)
        items, batch = normalize_inputs(kind, raw, max_chars_of(target))
        if batch:
            raise InvalidInput("attention maps are drawn for one input at a time")
        values = [items[0][field] for field in FIELDS[kind]]
        first, second = values[0], values[1] if len(values) > 1 else None
        return self.slots.run(attention_maps, self.predictor(target), first, second_text(kind, second))
