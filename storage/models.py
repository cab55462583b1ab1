"""SQLAlchemy 2.x models: datasets, runs (the job queue), per-step metrics, artifacts, playgrounds, sweeps,
label audits, labelling projects, accounts (users, sessions, API tokens, the activity log).

The schema is created and upgraded only through the Alembic migrations in
``storage/migrations``; a change here needs a new revision there.
"""
from __future__ import annotations

import datetime as dt
from typing import Any, Optional

from sqlalchemy import (JSON, Boolean, CheckConstraint, DateTime, Float, ForeignKey, ForeignKeyConstraint, Index,
                        Integer, String, Text, UniqueConstraint, false)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


# Run states. The allowed moves are in jobs.queue.states; the database only stores them.
QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLING, CANCELLED = (
    "queued", "running", "succeeded", "failed", "cancelling", "cancelled")
# A sweep trial the pruner stopped early: finished on purpose, neither failed nor cancelled.
PRUNED = "pruned"
RUN_STATES = (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLING, CANCELLED, PRUNED)

# Sweep states: running (trials being asked for and run), cancelling (no new trials; waiting for the
# running ones to stop), finished (every trial ended), cancelled, failed (stopped because its first trials
# all failed the same way; ``Sweep.error`` says how).
SWEEP_RUNNING, SWEEP_CANCELLING, SWEEP_FINISHED, SWEEP_CANCELLED = "running", "cancelling", "finished", "cancelled"
SWEEP_FAILED = "failed"
SWEEP_STATES = (SWEEP_RUNNING, SWEEP_CANCELLING, SWEEP_FINISHED, SWEEP_CANCELLED, SWEEP_FAILED)

# What a run does: trains a model (its spec is a jobs.specs.run.RunSpec), or puts a trained run's model to work
# over a whole file (a jobs.predict.spec.PredictSpec; ``parent_run_id`` is the model's run), or exports it
# to ONNX (a jobs.export.spec.ExportSpec, the same parent link). All go through the same queue, leases,
# cancel and crash resume.
KIND_TRAIN, KIND_PREDICT, KIND_EVALUATE, KIND_EXPORT = "train", "predict", "evaluate", "export"
# A labelling project's background work (jobs.labelling): embed the pool's texts with the frozen encoder
# (once, then the texts added later), and refit the fast model on the labels given so far and rank the pool again.
# Their spec names the project (``{"project_id": N, ...}``), as does ``Run.label_project_id``.
KIND_LABEL_EMBED, KIND_LABEL_REFIT = "label-embed", "label-refit"
RUN_KINDS = (KIND_TRAIN, KIND_PREDICT, KIND_EVALUATE, KIND_EXPORT, KIND_LABEL_EMBED, KIND_LABEL_REFIT)
LABEL_KINDS = (KIND_LABEL_EMBED, KIND_LABEL_REFIT)
# The kinds a worker's short-job lane takes beside its training runs (jobs.queue.worker, docs/runs-and-queue.md):
# minutes where a training run takes hours, and none of them has a time estimate to sort by instead.
SHORT_KINDS = (KIND_PREDICT, KIND_EVALUATE, KIND_EXPORT, KIND_LABEL_EMBED, KIND_LABEL_REFIT)


