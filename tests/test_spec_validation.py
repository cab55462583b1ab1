"""Spec text a user writes is read within limits and every field is checked before anything is stored.

The same refusals through every door a spec comes in by: `workbench sweep --config`, `workbench train
--config`, the Sweep form (search space YAML, base run spec JSON, its number fields) and the Train form.
Each refusal is one message naming the field, exit code 2 in the CLI, and no sweep, run or dataset row.
"""
from __future__ import annotations

import json
import math
import re
import time
import tracemalloc

import pytest

from jobs.specs.files import MAX_SPEC_BYTES, MAX_SPEC_DEPTH, load_json, load_yaml
from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from jobs.specs.sweep import SweepSpec
from tests.conftest import ROOT
from tests.tiny_models import classification_records, write_jsonl
from workbench.errors import ConfigError
from workbench.services import datasets, runs, sweeps
from workbench.ui import sweep_tab, train_tab


@pytest.fixture
def dataset_id(wb, tmp_path):
    """A stored two-label dataset: specs name it, so a refused spec imports nothing either."""
    records = [{**r, "text": f"{r['text']} {i}"} for i, r in enumerate(classification_records(30))]
    return datasets.import_dataset(wb, write_jsonl(tmp_path / "train.jsonl", records), "text-classification").id


def nothing_stored(wb, dataset_count: int = 1) -> bool:
    return (sweeps.list_sweeps(wb) == [] and runs.list_runs(wb) == []
            and len(datasets.list_datasets(wb)) == dataset_count)


def sweep_yaml(dataset_id: str, **lines: str) -> str:
    """A valid sweep file, with top-level keys replaced by the YAML text given for them."""
    keys = {"base": f"{{task: text-classification, model: 'fake:succeed', data: {{dataset_id: {dataset_id}}}}}",
            "space": "{learning_rate: {low: 1e-5, high: 1e-4, log: true}, batch_size: [16, 32]}",
            "n_trials": "4", "parallelism": "2", "pruner": "none", **lines}
    return "".join(f"{key}: {value}\n" for key, value in keys.items())


