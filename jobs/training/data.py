"""A run's records: the validation split taken from the training records when none was given, and seeded
subsamples. The export's parity check reads the same split as the run trained with.
"""
from __future__ import annotations

from collections import Counter

from jobs.specs.run import RunSpec
from storage.errors import TrainingError


def split_validation(records: list[dict], seed: int) -> tuple[list[dict], list[dict]]:
    """The validation split when none was given: 10 % of the training records, raised to 100 where that is at
    most a quarter of them (``storage.datasets.split.validation_size``, the import's rule too)."""
    import random

    from storage.datasets.split import validation_size

    if len(records) < 2:
        raise TrainingError("at least 2 training records are needed", "add data to the dataset")
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    n_val = validation_size(len(records), 0.1)
    # a class's last example stays in training (a validation label the model never saw fails the run: a rare
    # class of 100 labelled questions did); where no class runs out this is the plain first ``n_val`` of ``order``
    left = Counter(_class_of(r) for r in records)
    chosen: set[int] = set()
    for i in order:
        if len(chosen) == n_val:
            break
        label = _class_of(records[i])
        if label is not None and left[label] == 1:
            continue
        left[label] -= 1
        chosen.add(i)
    if n_val and not chosen:
        raise TrainingError("every class has a single example, so none can be held out to validate on",
                            "add a second example to some of the classes, or give a validation file")
    return [r for i, r in enumerate(records) if i not in chosen], [records[i] for i in sorted(chosen)]


def _class_of(record: dict):
    """A single-label record's class (None for multi-label, tags, answers or no label)."""
    label = record.get("label")
    return label if isinstance(label, (str, int)) and not isinstance(label, bool) else None


def validation_records(spec: RunSpec) -> list[dict]:
    """The run's validation records exactly as its training split them (its validation file, else the seeded
    split of its training records, ``split_validation``): what the export's parity check compares PyTorch and ONNX
    on."""
    from jobs.tasks import task_module

    module = task_module(spec.task, spec.train.objective)
    if spec.data.validation_path:
        return module.read(spec.data.validation_path)
    return split_validation(module.read(spec.data.train_path), spec.train.seed)[1]


def subsample(records: list[dict], cap: int | None, seed: int) -> list[dict]:
    """A seeded sample of at most ``cap`` records, kept in file order; all of them when they fit.

    The quick preset trains one epoch on such a sample: the same seed gives the same sample on
    every machine, and the validation split was taken before, so it is the one standard uses.
    """
    import random

    if not cap or len(records) <= cap:
        return records
    chosen = sorted(random.Random(seed).sample(range(len(records)), cap))
    return [records[i] for i in chosen]


def training_records(spec: RunSpec, hp: dict) -> list[dict]:
    """The records run ``spec`` trained on: its training file less the validation split it took (when it had no
    validation file), then the seeded sample of ``max_train_examples`` from its resolved ``hp`` — what an
    evaluation's baselines are fitted on."""
    from jobs.tasks import task_module

    train = task_module(spec.task, spec.train.objective).read(spec.data.train_path)
    if not spec.data.validation_path:
        train = split_validation(train, spec.train.seed)[0]
    return subsample(train, hp.get("max_train_examples"), hp.get("seed", spec.train.seed))