class Dataset(Base):
    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    # the user who made it (accounts: workbench/services/access.py); NULL = made before accounts, an admin's
    owner_id: Mapped[Optional[int]] = mapped_column(Integer, nullable=True, index=True)
    name: Mapped[str] = mapped_column(String(200))
    task: Mapped[str] = mapped_column(String(40), index=True)
    format: Mapped[str] = mapped_column(String(40))
    # sha256 of the uploaded bytes plus the import options: re-uploading the same file is detected.
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    path: Mapped[str] = mapped_column(Text)
    num_train: Mapped[int] = mapped_column(Integer)
    num_validation: Mapped[int] = mapped_column(Integer)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    stats: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    warnings: Mapped[list[Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    # Stored or used to evaluate runs on: never preselected for training, offered only with a warning.
    test_set: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false(), nullable=False)


# A sweep's trial is numbered 0..n_trials-1 (NULLs would slip through a plain comparison, hence IS NOT NULL).
TRIAL_IN_BUDGET = ("sweep_id IS NULL OR (trial_number IS NOT NULL AND sweep_n_trials IS NOT NULL "
                   "AND trial_number >= 0 AND trial_number < sweep_n_trials)")

# A grouped run names its seed (a NULL seed would slip past the unique index), an ungrouped one neither.
SEED_GROUP_COMPLETE = ("(seed_group IS NULL AND group_seed IS NULL) OR "
                       "(seed_group IS NOT NULL AND group_seed IS NOT NULL)")


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # the user who made it (accounts: workbench/services/access.py); NULL = made before accounts, an admin's
    owner_id: Mapped[Optional[int]] = mapped_column(Integer, nullable=True, index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    task: Mapped[str] = mapped_column(String(40))
    model: Mapped[str] = mapped_column(String(300))
    status: Mapped[str] = mapped_column(String(16), default=QUEUED)
    # RUN_KINDS. A server default only (no Python one): rows written by code that predates the column, and
    # inserts that do not name it, are training runs.
    kind: Mapped[str] = mapped_column(String(16), server_default=KIND_TRAIN, nullable=False)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    # A deleted dataset must never fail or hide a run that used it.
    dataset_id: Mapped[Optional[str]] = mapped_column(ForeignKey("datasets.id", ondelete="SET NULL"), nullable=True)
    parent_run_id: Mapped[Optional[int]] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), nullable=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker_id: Mapped[Optional[str]] = mapped_column(String(120), nullable=True)
    device: Mapped[Optional[str]] = mapped_column(String(60), nullable=True)
    pid: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    step: Mapped[int] = mapped_column(Integer, default=0)
    total_steps: Mapped[int] = mapped_column(Integer, default=0)
    epoch: Mapped[float] = mapped_column(Float, default=0.0)
    eta_seconds: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    # What a running run does now (jobs.progress.PHASES), with done of total examples while it evaluates.
    phase: Mapped[Optional[str]] = mapped_column(String(40), nullable=True)
    phase_done: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    phase_total: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    # The time estimated at submit (workbench.services.estimates), compared with the actual time on the run page.
    estimate: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON, nullable=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[Optional[str]] = mapped_column(Text, nullable=True)
    error_detail: Mapped[Optional[str]] = mapped_column(Text, nullable=True)
    output_dir: Mapped[Optional[str]] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    started_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)
    heartbeat_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)
    # A sweep's trial: the sweep, Optuna's trial number (one run per trial, retries included) and a copy of
    # the sweep's n_trials, which the composite foreign key keeps true: with the CHECK below, the database
    # itself refuses trial n_trials, whoever asks and however two askers interleave.
    sweep_id: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    trial_number: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    sweep_n_trials: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    # A label audit's fold: the audit and the fold (0..k-1) whose held-out part this run predicts.
    audit_id: Mapped[Optional[int]] = mapped_column(ForeignKey("audits.id", ondelete="SET NULL",
                                                               name="fk_runs_audit_id"), nullable=True)
    fold: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    # Runs that differ only in their seed ("repeat with N seeds", a sweep trial confirmed with more seeds): the
    # id of the group's first run, kept as a plain number so the group outlives a deleted first run, and a copy
    # of each member's ``train.seed``. The unique index refuses the same seed twice in one group.
    seed_group: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    group_seed: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    # A labelling project's job (LABEL_KINDS), or a run trained from a project's labels (its hand-off run).
    label_project_id: Mapped[Optional[int]] = mapped_column(
        ForeignKey("label_projects.id", ondelete="SET NULL", name="fk_runs_label_project_id"), nullable=True,
        index=True)
    # The run's mirror in MLflow (jobs.tracking): its MLflow run id, kept so that a resumed attempt and a backfill
    # write into the same MLflow run; and why the mirror is behind (a tracker was down or slow), shown as a badge
    # until a retry or `workbench runs mirror` catches up. NULL: mirrored in full, or never mirrored.
    mlflow_run_id: Mapped[Optional[str]] = mapped_column(String(64), nullable=True)
    mirror_warning: Mapped[Optional[str]] = mapped_column(Text, nullable=True)

    dataset: Mapped[Optional[Dataset]] = relationship()
    points: Mapped[list["MetricPoint"]] = relationship(
        back_populates="run", cascade="all, delete-orphan", passive_deletes=True)
    artifacts: Mapped[list["Artifact"]] = relationship(
        back_populates="run", cascade="all, delete-orphan", passive_deletes=True)

    __table_args__ = (
        Index("ix_runs_status_priority", "status", "priority", "id"),
        Index("ix_runs_created_at", "created_at"),
        # A run's prediction and evaluation jobs ("past jobs" of the run details), and a model's dependants.
        Index("ix_runs_parent_kind", "parent_run_id", "kind"),
        # Two processes creating a run for the same trial: the second insert fails instead of doubling it.
        Index("ix_runs_sweep_trial", "sweep_id", "trial_number", unique=True),
        Index("ix_runs_audit_fold", "audit_id", "fold", unique=True),
        ForeignKeyConstraint(["sweep_id", "sweep_n_trials"], ["sweeps.id", "sweeps.n_trials"], ondelete="SET NULL",
                             name="fk_runs_sweep_budget"),
        CheckConstraint(TRIAL_IN_BUDGET, name="ck_runs_trial_in_budget"),
        Index("ix_runs_seed_group", "seed_group", "group_seed", unique=True),
        CheckConstraint(SEED_GROUP_COMPLETE, name="ck_runs_seed_group"),
    )


