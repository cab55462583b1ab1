"""A prediction job: a finished run's model over a whole input file, in resumable chunks.

``predict_file`` is the torch-free core: it checks and counts the input (``jobs.predict.inputs``), then
for each chunk of ``spec.chunk_rows`` rows sorts the rows by length, hands them to the predictor in
batches, puts the results back in input order and writes the chunk (``jobs.predict.writer``). Between
batches it reports progress (``reporter.progress(rows_done, total_rows, 0.0)``) and checks for a cancel
(``jobs.progress.Cancelled``: the chunk under way is dropped, the finished ones stay). A job started
again after a kill continues after its last finished chunk. At the end the chunks are joined into one
output file. ``run_prediction`` loads the run's model as a predictor (``jobs.predict.infer``) and calls it.

The predictor protocol, all a test fake needs::

    class Predictor(Protocol):
        task: str                # the run's task: text-classification, token-classification,
                                 # question-answering or masked-lm
        labels: Sequence[str]    # text classification: the class names, one prob_<class> column each; else ()
        batch_size: int          # rows per predict() call (the spec's batch_size wins when set)

        def predict(self, rows: list[dict]) -> list[dict]:
            '''One result per row, in the same order; a row is an InputRow's features.'''

Features (what a row holds) and results, by task — ``truncated: bool`` may be in any result (the row
was longer than the model reads; it is counted, never dropped; QA reads a long context in overlapping
windows, so only an over-long question is cut):

- text classification: ``{"text"[, "text_pair"]}`` -> ``{"label": str, or list[str] for multi-label,
  "score": float, "scores": {class: probability}}``
- token classification: ``{"text"}`` or ``{"tokens": [...]}`` -> ``{"entities": [{"text", "label",
  "start", "end", "score"}]}``, plus ``"tags"`` (one per token) for ``tokens`` rows; offsets are
  characters of the text (of the tokens joined by single spaces)
- question answering: ``{"question", "context"}`` -> ``{"answer", "score", "start", "end", "no_answer"}``
- masked LM: ``{"text"}`` -> ``{"fills": [{"mask", "candidates": [{"token", "score", "sequence"}]}]}``
  where the text has ``[MASK]``, else ``{"pseudo_perplexity": float}``

For example, a fake classifier for tests::

    class Fake:
        task, labels, batch_size = "text-classification", ("long", "short"), 8
        def predict(self, rows):
            return [{"label": "long" if len(r["text"]) > 20 else "short", "score": 1.0} for r in rows]
"""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Protocol, Sequence

from jobs.predict import writer
from jobs.predict.heap import fix_mmap_threshold
from jobs.predict.inputs import TEXT, InputFile, InputRow, iter_rows, open_input
from jobs.predict.spec import ModelRef, PredictSpec
from jobs.progress import Cancelled, Reporter
from storage.errors import TrainingError

log = logging.getLogger(__name__)


class Predictor(Protocol):
    task: str
    labels: Sequence[str]
    batch_size: int

    def predict(self, rows: list[dict]) -> list[dict]:
        """One result per row, in the same order (see the module's docstring)."""


def predict_file(spec: PredictSpec, predictor: Predictor, output_dir: Path, reporter: Reporter, *,
                 source: Optional[InputFile] = None, after_chunk: Optional[Callable[[int], None]] = None
                 ) -> dict[str, Any]:
    """Predict every row of ``spec.input_path`` into ``<output_dir>/predictions.<format>``; returns the totals.

    ``source``: the input already checked by ``open_input``; ``after_chunk(k)``: called once chunk ``k`` is
    written (the fake runner sleeps there, so a test can kill a job between chunks).
    """
    started = time.perf_counter()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    source = source or open_input(spec, predictor.task)
    layout, store = _layout_and_store(spec, predictor, source, output_dir)
    total, chunks = source.rows, math.ceil(source.rows / spec.chunk_rows)
    joined = store.joined()
    if joined is not None and writer.output_path(output_dir, spec.output_format).is_file():
        reporter.progress(total, total, 0.0)
        return _result(joined, source, 0, started)
    first = min(store.resume(), chunks)
    batch_size = spec.batch_size or predictor.batch_size
    log.info("predicting %d rows of %s (%s) in %d chunk(s) of %d rows, batches of %d%s", total, source.name,
             source.format, chunks, spec.chunk_rows, batch_size,
             f"; resuming at chunk {first}" if first else "")
    reporter.info({"total_steps": total, "rows": total, "batch_size": batch_size})
    reporter.progress(min(total, first * spec.chunk_rows), total, 0.0)
    predicted = 0
    for k, chunk in enumerate(_chunks(iter_rows(source, first * spec.chunk_rows), spec.chunk_rows), start=first):
        results = predict_chunk(predictor, chunk, batch_size, reporter, k * spec.chunk_rows, total)
        store.write(k, (layout.row(row, result) for row, result in zip(chunk, results)))
        predicted += len(chunk)
        if after_chunk is not None:
            after_chunk(k)
    totals = writer.join(store, chunks, layout, spec.output_format, output_dir)
    if totals["rows"] != total:
        raise TrainingError(f"the output has {totals['rows']} rows but the input {total}",
                            "the input file changed while the job ran; start the job again")
    store.finish(totals, chunks)
    reporter.progress(total, total, 0.0)
    return _result(totals, source, predicted, started)


