"""The sweep spec: a base run spec, a search space, an objective, a budget and a pruner.

The UI, ``workbench sweep --config sweep.yaml`` and the ``workbench sweep`` flags all
build a ``SweepSpec``; ``jobs.sweeps.driver`` turns each of Optuna's trials into a normal
run spec with ``apply_params``. Parameter names are short and fixed (``PARAMETERS``),
so a typo is an error naming the known ones, not a silently ignored key. Every field is
typed and range-checked before a sweep is stored, and every value a search dimension can
sample must fit the run-spec field it sets (a batch-size range starts at 1, a learning
rate is above 0), so a trial never fails on a value the spec let through.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

from jobs.specs.fields import Field, check_fields, refuse_unknown, show
from jobs.specs.run import RUN_FIELDS, SECTIONS, RunSpec, check_run_mapping, objective_metrics
from storage.errors import ConfigError

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
# Metrics where lower is better; every other reported metric (jobs.specs.run.REPORTED_METRICS) is maximised by default.
LOWER_IS_BETTER = {"perplexity", "mlm_loss"}
MAX_CHOICES = 100
# The sweep's own fields; the base run spec is checked as a run spec (jobs.specs.run).
SWEEP_FIELDS: dict[str, Field] = {
    "name": Field("text"),
    "metric": Field("text"),
    "direction": Field("choice", choices=DIRECTIONS),
    "n_trials": Field("int", 1, 1000),
    "parallelism": Field("int", 1, 64),
    "pruner": Field("choice", choices=PRUNERS),
    "seed": Field("int", 0, 2**32 - 1),
}
LABEL = "sweep spec"


def parameter_field(name: str) -> Field:
    """The rule every sampled value of search parameter ``name`` must pass: that of the run-spec field it sets."""
    section, key = PARAMETERS[name]
    rule = RUN_FIELDS[key] if section is None else SECTIONS[section][1][key]
    return dataclasses.replace(rule, optional=False)


@dataclasses.dataclass
class ParamSpec:
    """One dimension of the search space: a range (``float``/``int``, optionally log-scaled) or choices."""

    kind: str
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    choices: Optional[list[Any]] = None

    def check(self, name: str) -> None:
        """Every value this dimension can sample fits the run-spec field it sets (``parameter_field``)."""
        where = f"space.{name}"
        Field("choice", choices=KINDS).check(LABEL, f"{where}.type", self.kind)
        Field("bool").check(LABEL, f"{where}.log", self.log)
        rule = parameter_field(name)
        if self.kind == "categorical":
            self._check_choices(where, rule)
            return
        if self.choices is not None:
            raise ConfigError(f"{LABEL}: {where}: give either low and high (a range) or choices, not both")
        whole = Field("int", what="a whole number (the range has type int)")
        for key in ("low", "high"):
            value = getattr(self, key)
            if value is None:
                raise ConfigError(f"{LABEL}: {where}: give low and high (a range) or choices")
            (whole if self.kind == "int" else Field("number", what="a finite number")).check(
                LABEL, f"{where}.{key}", value)
        if not self.low <= self.high:
            raise ConfigError(f"{LABEL}: {where}: give low <= high, got {show(self.low)}..{show(self.high)}")
        if self.log and self.low <= 0:
            raise ConfigError(f"{LABEL}: {where}: a log-scaled range must start above 0, got low {show(self.low)}")
        if self.kind == "float" and rule.kind == "int":
            raise ConfigError(f"{LABEL}: {where}: {name} takes whole numbers; give a range with whole-number "
                              "ends (type int, e.g. 8..64) or choices")
        if rule.kind not in ("int", "number"):
            raise ConfigError(f"{LABEL}: {where}: {name} is searched over choices, not a range; give choices")
        for key in ("low", "high"):
            rule.check(LABEL, f"{where}.{key}", getattr(self, key))

    def _check_choices(self, where: str, rule: Field) -> None:
        if self.low is not None or self.high is not None:
            raise ConfigError(f"{LABEL}: {where}: give either low and high (a range) or choices, not both")
        if not isinstance(self.choices, list) or not self.choices or len(self.choices) > MAX_CHOICES:
            raise ConfigError(f"{LABEL}: {where}.choices must be a list of 1 to {MAX_CHOICES} numbers or texts, "
                              f"got {show(self.choices)}")
        for index, choice in enumerate(self.choices):
            if choice is None or isinstance(choice, (bool, Mapping, list, tuple)):
                raise ConfigError(f"{LABEL}: {where}.choices[{index}] must be a number or a text, got {show(choice)}")
            rule.check(LABEL, f"{where}.choices[{index}]", choice)

    def describe(self) -> str:
        if self.kind == "categorical":
            return " | ".join(str(c) for c in self.choices or [])
        return f"{self.low:g} .. {self.high:g}" + (" (log)" if self.log else "") + (" int" if self.kind == "int" else "")

    def sample(self) -> Any:
        """One value this dimension can give (its low end or first choice)."""
        return self.choices[0] if self.kind == "categorical" else self.low


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
        run = RunSpec.from_dict(self.base, LABEL, "base.")  # raises ConfigError naming the base's field
        check_fields(LABEL, "", _given({key: getattr(self, key) for key in SWEEP_FIELDS}), SWEEP_FIELDS)
        reported = objective_metrics(run)
        self.metric = self.metric or reported[0]
        if self.metric not in reported:
            raise ConfigError(f"{LABEL}: metric: {run.task} does not report {show(self.metric)}; choose one of "
                              f"{', '.join(reported)}")
        self.direction = self.direction or ("minimize" if self.metric in LOWER_IS_BETTER else "maximize")
        if not isinstance(self.space, Mapping) or not self.space:
            raise ConfigError("the search space is empty; give at least one parameter")
        for name, param in self.space.items():
            if name not in PARAMETERS:
                raise ConfigError(f"unknown sweep parameter {show(name)}; known: {', '.join(PARAMETERS)}")
            if not isinstance(param, ParamSpec):
                raise ConfigError(f"{LABEL}: space.{name}: give {{low, high}}, {{choices}} or a list, "
                                  f"got {show(param)}")
            param.check(name)
        try:
            apply_params(self.base, {name: param.sample() for name, param in self.space.items()})
        except ConfigError as exc:
            raise ConfigError(f"{LABEL}: a trial of this space would not run: "
                              f"{str(exc).removeprefix('run spec: ')}") from None

    @property
    def task(self) -> str:
        return self.base["task"]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "SweepSpec":
        """The spec of a mapping (a sweep file, the Sweep form, a stored sweep); every field is checked."""
        check_sweep_mapping(raw)
        raw = dict(raw)
        objective = raw.pop("objective", None) or {}
        raw.setdefault("metric", objective.get("metric", ""))
        raw.setdefault("direction", objective.get("direction", ""))
        if not isinstance(raw.get("base"), Mapping):
            raise ConfigError("base: give the run spec the trials start from (task, data, model, train, ...)")
        space = {name: parse_param(name, value) for name, value in (raw.pop("space", None) or {}).items()}
        return cls(space=space, **raw)


def check_sweep_mapping(raw: Any) -> None:
    """Every key of a sweep spec mapping known and every value present typed and in range.

    Only what is present is checked (a sweep file may leave the base's task or data to flags); the
    objective metric is checked against the task by ``SweepSpec`` itself.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{LABEL} must be a mapping (base:, space:, n_trials:, ...), got {show(raw)}")
    known = {f.name for f in dataclasses.fields(SweepSpec)} | {"objective"}
    unknown = sorted(str(key)[:60] for key in set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)} in the sweep spec; known keys: "
                          f"{', '.join(sorted(known))}")
    objective = raw.get("objective") or {}
    if not isinstance(objective, Mapping):
        raise ConfigError("objective: give a mapping {metric: accuracy, direction: maximize}")
    refuse_unknown(LABEL, "objective", objective, ("metric", "direction"))
    check_fields(LABEL, "objective.", _given(objective), SWEEP_FIELDS)
    check_fields(LABEL, "", _given(raw), SWEEP_FIELDS)
    if raw.get("base") is not None:
        check_run_mapping(raw["base"], LABEL, "base.")
    space = raw.get("space") or {}
    if not isinstance(space, Mapping):
        raise ConfigError("space: give a mapping of parameter name -> range or choices")
    for name, value in space.items():
        if name not in PARAMETERS:
            raise ConfigError(f"unknown sweep parameter {show(name)}; known: {', '.join(PARAMETERS)}")
        parse_param(name, value).check(name)