class MetricPoint(Base):
    """One value of one curve (``train/loss``, ``eval/f1_macro``, ...) at one step."""

    __tablename__ = "metric_points"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    name: Mapped[str] = mapped_column(String(80))
    value: Mapped[float] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)

    run: Mapped[Run] = relationship(back_populates="points")

    __table_args__ = (Index("ix_metric_points_run_step", "run_id", "name", "step"),)


class Artifact(Base):
    __tablename__ = "artifacts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(40))  # model, checkpoint, metrics, predictions, log, merged-model
    path: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)

    run: Mapped[Run] = relationship(back_populates="artifacts")


class Playground(Base):
    __tablename__ = "playgrounds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # the user who made it (accounts: workbench/services/access.py); NULL = made before accounts, an admin's
    owner_id: Mapped[Optional[int]] = mapped_column(Integer, nullable=True, index=True)
    slug: Mapped[str] = mapped_column(String(80), unique=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    # sha256 of the access token; NULL means public.
    token_hash: Mapped[Optional[str]] = mapped_column(String(64), nullable=True)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    # What answers its requests: "pytorch" (the run's model folder) or an exported ONNX variant
    # ("onnx-fp32", "onnx-int8", "onnx-fp16"; jobs.export.runtime.RUNTIMES).
    runtime: Mapped[str] = mapped_column(String(16), server_default="pytorch", nullable=False)


class Worker(Base):
    """A live `workbench worker` (or embedded worker): lets `train --wait` and the UI know one is there."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(120), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(200), default="")
    pid: Mapped[int] = mapped_column(Integer, default=0)
    max_jobs: Mapped[int] = mapped_column(Integer, default=1)
    # Slots of its short-job lane (WORKBENCH_SHORT_JOBS), beside ``max_jobs``; 0 for workers older than the lane.
    short_jobs: Mapped[int] = mapped_column(Integer, default=0, server_default="0", nullable=False)
    gpus: Mapped[str] = mapped_column(String(200), default="")
    started_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    heartbeat_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow, index=True)


class Sweep(Base):
    """A hyper-parameter search: its spec (``jobs.specs.sweep.SweepSpec``), its Optuna study and state.

    The study itself (trials, parameters, reported values) lives in Optuna's tables in the same
    database; the trials' runs point here through ``Run.sweep_id``. ``lock_owner``/``lock_until``
    is a short lease, renewed while its holder works: whoever holds it is the only process asking
    Optuna for trials of this sweep. ``n_trials`` (also in the spec) is the trial budget the runs'
    composite foreign key and CHECK enforce; it never changes once trials exist.
    """

    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # the user who made it (accounts: workbench/services/access.py); NULL = made before accounts, an admin's
    owner_id: Mapped[Optional[int]] = mapped_column(Integer, nullable=True, index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    task: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(16), default=SWEEP_RUNNING, index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    study_name: Mapped[str] = mapped_column(String(120), unique=True)
    n_trials: Mapped[int] = mapped_column(Integer)
    # Why a failed sweep stopped (the error its first trials all ended with).
    error: Mapped[Optional[str]] = mapped_column(Text, nullable=True)
    lock_owner: Mapped[Optional[str]] = mapped_column(String(120), nullable=True)
    lock_until: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)
    # The MLflow parent run whose children are the sweep's trials (jobs.tracking); NULL until a trial is mirrored.
    mlflow_run_id: Mapped[Optional[str]] = mapped_column(String(64), nullable=True)

    __table_args__ = (
        # The target of the runs' (sweep_id, sweep_n_trials) foreign key.
        UniqueConstraint("id", "n_trials", name="uq_sweeps_id_n_trials"),
        CheckConstraint("n_trials >= 1", name="ck_sweeps_n_trials"),
    )


class Audit(Base):
    """A search for wrong labels in a dataset (``workbench.services.audits``): k fold runs, each
    trained on k-1 folds and predicting the held-out one; the ranking is computed from their
    ``heldout.npz`` once every fold has succeeded and kept in ``folder``. Its state follows from
    its fold runs' states, so a retried fold or a crashed worker needs nothing here."""

    __tablename__ = "audits"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # the user who made it (accounts: workbench/services/access.py); NULL = made before accounts, an admin's
    owner_id: Mapped[Optional[int]] = mapped_column(Integer, nullable=True, index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    dataset_id: Mapped[Optional[str]] = mapped_column(ForeignKey("datasets.id", ondelete="SET NULL"),
                                                      nullable=True, index=True)
    task: Mapped[str] = mapped_column(String(40))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)  # folds, model, preset, seed, method
    folder: Mapped[str] = mapped_column(Text)
    # Filled when the ranking is written: issue count and examples audited (the rows are in folder).
    summary: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)


