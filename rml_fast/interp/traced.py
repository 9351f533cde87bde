"""TRACED: reasoning-trace quality from the kinematics of hidden-state trajectories.

Jiang, Liu, Wang & Hu, "Beyond Scalars: Evaluating and Understanding LLM Reasoning via Geometric
Progress and Stability" (arXiv 2603.10384, ICML 2026). The paper decomposes a reasoning trace's
hidden-state trajectory into *Progress* (displacement: "certainty accumulation") and *Stability*
(curvature: "hesitation loops") and scores traces with a probabilistic model of those
signatures. Only the paper's abstract and introduction were available to us, so the concrete
quantities below are our reconstruction (PROPOSED; our spec, ``specs/interp_dynamics.md`` §2):

* a trace is split into reasoning steps; step ``t`` is the mean hidden state ``h_t`` of its
  tokens at one layer (:func:`segment_steps`, :func:`step_embeddings`);
* velocity ``v_t = h_{t+1} - h_t``; displacement ``D = |h_T - h_1|``; path length
  ``L = sum_t |v_t|``; efficiency ``E = D / L``; progress ``p_t = <v_t, e>`` along
  ``e = (h_T - h_1) / D`` and the cumulative curve ``P_t = <h_t - h_1, e> / D``;
* turning angle ``theta_t = angle(v_t, v_{t+1})``, Menger curvature
  ``kappa_t = 2 sin(theta_t) / |h_{t+2} - h_t|``, the fraction of near-reversals
  ``theta_t > pi / 2`` and revisits ``|h_t - h_u| < tau`` (``|t - u| >= 2``);
* the feature vector ``z = [E, log D, mean p_t, mean theta, std theta, frac(theta > pi/2),
  log T]`` (:func:`trace_features`, a numba kernel over ragged batches), scored by
  class-conditional Gaussians with Ledoit-Wolf shrinkage, ``s(z) = log N(z; mu_+, S_+) -
  log N(z; mu_-, S_-) + log(pi_+ / pi_-)`` (:class:`TracedScorer`), or without labels by
  ``z_E - z_std(theta)`` against a reference set (:func:`unsupervised_score`).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.covariance import ledoit_wolf
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from rml_fast._validation import check_array, check_rng
from rml_fast.interp._checks import naming, not_meta
from rml_fast.interp._traced_kernels import FEATURES, features_ragged

__all__ = [
    "FEATURES",
    "TracedScorer",
    "kinematics",
    "pack_trajectories",
    "segment_steps",
    "simulate_trajectories",
    "step_embeddings",
    "trace_features",
    "unsupervised_score",
]

_STEP_MODES = ("newline", "blank_line", "sentence", "tokens")


def segment_steps(
    text: str, token_offsets: Sequence[tuple[int, int]], mode: str = "newline"
) -> list[slice]:
    """Split a trace into reasoning steps, as slices of its tokens.

    Parameters
    ----------
    text : str
        The generated trace.
    token_offsets : sequence of (start, end)
        Character span of every token in ``text`` (a Hugging Face tokenizer's
        ``offset_mapping``), in order.
    mode : {"newline", "blank_line", "sentence", "tokens"}, default="newline"
        Step boundaries: each non-empty line, each paragraph, each sentence (``.``, ``!``,
        ``?`` followed by white space, or a newline), or every token its own step.

    Returns
    -------
    list of slice
        Token index ranges of the non-empty steps, in order.

    Examples
    --------
    >>> text = "3+4=7\\n7*2=14\\n"
    >>> offsets = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9),
    ...            (9, 10), (10, 12), (12, 13)]
    >>> segment_steps(text, offsets)
    [slice(0, 6, None), slice(6, 12, None)]
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if mode not in _STEP_MODES:
        raise ValueError(f"mode must be one of {_STEP_MODES}, got {mode!r}")
    offs = np.asarray(token_offsets, dtype=np.int64)
    if offs.ndim != 2 or offs.shape[1] != 2 or len(offs) == 0:
        raise ValueError("token_offsets must be a non-empty sequence of (start, end) pairs")
    if np.any(offs[:, 0] > offs[:, 1]) or np.any(np.diff(offs[:, 0]) < 0) or offs.max() > len(text):
        raise ValueError("token_offsets must be ordered (start <= end) spans inside text")
    if mode == "tokens":
        return [slice(i, i + 1) for i in range(len(offs))]
    pattern = {"newline": r"\n", "blank_line": r"\n\s*\n", "sentence": r"(?<=[.!?])\s+|\n"}[mode]
    ends = [m.end() for m in re.finditer(pattern, text)] + [len(text) + 1]
    step_of = np.searchsorted(np.asarray(ends), offs[:, 0], side="right")
    slices = []
    start = 0
    for i in range(1, len(offs) + 1):
        if i == len(offs) or step_of[i] != step_of[start]:
            if text[offs[start, 0] : offs[i - 1, 1]].strip():
                slices.append(slice(start, i))
            start = i
    return slices