def _layout_and_store(spec: PredictSpec, predictor: Predictor, source: InputFile, output_dir: Path
                      ) -> tuple[writer.Layout, writer.ChunkStore]:
    """The output's columns, and the chunks of this input (``jobs.predict.writer``)."""
    layout = writer.Layout(predictor.task, source.columns, tuple(predictor.labels) if predictor.task == TEXT else (),
                           pre_split="tokens" in source.mapping)
    store = writer.ChunkStore(output_dir / writer.CHUNK_DIR, writer.fingerprint(
        source.info.sha256, source.info.size, source.rows, spec.chunk_rows, layout.columns))
    return layout, store


def _result(totals: dict[str, Any], source: InputFile, predicted: int, started: float) -> dict[str, Any]:
    seconds = time.perf_counter() - started
    if totals["truncated"]:
        log.warning("%d of %d rows were longer than the model reads and were truncated (column 'truncated')",
                    totals["truncated"], totals["rows"])
    return {"rows": totals["rows"], "truncated": totals["truncated"], "seconds": round(seconds, 3),
            "rows_per_second": round(predicted / seconds, 2) if predicted and seconds > 0 else 0.0,
            "output": totals["output"], "outputs": dict(totals["outputs"]), "input_format": source.format,
            "columns": dict(source.mapping),  # which column each input the model read came from
            "resumed_rows": totals["rows"] - predicted}


def _chunks(rows: Iterable[InputRow], size: int) -> Iterator[list[InputRow]]:
    chunk: list[InputRow] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def row_size(features: dict[str, Any]) -> int:
    """How long a row is, in characters: batches of rows of about one length waste little on padding."""
    return sum(len(v) if isinstance(v, str) else sum(len(t) + 1 for t in v) if isinstance(v, list) else 0
               for v in features.values())


def predict_chunk(predictor: Predictor, chunk: Sequence[InputRow], batch_size: int, reporter: Reporter,
                  done_before: int, total: int) -> list[dict]:
    """The predictor's results for ``chunk`` in its order, from batches of rows sorted by length."""
    order = sorted(range(len(chunk)), key=lambda i: row_size(chunk[i].features))
    results: list[Optional[dict]] = [None] * len(chunk)
    for start in range(0, len(order), batch_size):
        if reporter.cancel_requested():
            raise Cancelled(f"cancelled at row {done_before + start} of {total}; the finished chunks are kept")
        picked = order[start:start + batch_size]
        out = predictor.predict([chunk[i].features for i in picked])
        if len(out) != len(picked):
            raise TrainingError(f"the predictor returned {len(out)} results for {len(picked)} rows",
                                "this is a bug in the predictor; report it")
        for index, result in zip(picked, out):
            results[index] = result
        reporter.progress(done_before + start + len(picked), total, 0.0)
    return results  # type: ignore[return-value]


def run_prediction(spec: PredictSpec, model: ModelRef, output_dir: Path, reporter: Reporter, *,
                   device: str = "auto") -> dict[str, Any]:
    """Check the input, load the run's model (``model.model_dir``, or the export's variant ``spec.runtime``
    names) and predict the whole file with it; the result names the runtime that predicted."""
    from jobs.predict.infer import load_predictor  # torch is imported only in the job's process

    source = open_input(spec, model.task)  # a bad file is refused before the model is loaded
    fix_mmap_threshold()  # memory flat in the number of rows (jobs.predict.heap)
    predictor = load_predictor(model, device=device, runtime=spec.runtime)
    result = predict_file(spec, predictor, output_dir, reporter, source=source)
    result["device"] = predictor.device
    result["runtime"] = spec.runtime
    result["calibrated"] = predictor.calibrated  # the scores carry the run's temperature scaling
    return result
