"""Every setting of the workbench, declared once as data.

Each setting has a name, a default and a help text, and is read from the
environment variable ``WORKBENCH_<NAME>``. docs/settings.md documents every one of
them (a test checks this), so add a row there when you add one here.

They live on the bottom floor because every floor reads them: ``home`` and
``database_url`` say where storage keeps everything, the worker and the
training process read the queue settings, the server the rest.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from storage.errors import ConfigError

ENV_PREFIX = "WORKBENCH_"


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    help: str
    parse: Callable[[str], Any] = str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


def parse_addresses(value: str) -> str:
    """A comma-separated list of IP addresses or networks (or ``*``), normalised; ValueError otherwise."""
    import ipaddress

    items = [item.strip() for item in value.split(",") if item.strip()]
    for item in items:
        if item != "*":
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address, a network such as 10.0.0.0/8, or *") from None
    return ",".join(items)


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected true/false, got {value!r}")


SETTINGS: tuple[Setting, ...] = (
    Setting("home", ".workbench", "Folder for uploaded datasets, run artifacts, logs and the SQLite database."),
    Setting("database_url", "", "SQLAlchemy URL of the database. Empty means SQLite at `<home>/workbench.db`; "
            "use `postgresql+psycopg://user:pw@host/db` to share one queue between several worker machines."),
    Setting("host", "127.0.0.1", "Interface the web server listens on (`0.0.0.0` to reach it from other machines)."),
    Setting("port", 7860, "Port of the web server.", int),
    Setting("forwarded_allow_ips", "", "Addresses of reverse proxies whose `X-Forwarded-For` and "
            "`X-Forwarded-Proto` headers are believed (comma separated; networks like `10.0.0.0/8`; `*` trusts "
            "every peer). Empty means no proxy is trusted: the client address is the connection's, whatever the "
            "headers say (`workbench serve --forwarded-allow-ips`).", parse_addresses),
    Setting("auth", "", "Protects the whole workbench: `user:password`, several separated by commas, or the path "
            "of a file with one `user:password` per line. Empty means no login. Playgrounds have their own tokens."),
    Setting("session_hours", 12.0, "How long a browser stays signed in after signing in, in hours (accounts: "
            "docs/access.md).", float),
    Setting("device", "auto", "Where training runs: `auto` (GPU when present, else CPU), `cpu`, `cuda` or `cuda:N`."),
    Setting("max_jobs", 1, "Most runs one worker executes at the same time.", int),
    Setting("short_jobs", 1, "Prediction, evaluation and export jobs one worker runs beside its `WORKBENCH_MAX_JOBS` "
            "runs (its short-job lane), so that they do not wait behind a long training run; each shares the CPU "
            "with the training beside it. 0 turns the lane off: every job waits its turn.", int),
    Setting("cpu_procs", 1, "Data-parallel training processes per run on a worker without GPUs (DDP with the gloo "
            "backend; `workbench worker --procs N`). A run spec's `procs` overrides it. Each process gets "
            "cores/N threads.", int),
    Setting("preload_jobs", True, "Start each CPU job of one process by forking it from a warm process that has "
            "imported torch and transformers once, instead of a new Python process that imports them again (a "
            "small job ends in about half the time). The warm process holds about 0.5 GB while jobs come and exits "
            "after 5 idle minutes. A job forked from it dies with the worker's process, not with the warm process; a "
            "launch waits for its imports at most 15 s (then the job starts as a new process). `false`: every "
            "job starts as a new process (docs/runs-and-queue.md, \"How a job starts\").", _bool),
    Setting("max_upload_mb", 2048, "Largest dataset file accepted, in MB. Files are read as a stream, so this bounds "
            "disk use, not memory.", int),
    Setting("heartbeat_seconds", 5.0, "How often a worker records that a running job is alive.", float),
    Setting("lease_seconds", 60.0, "A running job whose worker sent no heartbeat for this long is taken over by "
            "another worker and resumed from its last checkpoint.", float),
    Setting("max_attempts", 3, "How many times a run may be started when its worker keeps dying (crash, kill -9, "
            "a lost machine); each start resumes from the last checkpoint. After that the run fails.", int),
    Setting("cancel_timeout_seconds", 30.0, "How long a cancelled run may take to stop at a step boundary and save "
            "a checkpoint before it is killed.", float),
    Setting("playground_memory_mb", 2048, "Memory bound for models cached by playgrounds; least recently used "
            "models are evicted beyond it.", int),
    Setting("playground_concurrency", 2, "Playground predictions computed at the same time by one server process "
            "(every playground, page and API together); each holds a bounded amount of memory.", int),
    Setting("playground_queue", 8, "Playground predictions that may wait for one of those slots, each for at most "
            "30 s; beyond that a prediction answers 503 with `Retry-After` at once.", int),
    Setting("playground_max_tokens", 32768, "Most tokens one prediction request may hold after each input is cut "
            "to the run's training length (inputs x padded length, question-answering windows included); a larger "
            "request answers 422.", int),
    Setting("playground_rate_limit", 60, "Predictions a minute one client address may ask of public playgrounds "
            "(page and API; token-protected playgrounds are not limited); beyond it 429 with `Retry-After`. "
            "0 turns the limit off.", int),
    Setting("playground_max_in_flight", 1, "Playground predictions one client may have running or waiting at the "
            "same time (a client: its address, and on a token-protected playground also its token); one more "
            "answers 429 with `Retry-After` at once. 0 turns the bound off.", int),
    Setting("playground_token_budget", 20000, "Model input tokens a minute one client may spend on playground "
            "predictions (inputs x padded length after truncation, counted once answered; a client address, and "
            "on a token-protected playground also its token). A client in debt answers 429 with `Retry-After` "
            "until it is refilled. 0 turns the budget off.", int),
    Setting("mlflow_uri", "", "Mirror every training run to MLflow (docs/tracking.md): a `sqlite:///path/mlflow.db` "
            "store or an `http://host:5000` tracking server. Empty means no MLflow mirror."),
    Setting("mlflow_experiment", "workbench", "The MLflow experiment runs are mirrored into (made when missing)."),
    Setting("mlflow_ui_url", "", "Address of the MLflow UI (for example `http://mlflow.example:5000`); when set, the "
            "run page links each mirrored run to its page there."),
    Setting("mlflow_log_model", False, "Also copy each run's model folder into its MLflow run's artifacts (can be "
            "hundreds of MB a run).", _bool),
    Setting("tracking_timeout_seconds", 5.0, "Longest a run waits on a tracker (MLflow) at its end, and the timeout "
            "of each request to a tracking server. A tracker that is down or slower leaves one warning in the run's "
            "log and a badge on its page; `workbench runs mirror` completes the record later.", float),
    Setting("tensorboard_dir", "", "Mirror every training run to TensorBoard event files: one folder per run, "
            "`run-<id>-<name>`, below this folder. Empty means no TensorBoard mirror."),
    Setting("offline", True, "Never download models from a hub at run time (sets HF_HUB_OFFLINE). Set false on a "
            "machine with internet access to use hub models that are not in the local cache.", _bool),
)

_BY_NAME = {s.name: s for s in SETTINGS}


@dataclasses.dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str
    host: str
    port: int
    forwarded_allow_ips: str
    auth: str
    session_hours: float
    device: str
    max_jobs: int
    short_jobs: int
    cpu_procs: int
    preload_jobs: bool
    max_upload_mb: int
    heartbeat_seconds: float
    lease_seconds: float
    max_attempts: int
    cancel_timeout_seconds: float
    playground_memory_mb: int
    playground_concurrency: int
    playground_queue: int
    playground_max_tokens: int
    playground_rate_limit: int
    playground_max_in_flight: int
    playground_token_budget: int
    mlflow_uri: str
    mlflow_experiment: str
    mlflow_ui_url: str
    mlflow_log_model: bool
    tracking_timeout_seconds: float
    tensorboard_dir: str
    offline: bool

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "Settings":
        """Read every setting from ``environ`` (default ``os.environ``); keyword overrides win."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for setting in SETTINGS:
            if setting.name in overrides and overrides[setting.name] is not None:
                values[setting.name] = overrides[setting.name]
                continue
            raw = environ.get(setting.env)
            if raw is None or raw == "":
                values[setting.name] = setting.default
                continue
            try:
                values[setting.name] = setting.parse(raw)
            except ValueError as exc:
                raise ConfigError(f"{setting.env}={raw!r} is not valid: {exc}. {setting.help}") from None
        values["home"] = Path(values["home"]).expanduser().resolve()
        if not values["database_url"]:
            values["database_url"] = f"sqlite:///{values['home'] / 'workbench.db'}"
        for name in ("max_jobs", "max_attempts", "cpu_procs", "playground_concurrency", "playground_max_tokens"):
            if values[name] < 1:
                raise ConfigError(f"{_BY_NAME[name].env} must be at least 1")
        for name in ("short_jobs", "playground_queue", "playground_rate_limit", "playground_max_in_flight",
                     "playground_token_budget"):
            if values[name] < 0:
                raise ConfigError(f"{_BY_NAME[name].env} must be 0 or more")
        if values["tracking_timeout_seconds"] <= 0:
            raise ConfigError(f"{_BY_NAME['tracking_timeout_seconds'].env} must be more than 0")
        return cls(**values)

    # Folders below home. Created on demand by the code that writes there.
    @property
    def datasets_dir(self) -> Path:
        return self.home / "datasets"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def uploads_dir(self) -> Path:
        return self.home / "uploads"

    def as_env(self) -> dict[str, str]:
        """The settings as environment variables, for child processes."""
        out = {}
        for setting in SETTINGS:
            value = getattr(self, setting.name)
            out[setting.env] = str(value).lower() if isinstance(value, bool) else str(value)
        return out
