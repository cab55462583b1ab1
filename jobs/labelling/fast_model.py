"""The fast model in the loop: logistic regression on frozen embeddings (one-vs-rest for multi-label).

From 30 labels on, one temperature fitted on 3-fold out-of-fold logits calibrates its scores (it changes no
prediction; with more than two classes it can reorder the margins).

Its probabilities are shrunk towards a uniform prior by one pseudo-count per class, ``(n·p + 1) / (n + C)``
(Laplace), so a model fitted on a handful of labels never claims 100 % and a class nobody has labelled yet keeps a
small share. The shrinkage is the same for every row, so it never changes which item is the most uncertain by
margin. Pure numpy / scikit-learn.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar
from sklearn.linear_model import LogisticRegression

C_PER_LABELS = 40_000.0  # C = C_PER_LABELS / labels, clamped to [C_MIN, C_MAX]: the same penalty per label at
C_MIN, C_MAX = 10.0, 1000.0  # every size (rows are unit vectors, so the weights must be large to separate them)
CALIBRATION_FOLDS = 3
MIN_CALIBRATION = 30  # labels needed before a temperature is fitted; below, the Laplace shrinkage alone
MAX_ITER = 500
TOL = 1e-4  # 1e-3 stopped SMS spam's whole-pool fit 1.2 points short of its optimum; 1,000 labels fit in ~0.2 s


class FastModel:
    """Frozen embeddings + logistic regression over ``classes``; fits on any labels, even one class or none."""

    def __init__(self, classes: list[str], multi_label: bool = False, seed: int = 0, C: float | None = None,
                 max_iter: int = MAX_ITER, tol: float = TOL, calibrate: bool = True):
        if len(classes) < (1 if multi_label else 2):
            raise ValueError(f"a labelling project needs at least {1 if multi_label else 2} classes, got {classes}")
        self.classes = list(classes)
        self.multi_label = multi_label
        self.seed = seed
        self.C, self.max_iter, self.tol = C, max_iter, tol
        self.calibrate = calibrate
        self.temperature = 1.0
        self._index = {name: i for i, name in enumerate(self.classes)}
        self._n = 0
        self._models: list[LogisticRegression | None] = []
        self._present: np.ndarray = np.zeros(0, dtype=np.int64)
        self._constant: np.ndarray = np.full(len(self.classes), 1.0 / len(self.classes))

    # --- fitting ------------------------------------------------------------------------------------------

    def fit(self, X: np.ndarray, y: list) -> "FastModel":
        """Fit on rows ``X`` labelled ``y``: class names, or lists of names for multi-label."""
        X = np.asarray(X, dtype=np.float64)
        if len(X) != len(y):
            raise ValueError(f"{len(X)} embeddings but {len(y)} labels")
        self._n = len(y)
        encoded = self.encode(y)
        if self.multi_label:
            self._fit_multi(X, encoded)
        else:
            self._fit_single(X, encoded)
        self.temperature = 1.0
        if self.calibrate and self._n >= MIN_CALIBRATION and any(m is not None for m in self._models):
            self.temperature = self._fit_temperature(X, encoded)
        return self

    def _fit_temperature(self, X: np.ndarray, encoded: np.ndarray) -> float:
        """One temperature for the logits, fitted on out-of-fold logits (CALIBRATION_FOLDS folds) by the negative
        log-likelihood: logistic regression with a weak penalty on few labels is over-confident, and a temperature
        changes no prediction, only how sure it says it is."""
        fold_of = np.random.default_rng(self.seed).permutation(len(X)) % CALIBRATION_FOLDS
        logits, targets = [], []
        for fold in range(CALIBRATION_FOLDS):
            test = fold_of == fold
            part = FastModel(self.classes, self.multi_label, self.seed, self.regularisation(), self.max_iter, self.tol,
                             calibrate=False)
            part._n = int((~test).sum())
            if self.multi_label:
                part._fit_multi(X[~test], encoded[~test])
                for column, model in enumerate(part._models):
                    if model is not None:
                        logits.append(model.decision_function(X[test]))
                        targets.append(encoded[test, column])
            else:
                part._fit_single(X[~test], encoded[~test])
                if part._models and set(part._present) == set(self._present):
                    logits.append(_class_logits(part._models[0], X[test]))
                    targets.append(np.searchsorted(self._present, encoded[test]))
        if not logits:
            return 1.0
        if self.multi_label:
            z, t = np.concatenate(logits), np.concatenate(targets).astype(np.float64)
            loss = lambda log_t: float(np.mean(np.logaddexp(0.0, -(2 * t - 1) * z / np.exp(log_t))))  # noqa: E731
        else:
            z, t = np.concatenate(logits), np.concatenate(targets)
            loss = lambda log_t: _softmax_nll(z / np.exp(log_t), t)  # noqa: E731
        return float(np.exp(minimize_scalar(loss, bounds=(-3.0, 3.0), method="bounded").x))

    def encode(self, y: list) -> np.ndarray:
        """Class ids (n,) for single-label, a multi-hot (n, C) matrix for multi-label; unknown names raise."""
        try:
            if not self.multi_label:
                return np.array([self._index[name] for name in y], dtype=np.int64)
            hot = np.zeros((len(y), len(self.classes)), dtype=np.int64)
            for row, names in enumerate(y):
                hot[row, [self._index[name] for name in names]] = 1
            return hot
        except KeyError as error:
            raise ValueError(f"unknown class {error.args[0]!r}; the classes are {', '.join(self.classes)}") from None
        except TypeError:
            raise ValueError("multi-label labels are lists of class names, one list per item") from None

    def _fit_single(self, X: np.ndarray, ids: np.ndarray) -> None:
        self._present = np.unique(ids)
        self._models = []
        if len(self._present) >= 2:
            self._models = [self._logistic().fit(X, ids)]
        else:
            self._constant = np.zeros(len(self.classes))
            self._constant[self._present] = 1.0

    def _fit_multi(self, X: np.ndarray, hot: np.ndarray) -> None:
        self._models = []
        positives = hot.sum(axis=0)
        self._constant = positives / max(len(hot), 1) if len(hot) else np.full(len(self.classes), 0.5)
        for column, count in enumerate(positives):
            both = 0 < count < len(hot)
            self._models.append(self._logistic().fit(X, hot[:, column]) if both else None)

    def regularisation(self) -> float:
        """The C of the logistic regression: as given, else C_PER_LABELS / labels clamped to [C_MIN, C_MAX]."""
        if self.C is not None:
            return float(self.C)
        return float(min(max(C_PER_LABELS / max(self._n, 1), C_MIN), C_MAX))

    def _logistic(self) -> LogisticRegression:
        return LogisticRegression(C=self.regularisation(), max_iter=self.max_iter, tol=self.tol,
                                  random_state=self.seed)

    # --- predicting ---------------------------------------------------------------------------------------

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """(n, C) probabilities in the order of ``classes``; rows sum to 1 for single-label."""
        X = np.asarray(X, dtype=np.float64)
        raw = self._raw_multi(X) if self.multi_label else self._raw_single(X)
        pseudo = 2.0 if self.multi_label else float(len(self.classes))
        return ((self._n * raw + 1.0) / (self._n + pseudo)).astype(np.float64)

    def _raw_single(self, X: np.ndarray) -> np.ndarray:
        if not self._models:
            return np.tile(self._constant, (len(X), 1))
        raw = np.zeros((len(X), len(self.classes)))
        raw[:, self._present] = _softmax(_class_logits(self._models[0], X) / self.temperature)
        return raw

    def _raw_multi(self, X: np.ndarray) -> np.ndarray:
        raw = np.tile(self._constant, (len(X), 1))
        for column, model in enumerate(self._models):
            if model is not None:
                raw[:, column] = 1.0 / (1.0 + np.exp(-model.decision_function(X) / self.temperature))
        return raw

    def predict(self, X: np.ndarray) -> list:
        """Class names (single-label) or sorted lists of names with probability >= 0.5 (multi-label)."""
        return self.decode(self.predict_proba(X))

    def decode(self, proba: np.ndarray) -> list:
        """Probabilities (n, C) -> the predicted labels, as ``predict`` gives them."""
        if not self.multi_label:
            return [self.classes[i] for i in np.argmax(proba, axis=1)]
        return [sorted(self.classes[i] for i in np.flatnonzero(row >= 0.5)) for row in proba]


def _class_logits(model: LogisticRegression, X: np.ndarray) -> np.ndarray:
    """(n, classes) logits whose softmax is the model's predict_proba (a binary model gives [0, z])."""
    z = model.decision_function(X)
    return np.stack([np.zeros_like(z), z], axis=1) if z.ndim == 1 else z


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _softmax_nll(logits: np.ndarray, targets: np.ndarray) -> float:
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(shifted).sum(axis=1))
    return float(np.mean(log_norm - shifted[np.arange(len(targets)), targets]))