def _given(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` less a metric or direction left empty (null or ""), which means: the default."""
    return {key: value for key, value in values.items()
            if not (key in ("metric", "direction") and (value is None or value == ""))}


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
        raise ConfigError(f"{LABEL}: space.{name}: give {{low, high}}, {{choices}} or a list, got {show(value)}")
    value = dict(value)
    refuse_unknown(LABEL, f"space.{name}", value, ("type", "kind", "low", "high", "log", "choices"))
    kind = value.pop("type", None) or value.pop("kind", None)
    if "choices" in value:
        kind = kind or "categorical"
    elif kind is None:
        both_int = all(isinstance(value.get(k), int) and not isinstance(value.get(k), bool) for k in ("low", "high"))
        kind = "int" if both_int else "float"
    value.pop("kind", None)
    param = ParamSpec(kind=kind, **value)
    for key in ("low", "high"):
        current = getattr(param, key)
        if isinstance(current, str):
            setattr(param, key, _number(name, current))
    return param


def _number(name: str, text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise ConfigError(f"{LABEL}: space.{name}: {show(text)} is not a number") from None
    return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number


def _parse_flag_value(name: str, text: str) -> ParamSpec:
    """``1e-5..1e-4:log`` (a range; int when both ends are whole numbers written without a point) or ``16,32``."""
    text = text.strip()
    if ".." in text:
        bounds, _, option = text.partition(":")
        low_text, _, high_text = bounds.partition("..")
        low, high = _number(name, low_text.strip()), _number(name, high_text.strip())
        if option and option != "log":
            raise ConfigError(f"{LABEL}: space.{name}: after the range only ':log' is understood, got {option!r}")
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
