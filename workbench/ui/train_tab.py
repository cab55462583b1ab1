"""Train tab: task, dataset and model pickers, presets, advanced settings, LoRA, the exact run spec, Submit.

The form builds the same ``RunSpec`` the CLI builds (``spec_from_form`` is a pure
function); Submit hands it to ``workbench.services.runs.submit_run``.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

import gradio as gr

from workbench.errors import WorkbenchError
from workbench.services import catalogue, estimates, specs
from workbench.services import datasets as data_service
from workbench.services import runs as runs_service
from workbench.services.specs import DEFAULT_MODEL, TASKS, DataSpec, LoraSpec, RunSpec, TrainSpec
from workbench.ui import access, polling
from workbench.ui import format as fmt

PRESETS = ("quick", "standard", "thorough")
OUTLOOK_SECONDS = 5.0  # how often "If started now: …" is read again: a run ahead of it moves on
PRESET_HELP = {
    "quick": f"1 epoch on at most {specs.QUICK_MAX_EXAMPLES:,} examples (a seeded sample) — a usable "
             f"first model in a fraction of standard's time; a small set gets at least "
             f"{specs.MIN_STEPS['quick']} steps",
    "standard": f"3 epochs on all examples (2 above 50k, 1 above 200k); a small set gets at least "
                f"{specs.MIN_STEPS['standard']} steps with early stopping",
    "thorough": f"2 epochs more than standard (at least {specs.MIN_STEPS['thorough']} steps), "
                "with early stopping",
}
# Advanced fields: (TrainSpec key, label, default shown; 0 or "" means "automatic").
ADVANCED = (
    ("epochs", "Epochs (0 = automatic)", 0.0),
    ("learning_rate", "Learning rate (0 = automatic)", 0.0),
    ("batch_size", "Batch size (0 = automatic)", 0),
    ("max_length", "Max length in tokens (0 = automatic)", 0),
    ("max_steps", "Max steps (0 = no limit)", 0),
    ("gradient_accumulation_steps", "Gradient accumulation steps", 1),
    ("warmup_ratio", "Warm-up share", 0.06),
    ("weight_decay", "Weight decay", 0.01),
    ("eval_steps", "Evaluate every N steps (0 = automatic)", 0),
    ("early_stopping_patience", "Early-stopping patience (0 = automatic)", 0),
    ("seed", "Seed", 42),
)
AUTO_WHEN_ZERO = {"epochs", "learning_rate", "batch_size", "max_length", "max_steps", "eval_steps",
                  "early_stopping_patience"}
INT_KEYS = {"batch_size", "max_length", "max_steps", "eval_steps", "gradient_accumulation_steps",
            "early_stopping_patience", "seed"}


def spec_from_form(task: str, dataset_id: str | None, model: str, preset: str, name: str,
                   advanced: dict[str, Any], class_weights: bool = False, objective: str = "mlm",
                   lora: Optional[dict[str, Any]] = None, dataset_name: str = "", method: str = "auto",
                   chunking: str = "auto") -> RunSpec:
    """The run spec for the form's values; zeros in automatic fields become ``None`` (engine defaults)."""
    train: dict[str, Any] = {"preset": preset or "standard", "class_weights": bool(class_weights)}
    if task == "text-classification":
        train["method"] = method or "auto"
        train["chunking"] = chunking or "auto"
    for key, value in advanced.items():
        if value is None or value == "":
            continue
        if key in AUTO_WHEN_ZERO and value == 0:
            train[key] = None
            continue
        train[key] = _form_number(value, key in INT_KEYS)
    if task == "masked-lm":
        train["objective"] = objective or "mlm"
    lora = lora or {}
    lora_spec = LoraSpec(enabled=bool(lora.get("enabled")), r=_form_number(lora.get("r") or 8, True),
                         alpha=_form_number(lora.get("alpha") or 16, True),
                         dropout=_form_number(lora.get("dropout") or 0.0, False))
    return RunSpec(task=task, data=DataSpec(dataset_id=dataset_id or None, name=dataset_name or ""),
                   model=(model or DEFAULT_MODEL).strip(), train=TrainSpec(**train), lora=lora_spec,
                   name=(name or "").strip())