class AuditDecision(Base):
    """What the user decided for one flagged example: keep, relabel (to ``label``) or drop.
    One row per example, so two people marking different rows never overwrite each other."""

    __tablename__ = "audit_decisions"

    audit_id: Mapped[int] = mapped_column(ForeignKey("audits.id", ondelete="CASCADE"), primary_key=True)
    example: Mapped[str] = mapped_column(String(40), primary_key=True)  # "train:17", "validation:3"
    action: Mapped[str] = mapped_column(String(16))
    label: Mapped[Optional[Any]] = mapped_column(JSON, nullable=True)  # a class name, or a tag list
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow, onupdate=utcnow)


# Labelling projects (workbench.services.labelling, jobs.labelling). What to ask next: margin on the calibrated
# scores taken from distinct clusters (the default), entropy, random, or one item a cluster (clusters only).
STRATEGY_MARGIN, STRATEGY_ENTROPY, STRATEGY_RANDOM, STRATEGY_CLUSTERS = "margin", "entropy", "random", "clusters"
STRATEGIES = (STRATEGY_MARGIN, STRATEGY_ENTROPY, STRATEGY_RANDOM, STRATEGY_CLUSTERS)
# What a label event did: gave or changed an item's label, skipped it, or undid the user's last label event.
EVENT_LABEL, EVENT_SKIP, EVENT_UNDO = "label", "skip", "undo"
EVENT_ACTIONS = (EVENT_LABEL, EVENT_SKIP, EVENT_UNDO)