def bomb(levels: int = 9) -> str:
    """A 'billion laughs' list: ``levels`` of nine aliases each, 9**levels strings once expanded."""
    lines = ['  - &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        lines.append(f"  - &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def deep(levels: int = 5000) -> str:
    return "[" * levels + "1" + "]" * levels


# (id, top-level YAML of a sweep file, what the message says); one per input the issue lists as accepted.
BAD_SWEEP_FILES = [
    ("parallelism .inf", {"parallelism": ".inf"}, "sweep spec: parallelism must be a whole number from 1 to 64, "
                                                  "got .inf"),
    ("n_trials .nan", {"n_trials": ".nan"}, "sweep spec: n_trials must be a whole number from 1 to 1000, got .nan"),
    ("n_trials 2.5", {"n_trials": "2.5"}, "sweep spec: n_trials must be a whole number from 1 to 1000, got 2.5"),
    ("n_trials true", {"n_trials": "true"}, "sweep spec: n_trials must be a whole number from 1 to 1000, got true"),
    ("negative base learning rate",
     {"base": "{task: text-classification, model: 'fake:succeed', data: {dataset_id: DATASET}, "
              "train: {learning_rate: -1e-4}}"},
     "sweep spec: base.train.learning_rate must be a number above 0"),
    ("negative learning-rate range", {"space": "{learning_rate: {low: -1e-4, high: 1e-4}}"},
     "sweep spec: space.learning_rate.low must be a number above 0"),
    ("batch_size 0..0", {"space": "{batch_size: '0..0'}"},
     "sweep spec: space.batch_size.low must be a whole number from 1 to 8192, got 0"),
    ("dict choices", {"space": "{batch_size: {choices: {small: 16, large: 32}}}"},
     "sweep spec: space.batch_size.choices must be a list of 1 to 100 numbers or texts, got a mapping"),
    ("a dict among the choices", {"space": "{batch_size: [{size: 16}, 32]}"},
     "sweep spec: space.batch_size.choices[0] must be a number or a text, got a mapping"),
    ("unknown objective metric", {"objective": "{metric: bleu}"},
     "sweep spec: metric: text-classification does not report 'bleu'; choose one of accuracy, f1_macro"),
    ("-inf..inf", {"space": "{learning_rate: '-inf..inf'}"},
     "sweep spec: space.learning_rate.low must be a finite number, got -.inf"),
    ("-.inf to .inf", {"space": "{warmup_ratio: {low: -.inf, high: .inf}}"},
     "sweep spec: space.warmup_ratio.low must be a finite number, got -.inf"),
]


@pytest.mark.parametrize("lines, message", [case[1:] for case in BAD_SWEEP_FILES],
                         ids=[case[0] for case in BAD_SWEEP_FILES])
def test_sweep_cli_refuses_each_bad_field_naming_it_and_stores_nothing(cli, wb, tmp_path, dataset_id, lines,
                                                                        message):
    config = tmp_path / "sweep.yaml"
    config.write_text(sweep_yaml(dataset_id, **{k: v.replace("DATASET", dataset_id) for k, v in lines.items()}))
    code, out, err = cli("sweep", "--config", str(config))
    assert code == 2, err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and out == ""
    assert nothing_stored(wb)


# The same inputs through the Sweep form: (id, form values over valid ones, what the message says).
BAD_SWEEP_FORMS = [
    ("parallelism inf", {"parallelism": math.inf}, "sweep spec: parallelism must be a whole number from 1 to 64, "
                                                   "got .inf"),
    ("n_trials nan", {"n_trials": math.nan}, "sweep spec: n_trials must be a whole number from 1 to 1000, got .nan"),
    ("n_trials 2.5", {"n_trials": 2.5}, "sweep spec: n_trials must be a whole number from 1 to 1000, got 2.5"),
    ("n_trials true", {"n_trials": True}, "sweep spec: n_trials must be a whole number from 1 to 1000, got true"),
    ("negative base learning rate", {"train": {"learning_rate": -1e-4}},
     "sweep spec: base.train.learning_rate must be a number above 0"),
    ("negative learning-rate range", {"space": "learning_rate: {low: -1.0e-4, high: 1.0e-4}"},
     "sweep spec: space.learning_rate.low must be a number above 0"),
    ("batch_size 0..0", {"space": "batch_size: {low: 0, high: 0}"},
     "sweep spec: space.batch_size.low must be a whole number from 1 to 8192, got 0"),
    ("dict choices", {"space": "batch_size: {choices: {small: 16}}"},
     "sweep spec: space.batch_size.choices must be a list"),
    ("a dict among the choices", {"space": "batch_size: [16, {size: 32}]"},
     "sweep spec: space.batch_size.choices[1] must be a number or a text, got a mapping"),
    ("unknown objective metric", {"metric": "bleu"}, "sweep spec: metric: text-classification does not report 'bleu'"),
    ("-inf..inf", {"space": "learning_rate: -inf..inf"},
     "sweep spec: space.learning_rate.low must be a finite number, got -.inf"),
    ("bool log", {"space": "learning_rate: {low: 1.0e-5, high: 1.0e-4, log: 'yes'}"},
     "sweep spec: space.learning_rate.log must be true or false, got 'yes'"),
]


def form_values(wb, dataset_id, *, train=None, space=None, n_trials=4, parallelism=2, metric=""):
    base = RunSpec.from_dict({"task": "text-classification", "model": "fake:succeed",
                              "data": {"dataset_id": dataset_id}}).to_dict()
    base["train"].update(train or {})
    return (json.dumps(base), space or "learning_rate: {low: 1.0e-5, high: 1.0e-4, log: true}\n", n_trials,
            parallelism, "none", metric, "", "form")


@pytest.mark.parametrize("values, message", [case[1:] for case in BAD_SWEEP_FORMS],
                         ids=[case[0] for case in BAD_SWEEP_FORMS])
def test_sweep_form_refuses_each_bad_field_naming_it_and_stores_nothing(wb, dataset_id, values, message):
    with pytest.raises(ConfigError) as refused:
        # what the Start button does (sweep_tab.build_form's on_start)
        sweeps.create_sweep(wb, sweep_tab.spec_from_form(*form_values(wb, dataset_id, **values)))
    assert message in str(refused.value)
    assert nothing_stored(wb)


def test_the_forms_valid_values_still_make_a_sweep(wb, dataset_id):
    spec = sweep_tab.spec_from_form(*form_values(wb, dataset_id, n_trials=6.0, parallelism=3.0))
    assert (spec.n_trials, spec.parallelism) == (6, 3)  # gr.Number hands floats: whole ones are taken
    assert sweeps.get_sweep(wb, sweeps.create_sweep(wb, spec))["n_trials"] == 6


# -- aliases, depth and size: refused while the text is read --------------------------------------------------

def test_a_yaml_bomb_is_refused_at_its_first_alias_in_little_time_and_memory():
    text = "space:\n model:\n  choices:\n" + bomb(9).replace("  - ", "   - ")
    tracemalloc.start()
    started = time.process_time()  # CPU time, what a bomb would burn: the wall clock counts other work too
    try:
        with pytest.raises(ConfigError, match=r"bomb.yaml, line 5, column \d+: YAML aliases \(\*l0\) are not "
                                              r"allowed in a spec"):
            load_yaml(text, "bomb.yaml")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.process_time() - started < 1.0 and peak < 2 * 2**20


def test_merge_keys_are_aliases_too():
    with pytest.raises(ConfigError, match="YAML aliases"):
        load_yaml("defaults: &d {epochs: 1}\ntrain:\n  <<: *d\n  seed: 1\n", "spec.yaml")
    assert load_yaml("train: &t {epochs: 1}\n", "spec.yaml") == {"train": {"epochs": 1}}  # an anchor alone is fine


@pytest.mark.timeout(60)
def test_sweep_and_train_cli_refuse_a_bomb_file(cli, wb, tmp_path, dataset_id):
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(sweep_yaml(dataset_id, space="\n  model:\n    choices:\n"
                                     + bomb(9).replace("  - ", "      - ")))
    started = time.process_time()
    code, _, err = cli("sweep", "--config", str(sweep_file))
    assert code == 2 and f"error: {sweep_file}, line" in err and "YAML aliases (*l0) are not allowed" in err, err
    run_file = tmp_path / "run.yaml"
    run_file.write_text("task: text-classification\nname:\n" + bomb(9))
    code, _, err = cli("train", "--config", str(run_file), "--data", dataset_id)
    assert code == 2 and "YAML aliases (*l0) are not allowed" in err, err
    assert time.process_time() - started < 20
    assert nothing_stored(wb)


def test_the_sweep_form_refuses_a_bomb_in_the_search_space(wb, dataset_id):
    space = "model:\n  choices:\n" + bomb(9)
    with pytest.raises(ConfigError, match=r"the search space, line \d+, column \d+: YAML aliases"):
        sweeps.create_sweep(wb, sweep_tab.spec_from_form(*form_values(wb, dataset_id, space=space)))
    assert nothing_stored(wb)


def test_nesting_5000_deep_is_refused_with_a_message_not_a_recursion_error(cli, wb, tmp_path, dataset_id):
    nested = f"nested more than {MAX_SPEC_DEPTH} levels deep"
    config = tmp_path / "sweep.yaml"
    config.write_text(sweep_yaml(dataset_id, space="{model: " + deep() + "}"))
    code, _, err = cli("sweep", "--config", str(config))
    assert code == 2 and f"error: {config}, line 2, column" in err and nested in err, err
    run_file = tmp_path / "run.json"
    run_file.write_text('{"task": "text-classification", "train": ' + deep().replace("1", '{"a": 1}') + "}")
    code, _, err = cli("train", "--config", str(run_file), "--data", dataset_id)
    assert code == 2 and nested in err, err
    with pytest.raises(ConfigError, match=f"the search space, line 1, column 27: {nested}"):
        sweep_tab.spec_from_form(*form_values(wb, dataset_id, space="model: " + deep()))
    base = '{"task": "text-classification", "data": ' + deep() + "}"
    with pytest.raises(ConfigError, match=f"the Train form's run spec, line 1, column 60: {nested}"):
        sweep_tab.spec_from_form(base, "learning_rate: [1.0e-5]", 2, 1, "none", "", "", "")
    assert sweep_tab.default_space_for(base) == sweep_tab.space_yaml("text-classification")
    assert nothing_stored(wb)


def test_json_depth_counts_brackets_outside_strings_only():
    text = json.dumps({"name": "[" * 100, "train": {"seed": 1}})
    assert load_json(text, "spec.json")["name"] == "[" * 100
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_json('{"a": [1, }', "spec.json")


def test_a_spec_file_over_the_size_limit_is_refused_unread(cli, wb, tmp_path, dataset_id):
    config = tmp_path / "sweep.yaml"
    config.write_text(sweep_yaml(dataset_id) + "#" * MAX_SPEC_BYTES + "\n")
    code, _, err = cli("sweep", "--config", str(config))
    assert code == 2 and f"{config} is larger than {MAX_SPEC_BYTES // 1024} KiB" in err, err
    with pytest.raises(ConfigError, match="the search space is larger than 64 KiB"):
        sweep_tab.spec_from_form(*form_values(wb, dataset_id, space="learning_rate: [1.0e-5]\n" + " " * MAX_SPEC_BYTES))
    assert nothing_stored(wb)


# -- the run spec: every field typed and range-checked -------------------------------------------------------

BAD_RUN_FILES = [
    ("learning_rate: -1.0e-4", "run spec: train.learning_rate must be a number above 0, or null for the default, "
                               "got -0.0001"),
    ("batch_size: 0", "run spec: train.batch_size must be a whole number from 1 to 8192"),
    ("batch_size: 2.5", "run spec: train.batch_size must be a whole number from 1 to 8192, or null for the default, "
                        "got 2.5"),
    ("epochs: .inf", "run spec: train.epochs must be a number above 0 and at most 1000, or null for the default, "
                     "got .inf"),
    ("warmup_ratio: .nan", "run spec: train.warmup_ratio must be a number from 0 to 1, got .nan"),
    ("seed: true", "run spec: train.seed must be a whole number from 0 to 4,294,967,295, got true"),
    ("class_weights: 1", "run spec: train.class_weights must be true or false, got 1"),
    ("preset: fastest", "run spec: train.preset: unknown preset 'fastest'; choose one of quick, standard, thorough"),
    ("max_steps: 0", "run spec: train.max_steps must be a whole number of at least 1"),
]


@pytest.mark.parametrize("line, message", BAD_RUN_FILES, ids=[case[0] for case in BAD_RUN_FILES])
def test_train_cli_refuses_each_bad_field_naming_it_and_stores_nothing(cli, wb, tmp_path, dataset_id, line, message):
    config = tmp_path / "run.yaml"
    config.write_text(f"task: text-classification\nmodel: 'fake:succeed'\ntrain:\n  {line}\n")
    code, out, err = cli("train", "--config", str(config), "--data", dataset_id)
    assert code == 2 and err.startswith(f"error: {config}: {message}"), err
    assert nothing_stored(wb)


@pytest.mark.parametrize("field, value, message", [
    ("lora.r", 2.5, "run spec: lora.r must be a whole number from 1 to 1024, got 2.5"),
    ("lora.dropout", 1.0, "run spec: lora.dropout must be a number of at least 0 and below 1, got 1.0"),
    ("gpus", 0, "run spec: gpus must be a whole number from 1 to 64, got 0"),
    ("procs", True, "run spec: procs must be a whole number of processes, at least 1"),
    ("model", "", "run spec: model must be non-empty text"),
    ("name", "x" * 5000, "run spec: name must be text of at most 4096 characters, got 'xxx"),
    ("data.train_path", ["a.csv"], "run spec: data.train_path must be text of at most 4096 characters, got a list"),
    ("init_from_run", 0, "run spec: init_from_run must be a whole number of at least 1, or null for the default"),
])
def test_every_run_spec_field_is_typed_and_range_checked(field, value, message):
    raw = {"task": "text-classification", "data": {"train_path": "t.jsonl"}}
    section, _, key = field.rpartition(".")
    (raw.setdefault(section, {}) if section else raw)[key] = value
    with pytest.raises(ConfigError) as refused:
        RunSpec.from_dict(raw)
    assert str(refused.value).startswith(message)


def test_the_train_form_leaves_bad_numbers_to_the_spec_which_names_them():
    """Before: 2.5 batches were truncated to 2 and an infinite rate crashed int() with OverflowError."""
    for advanced, message in (({"batch_size": 2.5}, "train.batch_size must be a whole number"),
                              ({"max_steps": math.inf}, "train.max_steps must be a whole number"),
                              ({"learning_rate": -1e-4}, "train.learning_rate must be a number above 0"),
                              ({"epochs": math.nan}, "train.epochs must be a number above 0")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            train_tab.spec_from_form("text-classification", "ds", "fake:succeed", "standard", "", advanced)
    with pytest.raises(ConfigError, match=re.escape("lora.r must be a whole number from 1 to 1024, got 4.5")):
        train_tab.spec_from_form("text-classification", "ds", "m", "standard", "", {}, lora={"r": 4.5})
    spec = train_tab.spec_from_form("text-classification", "ds", "m", "standard", "", {"batch_size": 16.0})
    assert spec.train.batch_size == 16 and isinstance(spec.train.batch_size, int)


def test_a_trial_of_the_space_must_make_a_valid_run():
    base = RunSpec(task="text-classification", data=DataSpec(train_path="t"), train=TrainSpec(method="setfit"))
    with pytest.raises(ConfigError, match="sweep spec: a trial of this space would not run: train.method setfit"):
        SweepSpec.from_dict({"base": base.to_dict(), "space": {"lora_r": [4, 8]}})


# -- valid specs still load ----------------------------------------------------------------------------------

def test_the_documented_sweep_spec_loads(cli, wb, dataset_id):
    page = (ROOT / "docs" / "sweeps.md").read_text(encoding="utf-8")
    block = re.search(r"\*\*The spec\*\*.*?```yaml\n(.*?)```", page, re.S).group(1)
    raw = load_yaml(block, "docs/sweeps.md")
    raw["base"]["data"] = {"dataset_id": dataset_id}
    spec = SweepSpec.from_dict(raw)
    assert (spec.metric, spec.n_trials, spec.space["learning_rate"].log) == ("accuracy", 12, True)
    assert spec.space["model"].choices == ["all-MiniLM-L6-v2", "bert-base-uncased"]


def test_exponents_without_a_point_are_numbers_and_json_configs_load(cli, wb, tmp_path, dataset_id):
    assert load_yaml("learning_rate: 1e-5\nhigh: 2E+4\nname: '1e-5'\n", "s") == {
        "learning_rate": 1e-5, "high": 2e4, "name": "1e-5"}
    config = tmp_path / "run.json"  # the Train tab's run-spec panel, saved: JSON is YAML here
    spec = train_tab.spec_from_form("text-classification", dataset_id, "fake:succeed", "quick", "json",
                                    {"learning_rate": 1e-5, "batch_size": 8})
    config.write_text(json.dumps(spec.to_dict(), indent=2))
    code, out, err = cli("train", "--config", str(config), "--json")
    assert code == 0, err
    assert runs.get_run(wb, json.loads(out)["id"])["spec"]["train"]["learning_rate"] == 1e-5