def step_embeddings(
    hidden: Any, steps: Sequence[slice], layer: int | str | None = None, pool: str = "mean"
) -> np.ndarray:
    """Pool token hidden states into one state per reasoning step.

    Parameters
    ----------
    hidden : array-like or torch.Tensor of shape (L, n_tok, d) or (n_tok, d)
        Hidden states per layer (e.g. ``output_hidden_states``, stacked) or of one layer.
    steps : sequence of slice
        Token ranges of the steps (:func:`segment_steps`).
    layer : int, "last4" or None, default=None
        Layer of a 3-D ``hidden``: an index, ``"last4"`` (mean of the last four layers) or None
        for the layer at two thirds of the depth (PROPOSED default).
    pool : {"mean", "last"}, default="mean"
        Mean of the step's tokens, or its last token.

    Returns
    -------
    ndarray of shape (T, d), float64

    Examples
    --------
    >>> import numpy as np
    >>> h = np.arange(12.0).reshape(6, 2)
    >>> step_embeddings(h, [slice(0, 2), slice(2, 6)])
    array([[1., 2.],
           [7., 8.]])
    """
    not_meta(hidden, "hidden")
    if hasattr(hidden, "detach"):
        hidden = hidden.detach().cpu()
        if hidden.is_complex():
            raise TypeError(f"hidden must hold real numbers, got dtype {hidden.dtype}")
        hidden = hidden.numpy()
    H = check_array(hidden, "hidden", dtypes=(np.float64,), ndim=(2, 3), finite=False)
    if 0 in H.shape:
        raise ValueError(f"hidden must not be empty (no layer, token or feature), got {H.shape}")
    if H.ndim == 3:
        n_layers = H.shape[0]
        if layer is None:
            H = H[round(2 * (n_layers - 1) / 3)]
        elif layer == "last4":
            H = H[-4:].mean(axis=0)
        elif isinstance(layer, numbers.Integral) and -n_layers <= layer < n_layers:
            H = H[layer]
        else:
            raise ValueError(
                f"layer must be an int in [-{n_layers}, {n_layers}), 'last4' or None, got {layer!r}"
            )
    elif H.ndim != 2:
        raise ValueError(f"hidden must have shape (L, n_tok, d) or (n_tok, d), got {H.shape}")
    if pool not in ("mean", "last"):
        raise ValueError(f"pool must be 'mean' or 'last', got {pool!r}")
    if len(steps) == 0:
        raise ValueError("steps must not be empty")
    out = np.empty((len(steps), H.shape[1]))
    for t, s in enumerate(steps):
        block = H[s]
        if block.shape[0] == 0:
            raise ValueError(f"step {t} ({s}) selects no token of the {H.shape[0]} tokens")
        out[t] = block.mean(axis=0) if pool == "mean" else block[-1]
    return out


