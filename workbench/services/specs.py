"""What the edges need to build and show specs, without reaching past the services into ``jobs``: the run and
sweep spec types, the choices a form offers (tasks, methods, presets' step floors, pruners, the default model),
the headline metrics, how steps and epochs are said, reading spec text, and a sweep trial's name.

The edges (UI, CLI, playgrounds) import these from here; ``jobs.specs`` stays the one definition.
"""
from __future__ import annotations

from jobs.specs.files import load_json, load_run_spec_file, load_sweep_spec_file, load_yaml
from jobs.specs.hyperparameters import METHODS, MIN_STEPS, QUICK_MAX_EXAMPLES, steps_and_epochs
from jobs.specs.run import (CHUNKING_CHOICES, DEFAULT_MODEL, HEADLINE_METRICS, TASKS, DataSpec, LoraSpec, RunSpec, TrainSpec,
                            check_run_mapping)
from jobs.specs.sweep import PRUNERS, SweepSpec, check_sweep_mapping, default_space, format_params, parse_param
from jobs.sweeps.driver import trial_name

__all__ = ["CHUNKING_CHOICES", "DEFAULT_MODEL", "HEADLINE_METRICS", "METHODS", "MIN_STEPS", "PRUNERS", "QUICK_MAX_EXAMPLES", "TASKS", "DataSpec", "LoraSpec",
           "RunSpec", "SweepSpec", "TrainSpec", "check_run_mapping", "check_sweep_mapping", "default_space", "format_params", "load_json", "load_run_spec_file",
           "load_sweep_spec_file", "load_yaml", "parse_param", "steps_and_epochs", "trial_name"]