class LabelProject(Base):
    """A pool of texts to label, with its label set (``LabelClass``), items (``LabelItem``) and their history
    (``LabelEvent``). ``folder`` holds what is no row: the source file and the pool's cached embeddings."""

    __tablename__ = "label_projects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # the user who made it (accounts: workbench/services/access.py); NULL = made before accounts, an admin's
    owner_id: Mapped[Optional[int]] = mapped_column(Integer, nullable=True, index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    multi_label: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false(), nullable=False)
    folder: Mapped[str] = mapped_column(Text)
    source_name: Mapped[str] = mapped_column(String(300), default="")
    # The frozen encoder that embeds the pool (a catalogue name or a path), and the query strategy (STRATEGIES).
    model: Mapped[str] = mapped_column(String(300))
    strategy: Mapped[str] = mapped_column(String(16), default=STRATEGY_MARGIN, server_default=STRATEGY_MARGIN)
    # The share of queries drawn at random (the unbiased estimate and the random-sampling control).
    random_share: Mapped[float] = mapped_column(Float, default=0.1, server_default="0.1")
    # The fast model is refitted after this many new labels.
    refit_every: Mapped[int] = mapped_column(Integer, default=10, server_default="10")
    # Labels counted when the pool was last ranked (by the cold start or a refit): the next refit is due at
    # ``ranked_at_labels + refit_every``.
    ranked_at_labels: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_by: Mapped[str] = mapped_column(String(120), default="")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)

    __table_args__ = (
        CheckConstraint("random_share >= 0 AND random_share <= 1", name="ck_label_projects_random_share"),
        CheckConstraint("refit_every >= 1", name="ck_label_projects_refit_every"),
    )


class LabelClass(Base):
    """One label of a project's label set, in the order of its keyboard shortcut (position 0 is key 1)."""

    __tablename__ = "label_classes"

    project_id: Mapped[int] = mapped_column(ForeignKey("label_projects.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    # One line that says what the label means; also what the zero-shot suggestions compare the texts with.
    description: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (UniqueConstraint("project_id", "name", name="uq_label_classes_name"),)


class LabelItem(Base):
    """One text of a project's pool, its current label and where it stands in the ranking.

    ``label`` is the current answer (a class name; a list of names for a multi-label project), NULL while
    unlabelled; its history is in ``label_events``. An item is handed to one labeller at a time: a claim sets
    ``claimed_by``/``claim_until`` in ONE conditional UPDATE, as the queue claims runs."""

    __tablename__ = "label_items"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("label_projects.id", ondelete="CASCADE"))
    # 0..n-1 in the order the texts were added: also the item's row in the project's embedding cache.
    position: Mapped[int] = mapped_column(Integer)
    # The source's id column, or the item's line in its file when it had none.
    external_id: Mapped[str] = mapped_column(String(200))
    text: Mapped[str] = mapped_column(Text)
    label: Mapped[Optional[Any]] = mapped_column(JSON, nullable=True)
    labelled_by: Mapped[Optional[str]] = mapped_column(String(120), nullable=True)
    labelled_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)
    # Embedded into the cache already (new texts are embedded incrementally).
    embedded: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false(), nullable=False)
    cluster: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    # Where the current ranking puts it: lower is asked sooner; NULL when not ranked.
    rank: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    # Put in the queue by the random share: its label is an unbiased sample of the pool.
    random_pick: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false(), nullable=False)
    # Sent back to be labelled again (from a label audit): asked before any unlabelled item.
    relabel: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false(), nullable=False)
    # The model's answer and its calibrated confidence (zero-shot, the fast model, or a real run's predictions).
    suggestion: Mapped[Optional[Any]] = mapped_column(JSON, nullable=True)
    confidence: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    skipped_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)
    claimed_by: Mapped[Optional[str]] = mapped_column(String(120), nullable=True)
    claim_until: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)

    __table_args__ = (
        UniqueConstraint("project_id", "position", name="uq_label_items_position"),
        Index("ix_label_items_project_external", "project_id", "external_id"),
        # The claim's tiers (the ranking, then the unranked texts by position) and the label counts (migration
        # 0013_labelling_indexes, which drops 0012's (project_id, rank): the planner took it and sorted the pool).
        Index("ix_label_items_project_rank_position", "project_id", "rank", "position"),
        Index("ix_label_items_project_relabel", "project_id", "relabel"),
        Index("ix_label_items_project_skipped", "project_id", "skipped_at"),
        Index("ix_label_items_project_labelled", "project_id", "labelled_at"),
        Index("ix_label_items_project_claimed", "project_id", "claimed_by"),
    )