def _form_number(value: Any, whole: bool) -> Any:
    """A form number as the spec takes it (16.0 is 16 for a whole-number field); anything else (2.5 batches,
    inf) is left as it is for the spec to refuse with the field's name, not truncated or crashed on here."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if whole:
        return int(value) if isinstance(value, float) and value.is_integer() else value
    return float(value)


def form_from_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The inverse, for clone-and-edit: the form values that rebuild ``spec``."""
    train = spec.get("train") or {}
    advanced = {key: (train.get(key) if train.get(key) is not None else (0 if key in AUTO_WHEN_ZERO else default))
                for key, _, default in ADVANCED}
    lora = spec.get("lora") or {}
    return {"task": spec.get("task"), "dataset_id": (spec.get("data") or {}).get("dataset_id"),
            "model": spec.get("model"), "preset": train.get("preset", "standard"), "name": spec.get("name", ""),
            "advanced": advanced, "class_weights": bool(train.get("class_weights")),
            "objective": train.get("objective", "mlm"), "method": train.get("method", "auto"),
            "chunking": train.get("chunking", "auto"), "lora": lora}


def dataset_choices(wb, task: str) -> list[tuple[str, str]]:
    """Stored datasets of ``task`` as (label, id), newest first; test sets last, labelled as such (they are
    offered, never preselected: ``preselected``)."""
    choices, test_sets = [], []
    for item in data_service.list_datasets(wb):
        d = fmt.as_dict(item)
        if d.get("task") != task:
            continue
        if d.get("test_set"):
            test_sets.append((f"⚠ test set · {d.get('name')} · {d.get('examples')} examples · {d.get('id')}",
                              str(d.get("id"))))
        else:
            choices.append((f"{d.get('name')} · {d.get('train', d.get('num_train'))} train · {d.get('id')}",
                            str(d.get("id"))))
    return choices + test_sets


def preselected(choices: list[tuple[str, str]], current: str | None = None) -> str | None:
    """The dataset the picker shows: ``current`` while it is a choice (clone-and-edit, Data → Train), else the
    newest that is no test set, else none — a test set is trained on only when picked by hand."""
    ids = [value for _, value in choices]
    if current in ids:
        return current
    return next((value for label, value in choices if not label.startswith("⚠ test set")), None)


def refreshed_datasets(wb, task: str, current: str | None) -> dict:
    """The dataset picker's update when it is read again (its tab opens, the task changes, a dataset is imported
    or deleted): the pick stays while it is a choice (``polling.picker_update``), else the newest dataset is
    preselected (``preselected``)."""
    choices = dataset_choices(wb, task)
    return polling.picker_update(choices, current, preselected(choices, current))


def clone_name(name: str, source_id: int | None = None) -> str:
    """The name a clone starts with: "NAME (edited)", or "clone of run #N" for an unnamed run."""
    name = (name or "").strip()
    if name:
        return f"{name} (edited)"
    return f"clone of run #{source_id}" if source_id else ""


def model_choices() -> list[str]:
    return [info.name for info in catalogue.list_models()]


def find_model(name: str):
    """The catalogue entry (or local folder) for ``name``, with availability; never downloads."""
    name = (name or DEFAULT_MODEL).strip()
    for info in catalogue.list_models():
        if name in (info.name, info.source):
            return info
    return catalogue.resolve_model(name)


def preset_lines(wb, spec: RunSpec, load: dict[str, float]) -> list[str]:
    """What each preset would do with this dataset and model: epochs, examples, expected time at ``load``
    (``estimates.current_load``'s figures, the ones the estimate above the lines was made at)."""
    lines = []
    for preset in PRESETS:
        variant = dataclasses.replace(spec, train=dataclasses.replace(spec.train, preset=preset))
        est = estimates.estimate_run(wb, variant, load=load)
        if est is None:
            return []
        used = f"{est['train_examples']:,}"
        marker = "**" if preset == spec.train.preset else ""
        if est["method"] == "setfit":
            lines.append(f"- {marker}{preset}{marker}: SetFit, {est['steps']:,} steps of text pairs on {used} "
                         f"training examples — about {fmt.estimate_range(est)}")
            continue
        done = specs.steps_and_epochs(est["steps"], est["epochs"], bool(spec.train.max_steps))
        lines.append(f"- {marker}{preset}{marker}: {done} on {used} "
                     f"training examples, up to {est['evaluations']} evaluation(s) of "
                     f"{est['validation_examples']:,} — about {fmt.estimate_range(est)}")
    return lines


