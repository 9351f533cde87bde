"""DP-C4 and DP-SGD for linear and logistic models with a scikit-learn API (NumPy path).

For a linear model the per-sample gradient is rank one, ``g_i = [x_i, 1] r_i^T`` with the
residual ``r_i = sigmoid(z_i) - y_i`` (binary logistic), ``softmax(z_i) - e_{y_i}`` (multiclass,
``K`` outputs) or ``z_i - y_i`` (squared loss), so ``||g_i|| = ||r_i|| ||[x_i, 1]||`` and the
coupled difference ``[x_i, 1] (r_i(x_t) - r_i(x_{t-1}))^T`` are exact and cheap. The
L2 penalty ``alpha/2 ||w||^2`` is data-independent and enters the update unclipped. The
algorithm and its options are those of :class:`rml_fast.privacy.dp_c4.DPC4Optimizer`
(**[PROPOSED reconstruction]** of DP-C4).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

try:
    from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
    from sklearn.utils.validation import check_is_fitted
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "DPC4Classifier/DPC4Regressor need scikit-learn: pip install scikit-learn"
    ) from exc

from rml_fast._sklearn_validation import check_targets_named, validate_named
from rml_fast._validation import Interval, check_rng, check_scalar
from rml_fast.kernels.random import MAX_COUNTER, normal, seed_from_rng
from rml_fast.privacy.clipping import NonFiniteGradientError
from rml_fast.privacy.dp_c4 import (
    ALGORITHMS,
    calibrate_noise_multiplier,
    privacy_spent,
    stability_floor_beta,
)

__all__ = ["DPC4Classifier", "DPC4Regressor"]

_POS = Interval("real", 0.0, None, "neither")
_NONNEG = Interval("real", 0.0, None, "left")
_FRACTION = Interval("real", 0.0, 1.0, "neither")
#: the batch size ``batch_size="auto"`` asks for; smaller data sets get full batches (``q = 1``)
AUTO_BATCH_SIZE = 64
_DTYPES = [np.float64, np.float32]


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


class _DPC4Linear(BaseEstimator):
    _loss = "squared"
    #: scikit-learn checks (``check_estimator`` / ``parametrize_with_checks``) this estimator
    #: is known to fail, with the reason; passed as ``expected_failed_checks``.
    _expected_failed_checks: ClassVar[dict[str, str]] = {}

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        delta: float | None = None,
        epochs: int = 10,
        batch_size: int | str = "auto",
        lr: float = 0.1,
        alpha: float = 1e-3,
        anchor_clip: float = 1.0,
        anchor_clip_growth: float = 0.25,
        drift_clip_scale: float = 1.0,
        threshold_shift: float = 1e-3,
        anchor_budget_fraction: float = 0.5,
        beta0: float = 1.0,
        beta_power: float = 2.0 / 3.0,
        stability_floor: float = 2.0,
        lr_decay_steps: float | None = None,
        algorithm: str = "dpc4",
        fit_intercept: bool = True,
        noise_multiplier: float | None = None,
        random_state: Any = None,
        progress: bool = False,
        callback: Callable[[int, np.ndarray, Any], None] | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.alpha = alpha
        self.anchor_clip = anchor_clip
        self.anchor_clip_growth = anchor_clip_growth
        self.drift_clip_scale = drift_clip_scale
        self.threshold_shift = threshold_shift
        self.anchor_budget_fraction = anchor_budget_fraction
        self.beta0 = beta0
        self.beta_power = beta_power
        self.stability_floor = stability_floor
        self.lr_decay_steps = lr_decay_steps
        self.algorithm = algorithm
        self.fit_intercept = fit_intercept
        self.noise_multiplier = noise_multiplier
        self.random_state = random_state
        self.progress = progress
        self.callback = callback

    def _residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Residuals (n, K) for scores z (n, K) and targets y (n, K) (one-hot if softmax)."""
        if self._loss == "logistic":
            return _sigmoid(z) - y
        if self._loss == "softmax":
            return _softmax(z) - y
        return z - y

    def _validate(self, n: int) -> dict[str, Any]:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        delta = 1.0 / n if self.delta is None else self.delta
        v = {
            "epsilon": check_scalar(self.epsilon, "epsilon", _POS),
            "delta": check_scalar(delta, "delta", _FRACTION),
            "epochs": check_scalar(self.epochs, "epochs", Interval("int", 1, None)),
            "batch_size": self._batch_size(n),
            "lr": check_scalar(self.lr, "lr", _POS),
            "alpha": check_scalar(self.alpha, "alpha", _NONNEG),
            "anchor_clip": check_scalar(self.anchor_clip, "anchor_clip", _POS),
            "growth": check_scalar(self.anchor_clip_growth, "anchor_clip_growth",
                                   Interval("real", 0.0, 1.0, "left")),
            "drift_clip_scale": check_scalar(self.drift_clip_scale, "drift_clip_scale", _POS),
            "threshold_shift": check_scalar(self.threshold_shift, "threshold_shift", _POS),
            "rho": check_scalar(self.anchor_budget_fraction, "anchor_budget_fraction", _FRACTION),
            "beta0": check_scalar(self.beta0, "beta0", _POS),
            "beta_power": check_scalar(self.beta_power, "beta_power", _NONNEG),
            "kappa": check_scalar(self.stability_floor, "stability_floor", _NONNEG),
        }
        if self.lr_decay_steps is not None:
            check_scalar(self.lr_decay_steps, "lr_decay_steps", _POS)
        if self.noise_multiplier is not None:
            check_scalar(self.noise_multiplier, "noise_multiplier", _NONNEG)
        return v

    def _batch_size(self, n: int) -> int:
        """The expected batch size for ``n`` samples: ``min(64, n)`` for ``"auto"``."""
        if isinstance(self.batch_size, str):
            if self.batch_size != "auto":
                raise ValueError(f"batch_size must be 'auto' or an int in [1, {n}] (n_samples), "
                                 f"got {self.batch_size!r}")
            return min(AUTO_BATCH_SIZE, n)
        return check_scalar(self.batch_size, "batch_size", Interval("int", 1, n))

    def _validate_X_y(self, X: Any, y: Any, *, y_numeric: bool) -> tuple[np.ndarray, np.ndarray]:
        """scikit-learn's input validation; at least 2 samples (the default ``delta = 1/n``)."""
        return validate_named(self, X, y, dtype=_DTYPES, y_numeric=y_numeric, ensure_min_samples=2)

    def __sklearn_tags__(self) -> Any:
        """scikit-learn tags: dense real input, one target."""
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.target_tags.multi_output = False
        return tags

    def _fit(self, X: np.ndarray, y: np.ndarray) -> None:
        """``y`` of shape (n, K): K = 1 (binary logistic, squared) or one-hot (softmax)."""
        n, K = X.shape[0], y.shape[1]
        v = self._validate(n)
        q = v["batch_size"] / n
        steps_per_epoch = max(1, round(1 / q))
        T = v["epochs"] * steps_per_epoch
        if self.noise_multiplier is None:
            sigma = calibrate_noise_multiplier(v["epsilon"], v["delta"], q, T)
        else:
            sigma = float(self.noise_multiplier)
        rng = check_rng(self.random_state, "random_state")
        seed = seed_from_rng(rng)
        Xa = np.hstack([X, np.ones((n, 1), X.dtype)]) if self.fit_intercept else X
        dim = Xa.shape[1]
        with np.errstate(over="ignore"):
            row_norms = np.linalg.norm(Xa, axis=1)
        bad = np.flatnonzero(~np.isfinite(row_norms))
        if bad.size:
            raise ValueError(f"X rows {bad[:10].tolist()} are too large: their norms overflow "
                             "float64; rescale X (e.g. standardise it)")
        theta = np.zeros((dim, K))
        theta_prev = theta.copy()
        vel = np.zeros((dim, K))
        penalty = np.full((dim, 1), v["alpha"])
        if self.fit_intercept:
            penalty[-1] = 0.0
        dpsgd = self.algorithm == "dpsgd"
        rho = v["rho"]
        sigma_g = sigma if dpsgd else sigma / math.sqrt(rho)
        sigma_d = math.inf if dpsgd else sigma / math.sqrt(1.0 - rho)
        last_move, last_lr = 0.0, v["lr"]
        from tqdm.auto import tqdm

        bar = tqdm(range(T), disable=not self.progress, desc=f"{self.algorithm} fit")
        for t in bar:
            lr = v["lr"] if self.lr_decay_steps is None else v["lr"] / math.sqrt(
                1.0 + t / self.lr_decay_steps)
            if dpsgd or t == 0:
                beta = 1.0
            else:
                floor = stability_floor_beta(v["kappa"], v["drift_clip_scale"], last_lr, sigma_d,
                                             dim * K, v["batch_size"])
                beta = min(1.0, max(v["beta0"] / (t + 1) ** v["beta_power"], floor))
            idx = np.flatnonzero(rng.random(n) < q)
            Xb, yb, nb = Xa[idx], y[idx], row_norms[idx]
            with np.errstate(over="ignore", invalid="ignore"):  # checked just below
                r = self._residual(Xb @ theta, yb)  # (b, K)
                norms = np.linalg.norm(r, axis=1) * nb  # ||g_i|| = ||r_i|| ||x_i||
            _check_step(t, T, norms, idx)
            C_g = v["anchor_clip"] * beta ** (-v["growth"])
            w_anchor = np.minimum(1.0, C_g / np.maximum(norms, 1e-300))
            size = dim * K
            z = normal(size, seed, (t * size) % (MAX_COUNTER - size)).astype(np.float64)
            z = z.reshape(dim, K)
            if beta >= 1.0:
                total = Xb.T @ (w_anchor[:, None] * r) + sigma_g * C_g * z
            else:
                with np.errstate(over="ignore", invalid="ignore"):
                    r_prev = self._residual(Xb @ theta_prev, yb)
                    dr = r - r_prev
                    diff_norms = np.linalg.norm(dr, axis=1) * nb
                _check_step(t, T, diff_norms, idx, "gradient differences")
                C_t = v["drift_clip_scale"] * (last_move + last_lr * v["threshold_shift"])
                u = np.minimum(1.0, C_t / np.maximum(diff_norms, 1e-300))
                std = math.hypot((1 - beta) * sigma_d * C_t, beta * sigma_g * C_g)
                coef = (1 - beta) * u[:, None] * dr + beta * w_anchor[:, None] * r
                total = Xb.T @ coef + std * z
            if not np.isfinite(total).all():
                raise NonFiniteGradientError(
                    f"step {t} (0-based) of {T}: the clipped, noised gradient sum is not finite "
                    "(an overflow); fit stopped, no fitted model is returned", step=t)
            vel = (1 - beta) * vel + total / v["batch_size"]
            direction = vel + penalty * theta
            theta_prev = theta
            theta = theta - lr * direction
            last_move, last_lr = lr * float(np.linalg.norm(direction)), lr
            if self.callback is not None:
                self._set(theta)
                self.callback(t, self.coef_, self.intercept_)
            if self.progress and (t + 1) % steps_per_epoch == 0 and sigma > 0:
                spent = privacy_spent(sigma, q, t + 1, v["delta"], h=1e-3)  # pessimistic
                bar.set_postfix(epoch=(t + 1) // steps_per_epoch, eps=f"{spent:.3g}")
        self._set(theta)
        self.noise_multiplier_ = sigma
        self.n_iter_ = T
        self.sample_rate_ = q
        self.delta_ = v["delta"]
        self.epsilon_ = privacy_spent(sigma, q, T, v["delta"]) if sigma > 0 else math.inf

    def _set(self, theta: np.ndarray) -> None:
        """theta (dim, K) -> coef_ (n_features,) and a float intercept_ for K = 1, else
        sklearn's multinomial layout coef_ (K, n_features), intercept_ (K,)."""
        W = theta[:-1] if self.fit_intercept else theta
        b = theta[-1] if self.fit_intercept else np.zeros(theta.shape[1])
        self.intercept_: float | np.ndarray  # a float for one output column, else (K,)
        if theta.shape[1] == 1:
            self.coef_, self.intercept_ = W[:, 0].copy(), float(b[0])
        else:
            self.coef_, self.intercept_ = W.T.copy(), b.copy()

    def _decision(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "coef_")
        X = validate_named(self, X, dtype=_DTYPES, reset=False)
        return X @ self.coef_.T + self.intercept_


def _check_step(t: int, T: int, norms: np.ndarray, idx: np.ndarray,
                what: str = "gradients") -> None:
    bad = ~np.isfinite(norms)
    if bad.any():
        rows = idx[bad][:10].tolist()
        raise NonFiniteGradientError(
            f"step {t} (0-based) of {T}: the per-sample {what} of rows {rows} of X are not "
            "finite (an overflow: rescale X and y); fit stopped, no fitted model is returned",
            step=t, samples=rows)


class DPC4Classifier(ClassifierMixin, _DPC4Linear):
    """L2-regularised logistic regression trained privately by DP-C4 (or DP-SGD).

    Two classes: minimises ``(1/n) sum_i log(1 + exp(-s_i (w.x_i + b))) + alpha/2 ||w||^2``.
    ``K >= 3`` classes: multinomial (softmax) regression, ``(1/n) sum_i -log softmax(W x_i +
    b)_{y_i} + alpha/2 ||W||_F^2`` with ``W`` of shape (K, n_features) (sklearn's
    ``LogisticRegression(C=1/(alpha n))`` optimum). Per-sample gradients
    ``[x_i, 1] (p_i - e_{y_i})^T`` are clipped as one vector of ``K (n_features + 1)``
    entries, so the privacy guarantee is the same for any ``K``: ``(epsilon, delta)``-DP
    (add/remove adjacency, Poisson sampling, PLD accounting).

    Parameters
    ----------
    epsilon : float, default=1.0
    delta : float, optional
        Default ``1 / n``.
    epochs : int, default=10
    batch_size : int or "auto", default="auto"
        Expected batch size: ``T = epochs * round(n / batch_size)`` Poisson-sampled steps with
        rate ``q = batch_size / n``. ``"auto"`` is ``min(64, n)`` (64 before; a data set of
        fewer than 64 rows is now trained with full batches, ``q = 1``, no subsampling
        amplification, and the noise is calibrated for it). An int must be in ``[1, n]``.
    lr, alpha : float, default=0.1, 1e-3
    anchor_clip, anchor_clip_growth, drift_clip_scale, threshold_shift, anchor_budget_fraction, beta0,
    beta_power, stability_floor, lr_decay_steps, algorithm
        As in :class:`rml_fast.privacy.dp_c4.DPC4Optimizer`.
    fit_intercept : bool, default=True
    noise_multiplier : float, optional
        Skip calibration and use this ``sigma_eff`` (``epsilon_`` then reports the spend).
    random_state : Generator, int or None
    progress : bool, default=False
        Show a progress bar with the privacy spent so far (epsilon at ``delta``, PLD).
    callback : callable, optional
        ``callback(t, coef, intercept)`` after each step.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_classes, n_features)
        1-D for two classes, else one row per class (sklearn's multinomial layout).
    intercept_ : float or ndarray of shape (n_classes,)
    classes_ : ndarray of shape (n_classes,)
    noise_multiplier_, epsilon_, delta_, sample_rate_ : float
    n_iter_ : int
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names (a DataFrame).

    Raises ``NotFittedError`` from the prediction methods before :meth:`fit`. Passes
    scikit-learn's ``check_estimator`` (``tests/test_estimator_checks.py``).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.privacy.dp_c4_linear import DPC4Classifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 3)); y = (X[:, 0] > 0).astype(int)
    >>> clf = DPC4Classifier(epsilon=5.0, epochs=5, batch_size=50, random_state=0).fit(X, y)
    >>> clf.score(X, y) > 0.8
    True
    """

    _loss = "logistic"

    def fit(self, X: Any, y: Any) -> DPC4Classifier:
        """Train privately on ``X`` (n, n_features) and labels ``y`` (n,) of at least 2 classes.

        Calibrates ``sigma_eff`` to ``(epsilon, delta)`` with the PLD accountant (unless
        ``noise_multiplier`` is given), runs ``T`` Poisson-sampled DP-C4 (or DP-SGD) steps and
        sets ``coef_``, ``intercept_``, ``classes_`` and the privacy attributes. Returns self.
        """
        X, y = self._validate_X_y(X, y, y_numeric=False)
        check_targets_named(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        K = self.classes_.shape[0]
        if K < 2:
            raise ValueError(f"y must have at least 2 classes, got {K}")
        if K == 2:
            self._loss = "logistic"
            target = (codes == 1).astype(np.float64)[:, None]
        else:
            self._loss = "softmax"
            target = np.eye(K)[codes]
        self._fit(X.astype(np.float64), target)
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """Scores of shape (n,) for two classes, else (n, n_classes)."""
        return self._decision(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities of shape (n, n_classes), columns in the order of ``classes_``."""
        z = self._decision(X)
        if z.ndim == 2:
            return _softmax(z)
        p = _sigmoid(z)
        return np.stack([1 - p, p], axis=1)

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each row, shape (n,), values from ``classes_``."""
        z = self._decision(X)
        if z.ndim == 2:
            return self.classes_[z.argmax(axis=1)]
        return self.classes_[(z > 0).astype(int)]


class DPC4Regressor(RegressorMixin, _DPC4Linear):
    """Ridge regression ``(1/2n) sum_i (w.x_i + b - y_i)^2 + alpha/2 ||w||^2`` by DP-C4.

    Parameters and attributes as :class:`DPC4Classifier` (no ``classes_``).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.privacy.dp_c4_linear import DPC4Regressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((300, 2)); y = X @ np.array([0.5, -0.3])
    >>> reg = DPC4Regressor(epsilon=8.0, epochs=10, batch_size=60, random_state=0).fit(X, y)
    >>> reg.coef_.shape
    (2,)
    """

    _loss = "squared"

    def fit(self, X: Any, y: Any) -> DPC4Regressor:
        """Train privately on ``X`` (n, n_features) and targets ``y`` (n,); returns self.

        Calibration, steps and attributes as :meth:`DPC4Classifier.fit` (no ``classes_``).
        """
        X, y = self._validate_X_y(X, y, y_numeric=True)
        self._fit(X.astype(np.float64), y.astype(np.float64)[:, None])
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predictions ``X @ coef_ + intercept_``, shape (n,)."""
        return self._decision(X)