class LabelEvent(Base):
    """One thing a labeller did to one item, kept forever: a label given or changed (``previous`` is what it
    replaced), a skip, or an undo (``undoes`` names the event it took back, which is then marked ``undone``)."""

    __tablename__ = "label_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("label_projects.id", ondelete="CASCADE"))
    item_id: Mapped[int] = mapped_column(ForeignKey("label_items.id", ondelete="CASCADE"), index=True)
    action: Mapped[str] = mapped_column(String(16))
    label: Mapped[Optional[Any]] = mapped_column(JSON, nullable=True)
    previous: Mapped[Optional[Any]] = mapped_column(JSON, nullable=True)
    user: Mapped[str] = mapped_column(String(120), default="")
    at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    # What the model suggested when the label was given, and whether the item was a random-share pick.
    suggestion: Mapped[Optional[Any]] = mapped_column(JSON, nullable=True)
    random_pick: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false(), nullable=False)
    undone: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false(), nullable=False)
    undoes: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    # Recorded in bulk (the labels a project's file held, an import of labels), not by a labeller one at a time:
    # left out of the labels per minute (migration 0013_labelling_indexes).
    bulk: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false(), nullable=False)

    __table_args__ = (
        Index("ix_label_events_project_user", "project_id", "user", "id"),
        Index("ix_label_events_project_at", "project_id", "at"),  # labels per minute
        CheckConstraint("action IN ('label', 'skip', 'undo')", name="ck_label_events_action"),
    )


class LabelEstimate(Base):
    """One point of a project's learning curve, written by each refit: the estimated score (accuracy, macro-F1
    for multi-label) at ``labels`` labels with its interval, the majority-class baseline beside it, and the
    agreement of this refit's predictions with the previous one's (the stopping rule reads it)."""

    __tablename__ = "label_estimates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("label_projects.id", ondelete="CASCADE"), index=True)
    labels: Mapped[int] = mapped_column(Integer)
    metric: Mapped[str] = mapped_column(String(40))
    estimate: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    low: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    high: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    majority: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    # Where the estimate comes from: "random share" (n held-out random picks) or "cross-validation".
    source: Mapped[str] = mapped_column(String(40), default="")
    agreement: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


# --- accounts (workbench/services/accounts.py, docs/access.md) ------------------------------------------------

class User(Base):
    """A person who signs in. ``password_hash`` is Argon2id (argon2-cffi's encoded form, parameters included);
    a disabled user cannot sign in and their sessions and tokens stop working."""

    __tablename__ = "users"
    __table_args__ = (CheckConstraint("role IN ('viewer', 'editor', 'admin')", name="ck_users_role"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(120), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16))
    disabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    last_sign_in_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)


class WebSession(Base):
    """A signed-in browser: the cookie's value is never stored, only its sha256."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime)
    address: Mapped[str] = mapped_column(String(64), default="")


class ApiToken(Base):
    """A user's API token (``Authorization: Bearer wbt_…``): shown once, stored as its sha256; ``scope`` is
    ``read`` or ``write`` and never grants more than the user's role."""

    __tablename__ = "api_tokens"
    __table_args__ = (CheckConstraint("scope IN ('read', 'write')", name="ck_api_tokens_scope"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(120))
    scope: Mapped[str] = mapped_column(String(8))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    expires_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)
    last_used_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)
    revoked_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime, nullable=True)


class Activity(Base):
    """Who did what and when. Append-only for everyone: database triggers refuse UPDATE and DELETE (migration
    0015_accounts). No password and no token value is ever in it (a token by its name)."""

    __tablename__ = "activity"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow, index=True)
    user_id: Mapped[Optional[int]] = mapped_column(Integer, nullable=True, index=True)  # no FK: rows outlive users
    user_name: Mapped[str] = mapped_column(String(120), default="")
    token_name: Mapped[Optional[str]] = mapped_column(String(120), nullable=True)
    action: Mapped[str] = mapped_column(String(32), index=True)
    target_kind: Mapped[Optional[str]] = mapped_column(String(32), nullable=True)
    target_id: Mapped[Optional[str]] = mapped_column(String(120), nullable=True)
    detail: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON, nullable=True)
    address: Mapped[str] = mapped_column(String(64), default="")