def model_facts(wb, spec: RunSpec) -> str:
    """Architecture facts, offline availability, and the run's time estimate (train + evaluation) as markdown."""
    try:
        info = find_model(spec.model)
    except WorkbenchError as exc:
        return f"⚠ {exc}"
    facts = [f"{value} {label}" for value, label in ((info.layers, "layers"), (info.hidden, "hidden"),
                                                     (info.heads, "heads")) if value]
    if info.parameters:
        facts.append(f"{info.parameters / 1e6:.1f}M parameters")
    if info.context_length:
        facts.append(f"{info.context_length:,}-token context")
    facts.extend(value for value in (info.languages, info.licence) if value)
    where = ("✔ available offline" if info.available_locally else
             "↓ needs a download" + (" — not possible while the workbench is offline" if catalogue.offline()
                                      else ""))
    lines = [f"**{info.name}** ({info.family}) · " + " · ".join(facts), where]
    est = None
    if info.parameters:
        # one reading of the load for the estimate and every preset's line: read twice, the share of niced work
        # sampled a moment apart could make the chosen preset's line disagree with the estimate above it
        load = estimates.current_load() or {}
        est = estimates.estimate_run(wb, spec, load=load)
    if est is not None:
        parts = est["parts"]
        memory = catalogue.estimate_training(info.parameters, 0, 0, 1.0)["memory_mb"]
        lines.append(
            f"Estimated time on this {est['device'].upper()}: **{fmt.estimate_range(est)}** "
            f"({est.get('sureness', est['basis'])}) — training "
            f"{fmt.format_duration(parts['train'])} ({est['examples_seen']:,} examples seen), "
            f"{est['evaluations']} evaluation(s) {fmt.format_duration(parts['evaluation'])}, start-up and saving "
            f"{fmt.format_duration(parts['fixed'] + parts['checkpoints'])}; about {memory:,} MB of memory "
            f"(lr {est['hp']['learning_rate']:g}, batch {est['hp']['batch_size']}). Based on {est['basis']}.")
        lines.append(f"What the defaults chose: {est['why']}.")
        lines.extend(preset_lines(wb, spec, load))
    return "  \n".join(lines)


def queue_outlook(wb) -> str:
    """When a run submitted now would start: ``If started now: 2nd in line · starts after run 1, in …``.
    Read again at every tick of the form's timer (``OUTLOOK_SECONDS``): a run that starts, or runs on,
    changes it while the form stays unchanged."""
    return f"If started now: {fmt.queue_text(runs_service.start_if_queued_now(wb))}."


def submitted_text(wb, run_id: int) -> str:
    """``✔ Run #3 is on the queue: 2nd in line · starts after run 1, in about 10 min.``"""
    place = fmt.queue_text(runs_service.queue_position(wb, run_id))
    return f"✔ Run #{run_id} is on the queue" + (f": {place}." if place else ".")


def cloned_spec(spec: dict[str, Any], source_id: int | None = None) -> RunSpec:
    """The spec the form holds once ``fill`` has loaded ``spec`` (clone-and-edit): the clone's name included."""
    form = form_from_spec(spec)
    return spec_from_form(form["task"], form["dataset_id"], form["model"], form["preset"],
                          clone_name(form["name"], source_id), form["advanced"], form["class_weights"],
                          form["objective"], form["lora"], method=form["method"], chunking=form["chunking"])


def clone_panels(wb, spec: dict[str, Any], source_id: int | None = None) -> tuple[str, str, str]:
    """(submit status, spec panel, model facts) right after clone-and-edit: the last submit's "✔ Run #N is on
    the queue." is cleared, and the spec and the estimate are those of the cloned spec, read now (a field the
    clone leaves unchanged sets off no change event, so they would keep what they said before)."""
    try:
        cloned = cloned_spec(spec, source_id)
    except (WorkbenchError, TypeError, ValueError) as exc:
        return "", json.dumps({"error": str(exc)}, indent=2), f"⚠ {exc}"
    return "", json.dumps(cloned.to_dict(), indent=2), model_facts(wb, cloned)


