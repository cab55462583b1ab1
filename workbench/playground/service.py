"""Publishing runs as playgrounds: slugs, access tokens, the model card. No gradio here.

A playground is a row in ``playgrounds`` pointing at a succeeded run whose
``output_dir/model`` folder holds the fine-tuned model. The database is the
source of truth, so a playground published by the CLI in another process is
served by an already running server on its next request.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import itertools
import json
import logging
import re
import secrets
from pathlib import Path
from typing import Any, Optional, Sequence

from sqlalchemy import select

from storage.context import Workbench
from storage.models import SUCCEEDED, Dataset, Playground, Run
from workbench.errors import ConfigError, InvalidState, ModelUnavailable, NotFound, WorkbenchError
from workbench.services import baselines
from workbench.services.predictions import runtime_dir
from workbench.services.serving import PYTORCH, check_runtime
from workbench.services.specs import HEADLINE_METRICS

log = logging.getLogger(__name__)

PLAY_PREFIX = "/play"
API_PREFIX = "/api/v1/predict"
MAX_EXAMPLES = 5
EXAMPLE_SCAN = 2_000  # validation lines read to find examples of every class (a rare one may come late)
# What the page, its own calls and the API say once a playground is unpublished (a visitor may have it open).
NO_LONGER_PUBLISHED = "This playground is no longer published."


class AccessDenied(WorkbenchError):
    """A token-protected playground was called without its valid token (HTTP 401 at the edge)."""

    exit_code = 5


@dataclasses.dataclass(frozen=True)
class PlaygroundInfo:
    slug: str
    run_id: int
    run_name: str
    task: str
    url_path: str
    api_path: str
    has_token: bool
    active: bool
    created_at: dt.datetime
    runtime: str = PYTORCH  # what answers: "pytorch" or an exported ONNX variant ("onnx-int8", ...)
    # The plaintext token, only in the answer to ``publish``; never stored.
    token: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["created_at"] = self.created_at.isoformat(timespec="seconds")
        if out["token"] is None:
            del out["token"]
        return out


@dataclasses.dataclass(frozen=True)
class Target:
    """What serving a playground needs: where the model is and what it does."""

    slug: str
    run_id: int
    task: str
    model_dir: Path
    output_dir: Path
    token_hash: Optional[str]
    runtime: str = PYTORCH  # "pytorch" or an exported ONNX variant (see ``serving_dir``)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def model_dir_of(output_dir: Optional[str]) -> Optional[Path]:
    if not output_dir:
        return None
    folder = Path(output_dir) / "model"
    return folder if (folder / "config.json").is_file() else None


def _slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:40].strip("-") or "model"


def _info(pg: Playground, run: Run, token: Optional[str] = None) -> PlaygroundInfo:
    return PlaygroundInfo(
        slug=pg.slug, run_id=run.id, run_name=run.name or f"run {run.id}", task=run.task,
        url_path=f"{PLAY_PREFIX}/{pg.slug}/", api_path=f"{API_PREFIX}/{pg.slug}",
        has_token=pg.token_hash is not None, active=pg.active, created_at=pg.created_at,
        runtime=pg.runtime or PYTORCH, token=token)


def publish(wb: Workbench, run_id: int, token: Optional[str] = None, runtime: str = PYTORCH, *,
            owner_id: Optional[int] = None) -> PlaygroundInfo:
    """Publish a succeeded run; the answer carries the plaintext token (if any) this one time.

    Each call makes a new playground with its own slug (and token), so a link
    given to one person can be revoked without breaking another's. ``runtime``
    serves it from PyTorch or from an ONNX variant of the run's newest export
    (refused when the run has no such export).
    """
    if token is not None and len(token.strip()) < 8:
        raise ConfigError("an access token must have at least 8 characters")
    runtime = check_runtime(runtime)
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        if run is None:
            raise NotFound(f"run {run_id} does not exist; `workbench runs list` shows the runs")
        if run.status != SUCCEEDED:
            raise InvalidState(f"run {run_id} is {run.status}; only succeeded runs can be published")
        if model_dir_of(run.output_dir) is None:
            raise InvalidState(f"run {run_id} has no saved model folder ({run.output_dir or 'no output folder'}/model)")
        runtime_dir(wb, run.id, runtime)
        slug = f"{_slugify(run.name or run.task)}-{run.id}-{secrets.token_hex(3)}"
        pg = Playground(slug=slug, run_id=run.id, token_hash=hash_token(token.strip()) if token else None,
                        active=True, created_at=dt.datetime.now(dt.timezone.utc).replace(tzinfo=None),
                        runtime=runtime, owner_id=owner_id)
        session.add(pg)
        session.flush()
        log.info("published run %s as playground %s (token: %s, runtime: %s)", run.id, slug,
                 "yes" if token else "no", runtime)
        return _info(pg, run, token.strip() if token else None)


def set_runtime(wb: Workbench, slug: str, runtime: str) -> PlaygroundInfo:
    """Serve a playground from another runtime; a running server answers with it from the next request on
    (its model cache keys on the runtime). Refused like ``publish`` when the run has no such export."""
    runtime = check_runtime(runtime)
    with wb.db.session() as session:
        pg = session.scalar(select(Playground).where(Playground.slug == slug))
        if pg is None:
            raise NotFound(f"no playground {slug!r}; `workbench playgrounds` lists them")
        runtime_dir(wb, pg.run_id, runtime)
        pg.runtime = runtime
        run = session.get(Run, pg.run_id)
        log.info("playground %s is now served by %s", slug, runtime)
        return _info(pg, run)


def unpublish(wb: Workbench, slug: str) -> PlaygroundInfo:
    """Deactivate a playground: its page and API answer 404 from the next request on."""
    with wb.db.session() as session:
        pg = session.scalar(select(Playground).where(Playground.slug == slug))
        if pg is None:
            raise NotFound(f"no playground {slug!r}; `workbench playgrounds` lists them")
        pg.active = False
        run = session.get(Run, pg.run_id)
        log.info("unpublished playground %s", slug)
        return _info(pg, run)


def new_token() -> str:
    """A fresh access token (22 URL-safe characters): what "generate a token" hands out, shown once."""
    return secrets.token_urlsafe(16)


def list_playgrounds(wb: Workbench, include_inactive: bool = False,
                     run_id: Optional[int] = None) -> list[PlaygroundInfo]:
    """Published playgrounds, newest first; only those of ``run_id`` when given."""
    with wb.db.session() as session:
        query = select(Playground, Run).join(Run, Run.id == Playground.run_id).order_by(Playground.id.desc())
        if run_id is not None:
            query = query.where(Playground.run_id == run_id)
        if not include_inactive:
            query = query.where(Playground.active.is_(True))
        return [_info(pg, run) for pg, run in session.execute(query).all()]


def get_target(wb: Workbench, slug: str) -> Target:
    """The serving target of an active playground; NotFound for unknown or unpublished slugs."""
    with wb.db.session() as session:
        row = session.execute(select(Playground, Run).join(Run, Run.id == Playground.run_id)
                              .where(Playground.slug == slug)).first()
        if row is None:
            raise NotFound(f"playground {slug!r} does not exist or is no longer published")
        if not row[0].active:
            raise NotFound(NO_LONGER_PUBLISHED)
        pg, run = row
        model_dir = model_dir_of(run.output_dir)
        if model_dir is None:
            raise NotFound(f"playground {slug!r}: the model folder of run {run.id} is gone")
        return Target(slug=slug, run_id=run.id, task=run.task, model_dir=model_dir,
                      output_dir=Path(run.output_dir), token_hash=pg.token_hash, runtime=pg.runtime or PYTORCH)


def serving_dir(wb: Workbench, target: Target) -> Optional[Path]:
    """The export folder serving ``target``'s runtime (None for PyTorch); ModelUnavailable (503) when the
    export was deleted after the playground was set to serve it."""
    try:
        return runtime_dir(wb, target.run_id, target.runtime)
    except InvalidState as exc:
        raise ModelUnavailable(f"this playground is served by {target.runtime}, which is gone: {exc}") from None


def trained_lengths(wb: Workbench, target: Target) -> tuple[Optional[int], Optional[int]]:
    """(max_length, doc_stride) the run was trained with: from its ``metrics.json`` (the engine records the
    resolved hyper-parameters there), else from its spec; None where neither says (the model's limit applies)."""
    from workbench.services.runs import read_run_hyperparameters

    used = read_run_hyperparameters(target.output_dir)
    with wb.db.session() as session:
        run = session.get(Run, target.run_id)
        asked = ((run.spec or {}).get("train") or {}) if run is not None else {}

    def length(name: str) -> Optional[int]:
        for source in (used, asked):
            value = source.get(name) if isinstance(source, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    return length("max_length"), length("doc_stride")


def bearer_token(authorization: str) -> Optional[str]:
    """The token of an ``Authorization: Bearer <token>`` header value, else None."""
    scheme, _, value = (authorization or "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def check_token(target: Target, token: Optional[str]) -> None:
    """Raise AccessDenied unless ``token`` opens ``target`` (always passes for public playgrounds)."""
    if target.token_hash is None:
        return
    if not token:
        raise AccessDenied("this playground needs an access token (Authorization: Bearer <token> or ?token=)")
    if not hmac.compare_digest(hash_token(token.strip()), target.token_hash):
        raise AccessDenied("the access token is not valid for this playground")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _count_lines(path: Optional[Path]) -> Optional[int]:
    if path is None or not path.is_file():
        return None
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


_HOUSEKEEPING = ("seconds", "peak_", "per_second", "param", "runtime", "step", "epoch", "loss", "_mb")


def _scalar_metrics(metrics: Any) -> dict[str, float]:
    if not isinstance(metrics, dict):
        return {}
    return {k: round(float(v), 4) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def card_metrics(task: str, metrics: dict[str, float]) -> dict[str, float]:
    """The scores a visitor cares about: the task's headline metrics, else any score that is no timing,
    memory, size or loss figure (a card shows no ``eval_and_checkpoint_seconds`` or ``peak_gpu_mb``)."""
    headline = {k: metrics[k] for k in HEADLINE_METRICS.get(task, ()) if k in metrics}
    return headline or {k: v for k, v in metrics.items() if not any(h in k for h in _HOUSEKEEPING)}


def get_card(wb: Workbench, slug: str) -> dict[str, Any]:
    """The model card: task, base model, dataset name and size, metrics, date. Nothing about other runs."""
    target = get_target(wb, slug)
    with wb.db.session() as session:
        run = session.get(Run, target.run_id)
        dataset = session.get(Dataset, run.dataset_id) if run.dataset_id else None
        data = (run.spec or {}).get("data") or {}
        train_path = Path(data["train_path"]) if data.get("train_path") else None
        if dataset is not None:
            name, n_train, n_val = dataset.name, dataset.num_train, dataset.num_validation
        else:
            name = data.get("name") or (train_path.parent.name if train_path else "unknown")
            val = Path(data["validation_path"]) if data.get("validation_path") else None
            n_train, n_val = _count_lines(train_path), _count_lines(val)
        raw = run.metrics or _read_json(target.output_dir / "metrics.json") or {}
        metrics = card_metrics(run.task, _scalar_metrics(raw))
        date = run.finished_at or run.created_at
        return {
            "title": run.name or f"{run.task} model (run {run.id})",
            "task": run.task,
            "base_model": run.model,
            "dataset": name,
            "train_examples": n_train,
            "validation_examples": n_val,
            "metrics": metrics,
            "metrics_ci": raw.get("metrics_ci") or {},  # 95 % intervals of the scores (jobs.evaluation.outcomes)
            # what the score means: the same split scored by a majority class and a TF-IDF model
            "baselines": baselines.summary(raw),
            "verdict": baselines.warning(raw),
            "date": date.strftime("%Y-%m-%d %H:%M UTC") if date else "",
        }


_INPUT_KEYS = ("text", "text_pair", "tokens", "question", "context")


def _example_from(record: dict) -> Optional[dict]:
    found = {k: record[k] for k in _INPUT_KEYS if isinstance(record.get(k), (str, list))}
    if "tokens" in found and "text" not in found:
        found["text"] = " ".join(str(t) for t in found.pop("tokens"))
    found.pop("tokens", None)
    return found or None


def gold_class(record: dict) -> Optional[str]:
    """The class a classification record is labelled with (a prediction row's ``gold``, a data file's ``label``;
    a multi-label set counts as one class); None for the other tasks, whose records carry no single class."""
    if "tokens" in record or "question" in record:
        return None
    gold = record.get("gold", record.get("label"))
    if isinstance(gold, list) and all(isinstance(g, (str, int)) for g in gold):
        return json.dumps(sorted(str(g) for g in gold))
    return str(gold) if isinstance(gold, (str, int)) else None


def across_classes(labelled: Sequence[tuple[Optional[str], dict]], limit: int) -> list[dict]:
    """Up to ``limit`` examples taken round-robin over their classes, in the order the classes first appear:
    the first example of each class, then the second of each, and so on. Examples without a class (NER, QA,
    masked LM) form one group, so alone they keep their order."""
    groups: dict[Optional[str], list[dict]] = {}
    for label, example in labelled:
        groups.setdefault(label, []).append(example)
    picked: list[dict] = []
    for rank in range(max((len(g) for g in groups.values()), default=0)):
        picked.extend(group[rank] for group in groups.values() if rank < len(group))
    return picked[:limit]


def _read_examples(path: Path, limit: int) -> list[dict]:
    labelled: list[tuple[Optional[str], dict]] = []
    try:
        with path.open(encoding="utf-8") as handle:
            for line in itertools.islice(handle, EXAMPLE_SCAN):
                if len(labelled) >= limit and all(label is None for label, _ in labelled):
                    break  # no classes to spread over: the first examples are the examples
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                example = _example_from(record) if isinstance(record, dict) else None
                if example:
                    labelled.append((gold_class(record), example))
    except OSError:
        return []
    return across_classes(labelled, limit)


def validation_examples(wb: Workbench, slug: str, limit: int = MAX_EXAMPLES) -> list[dict]:
    """A few inputs from the run's validation data (predictions.jsonl first, else the validation file), spread
    over the gold classes for classification: the first few lines are often all of one class."""
    target = get_target(wb, slug)
    candidates = [target.output_dir / "predictions.jsonl"]
    with wb.db.session() as session:
        run = session.get(Run, target.run_id)
        data = (run.spec or {}).get("data") or {}
        if data.get("validation_path"):
            candidates.append(Path(data["validation_path"]))
        dataset = session.get(Dataset, run.dataset_id) if run.dataset_id else None
        if dataset is not None:
            candidates.append(Path(dataset.path) / "validation.jsonl")
    for path in candidates:
        if path.is_file():
            examples = _read_examples(path, limit)
            if examples:
                return examples
    return []


def push_to_hub(wb: Workbench, run_id: int, repo_id: str, token: Optional[str] = None,
                private: bool = True, timeout_s: float = 10.0) -> str:
    """Upload the model folder to the Hugging Face Hub; offline it fails at once with a clear message."""
    import os

    with wb.db.session() as session:
        run = session.get(Run, run_id)
        if run is None:
            raise NotFound(f"run {run_id} does not exist")
        model_dir = model_dir_of(run.output_dir)
    if model_dir is None:
        raise InvalidState(f"run {run_id} has no saved model folder to push")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id or ""):
        raise InvalidState(f"repo id {repo_id!r} must look like 'user-or-org/model-name'")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or wb.settings.offline:
        raise ModelUnavailable("pushing to the Hugging Face Hub needs internet, and this workbench is offline "
                               "(WORKBENCH_OFFLINE / HF_HUB_OFFLINE); download the zip instead")
    if not _reachable("huggingface.co", 443, timeout_s):
        raise ModelUnavailable("cannot reach huggingface.co; pushing to the Hub needs internet — download the zip "
                               "instead")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        commit = api.upload_folder(folder_path=str(model_dir), repo_id=repo_id,
                                   commit_message=f"Upload run {run_id} from BERT Workbench")
    except Exception as exc:  # the hub client raises many kinds; one clear line is what the user needs
        raise ModelUnavailable(f"push to {repo_id} failed: {exc}") from None
    return getattr(commit, "commit_url", f"https://huggingface.co/{repo_id}")


def _reachable(host: str, port: int, timeout_s: float) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
