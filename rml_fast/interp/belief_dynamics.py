"""Belief dynamics: a closed-form Bayesian account of in-context learning and activation steering.

Bigelow, Wurgaft, Wang, Goodman, Ullman, Tanaka & Lubana, "Belief Dynamics Reveal the Dual
Nature of In-Context Learning and Activation Steering" (arXiv 2511.00617, ICML 2026).

A model's belief in a latent concept ``c`` (against its complement) after ``N`` in-context
examples, with steering vectors added at magnitudes ``m = (m_1, ..., m_k)``, is Bayes' rule in
log-odds:

    log o(c | N, m) = b + sum_j a_j m_j + gamma * N**(1 - alpha)            (paper's closed form)

Steering moves the prior log-odds linearly (``b`` is the unsteered prior, ``a_j`` the gain of
steering vector ``j``); in-context examples accumulate evidence sub-linearly (``alpha = 0`` is
the i.i.d. linear case). The belief is ``p(c) = sigmoid(log o)`` and the behaviour rate is

    P(y | N, m) = q_cbar + (q_c - q_cbar) * p(c)

with ``q_c = 1, q_cbar = 0`` unless ``fit_emission=True``. The paper's model has one steering
vector (``k = 1``); several columns of steering magnitudes add in log-odds space (the paper's
additivity prediction), which is what lets this module fit any number of them.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit, logit
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from rml_fast._validation import Interval, check_array, check_rng, check_scalar, check_tensor
from rml_fast.interp._checks import naming

__all__ = ["BeliefDynamicsModel", "simulate_curves", "steering_vector"]

_EVIDENCE = ("power", "linear")
_LOSSES = ("squared", "binomial")
_P_EPS = 1e-12


def _evidence_terms(N: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """``sign(N) |N|**(1-alpha)`` and its derivative in ``alpha`` (0 at N = 0)."""
    absN = np.abs(N)
    pos = absN > 0
    logN = np.zeros_like(absN)
    logN[pos] = np.log(absN[pos])
    g = np.where(pos, np.sign(N) * np.exp((1.0 - alpha) * logN), 0.0)
    return g, -g * logN


class BeliefDynamicsModel(RegressorMixin, BaseEstimator):
    """Fit the closed-form belief model to behaviour curves over (context size, steering).

    ``X[:, 0]`` is the number of in-context examples ``N``; the other columns (none or more)
    are steering magnitudes ``m_j`` (any sign); ``y`` is the observed behaviour rate in each
    cell (a probability for ``loss="binomial"``). The model (see the module docstring) is

        P(N, m) = q_cbar + (q_c - q_cbar) * sigmoid(b + a . m + gamma * N**(1 - alpha)).

    The paper's model has ``N >= 0`` examples consistent with the concept. A negative ``N`` is
    read as ``|N|`` examples consistent with the complement, with evidence
    ``-gamma |N|**(1-alpha)`` (a symmetric-evidence extension of ours, not in the paper; data
    with ``N >= 0`` only fit the paper's model exactly).

    Parameters
    ----------
    evidence : {"power", "linear"}, default="power"
        ``"power"``: the paper's sub-linear evidence ``gamma N**(1-alpha)``, ``0 <= alpha < 1``;
        ``"linear"``: ``alpha = 0`` fixed (i.i.d. examples).
    loss : {"squared", "binomial"}, default="squared"
        ``"binomial"``: maximum likelihood with ``sample_weight`` the number of trials per cell
        and ``y`` the fraction of them showing the behaviour (needs ``0 <= y <= 1``);
        ``"squared"``: weighted least squares on probabilities, for curves of mean next-token
        probabilities (any real ``y`` is accepted).
    fit_emission : bool, default=False
        Also fit the behaviour rates ``q_c >= q_cbar`` in [0, 1] (PROPOSED in our spec; the
        paper reads behaviour as the belief itself, ``q_c = 1, q_cbar = 0``).
    n_starts : int, default=20
        Random restarts of L-BFGS-B (analytic gradient); the best optimum is kept.
    max_alpha : float, default=0.99
        Upper bound of ``alpha`` in the power model.
    random_state : int, numpy Generator or None, default=0
        Seeds the restarts.

    Attributes
    ----------
    params_ : dict
        ``b``, ``a`` (array, one gain per steering column), ``gamma``, ``alpha``, ``q_c``,
        ``q_cbar``.
    coef_ : ndarray of shape (n_params,)
        The same in the order ``b, a_1..a_k, gamma[, alpha][, q_c, q_cbar]``;
        ``param_names_`` names them.
    cov_ : ndarray of shape (n_params, n_params)
        Asymptotic covariance of ``coef_``: the inverse observed information (``binomial``) or
        the Gauss-Newton sandwich ``s^2 (J^T W J)^-1`` (``squared``); NaN where singular.
    loss_ : float
        The minimised loss (mean over weights).
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.interp.belief_dynamics import BeliefDynamicsModel, simulate_curves
    >>> N, m = np.meshgrid([0, 1, 2, 4, 8, 16, 32, 64], np.linspace(-2, 2, 9))
    >>> X = np.column_stack([N.ravel(), m.ravel()])
    >>> truth = dict(b=-3.0, a=[1.5], gamma=1.2, alpha=0.3)
    >>> y, n = simulate_curves(X, **truth, n_trials=200, rng=0)
    >>> model = BeliefDynamicsModel(loss="binomial").fit(X, y, sample_weight=n)
    >>> model.param_names_
    ['b', 'a_0', 'gamma', 'alpha']
    >>> se = np.sqrt(np.diag(model.cov_))
    >>> bool(np.all(np.abs(model.coef_ - [-3.0, 1.5, 1.2, 0.3]) < 3 * se))  # recovered
    True
    >>> model.phase_boundary_N([[0.0]]).round(1)  # N where the belief crosses 1/2 at m = 0
    array([3.7])
    """

    def __init__(
        self,
        evidence: str = "power",
        loss: str = "squared",
        fit_emission: bool = False,
        n_starts: int = 20,
        max_alpha: float = 0.99,
        random_state: Any = 0,
    ) -> None:
        self.evidence = evidence
        self.loss = loss
        self.fit_emission = fit_emission
        self.n_starts = n_starts
        self.max_alpha = max_alpha
        self.random_state = random_state

    # ------------------------------------------------------------------ parameters

    def _check_params(self) -> None:
        if self.evidence not in _EVIDENCE:
            raise ValueError(f"evidence must be one of {_EVIDENCE}, got {self.evidence!r}")
        if self.loss not in _LOSSES:
            raise ValueError(f"loss must be one of {_LOSSES}, got {self.loss!r}")
        if not isinstance(self.fit_emission, (bool, np.bool_)):
            raise TypeError(f"fit_emission must be a bool, got {self.fit_emission!r}")
        if (
            isinstance(self.n_starts, bool)
            or not isinstance(self.n_starts, numbers.Integral)
            or self.n_starts < 1
        ):
            raise ValueError(f"n_starts must be an int >= 1, got {self.n_starts!r}")
        if not (isinstance(self.max_alpha, numbers.Real) and 0.0 < self.max_alpha < 1.0):
            raise ValueError(f"max_alpha must be a real number in (0, 1), got {self.max_alpha!r}")

    def _layout(self, k: int) -> list[str]:
        names = ["b", *[f"a_{j}" for j in range(k)], "gamma"]
        if self.evidence == "power":
            names.append("alpha")
        if self.fit_emission:
            names += ["q_c", "q_cbar"]
        return names

    def _unpack(
        self, theta: np.ndarray, k: int
    ) -> tuple[float, np.ndarray, float, float, float, float]:
        b, a, gamma = theta[0], theta[1 : 1 + k], theta[1 + k]
        i = 2 + k
        alpha = 0.0
        if self.evidence == "power":
            alpha, i = theta[i], i + 1
        q_c, q_cbar = (theta[i], theta[i + 1]) if self.fit_emission else (1.0, 0.0)
        return b, a, gamma, alpha, q_c, q_cbar

    # ------------------------------------------------------------------ the model

    @staticmethod
    def _split(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return X[:, 0], X[:, 1:]

    def _eta_and_grad(self, theta: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log-odds ``eta`` (n,) and ``d eta / d theta`` (n, p) for the non-emission parameters."""
        N, M = self._split(X)
        k = M.shape[1]
        b, a, gamma, alpha, _, _ = self._unpack(theta, k)
        g, dg_dalpha = _evidence_terms(N, alpha)
        eta = b + M @ a + gamma * g
        cols = [np.ones_like(N), *M.T, g]
        if self.evidence == "power":
            cols.append(gamma * dg_dalpha)
        return eta, np.column_stack(cols)

    def _objective(
        self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, w: np.ndarray
    ) -> tuple[float, np.ndarray]:
        k = X.shape[1] - 1
        eta, deta = self._eta_and_grad(theta, X)
        _, _, _, _, q_c, q_cbar = self._unpack(theta, k)
        s = expit(eta)
        P = q_cbar + (q_c - q_cbar) * s
        wsum = w.sum()
        if self.loss == "squared":
            r = P - y
            value = 0.5 * np.dot(w, r * r) / wsum
            dP = w * r / wsum
        elif not self.fit_emission:  # binomial on the belief: the stable log-sigmoid form
            value = -np.dot(w, y * log_expit(eta) + (1 - y) * log_expit(-eta)) / wsum
            grad_eta = w * (s - y) / wsum
            grad = deta.T @ grad_eta
            return float(value), grad
        else:
            Pc = np.clip(P, _P_EPS, 1 - _P_EPS)
            value = -np.dot(w, y * np.log(Pc) + (1 - y) * np.log1p(-Pc)) / wsum
            dP = w * (Pc - y) / (Pc * (1 - Pc)) / wsum
        grad_eta = dP * (q_c - q_cbar) * s * (1 - s)
        grad = deta.T @ grad_eta
        if self.fit_emission:
            grad = np.concatenate([grad, [np.dot(dP, s), np.dot(dP, 1 - s)]])
        return float(value), grad

    # ------------------------------------------------------------------ fitting

    def _bounds(self, k: int) -> list[tuple[float | None, float | None]]:
        bounds: list[tuple[float | None, float | None]] = [(None, None)] * (k + 2)
        if self.evidence == "power":
            bounds.append((0.0, float(self.max_alpha)))
        if self.fit_emission:
            bounds += [(0.0, 1.0), (0.0, 1.0)]
        return bounds

    def _start(self, rng: np.random.Generator, k: int, X: np.ndarray) -> np.ndarray:
        scale = 1.0 / np.maximum(np.abs(X).max(axis=0), 1.0)
        theta = [rng.normal(0, 2), *(rng.normal(0, 2, k) * scale[1:]), rng.normal(0, 1)]
        if self.evidence == "power":
            theta.append(rng.uniform(0, 0.8 * self.max_alpha))
        if self.fit_emission:
            theta += sorted(rng.uniform(0, 1, 2))[::-1]
        return np.asarray(theta, dtype=float)

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> BeliefDynamicsModel:
        """Fit by multi-start L-BFGS-B with the analytic gradient.

        Parameters
        ----------
        X : array-like of shape (n_cells, 1 + k)
            Column 0: the number of in-context examples ``N`` (negative: examples of the
            complement concept); columns 1..k: steering magnitudes.
        y : array-like of shape (n_cells,)
            Behaviour rate per cell (``loss="binomial"``: the fraction of ``sample_weight``
            trials, in [0, 1]).
        sample_weight : array-like of shape (n_cells,), optional
            Trials per cell (``binomial``) or least-squares weights (``squared``); default 1.

        Returns
        -------
        self : BeliefDynamicsModel
        """
        self._check_params()
        with naming("X", "y"):
            X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
            if self.loss == "binomial" and (np.any(y < 0) or np.any(y > 1)):
                raise ValueError('y must lie in [0, 1] for loss="binomial" (fractions of trials)')
        w = self._weights(sample_weight, X.shape[0])
        k = X.shape[1] - 1
        rng = check_rng(self.random_state, "random_state")
        bounds = self._bounds(k)
        best = None
        for _ in range(self.n_starts):
            res = minimize(
                self._objective,
                self._start(rng, k, X),
                args=(X, y, w),
                jac=True,
                method="L-BFGS-B",
                bounds=bounds,
                options={"maxiter": 2000, "ftol": 1e-14, "gtol": 1e-10},
            )
            if np.isfinite(res.fun) and (best is None or res.fun < best.fun):
                best = res
        if best is None:
            raise ValueError("no restart reached a finite loss; check X and y")
        theta = self._canonical(best.x, k)
        self.coef_ = theta
        self.param_names_ = self._layout(k)
        self.loss_ = float(best.fun)
        b, a, gamma, alpha, q_c, q_cbar = self._unpack(theta, k)
        self.params_: dict[str, Any] = {
            "b": b,
            "a": np.array(a),
            "gamma": gamma,
            "alpha": alpha,
            "q_c": q_c,
            "q_cbar": q_cbar,
        }
        self.cov_ = self._covariance(theta, X, y, w)
        return self

    @staticmethod
    def _weights(sample_weight: Any, n: int) -> np.ndarray:
        if sample_weight is None:
            return np.ones(n)
        w = np.asarray(sample_weight, dtype=float)
        if w.shape != (n,):
            raise ValueError(f"sample_weight must have shape ({n},), got {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("sample_weight must be finite, >= 0 and not all zero")
        return w

    def _canonical(self, theta: np.ndarray, k: int) -> np.ndarray:
        """Swap (q_c, q_cbar) and flip the log-odds when the fit found the mirrored solution."""
        theta = theta.copy()
        if self.fit_emission and theta[-2] < theta[-1]:
            theta[-2], theta[-1] = theta[-1], theta[-2]
            theta[: k + 2] *= -1
        return theta

    def _covariance(
        self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, w: np.ndarray
    ) -> np.ndarray:
        p = theta.size
        wsum = w.sum()
        if self.loss == "binomial":  # observed information by central differences of the gradient
            H = np.empty((p, p))
            for i in range(p):
                h = 1e-5 * max(1.0, abs(theta[i]))
                e = np.zeros(p)
                e[i] = h
                H[:, i] = (
                    self._objective(theta + e, X, y, w)[1] - self._objective(theta - e, X, y, w)[1]
                ) / (2 * h)
            H = 0.5 * (H + H.T) * wsum
            return _safe_inverse(H)
        J = np.empty((X.shape[0], p))  # Jacobian of P in theta
        k = X.shape[1] - 1
        eta, deta = self._eta_and_grad(theta, X)
        _, _, _, _, q_c, q_cbar = self._unpack(theta, k)
        s = expit(eta)
        J[:, : deta.shape[1]] = deta * ((q_c - q_cbar) * s * (1 - s))[:, None]
        if self.fit_emission:
            J[:, -2], J[:, -1] = s, 1 - s
        r = q_cbar + (q_c - q_cbar) * s - y
        dof = max(X.shape[0] - p, 1)
        s2 = np.dot(w, r * r) / dof
        return s2 * _safe_inverse(J.T @ (J * w[:, None]))

    # ------------------------------------------------------------------ bootstrap

    def bootstrap(
        self,
        X: Any,
        y: Any,
        sample_weight: Any = None,
        *,
        n_boot: int = 1000,
        rng: Any = None,
        max_iter: int = 100,
        tol: float = 1e-12,
    ) -> np.ndarray:
        """Nonparametric bootstrap of ``coef_``: all resamples refitted at once.

        Each resample draws the cells of ``(X, y)`` with replacement; its fit minimises the same
        loss as :meth:`fit` with the cell weights multiplied by the draw counts. The ``n_boot``
        fits run together as batched, projected Levenberg-Marquardt / Fisher-scoring steps
        (Gauss-Newton on probabilities, with the binomial variance ``P (1 - P)`` for
        ``loss="binomial"``), warm-started at ``coef_``: one ``(n_boot, p, p)`` solve per
        iteration instead of ``n_boot`` separate optimiser runs.

        Parameters
        ----------
        X, y, sample_weight
            The data :meth:`fit` was given.
        n_boot : int, default=1000
            Resamples.
        rng : int, numpy Generator or None
            Seeds the resampling.
        max_iter : int, default=100
            Damped Gauss-Newton iterations (all resamples step together).
        tol : float, default=1e-12
            A resample stops when its relative loss decrease falls below ``tol``.

        Returns
        -------
        ndarray of shape (n_boot, n_params)
            Bootstrap draws of ``coef_`` (columns named by ``param_names_``).

        Examples
        --------
        >>> import numpy as np
        >>> N, m = np.meshgrid([0, 2, 4, 8, 16, 32], np.linspace(-2, 2, 5))
        >>> X = np.column_stack([N.ravel(), m.ravel()])
        >>> y, n = simulate_curves(X, b=-3.0, a=[1.5], gamma=1.2, alpha=0.3, n_trials=100, rng=0)
        >>> model = BeliefDynamicsModel(loss="binomial", n_starts=5).fit(X, y, sample_weight=n)
        >>> draws = model.bootstrap(X, y, n, n_boot=200, rng=1)
        >>> draws.shape
        (200, 4)
        >>> lo, hi = np.percentile(draws[:, 2], [2.5, 97.5])  # 95% interval of gamma
        >>> bool(lo < 1.2 < hi)
        True
        """
        check_is_fitted(self)
        with naming("X", "y"):
            X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True, reset=False)
            if self.loss == "binomial" and (np.any(y < 0) or np.any(y > 1)):
                raise ValueError('y must lie in [0, 1] for loss="binomial" (fractions of trials)')
        w = self._weights(sample_weight, X.shape[0])
        if isinstance(n_boot, bool) or not isinstance(n_boot, numbers.Integral) or n_boot < 1:
            raise ValueError(f"n_boot must be an int >= 1, got {n_boot!r}")
        if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
            raise ValueError(f"max_iter must be an int >= 1, got {max_iter!r}")
        gen = check_rng(rng)
        n = X.shape[0]
        counts = np.stack([np.bincount(gen.integers(0, n, n), minlength=n) for _ in range(n_boot)])
        W = counts * w  # (B, n)
        return _batched_fit(self, X, y, W, self.coef_, max_iter=max_iter, tol=tol)

    # ------------------------------------------------------------------ predictions

    def _check_X(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        with naming("X"):
            return validate_data(self, X, dtype=np.float64, reset=False)

    def log_odds(self, X: Any) -> np.ndarray:
        """Belief log-odds ``b + a . m + gamma N**(1-alpha)`` per row of ``X``, shape (n,)."""
        X = self._check_X(X)
        return self._eta_and_grad(self.coef_, X)[0]

    def belief(self, X: Any) -> np.ndarray:
        """Belief ``p(c | N, m) = sigmoid(log_odds)``, shape (n,)."""
        return expit(self.log_odds(X))

    def predict(self, X: Any) -> np.ndarray:
        """Behaviour rate ``q_cbar + (q_c - q_cbar) p(c | N, m)``, shape (n,)."""
        p = self.belief(X)
        return self.params_["q_cbar"] + (self.params_["q_c"] - self.params_["q_cbar"]) * p

    def phase_boundary_N(self, M: Any) -> np.ndarray:
        """Context size at which the belief crosses 1/2, for steering magnitudes ``M``.

        ``N*(m) = sign(r) |r| ** (1 / (1 - alpha))`` with ``r = -(b + a . m) / gamma``; a
        negative ``N*`` counts examples of the complement concept (NaN when ``gamma = 0``).

        Parameters
        ----------
        M : array-like of shape (n, k)
            Steering magnitudes (``k = n_features_in_ - 1``; shape (n, 0) when ``k = 0``).

        Returns
        -------
        ndarray of shape (n,)
        """
        check_is_fitted(self)
        M = np.asarray(M, dtype=float)
        k = self.n_features_in_ - 1
        if M.ndim != 2 or M.shape[1] != k:
            raise ValueError(
                f"M must have shape (n, {k}) (one column per steering vector), got {M.shape}"
            )
        pr = self.params_
        if pr["gamma"] == 0:
            return np.full(len(M), np.nan)
        r = -(pr["b"] + M @ pr["a"]) / pr["gamma"]
        return np.sign(r) * np.abs(r) ** (1.0 / (1.0 - pr["alpha"]))

    def phase_boundary_m(self, N: Any, *, feature: int = 0) -> np.ndarray:
        """Steering magnitude of column ``feature`` at which the belief crosses 1/2 (others 0).

        ``m*(N) = -(b + gamma N**(1-alpha)) / a_feature``.

        Parameters
        ----------
        N : array-like of shape (n,)
            Context sizes.
        feature : int, default=0
            Which steering vector (0-based among the steering columns).

        Returns
        -------
        ndarray of shape (n,)
        """
        check_is_fitted(self)
        k = self.n_features_in_ - 1
        if not (isinstance(feature, numbers.Integral) and 0 <= feature < k):
            raise ValueError(f"feature must be an int in [0, {k}), got {feature!r}")
        N = np.asarray(N, dtype=float)
        if N.ndim != 1 or not np.all(np.isfinite(N)):
            raise ValueError("N must be a 1-D array of finite context sizes")
        pr = self.params_
        g, _ = _evidence_terms(N, pr["alpha"])
        return -(pr["b"] + pr["gamma"] * g) / pr["a"][feature]

    def additivity_residual(self, X: Any, y: Any) -> np.ndarray:
        """Observed minus fitted belief log-odds, per cell: zero where behaviour is additive.

        The observed log-belief is ``logit((y - q_cbar) / (q_c - q_cbar))``, clipped to
        ``[1e-6, 1 - 1e-6]``; additivity of context and steering in log-belief space (the
        paper's prediction) means no structure is left in these residuals.

        Parameters
        ----------
        X : array-like of shape (n, 1 + k)
        y : array-like of shape (n,)

        Returns
        -------
        ndarray of shape (n,)
        """
        eta = self.log_odds(X)
        y = np.asarray(y, dtype=float)
        if y.shape != eta.shape:
            raise ValueError(f"y must have shape {eta.shape}, got {y.shape}")
        pr = self.params_
        p = np.clip((y - pr["q_cbar"]) / (pr["q_c"] - pr["q_cbar"]), 1e-6, 1 - 1e-6)
        return logit(p) - eta

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True  # a sigmoid in [0, 1] cannot fit arbitrary targets
        return tags


def _batched_state(
    model: BeliefDynamicsModel, X: np.ndarray, y: np.ndarray, W: np.ndarray, T: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-resample loss (B,), gradient (B, p) and Gauss-Newton / Fisher matrix (B, p, p)."""
    k = X.shape[1] - 1
    N, M = X[:, 0], X[:, 1:]
    b, a, gamma = T[:, 0], T[:, 1 : 1 + k], T[:, 1 + k]
    alpha = T[:, 2 + k] if model.evidence == "power" else np.zeros(len(T))
    absN = np.abs(N)
    logN = np.log(np.where(absN > 0, absN, 1.0))
    g = np.where(absN > 0, np.sign(N) * np.exp((1.0 - alpha)[:, None] * logN), 0.0)  # (B, n)
    eta = b[:, None] + a @ M.T + gamma[:, None] * g
    s = expit(eta)
    if model.fit_emission:
        q_c, q_cbar = T[:, -2:-1], T[:, -1:]
    else:
        q_c, q_cbar = np.ones((len(T), 1)), np.zeros((len(T), 1))
    P = q_cbar + (q_c - q_cbar) * s
    dP_deta = (q_c - q_cbar) * s * (1 - s)
    cols = [np.ones_like(eta), *np.broadcast_to(M.T, (len(T), k, len(N))).transpose(1, 0, 2), g]
    if model.evidence == "power":
        cols.append(-gamma[:, None] * g * logN)
    J = np.stack(cols, axis=-1) * dP_deta[..., None]  # (B, n, p)
    if model.fit_emission:
        J = np.concatenate([J, s[..., None], (1 - s)[..., None]], axis=-1)
    wsum = W.sum(axis=1, keepdims=True)
    if model.loss == "squared":
        r = P - y
        loss = 0.5 * np.sum(W * r * r, axis=1) / wsum[:, 0]
        v = np.ones_like(P)
    else:
        Pc = np.clip(P, _P_EPS, 1 - _P_EPS)
        loss = -np.sum(W * (y * np.log(Pc) + (1 - y) * np.log1p(-Pc)), axis=1) / wsum[:, 0]
        r, v = Pc - y, Pc * (1 - Pc)
    Wv = W / v / wsum
    grad = np.matmul((Wv * r)[:, None, :], J)[:, 0, :]
    JW = J * Wv[..., None]
    H = np.matmul(JW.transpose(0, 2, 1), J)
    return loss, grad, H


def _batched_fit(
    model: BeliefDynamicsModel,
    X: np.ndarray,
    y: np.ndarray,
    W: np.ndarray,
    theta0: np.ndarray,
    *,
    max_iter: int,
    tol: float,
) -> np.ndarray:
    """Projected Levenberg-Marquardt on ``B`` weightings ``W`` (B, n) of the same cells at once."""
    k = X.shape[1] - 1
    lo = np.array([b[0] if b[0] is not None else -np.inf for b in model._bounds(k)])
    hi = np.array([b[1] if b[1] is not None else np.inf for b in model._bounds(k)])
    B, p = W.shape[0], theta0.size
    T = np.tile(theta0, (B, 1))
    lam = np.full(B, 1e-3)
    active = np.ones(B, dtype=bool)
    loss, grad, H = _batched_state(model, X, y, W, T)
    eye = np.eye(p)
    for _ in range(max_iter):
        if not active.any():
            break
        idx = np.flatnonzero(active)
        Hd = (
            H[idx]
            + (lam[idx, None, None] * (np.einsum("bii->bi", H[idx])[:, :, None] + 1e-12)) * eye
        )
        step = np.linalg.solve(Hd, -grad[idx][..., None])[..., 0]
        cand = np.clip(T[idx] + step, lo, hi)
        c_loss, c_grad, c_H = _batched_state(model, X, y, W[idx], cand)
        better = c_loss <= loss[idx]
        acc = idx[better]
        rel = (loss[acc] - c_loss[better]) / np.maximum(np.abs(loss[acc]), 1e-300)
        T[acc], loss[acc], grad[acc], H[acc] = (
            cand[better],
            c_loss[better],
            c_grad[better],
            c_H[better],
        )
        lam[acc] = np.maximum(lam[acc] / 3, 1e-12)
        rej = idx[~better]
        lam[rej] *= 4
        active[acc[rel < tol]] = False
        active[rej[lam[rej] > 1e10]] = False
    return np.array([model._canonical(t, k) for t in T])


def _safe_inverse(A: np.ndarray) -> np.ndarray:
    try:
        if np.linalg.cond(A) > 1e12:
            raise np.linalg.LinAlgError
        return np.linalg.inv(A)
    except np.linalg.LinAlgError:
        return np.full_like(A, np.nan)


def simulate_curves(
    X: Any,
    *,
    b: float,
    a: Any = (),
    gamma: float,
    alpha: float = 0.0,
    q_c: float = 1.0,
    q_cbar: float = 0.0,
    n_trials: int = 100,
    rng: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Binomial behaviour data from known belief-model parameters (for recovery studies).

    Parameters
    ----------
    X : array-like of shape (n_cells, 1 + k)
        ``N`` in column 0, steering magnitudes after.
    b, a, gamma, alpha, q_c, q_cbar
        The model's parameters (``a``: one gain per steering column).
    n_trials : int, default=100
        Trials per cell.
    rng : int, numpy Generator or None

    Returns
    -------
    y : ndarray of shape (n_cells,)
        Observed fractions ``k / n_trials``.
    n : ndarray of shape (n_cells,)
        ``n_trials`` per cell.

    Examples
    --------
    >>> y, n = simulate_curves([[0, 0.0], [64, 0.0]], b=-4.0, a=[1.0], gamma=2.0, n_trials=50, rng=1)
    >>> bool(y[0] < 0.1 < 0.9 < y[1])
    True
    """
    X = check_array(X, "X", dtypes=(np.float64,), finite=False)
    if X.ndim != 2 or X.shape[1] < 1 or not np.all(np.isfinite(X)):
        raise ValueError("X must be a finite array of shape (n, 1 + k), N in column 0")
    a = check_array(a, "a", dtypes=(np.float64,), ndim=(0, 1)).reshape(-1)
    real = Interval("real", None, None)
    b = float(check_scalar(b, "b", real))
    gamma = float(check_scalar(gamma, "gamma", real))
    alpha = float(check_scalar(alpha, "alpha", real))
    q_c = float(check_scalar(q_c, "q_c", real))
    q_cbar = float(check_scalar(q_cbar, "q_cbar", real))
    if a.size != X.shape[1] - 1:
        raise ValueError(
            f"a must have one gain per steering column ({X.shape[1] - 1}), got {a.size}"
        )
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must be in [0, 1), got {alpha!r}")
    if not (0.0 <= q_cbar <= 1.0 and 0.0 <= q_c <= 1.0):
        raise ValueError("q_c and q_cbar must lie in [0, 1]")
    if isinstance(n_trials, bool) or not isinstance(n_trials, numbers.Integral) or n_trials < 1:
        raise ValueError(f"n_trials must be an int >= 1, got {n_trials!r}")
    gen = check_rng(rng)
    g, _ = _evidence_terms(X[:, 0], alpha)
    P = q_cbar + (q_c - q_cbar) * expit(b + X[:, 1:] @ a + gamma * g)
    n = np.full(X.shape[0], float(n_trials))
    return gen.binomial(n_trials, P) / n_trials, n


def steering_vector(acts_pos: Any, acts_neg: Any) -> Any:
    """Contrastive activation-addition direction: mean(acts_pos) - mean(acts_neg).

    Parameters
    ----------
    acts_pos, acts_neg : array-like or torch.Tensor of shape (n_pos, d) and (n_neg, d)
        Residual-stream activations at one layer for concept-positive and concept-negative
        prompts.

    Returns
    -------
    ndarray or torch.Tensor of shape (d,)
        Same type as the inputs.

    Examples
    --------
    >>> import numpy as np
    >>> steering_vector(np.array([[1.0, 2.0], [3.0, 2.0]]), np.array([[0.0, 1.0]]))
    array([2., 1.])
    """
    torch_mod = sys.modules.get("torch")  # an input can only be a tensor if torch is loaded
    torch_in = [
        torch_mod is not None and isinstance(A, torch_mod.Tensor) for A in (acts_pos, acts_neg)
    ]
    if torch_in[0] != torch_in[1]:
        raise TypeError(
            "acts_pos and acts_neg must both be torch tensors or both NumPy arrays, got "
            f"acts_pos {type(acts_pos).__name__} and acts_neg {type(acts_neg).__name__}"
        )
    for name, A in (("acts_pos", acts_pos), ("acts_neg", acts_neg)):
        if torch_in[0]:
            check_tensor(A, name, finite=False)
        else:
            check_array(A, name, dtypes=None, finite=False)
        if getattr(A, "ndim", None) != 2 or A.shape[0] < 1:
            raise ValueError(
                f"{name} must be a 2-D array (n, d) with n >= 1, got shape {getattr(A, 'shape', None)}"
            )
    if acts_pos.shape[1] != acts_neg.shape[1]:
        raise ValueError(
            f"acts_pos and acts_neg must have the same width d, got {acts_pos.shape[1]} and {acts_neg.shape[1]}"
        )
    return acts_pos.mean(0) - acts_neg.mean(0)