@dataclasses.dataclass
class TrainTab:
    task: gr.Dropdown
    dataset: gr.Dropdown
    fields: list[gr.components.Component]
    submit_event: Any
    submitted_id: gr.Number
    clone_of: gr.Number
    spec_view: gr.Code
    facts: gr.Markdown
    submit_status: gr.Markdown
    on_load: Any  # fields -> [dataset, spec_view, facts], for the page load
    refresh_datasets: Any  # (fn, inputs, outputs): re-read the dataset picker (tab opened, import, delete)

    def fill(self, wb, spec: dict[str, Any], source_id: int | None = None) -> list[Any]:
        """Updates for ``fields`` that load ``spec`` into the form (clone-and-edit)."""
        form = form_from_spec(spec)
        lora = form["lora"]
        return [gr.update(value=form["task"]),
                gr.update(choices=dataset_choices(wb, form["task"]), value=form["dataset_id"]),
                form["model"], form["preset"], clone_name(form["name"], source_id),
                *[form["advanced"][key] for key, _, _ in ADVANCED],
                form["class_weights"], form["objective"], form["method"], form["chunking"], bool(lora.get("enabled")),
                lora.get("r", 8),
                lora.get("alpha", 16), lora.get("dropout", 0.1)]

    @property
    def clone_outputs(self) -> list:
        """What clone-and-edit sets, in ``clone`` order: the fields, the submit status, the spec and the facts."""
        return [*self.fields, self.submit_status, self.spec_view, self.facts]

    def clone(self, wb, spec: dict[str, Any], source_id: int | None = None) -> list[Any]:
        """Values for ``clone_outputs``: ``spec`` in the form, no stale status, its own spec panel and estimate."""
        return [*self.fill(wb, spec, source_id), *clone_panels(wb, spec, source_id)]


