"""The sweep spec: a base run spec, a search space, an objective, a budget and a pruner.

The UI, ``workbench sweep --config sweep.yaml`` and the ``workbench sweep`` flags all
build a ``SweepSpec``; ``jobs.sweeps`` turns each of Optuna's trials into a normal
run spec with ``apply_params``. Parameter names are short and fixed (``PARAMETERS``),
so a typo is an error naming the known ones, not a silently ignored key.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

from jobs.spec import HEADLINE_METRICS, RunSpec
from workbench.errors import ConfigError

# Search-space name -> (section of the run spec, key), section None for the top level.
PARAMETERS: dict[str, tuple[Optional[str], str]] = {
    "learning_rate": ("train", "learning_rate"),
    "batch_size": ("train", "batch_size"),
    "epochs": ("train", "epochs"),
    "warmup_ratio": ("train", "warmup_ratio"),
    "weight_decay": ("train", "weight_decay"),
    "lora_r": ("lora", "r"),
    "lora_alpha": ("lora", "alpha"),
    "lora_dropout": ("lora", "dropout"),
    "model": (None, "model"),
}
PRUNERS = ("median", "successive-halving", "none")
DIRECTIONS = ("maximize", "minimize")
KINDS = ("float", "int", "categorical")
# Metrics where lower is better; every other headline metric is maximised by default.
LOWER_IS_BETTER = {"perplexity", "loss", "eval_loss"}


@dataclasses.dataclass
class ParamSpec:
    """One dimension of the search space: a range (``float``/``int``, optionally log-scaled) or choices."""

    kind: str
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    choices: Optional[list[Any]] = None

    def check(self, name: str) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"parameter {name}: unknown type {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.kind == "categorical":
            if not self.choices:
                raise ConfigError(f"parameter {name}: give at least one choice")
            return
        if self.low is None or self.high is None or not self.low <= self.high:
            raise ConfigError(f"parameter {name}: give low <= high (got {self.low}..{self.high})")
        if self.log and self.low <= 0:
            raise ConfigError(f"parameter {name}: a log-scaled range must start above 0")

    def describe(self) -> str:
        if self.kind == "categorical":
            return " | ".join(str(c) for c in self.choices or [])
        return f"{self.low:g} .. {self.high:g}" + (" (log)" if self.log else "") + (" int" if self.kind == "int" else "")


@dataclasses.dataclass
class SweepSpec:
    base: dict[str, Any]  # a RunSpec as a dict; the trials' parameters are set over it
    space: dict[str, ParamSpec]
    metric: str = ""  # the final-metrics key to optimise; "" = the task's main metric
    direction: str = ""  # maximize | minimize; "" = from the metric
    n_trials: int = 12
    parallelism: int = 2
    pruner: str = "median"
    seed: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        run = RunSpec.from_dict(self.base)  # raises ConfigError for a bad base spec
        self.metric = self.metric or HEADLINE_METRICS[run.task][0]
        self.direction = self.direction or ("minimize" if self.metric in LOWER_IS_BETTER else "maximize")
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"unknown direction {self.direction!r}; choose maximize or minimize")
        if self.pruner not in PRUNERS:
            raise ConfigError(f"unknown pruner {self.pruner!r}; choose one of {', '.join(PRUNERS)}")
        if self.n_trials < 1 or self.parallelism < 1:
            raise ConfigError("a sweep needs at least 1 trial and a parallelism of at least 1")
        if not self.space:
            raise ConfigError("the search space is empty; give at least one parameter")
        for name, param in self.space.items():
            if name not in PARAMETERS:
                raise ConfigError(f"unknown sweep parameter {name!r}; known: {', '.join(PARAMETERS)}")
            param.check(name)

    @property
    def task(self) -> str:
        return self.base["task"]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "SweepSpec":
        raw = dict(raw)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known - {"objective"})
        if unknown:
            raise ConfigError(f"unknown key(s) {', '.join(unknown)} in the sweep spec; known keys: "
                              f"{', '.join(sorted(known | {'objective'}))}")
        objective = raw.pop("objective", None) or {}
        if not isinstance(objective, Mapping):
            raise ConfigError("objective: give a mapping {metric: accuracy, direction: maximize}")
        raw.setdefault("metric", objective.get("metric", ""))
        raw.setdefault("direction", objective.get("direction", ""))
        space_raw = raw.pop("space", None) or {}
        if not isinstance(space_raw, Mapping):
            raise ConfigError("space: give a mapping of parameter name -> range or choices")
        if not isinstance(raw.get("base"), Mapping):
            raise ConfigError("base: give the run spec the trials start from (task, data, model, train, ...)")
        space = {name: parse_param(name, value) for name, value in space_raw.items()}
        try:
            return cls(space=space, **raw)
        except TypeError as exc:
            raise ConfigError(f"invalid sweep spec: {exc}") from None


def parse_param(name: str, value: Any) -> ParamSpec:
    """A search-space entry from a mapping (``{type, low, high, log}`` / ``{choices}``), a list of
    choices, or the flag form ``LOW..HIGH[:log]`` / ``A,B,C``."""
    if isinstance(value, ParamSpec):
        return value
    if isinstance(value, (list, tuple)):
        return ParamSpec("categorical", choices=list(value))
    if isinstance(value, str):
        return _parse_flag_value(name, value)
    if not isinstance(value, Mapping):
        raise ConfigError(f"parameter {name}: give {{low, high}}, {{choices}} or a list")
    value = dict(value)
    kind = value.pop("type", None) or value.pop("kind", None)
    if "choices" in value:
        kind = kind or "categorical"
    elif kind is None:
        both_int = all(isinstance(value.get(k), int) and not isinstance(value.get(k), bool) for k in ("low", "high"))
        kind = "int" if both_int else "float"
    try:
        param = ParamSpec(kind=kind, **value)
    except TypeError:
        raise ConfigError(f"parameter {name}: known keys are type, low, high, log, choices") from None
    for key in ("low", "high"):
        current = getattr(param, key)
        if isinstance(current, str):
            setattr(param, key, _number(name, current))
    return param


def _number(name: str, text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise ConfigError(f"parameter {name}: {text!r} is not a number") from None
    return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number


def _parse_flag_value(name: str, text: str) -> ParamSpec:
    """``1e-5..1e-4:log`` (a range; int when both ends are whole numbers written without a point) or ``16,32``."""
    text = text.strip()
    if ".." in text:
        bounds, _, option = text.partition(":")
        low_text, _, high_text = bounds.partition("..")
        low, high = _number(name, low_text.strip()), _number(name, high_text.strip())
        if option and option != "log":
            raise ConfigError(f"parameter {name}: after the range only ':log' is understood, got {option!r}")
        kind = "int" if isinstance(low, int) and isinstance(high, int) else "float"
        return ParamSpec(kind, low=low, high=high, log=option == "log")
    choices = [c.strip() for c in text.split(",") if c.strip()]
    return ParamSpec("categorical", choices=[_choice(c) for c in choices])


def _choice(text: str) -> Any:
    try:
        return _number("", text)
    except ConfigError:
        return text


def default_space(task: str, lora: bool = False) -> dict[str, ParamSpec]:
    """What a user would search first for ``task``: learning rate (log), batch size, warm-up, weight decay;
    LoRA's r and alpha when the base run uses LoRA. Ranges are those the literature tunes BERT over
    (Devlin et al.: lr 2e-5..5e-5, batch 16/32), widened for small models like the default MiniLM."""
    low, high = (1e-5, 2e-4) if task in ("text-classification", "token-classification") else (1e-5, 1e-4)
    space = {
        "learning_rate": ParamSpec("float", low=low, high=high, log=True),
        "batch_size": ParamSpec("categorical", choices=[16, 32]),
        "warmup_ratio": ParamSpec("float", low=0.0, high=0.2),
        "weight_decay": ParamSpec("float", low=0.0, high=0.1),
    }
    if lora:
        space["lora_r"] = ParamSpec("categorical", choices=[4, 8, 16])
        space["lora_alpha"] = ParamSpec("categorical", choices=[8, 16, 32])
    return space


def apply_params(base: Mapping[str, Any], params: Mapping[str, Any], name: str = "") -> RunSpec:
    """The run spec of one trial: ``base`` with each sampled parameter set (LoRA switched on when searched)."""
    raw = {key: (dict(value) if isinstance(value, Mapping) else value) for key, value in base.items()}
    for param, value in params.items():
        section, key = PARAMETERS[param]
        if section is None:
            raw[key] = value
            continue
        raw.setdefault(section, {})
        raw[section] = dict(raw[section] or {})
        raw[section][key] = value
        if section == "lora":
            raw["lora"]["enabled"] = True
    if name:
        raw["name"] = name
    return RunSpec.from_dict(raw)


def format_params(params: Mapping[str, Any]) -> str:
    """``learning_rate=3.2e-05, batch_size=16`` for names and tables."""
    def show(value: Any) -> str:
        if isinstance(value, float) and value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e4):
            return f"{value:.2e}"
        if isinstance(value, float):
            return f"{value:.4g}" if not math.isnan(value) else "nan"
        return str(value)

    return ", ".join(f"{k}={show(v)}" for k, v in params.items())