def _check_trajectory(H: Any, name: str = "H") -> np.ndarray:
    H = np.asarray(H, dtype=np.float64)
    if H.ndim != 2 or H.shape[0] < 3 or H.shape[1] < 1:
        raise ValueError(f"{name} must have shape (T, d) with T >= 3 steps, got {H.shape}")
    if not np.all(np.isfinite(H)):
        raise ValueError(f"{name} must be finite")
    return H


def kinematics(H: Any, *, tau: float | None = None) -> dict[str, Any]:
    """Progress and stability kinematics of one trajectory.

    Parameters
    ----------
    H : array-like of shape (T, d), T >= 3
        Step states ``h_1..h_T``.
    tau : float, optional
        Revisit radius: pairs ``|h_t - h_u| < tau`` with ``|t - u| >= 2`` count as revisits
        (default: half the median step length).

    Returns
    -------
    dict
        ``displacement`` D, ``path_length`` L, ``efficiency`` E = D / L, ``progress`` p_t
        (T-1,), ``cumulative_progress`` P_t (T,), ``turn`` theta_t (T-2,) in radians,
        ``curvature`` kappa_t (T-2,), ``speed`` |v_t| (T-1,), and the summaries ``mean_turn``,
        ``std_turn``, ``max_turn``, ``reversal_frac``, ``mean_curvature``,
        ``std_curvature``, ``revisits``.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.linspace(0, 2 * np.pi, 13)[:-1]
    >>> circle = np.column_stack([np.cos(t), np.sin(t)])  # 12 points on the unit circle
    >>> k = kinematics(circle)
    >>> round(float(k["mean_turn"]), 6) == round(2 * np.pi / 12, 6), round(float(k["mean_curvature"]), 6)
    (True, 1.0)
    """
    H = _check_trajectory(H)
    v = np.diff(H, axis=0)
    speed = np.linalg.norm(v, axis=1)
    chord = H[-1] - H[0]
    D = float(np.linalg.norm(chord))
    L = float(speed.sum())
    e = chord / D if D > 0 else np.zeros_like(chord)
    num = np.einsum("ij,ij->i", v[:-1], v[1:])
    den = speed[:-1] * speed[1:]
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0)
    theta = np.arccos(np.clip(cos, -1.0, 1.0))
    span = np.linalg.norm(H[2:] - H[:-2], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        kappa = np.where(span > 0, 2 * np.sin(theta) / np.where(span > 0, span, 1.0), np.inf)
    if tau is None:
        tau = 0.5 * float(np.median(speed))
    sq = np.sum((H[:, None, :] - H[None, :, :]) ** 2, axis=-1)
    far = np.abs(np.arange(len(H))[:, None] - np.arange(len(H))[None, :]) >= 2
    revisits = int(np.sum(np.triu((sq < tau * tau) & far)))
    finite_k = kappa[np.isfinite(kappa)]
    return {
        "displacement": D,
        "path_length": L,
        "efficiency": D / L if L > 0 else 0.0,
        "progress": v @ e,
        "cumulative_progress": (H - H[0]) @ e / D if D > 0 else np.zeros(len(H)),
        "turn": theta,
        "curvature": kappa,
        "speed": speed,
        "mean_turn": float(theta.mean()),
        "std_turn": float(theta.std()),
        "max_turn": float(theta.max()),
        "reversal_frac": float(np.mean(theta > np.pi / 2)),
        "mean_curvature": float(finite_k.mean()) if finite_k.size else math.inf,
        "std_curvature": float(finite_k.std()) if finite_k.size else math.nan,
        "revisits": revisits,
    }


def pack_trajectories(trajectories: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ragged trajectories into ``(H_concat (sum T_i, d), offsets (n + 1,))``.

    Examples
    --------
    >>> import numpy as np
    >>> H, off = pack_trajectories([np.zeros((3, 2)), np.ones((4, 2))])
    >>> H.shape, off.tolist()
    ((7, 2), [0, 3, 7])
    """
    if len(trajectories) == 0:
        raise ValueError("trajectories must not be empty")
    mats = [_check_trajectory(H, f"trajectories[{i}]") for i, H in enumerate(trajectories)]
    d = mats[0].shape[1]
    for i, H in enumerate(mats):
        if H.shape[1] != d:
            raise ValueError(
                f"trajectories[{i}] has width {H.shape[1]}, expected {d} like the first"
            )
    offsets = np.zeros(len(mats) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(H) for H in mats])
    return np.concatenate(mats), offsets


def trace_features(
    trajectories: Sequence[Any] | tuple[np.ndarray, np.ndarray],
    *,
    transform: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """TRACED feature vectors ``z`` (:data:`FEATURES`) of many trajectories, in one numba pass.

    Parameters
    ----------
    trajectories : list of array-like (T_i, d), or (H_concat, offsets)
        Step states of each trace (``T_i >= 3``), ragged; or the packed form of
        :func:`pack_trajectories`.
    transform : callable, optional
        Applied to the stacked step states first, e.g. the ``transform`` of a
        ``sklearn.decomposition.PCA(64, whiten=True)`` fitted on training traces (the spec's
        centring and whitening; without it, curvature follows a few large dimensions).

    Returns
    -------
    ndarray of shape (n, 7)
        Columns ``efficiency, log_displacement, mean_progress, mean_turn, std_turn,
        reversal_frac, log_steps``.

    Examples
    --------
    >>> import numpy as np
    >>> line = np.outer(np.arange(5.0), [1.0, 2.0])
    >>> zigzag = np.array([[0.0, 0], [1, 0], [0, 0], [1, 0], [0, 0]])
    >>> trace_features([line, zigzag])[:, [0, 3, 5]].round(3)  # E, mean turn, reversals
    array([[1.   , 0.   , 0.   ],
           [0.   , 3.142, 1.   ]])
    """
    if isinstance(trajectories, tuple) and len(trajectories) == 2 and np.ndim(trajectories[1]) == 1:
        H = np.asarray(trajectories[0], dtype=np.float64)
        offsets = np.asarray(trajectories[1], dtype=np.int64)
        if H.ndim != 2 or offsets[0] != 0 or offsets[-1] != len(H) or np.any(np.diff(offsets) < 3):
            raise ValueError(
                "(H_concat, offsets) must have offsets[0] = 0, offsets[-1] = len(H_concat) and "
                "at least 3 steps per trajectory"
            )
    else:
        H, offsets = pack_trajectories(trajectories)
    if transform is not None:
        H = np.asarray(transform(H), dtype=np.float64)
        if H.ndim != 2 or H.shape[0] != offsets[-1]:
            raise ValueError("transform must map (n_steps, d) to (n_steps, r)")
    if not np.all(np.isfinite(H)):
        raise ValueError("trajectories must be finite")
    return features_ragged(np.ascontiguousarray(H), offsets)


def unsupervised_score(Z: Any, reference: Any) -> np.ndarray:
    """Label-free TRACED score ``z_E - z_std(theta)``, standardised against ``reference``.

    High efficiency (progress) and low turn-angle fluctuation (stability) score high.

    Parameters
    ----------
    Z : array-like of shape (n, 7)
        :func:`trace_features` of the traces to score.
    reference : array-like of shape (m, 7), m >= 2
        Features of a reference set (e.g. unlabelled traces of the same model).

    Returns
    -------
    ndarray of shape (n,)

    Examples
    --------
    >>> import numpy as np
    >>> ref = trace_features(simulate_trajectories(50, rng=0)[0])
    >>> line = np.outer(np.arange(8.0), np.ones(16))
    >>> zigzag = np.tile([[0.0] * 16, [1.0] * 16], (4, 1))
    >>> s = unsupervised_score(trace_features([line, zigzag]), ref)
    >>> bool(s[0] > s[1])
    True
    """
    Z = np.asarray(Z, dtype=np.float64)
    R = np.asarray(reference, dtype=np.float64)
    k = len(FEATURES)
    if Z.ndim != 2 or Z.shape[1] != k:
        raise ValueError(f"Z must have shape (n, {k}), got {Z.shape}")
    if R.ndim != 2 or R.shape[1] != k or R.shape[0] < 2:
        raise ValueError(f"reference must have shape (m >= 2, {k}), got {R.shape}")
    mu, sd = R.mean(axis=0), R.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    zs = (Z - mu) / sd
    return zs[:, FEATURES.index("efficiency")] - zs[:, FEATURES.index("std_turn")]


class TracedScorer(ClassifierMixin, BaseEstimator):
    """TRACED's probabilistic scorer: class-conditional Gaussians over trace features.

    ``decision_function`` is the log-likelihood ratio
    ``log N(z; mu_1, S_1) - log N(z; mu_0, S_0) + log(pi_1 / pi_0)`` with Ledoit-Wolf
    shrunk covariances, so ``predict_proba[:, 1] = sigmoid(LLR)``. Class 1 is the larger label
    (``1 = correct`` in TRACED). ``X`` is a feature matrix, normally :func:`trace_features`.
    More than two classes (e.g. correct / wrong / refused) fit one Gaussian each, as
    quadratic discriminant analysis with shrinkage.

    Parameters
    ----------
    covariance : {"ledoit_wolf", "empirical", "diagonal"}, default="ledoit_wolf"
        Covariance estimate per class.
    reg : float, default=1e-6
        Ridge added to each covariance's diagonal (relative to its mean variance).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    means_ : ndarray of shape (n_classes, n_features)
    covariances_ : ndarray of shape (n_classes, n_features, n_features)
    priors_ : ndarray of shape (n_classes,)

    Examples
    --------
    >>> from rml_fast.interp.traced import TracedScorer, simulate_trajectories, trace_features
    >>> trajs, y = simulate_trajectories(200, rng=0)
    >>> Z = trace_features(trajs)
    >>> clf = TracedScorer().fit(Z[:150], y[:150])
    >>> bool(clf.score(Z[150:], y[150:]) > 0.9)
    True
    """

    classes_: np.ndarray
    means_: np.ndarray
    covariances_: np.ndarray
    priors_: np.ndarray

    def __init__(self, covariance: str = "ledoit_wolf", reg: float = 1e-6) -> None:
        self.covariance = covariance
        self.reg = reg

    def fit(self, X: Any, y: Any) -> TracedScorer:
        """Fit one Gaussian per class.

        Parameters
        ----------
        X : array-like of shape (n, n_features)
        y : array-like of shape (n,), at least 2 classes with at least 2 samples each

        Returns
        -------
        self : TracedScorer
        """
        if self.covariance not in ("ledoit_wolf", "empirical", "diagonal"):
            raise ValueError(
                f"covariance must be 'ledoit_wolf', 'empirical' or 'diagonal', got {self.covariance!r}"
            )
        if not (isinstance(self.reg, numbers.Real) and self.reg >= 0):
            raise ValueError(f"reg must be a real number >= 0, got {self.reg!r}")
        with naming("X", "y"):
            X, y = validate_data(self, X, y, dtype=np.float64)
            check_classification_targets(y)
        self.classes_, yi = np.unique(y, return_inverse=True)
        K = len(self.classes_)
        if K < 2:
            raise ValueError(f"y must have at least 2 classes, got {K} class")
        p = X.shape[1]
        self.means_ = np.empty((K, p))
        self.covariances_ = np.empty((K, p, p))
        self.priors_ = np.bincount(yi, minlength=K) / len(yi)
        for c in range(K):
            Xc = X[yi == c]
            if len(Xc) < 2:
                raise ValueError(
                    f"class {self.classes_[c]!r} needs at least 2 samples, got {len(Xc)} sample"
                )
            self.means_[c] = Xc.mean(axis=0)
            if self.covariance == "ledoit_wolf":
                S = ledoit_wolf(Xc)[0]
            else:
                S = np.cov(Xc, rowvar=False, bias=True).reshape(p, p)  # MLE, as QDA
                if self.covariance == "diagonal":
                    S = np.diag(np.diag(S))
            scale = max(float(np.trace(S)) / p, 1e-12)
            self.covariances_[c] = S + (self.reg * scale + 1e-12) * np.eye(p)
        return self

    def _log_gauss(self, X: np.ndarray, c: int) -> np.ndarray:
        S = self.covariances_[c]
        Lc = np.linalg.cholesky(S)
        R = np.linalg.solve(Lc, (X - self.means_[c]).T)
        logdet = 2.0 * np.sum(np.log(np.diag(Lc)))
        return -0.5 * (np.sum(R * R, axis=0) + logdet + X.shape[1] * math.log(2 * math.pi))

    def _joint_log_likelihood(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        with naming("X"):
            X = validate_data(self, X, dtype=np.float64, reset=False)
        return np.column_stack(
            [self._log_gauss(X, c) + math.log(self.priors_[c]) for c in range(len(self.classes_))]
        )

    def decision_function(self, X: Any) -> np.ndarray:
        """Two classes: the log-likelihood ratio of class 1 over class 0 plus the log prior odds,
        shape (n,); more classes: the joint log-likelihoods, shape (n, n_classes)."""
        J = self._joint_log_likelihood(X)
        return J[:, 1] - J[:, 0] if J.shape[1] == 2 else J

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class posteriors, shape (n, n_classes) (two classes: ``[1 - sigmoid(LLR), sigmoid(LLR)]``)."""
        J = self._joint_log_likelihood(X)
        J -= J.max(axis=1, keepdims=True)
        P = np.exp(J)
        return P / P.sum(axis=1, keepdims=True)

    def predict(self, X: Any) -> np.ndarray:
        """The class with the largest posterior, shape (n,)."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self._joint_log_likelihood(X), axis=1)]


def simulate_trajectories(
    n: int,
    *,
    d: int = 16,
    steps: tuple[int, int] = (6, 40),
    noise: float = 0.6,
    rng: Any = None,
) -> tuple[list[np.ndarray], np.ndarray]:
    """Synthetic step-state trajectories: directed walks (label 1) and looping walks (label 0).

    A directed walk drifts along a random unit direction with isotropic noise; a looping walk
    circles in a random 2-D plane with the same noise (stalled displacement, steady turning).
    For unit tests and demos of the geometry; real traces come from a model's hidden states.

    Parameters
    ----------
    n : int
        Number of trajectories (half of each kind, alternating).
    d : int, default=16
        State dimension.
    steps : (int, int), default=(6, 40)
        Range of the number of steps T (inclusive), drawn uniformly.
    noise : float, default=0.6
        Standard deviation of the per-step noise relative to the unit step.
    rng : int, numpy Generator or None

    Returns
    -------
    trajectories : list of ndarray (T_i, d)
    y : ndarray of shape (n,), 1 = directed ("correct"), 0 = looping

    Examples
    --------
    >>> trajs, y = simulate_trajectories(4, rng=0)
    >>> len(trajs), y.tolist()
    (4, [1, 0, 1, 0])
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 2:
        raise ValueError(f"d must be an int >= 2, got {d!r}")
    lo, hi = steps
    if not (3 <= lo <= hi):
        raise ValueError(f"steps must be (lo, hi) with 3 <= lo <= hi, got {steps!r}")
    gen = check_rng(rng)
    out, y = [], np.empty(n, dtype=int)
    for i in range(n):
        T = int(gen.integers(lo, hi + 1))
        directed = i % 2 == 0
        basis = np.linalg.qr(gen.standard_normal((d, 2)))[0].T
        if directed:
            path = np.outer(np.arange(T), basis[0])
        else:
            ang = np.arange(T) * (2 * np.pi / gen.uniform(4, 8))
            r = 1.0 / (2 * np.sin(np.pi / 6))
            path = r * (np.outer(np.cos(ang), basis[0]) + np.outer(np.sin(ang), basis[1]))
        out.append(path + noise * gen.standard_normal((T, d)) / np.sqrt(d))
        y[i] = int(directed)
    return out, y
