"""The serving side of playgrounds, shared by the REST API and the pages: cache, kinds, timing. No gradio."""
from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any, Optional

from workbench.context import Workbench
from workbench.playground import service
from workbench.playground.attention import AttentionMaps, attention_maps, second_text
from workbench.playground.cache import ModelCache, folder_weight_bytes, pick_device
from workbench.playground.predictors import Predictor, normalize_inputs, resolve_kind


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the page needs before any model is loaded: the kind and the attention grid size."""

    kind: str
    layers: int
    heads: int


class Playgrounds:
    """One per server: resolves slugs through the DB on every call (so unpublish is immediate) and caches models."""

    def __init__(self, wb: Workbench, memory_mb: Optional[int] = None):
        self.wb = wb
        self.cache: ModelCache[Predictor] = ModelCache(memory_mb or wb.settings.playground_memory_mb)
        self.device = pick_device(wb.settings.device)
        self._kinds: dict[str, str] = {}
        self._lock = threading.Lock()

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

    def predictor(self, target: service.Target) -> Predictor:
        kind = self.kind(target)
        return self.cache.get((str(target.model_dir), kind), lambda: Predictor(target.model_dir, kind, self.device),
                              estimate_bytes=folder_weight_bytes(target.model_dir))

    def predict(self, slug: str, raw: Any, token: Optional[str] = None, check: bool = True) -> dict[str, Any]:
        """Validate, predict and time one request: ``{"predictions": [...], "latency_ms": ...}``.

        Order of checks: unknown slug (404), token (401), input shape (422) — so
        a caller without the token learns nothing about the expected inputs.
        """
        started = time.perf_counter()
        target = self.target(slug, token, check)
        kind = self.kind(target)
        items, batch = normalize_inputs(kind, raw)
        predictions = self.predictor(target).predict(items)
        return {"task": kind, "batch": batch, "predictions": predictions,
                "latency_ms": round((time.perf_counter() - started) * 1000, 2)}

    def attention(self, slug: str, text: str, text_pair: Optional[str] = None) -> AttentionMaps:
        target = self.target(slug, check=False)
        return attention_maps(self.predictor(target), text, second_text(self.kind(target), text_pair))