def build(wb) -> TrainTab:
    with gr.Row():
        with gr.Column(scale=3):
            with gr.Row():
                task = gr.Dropdown(list(TASKS), value=TASKS[0], label="Task", elem_id="train-task")
                dataset = gr.Dropdown([], label="Dataset", elem_id="train-dataset", scale=2)
                refresh = gr.Button("↻ datasets", size="sm", scale=0, min_width=100, elem_id="train-refresh")
            with gr.Row():
                model = gr.Dropdown(model_choices(), value=DEFAULT_MODEL, allow_custom_value=True,
                                    label="Model (catalogue name, hub id, or local folder)", elem_id="train-model",
                                    scale=2)
                name = gr.Textbox(label="Run name", placeholder="optional", elem_id="train-name")
            facts = gr.Markdown(elem_id="train-facts")
            # its own box, read at page load and at every tick: it follows the queue, not the form's fields
            outlook = gr.Markdown(lambda: queue_outlook(wb), elem_id="train-queue-outlook")
            preset = gr.Radio(list(PRESETS), value="standard", label="Preset", elem_id="train-preset",
                              info=" · ".join(f"{k}: {v}" for k, v in PRESET_HELP.items()))
            with gr.Accordion("Advanced hyper-parameters", open=False):
                advanced = []
                with gr.Row():
                    for key, label, default in ADVANCED:
                        advanced.append(gr.Number(default, label=label, min_width=150,
                                                  elem_id=f"train-{key.replace('_', '-')}"))
                with gr.Row():
                    class_weights = gr.Checkbox(False, label="Class weights (imbalanced labels)")
                    objective = gr.Radio(["mlm", "mlm+nsp"], value="mlm", label="Masked-LM objective",
                                         visible=False)
                    method = gr.Radio(list(specs.METHODS), value="auto", elem_id="train-method",
                                      label="Method (text classification)",
                                      info="auto: SetFit below 25 examples per class, else fine-tuning")
                    chunking = gr.Radio(list(specs.CHUNKING_CHOICES), value="auto", elem_id="train-chunking",
                                        label="Long texts (text classification)",
                                        info="auto: read in overlapping windows, their scores averaged (mean), "
                                             "when a fifth of the training texts is longer than the max length; "
                                             "off: cut at the max length; mean / max / attention: always windows, "
                                             "pooled so (the run's facts say what auto chose)")
            with gr.Accordion("LoRA (train small adapters instead of the whole model)", open=False):
                with gr.Row():
                    lora_on = gr.Checkbox(False, label="Use LoRA", elem_id="train-lora")
                    lora_r = gr.Number(8, label="r (rank)", precision=0)
                    lora_alpha = gr.Number(16, label="alpha", precision=0)
                    lora_dropout = gr.Number(0.1, label="dropout")
            submit = gr.Button("Start training", variant="primary", elem_id="train-submit")
            submit_status = gr.Markdown(elem_id="train-submit-status")
        with gr.Column(scale=2):
            spec_view = gr.Code(language="json", label="Run spec (exactly what the worker will run)",
                                elem_id="train-spec", interactive=False)
    submitted_id = gr.Number(visible=False, precision=0)
    clone_of = gr.Number(None, visible=False, precision=0)  # set by "Clone and edit": recorded as the parent

    fields = [task, dataset, model, preset, name, *advanced, class_weights, objective, method, chunking, lora_on,
              lora_r, lora_alpha, lora_dropout]

    def current_spec(task_, dataset_, model_, preset_, name_, *rest) -> RunSpec:
        values = list(rest)
        adv = dict(zip([k for k, _, _ in ADVANCED], values[: len(ADVANCED)]))
        cw, obj, method_, chunking_, l_on, l_r, l_a, l_d = values[len(ADVANCED):]
        return spec_from_form(task_, dataset_, model_, preset_, name_, adv, cw, obj,
                              {"enabled": l_on, "r": l_r, "alpha": l_a, "dropout": l_d}, method=method_,
                              chunking=chunking_)

    def preview(*values):
        try:
            return json.dumps(current_spec(*values).to_dict(), indent=2)
        except (WorkbenchError, TypeError, ValueError) as exc:
            return json.dumps({"error": str(exc)}, indent=2)

    def on_task(task_, current=None):
        """The task's datasets; the chosen one stays when it fits the task (clone-and-edit sets both)."""
        return refreshed_datasets(wb, task_, current)

    task.change(lambda t: gr.update(visible=t == "masked-lm"), [task], [objective])
    task.change(lambda t: [gr.update(visible=t == "text-classification")] * 2, [task], [method, chunking])

    def on_facts(*values):
        try:
            return model_facts(wb, current_spec(*values))
        except (WorkbenchError, TypeError, ValueError) as exc:
            return f"⚠ {exc}"

    def on_submit(parent, *values):
        try:
            spec = current_spec(*values)
        except WorkbenchError as exc:
            raise gr.Error(str(exc))
        if not spec.data.dataset_id:
            raise gr.Error("Choose a dataset first (import one in the Data tab).")
        try:
            run_id = runs_service.submit_run(wb, spec, parent_run_id=int(parent) if parent else None,
                                             owner_id=access.owner_id())
        except WorkbenchError as exc:
            raise gr.Error(str(exc))
        access.record(wb, "create", "run", run_id)
        warning = data_service.test_set_warning(wb, spec.data.dataset_id)
        return submitted_text(wb, run_id) + (f"  \n⚠ {warning[0].upper()}{warning[1:]}." if warning else ""), run_id

    task.change(on_task, [task, dataset], [dataset])
    refresh.click(on_task, [task, dataset], [dataset])
    # One listener per panel, not one per field: a clone sets every field at once, and one listener's
    # requests go one at a time with its last trigger last, where twenty listeners' could be answered in
    # any order and leave the panel computed from half-updated fields (the browser suite saw a cloned
    # spec without its name).
    gr.on([field.change for field in fields], preview, fields, [spec_view], trigger_mode="always_last")
    gr.on([field.change for field in (model, task, dataset, preset, method, chunking, lora_on, *advanced)],
          on_facts, fields, [facts], trigger_mode="always_last")
    submit_event = submit.click(on_submit, [clone_of, *fields], [submit_status, submitted_id])
    gr.Timer(OUTLOOK_SECONDS).tick(lambda: queue_outlook(wb), None, [outlook], show_progress="hidden")
    submit_event.then(lambda: queue_outlook(wb), None, [outlook], show_progress="hidden")

    def on_load(*values):
        dataset_update = on_task(values[0], values[1])
        chosen = dataset_update.get("value", values[1])
        values = (values[0], chosen, *values[2:])
        return dataset_update, preview(*values), on_facts(*values)

    return TrainTab(task=task, dataset=dataset, fields=fields, submit_event=submit_event,
                    submitted_id=submitted_id, clone_of=clone_of, spec_view=spec_view, facts=facts,
                    submit_status=submit_status, on_load=on_load,
                    refresh_datasets=(on_task, [task, dataset], [dataset]))
