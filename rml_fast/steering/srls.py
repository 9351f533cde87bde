"""SRLS: Sparse Relaxed-Lasso Steering with sparse-autoencoder features.

Given an SAE decoder ``D`` (d x m, one atom per column, m >> d) and the embedding edits
``Delta_i`` of n prompt pairs that differ only by an attribute, SRLS selects a sparse set of
SAE features by the Lasso

.. math::

    \\hat\\delta(\\lambda) = \\arg\\min_\\delta \\frac{1}{2d}\\lVert \\bar\\Delta - D\\delta\\rVert^2
                           + \\lambda\\lVert\\delta\\rVert_1, \\qquad \\bar\\Delta = \\tfrac1n\\sum_i \\Delta_i,

(equal, up to a constant, to the Lasso on all pairs with sklearn's scaling ``1/(2 n d)``),
debiases it by a ridge refit on the support ``S``

.. math::

    \\delta_S = (D_S^\\top D_S + d\\mu I)^{-1} D_S^\\top \\bar\\Delta, \\qquad
    \\delta^* = \\varphi\\,\\hat\\delta + (1 - \\varphi)\\,\\delta_{\\text{refit}},

and steers with ``v = D delta*`` (``h' = h + alpha v`` on the edited tokens; the affine SAE
decoder makes a latent edit ``delta`` exactly the embedding edit ``D delta``). The strength
``alpha`` is tuned by :func:`rml_fast.steering.bayes_opt.bayes_opt_strength`.

Only the paper's abstract was available: the choice of ``lambda`` by grouped K-fold CV with
the 1-SE rule, stability selection, the GCV grid for ``mu``, the relaxed blend and the mean
over aligned tokens are **[PROPOSAL]** choices of ``specs/steering_eval.md`` §1.

References
----------
"Sparse Relaxed-Lasso Steering: Automatic Sparse-Autoencoder Feature Selection for Precise
Image Editing", ICML 2026 (poster 63749; no arXiv id found). Meinshausen, "Relaxed Lasso",
CSDA 2007. Meinshausen & Bühlmann, "Stability selection", JRSS-B 2010 (arXiv:0809.2932).
"""

from __future__ import annotations

import inspect
import logging
import math
import sys
import warnings
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from rml_fast._validation import Interval, check_array, check_rng, check_scalar
from rml_fast.exceptions import SteeringWarning
from rml_fast.kernels.lasso import lambda_max, lasso_path
from rml_fast.steering._ridge import gcv_ridge_mu, ridge_refit

__all__ = ["SRLS", "SAEDecoderAdapter", "SteeringWarning", "srls_steering_vector"]

log = logging.getLogger(__name__)

_SUPPORT = ("cv", "stability", "fixed_k")
_RIDGE = ("gcv", "fixed", "none")
_BACKEND = {"auto": "auto", "cpu": "native", "numpy": "reference"}

_DECODER_FORMS = (
    "a (d, m) array (atoms as columns), an SAEDecoderAdapter, a torch.nn.Linear decoder "
    "(weight (d, m): m latents -> d dims), a module whose .decoder is such a Linear, or a "
    "module with a W_dec parameter of shape (m, d) (SAELens / TransformerLens SAEs)"
)


class SRLS:
    """Sparse relaxed-Lasso steering vector from an SAE decoder and prompt-pair edits.

    Parameters
    ----------
    alphas : array-like of shape (L,), optional
        Lasso penalties (decreasing); default: ``n_alphas`` values geometric from
        ``lambda_max = ||D^T mean(Delta)||_inf / d`` down to ``eps * lambda_max``.
    n_alphas : int, default=50
    eps : float, default=1e-3
    max_support : int, default=256
        The path stops once the support exceeds this size.
    cv : int, default=5
        Folds of the grouped cross-validation (``support="cv"``). Like scikit-learn's
        ``GroupKFold``, ``fit`` raises a ValueError when there are fewer distinct groups
        than folds (no silent reduction of ``cv``).
    support : {"cv", "stability", "fixed_k"}, default="cv"
        ``"cv"``: largest ``lambda`` within one standard error of the best held-out mean
        squared residual of the refitted vector (**[PROPOSAL]**); ``"stability"``: features
        selected in at least ``stability_threshold`` of ``n_subsamples`` half-subsamples of
        the pair groups at ``stability_alpha``; ``"fixed_k"``: the ``k`` largest
        coefficients at the first ``lambda`` of the path whose support reaches ``k``.
    k : int, optional
        Support size for ``support="fixed_k"``, at most ``m`` and ``max_support``. If the
        path ends before its support reaches ``k`` (a Lasso solution has at most ``d``
        nonzeros in general position), the last penalty's support is used with a
        :class:`SteeringWarning`.
    ridge : {"gcv", "fixed", "none"}, default="gcv"
        Ridge strength of the refit: GCV over 20 log-spaced values in
        ``[1e-6, 1] * tr(D_S^T D_S) / (d |S|)`` (**[PROPOSAL]**), ``ridge_mu``, or 0.
    ridge_mu : float, optional
        Used when ``ridge="fixed"``.
    relax_phi : float, default=0.0
        Blend ``phi`` of the Lasso estimate (restricted to the support) and the refit.
    tol, max_epochs, screening, working_set
        Lasso solver options (:func:`rml_fast.kernels.lasso.lasso_path`).
    n_subsamples : int, default=50
    stability_threshold : float, default=0.6
    stability_alpha : float, optional
        Penalty of stability selection; default ``0.1 * lambda_max`` (**[PROPOSAL]**).
    device : {"auto", "cpu", "numpy"}, default="auto"
        Where the Lasso runs: "auto" and "cpu" use the native C++ solver
        (``lasso_path(backend="native")``), "numpy" its NumPy reference
        (``backend="reference"``, slow; for checking).
    rng : Generator, int or None
        Fold assignment and subsampling.
    n_threads : int, optional
        Threads of the native solver.

    Attributes
    ----------
    coef_ : ndarray of shape (m,)
        ``delta*``.
    support_ : ndarray of shape (k,), int64
    lasso_coef_ : ndarray of shape (m,)
        Lasso estimate at ``alpha_`` on all pairs.
    alpha_ : float
        Chosen penalty.
    ridge_mu_ : float
    path_ : ndarray of shape (L,)
        Penalties solved on all pairs (the path may stop early at ``max_support``).
    path_support_size_ : ndarray of shape (L,), int64
    cv_scores_ : ndarray of shape (L, K) or None
    stability_scores_ : ndarray of shape (m,) or None
    steering_vector_ : ndarray of shape (d,)
        ``D @ coef_``.
    dual_gap_ : float
        Duality gap of the final Lasso solve.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.steering import SRLS
    >>> rng = np.random.default_rng(0)
    >>> D = rng.standard_normal((64, 256)); D /= np.linalg.norm(D, axis=0)
    >>> delta = np.zeros(256); delta[[3, 50]] = [1.5, -2.0]
    >>> deltas = D @ delta + 0.01 * rng.standard_normal((40, 64))
    >>> est = SRLS(support="fixed_k", k=2, rng=0).fit(D, deltas)
    >>> est.support_.tolist()
    [3, 50]
    """

    def __init__(self, alphas: Any = None, n_alphas: int = 50, eps: float = 1e-3,
                 max_support: int = 256, cv: int = 5, support: str = "cv", k: int | None = None,
                 ridge: str = "gcv", ridge_mu: float | None = None, relax_phi: float = 0.0,
                 tol: float = 1e-6, max_epochs: int = 10_000, screening: bool = True,
                 working_set: bool = True, n_subsamples: int = 50,
                 stability_threshold: float = 0.6, stability_alpha: float | None = None,
                 device: str = "auto", rng: Any = None, n_threads: int | None = None) -> None:
        self.alphas = alphas
        self.n_alphas = n_alphas
        self.eps = eps
        self.max_support = max_support
        self.cv = cv
        self.support = support
        self.k = k
        self.ridge = ridge
        self.ridge_mu = ridge_mu
        self.relax_phi = relax_phi
        self.tol = tol
        self.max_epochs = max_epochs
        self.screening = screening
        self.working_set = working_set
        self.n_subsamples = n_subsamples
        self.stability_threshold = stability_threshold
        self.stability_alpha = stability_alpha
        self.device = device
        self.rng = rng
        self.n_threads = n_threads

    # -- sklearn-style parameter access ---------------------------------------------------

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters as a dict."""
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {p: getattr(self, p) for p in names}

    def set_params(self, **params: Any) -> SRLS:
        """Set constructor parameters; unknown names raise ValueError."""
        valid = self.get_params()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"unknown parameter {key!r} for SRLS")
            setattr(self, key, value)
        return self

    # -- fitting ----------------------------------------------------------------------------

    def _validate_params(self) -> None:
        check_scalar(self.n_alphas, "n_alphas", Interval("int", 1, None))
        check_scalar(self.eps, "eps", Interval("real", 0, 1, "neither"))
        check_scalar(self.max_support, "max_support", Interval("int", 1, None))
        check_scalar(self.cv, "cv", Interval("int", 2, None))
        check_scalar(self.relax_phi, "relax_phi", Interval("real", 0, 1))
        check_scalar(self.n_subsamples, "n_subsamples", Interval("int", 1, None))
        check_scalar(self.stability_threshold, "stability_threshold", Interval("real", 0, 1, "right"))
        if self.support not in _SUPPORT:
            raise ValueError(f"support must be one of {_SUPPORT}, got {self.support!r}")
        if self.ridge not in _RIDGE:
            raise ValueError(f"ridge must be one of {_RIDGE}, got {self.ridge!r}")
        if self.support == "fixed_k":
            if self.k is None:
                raise ValueError("k must be given when support='fixed_k'")
            check_scalar(self.k, "k", Interval("int", 1, None))
        if self.ridge == "fixed":
            if self.ridge_mu is None:
                raise ValueError("ridge_mu must be given when ridge='fixed'")
            check_scalar(self.ridge_mu, "ridge_mu", Interval("real", 0, None))
        if self.stability_alpha is not None:
            check_scalar(self.stability_alpha, "stability_alpha", Interval("real", 0, None, "neither"))
        if not isinstance(self.device, str) or self.device not in _BACKEND:
            raise ValueError(f"device must be 'auto', 'cpu' or 'numpy', got {self.device!r}")

    def _solver_kw(self) -> dict[str, Any]:
        return {"tol": self.tol, "max_epochs": self.max_epochs,
                "screening": "gap_safe" if self.screening else None,
                "working_set": bool(self.working_set), "n_threads": self.n_threads,
                "backend": _BACKEND[self.device]}

    def _path(self, D: np.ndarray, Y: np.ndarray, lambdas: np.ndarray, chunk: int = 10):
        """Warm-started path on the columns of Y (d, B); stops once every support > max_support."""
        coefs, gaps = [], []
        warm = None
        for start in range(0, lambdas.size, chunk):
            res = lasso_path(D, Y, lambdas[start:start + chunk], warm_start=warm, **self._solver_kw())
            coefs.append(res.coefs)
            gaps.append(res.gaps)
            warm = res.coefs[-1]
            if np.min(np.count_nonzero(res.coefs[-1], axis=-1)) > self.max_support:
                break
        return np.concatenate(coefs), np.concatenate(gaps)

    def fit(self, D: Any, deltas: Any, groups: Any = None) -> SRLS:
        """Select the SAE features and build the steering vector.

        Data layout (one convention for the whole package): the decoder ``D`` is (d, m) with
        one SAE atom per column, as the design ``X`` of a regression of the d embedding
        coordinates; data passed to an estimator has **one row per sample**, like
        scikit-learn's ``X``: ``deltas`` is (n_pairs, d). Only the kernel
        :func:`rml_fast.kernels.lasso.lasso_path` takes right-hand sides aligned with the rows
        of ``D`` — ``Y`` of shape (d,) or (d, B), one column per problem, as scikit-learn's
        ``lasso_path(X, y)`` — so ``lasso_path(D, deltas.T, ...)`` solves one Lasso per pair.
        A ``deltas`` of shape (d, n_pairs) raises a ValueError that says to transpose it.

        Parameters
        ----------
        D : array-like of shape (d, m), float32 or float64, or an SAE decoder
            SAE decoder, atoms as columns (Fortran order avoids a copy). Also accepted: an
            :class:`SAEDecoderAdapter`, or anything :meth:`SAEDecoderAdapter.from_torch`
            accepts (a ``torch.nn.Linear`` decoder, a module with a ``.decoder`` Linear or a
            ``W_dec`` parameter of shape (m, d)); the result equals that of the (d, m) array.
        deltas : array-like of shape (n_pairs, d) or (n_pairs, T, d)
            Per-pair embedding differences (target minus source), one row per pair; with a
            token axis they are averaged over the aligned tokens (**[PROPOSAL]**). Cast to
            the dtype of D for the Lasso.
        groups : array-like of shape (n_pairs,), optional
            Group label of each pair for the cross-validation and subsampling (pairs with
            the same subject/template share a label); default one group per pair.
            ``support="cv"`` needs at least ``cv`` distinct groups, ``support="stability"``
            at least 2.

        Returns
        -------
        self : SRLS

        Raises
        ------
        ValueError
            Bad parameters or shapes (before any work), fewer groups than ``cv`` folds,
            ``deltas`` of shape (d, n_pairs), ``mean(deltas)`` orthogonal to every atom.
        TypeError
            ``D`` is none of the accepted forms.

        Warns
        -----
        SteeringWarning
            The path never reached ``k`` features (``support="fixed_k"``); the selected
            support is empty (zero steering vector); ``ridge="none"`` with more features
            than dimensions (minimum-norm refit).
        """
        self._validate_params()
        D = _decoder_matrix(D)
        d, m = D.shape
        deltas = check_array(deltas, "deltas", ndim=(2, 3))
        if deltas.shape[-1] != d:
            if deltas.ndim == 2 and deltas.shape[0] == d:
                raise ValueError(
                    f"deltas must have one row per prompt pair, shape (n_pairs, d) with d={d} "
                    f"(the rows of D); got shape {deltas.shape}, which is (d, n_pairs): pass "
                    "deltas.T (only lasso_path takes its right-hand sides as columns)")
            hint = ""
            if deltas.shape[-1] == m:
                hint = (f"; D of shape {D.shape} looks like (m, d), the W_dec layout of SAELens: "
                        "pass W_dec.T or SAEDecoderAdapter.from_arrays(W_dec, layout='md')")
            raise ValueError(
                f"deltas must have shape (n_pairs, d) or (n_pairs, T, d), last dimension d={d} "
                f"(the rows of D), got {deltas.shape}{hint}")
        n = deltas.shape[0]
        if n == 0:
            raise ValueError("deltas must hold at least one pair")
        if groups is None:
            groups = np.arange(n)
        groups = np.asarray(groups)
        if groups.shape != (n,):
            raise ValueError(f"groups must have shape ({n},), got {groups.shape}")
        n_groups = int(np.unique(groups).size)
        if self.support == "cv" and n_groups < self.cv:
            hint = ("" if n_groups >= 2 else
                    "; support='cv' needs at least 2 distinct groups of pairs")
            raise ValueError(
                f"cannot have cv={self.cv} folds with only {n_groups} distinct groups of pairs "
                f"(groups=None makes each pair its own group){hint}: lower cv to at most "
                f"{max(n_groups, 2)} or pass more pairs / groups")
        if self.support == "stability" and n_groups < 2:
            raise ValueError(
                f"support='stability' needs at least 2 distinct groups of pairs, got {n_groups}")
        if self.support == "fixed_k":
            k_fixed = cast(int, self.k)  # validated above: an int for support="fixed_k"
            if k_fixed > m:
                raise ValueError(f"k={self.k} exceeds the number of SAE features m={m}")
            if k_fixed > self.max_support:
                raise ValueError(
                    f"k={self.k} exceeds max_support={self.max_support}, where the path stops: "
                    f"raise max_support to at least {self.k}")
        if self.alphas is not None:
            lambdas = check_array(self.alphas, "alphas", dtypes=(np.float64,), ndim=(0, 1))
            lambdas = np.atleast_1d(lambdas).astype(np.float64)
            if lambdas.size == 0:
                raise ValueError("alphas must hold at least one penalty")
            if (lambdas <= 0).any() or (np.diff(lambdas) > 0).any():
                raise ValueError("alphas must be strictly positive and non-increasing")
        gen = check_rng(self.rng)
        if deltas.ndim == 3:
            deltas = deltas.mean(axis=1)
        deltas64 = deltas.astype(np.float64)
        ybar = deltas64.mean(axis=0)
        lm = math.nan  # lambda_max, computed below wherever it is used
        if self.alphas is None or (self.support == "stability" and self.stability_alpha is None):
            lm = float(lambda_max(D.astype(np.float64, copy=False), ybar))
            if lm == 0.0:
                raise ValueError("mean(deltas) is orthogonal to every atom of D: nothing to select")
        if self.alphas is None:
            lambdas = np.geomspace(lm, lm * self.eps, self.n_alphas)
        Df = np.asfortranarray(D)
        Y = ybar.astype(D.dtype)[:, None]
        self.cv_scores_: np.ndarray | None = None
        self.stability_scores_: np.ndarray | None = None
        self.support_: np.ndarray
        if self.support == "stability":
            lam = self.stability_alpha if self.stability_alpha is not None else 0.1 * lm
            self._fit_stability(Df, deltas64, groups, float(lam), gen)
            if self.support_.size == 0:
                warnings.warn(
                    f"SRLS: no feature was selected in at least stability_threshold="
                    f"{self.stability_threshold:g} of the subsamples (largest frequency "
                    f"{cast(np.ndarray, self.stability_scores_).max():.2f}); coef_ and steering_vector_ are zero. "
                    "Lower stability_threshold or stability_alpha.", SteeringWarning,
                    stacklevel=2)
        else:
            coefs, gaps = self._path(Df, Y, lambdas)
            coefs, gaps = coefs[:, 0], gaps[:, 0]
            sizes = np.count_nonzero(coefs, axis=1)
            self.path_ = lambdas[: coefs.shape[0]]
            self.path_support_size_ = sizes
            if self.support == "cv":
                idx = self._choose_cv(Df, deltas64, groups, self.path_, gen)
            else:
                reach = np.flatnonzero(sizes >= self.k)
                idx = int(reach[0]) if reach.size else coefs.shape[0] - 1
                if not reach.size:
                    why = (f" (a Lasso solution has at most d={d} nonzeros in general position)"
                           if self.k > d else "; lower eps or pass smaller alphas")
                    warnings.warn(
                        f"SRLS: the Lasso path never reached k={self.k} features; its last "
                        f"penalty {self.path_[idx]:.4g} selects {int(sizes[idx])}, which are "
                        f"used{why}", SteeringWarning, stacklevel=2)
            self.alpha_ = float(self.path_[idx])
            self.lasso_coef_ = coefs[idx].astype(np.float64)
            self.dual_gap_ = float(gaps[idx])
            order = np.argsort(-np.abs(self.lasso_coef_), kind="stable")
            nnz = int(np.count_nonzero(self.lasso_coef_))
            keep = order[: min(nnz, cast(int, self.k))] if self.support == "fixed_k" else order[:nnz]
            self.support_ = np.sort(keep).astype(np.int64)
            if self.support_.size == 0 and self.support == "cv":
                warnings.warn(
                    f"SRLS: the cross-validation chose the penalty {self.alpha_:.4g}, where no "
                    "feature is selected (the held-out edits are explained no better by any "
                    "support within one standard error); coef_ and steering_vector_ are zero. "
                    "Add pairs or use support='fixed_k'.", SteeringWarning, stacklevel=2)
        if self.ridge == "none" and self.support_.size > d:
            warnings.warn(
                f"SRLS: ridge='none' refits {self.support_.size} features on d={d} dimensions; "
                "the least-squares refit is not unique and the minimum-norm solution is used. "
                "Use ridge='gcv' or 'fixed' for a unique refit.", SteeringWarning, stacklevel=2)
        self.coef_, self.ridge_mu_ = self._refit(D, ybar, self.support_, self.lasso_coef_)
        self.steering_vector_ = D.astype(np.float64, copy=False) @ self.coef_
        self.n_features_in_ = d
        return self

    def _refit(self, D: np.ndarray, y: np.ndarray, S: np.ndarray, lasso_coef: np.ndarray):
        m = D.shape[1]
        if S.size == 0:
            return np.zeros(m), 0.0
        if self.ridge == "gcv":
            mu = gcv_ridge_mu(D, y, S)[0]
        elif self.ridge == "fixed":
            mu = float(cast(float, self.ridge_mu))  # required (checked) for ridge="fixed"
        else:
            mu = 0.0
        refit = ridge_refit(D.astype(np.float64, copy=False), y, S, mu)
        restricted = np.zeros(m)
        restricted[S] = lasso_coef[S]
        return self.relax_phi * restricted + (1.0 - self.relax_phi) * refit, mu

    def _choose_cv(self, D, deltas, groups, lambdas, gen) -> int:
        ug = np.unique(groups)
        K = self.cv  # fit checked that there are at least cv groups
        folds = np.array_split(gen.permutation(ug), K)
        test_masks = [np.isin(groups, f) for f in folds]
        Ytr = np.stack([deltas[~t].mean(axis=0) for t in test_masks], axis=1)
        coefs, _ = self._path(D, Ytr.astype(D.dtype), lambdas)
        L = lambdas.size
        scores = np.full((L, K), np.inf)
        D64 = D.astype(np.float64, copy=False)
        for ell in range(coefs.shape[0]):
            for k in range(K):
                w = coefs[ell, k].astype(np.float64)
                S = np.flatnonzero(w)
                if S.size > self.max_support:
                    continue
                coef, _ = self._refit(D64, Ytr[:, k], S, w)
                v = D64 @ coef
                held = deltas[test_masks[k]]
                scores[ell, k] = float(((held - v) ** 2).sum(axis=1).mean() / D.shape[0])
        self.cv_scores_ = scores
        with np.errstate(invalid="ignore"):
            mean = scores.mean(axis=1)
            se = scores.std(axis=1, ddof=1) / np.sqrt(K)
        finite = np.isfinite(mean)
        if not finite.any():
            raise ValueError("every penalty of the path exceeded max_support in some fold")
        best = int(np.nanargmin(np.where(finite, mean, np.inf)))
        return int(np.flatnonzero(finite & (mean <= mean[best] + se[best]))[0])

    def _fit_stability(self, D, deltas, groups, lam, gen) -> None:
        ug = np.unique(groups)  # fit checked that there are at least 2
        half = max(1, ug.size // 2)
        Y = np.empty((D.shape[0], self.n_subsamples))
        for b in range(self.n_subsamples):
            chosen = gen.choice(ug, half, replace=False)
            Y[:, b] = deltas[np.isin(groups, chosen)].mean(axis=0)
        res = lasso_path(D, Y.astype(D.dtype), [lam], **self._solver_kw())
        freq = np.count_nonzero(res.coefs[0], axis=0) / self.n_subsamples
        self.stability_scores_ = freq
        full = lasso_path(D, deltas.mean(axis=0).astype(D.dtype), [lam], **self._solver_kw())
        self.alpha_ = lam
        self.path_ = np.array([lam])
        self.lasso_coef_ = full.coefs[0].astype(np.float64)
        self.path_support_size_ = np.array([np.count_nonzero(self.lasso_coef_)])
        self.dual_gap_ = float(full.gaps[0])
        self.support_ = np.flatnonzero(freq >= self.stability_threshold).astype(np.int64)

    # -- steering ---------------------------------------------------------------------------

    def transform(self, H: Any, strength: float, token_mask: Any = None) -> Any:
        """Add ``strength * v`` to the embeddings of the edited tokens.

        Parameters
        ----------
        H : ndarray or torch.Tensor of shape (..., T, d) or (..., d)
        strength : float
        token_mask : array-like of bool of shape H.shape[:-1] (or broadcastable), optional
            Tokens to edit (default all; **[PROPOSAL]** subject tokens and the tokens after
            them, selected by the caller).

        Returns
        -------
        H_edit : same type, dtype and device as ``H``
            ``H + strength * token_mask[..., None] * v``; ``H`` is not modified.
        """
        if not hasattr(self, "steering_vector_"):
            raise RuntimeError("SRLS is not fitted: call fit(D, deltas) first")
        strength = check_scalar(strength, "strength", Interval("real", None, None))
        d = self.steering_vector_.shape[0]
        if H.shape[-1] != d:
            raise ValueError(f"H must have last dimension d={d}, got shape {tuple(H.shape)}")
        if hasattr(H, "detach"):
            import torch

            v = torch.as_tensor(self.steering_vector_, dtype=H.dtype, device=H.device)
            add = strength * v
            if token_mask is not None:
                mask = torch.as_tensor(token_mask, device=H.device)
                try:
                    torch.broadcast_shapes(mask.shape, H.shape[:-1])
                except RuntimeError as exc:
                    raise ValueError(f"token_mask of shape {tuple(mask.shape)} does not broadcast "
                                     f"to {tuple(H.shape[:-1])}") from exc
                add = mask.to(H.dtype)[..., None] * add
            return H + add
        H = check_array(H, "H")
        add_np = strength * self.steering_vector_.astype(H.dtype)
        if token_mask is not None:
            mask_np = np.asarray(token_mask, dtype=bool)
            try:
                np.broadcast_shapes(mask_np.shape, H.shape[:-1])
            except ValueError as exc:
                raise ValueError(
                    f"token_mask of shape {mask_np.shape} does not broadcast to {H.shape[:-1]}"
                ) from exc
            add_np = mask_np[..., None].astype(H.dtype) * add_np
        return H + add_np


def srls_steering_vector(D: Any, deltas: Any, groups: Any = None, **kwargs: Any):
    """Fit :class:`SRLS` and return ``(delta (m,), v (d,))`` (``coef_``, ``steering_vector_``).

    ``D`` and ``deltas`` as in :meth:`SRLS.fit`: the decoder (d, m) (or an adapter / torch SAE)
    and one row per prompt pair, (n_pairs, d).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.steering import srls_steering_vector
    >>> D = np.eye(4)
    >>> delta, v = srls_steering_vector(D, np.tile([2.0, 0, 0, 0], (6, 1)) + 0.01 * np.eye(6, 4),
    ...                                 support="fixed_k", k=1)
    >>> delta.nonzero()[0].tolist(), bool(np.allclose(v, D @ delta))
    ([0], True)
    """
    est = SRLS(**kwargs).fit(D, deltas, groups)
    return est.coef_, est.steering_vector_


@dataclass
class SAEDecoderAdapter:
    """The affine decoder ``dec(z) = D z + b_dec`` of a sparse autoencoder, ``D`` of shape (d, m).

    ``dec(z + delta) - dec(z) = D delta`` for every ``z``: a latent edit is the embedding edit
    ``D delta``, so :class:`SRLS` only needs ``D`` (``SRLS.fit`` accepts an adapter, or
    anything :meth:`from_torch` accepts, in place of the array).

    Attributes
    ----------
    D : ndarray of shape (d, m), Fortran order
        One atom per column (the layout of ``torch.nn.Linear(m, d).weight``; SAELens' and
        TransformerLens' ``W_dec`` is its transpose, (m, d)).
    b_dec : ndarray of shape (d,)
        Zeros when the SAE has no decoder bias.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.steering import SAEDecoderAdapter
    >>> SAEDecoderAdapter.from_torch(torch.nn.Linear(32, 8)).D.shape   # m = 32 latents -> d = 8
    (8, 32)
    """

    D: np.ndarray
    b_dec: np.ndarray | None = None

    def __post_init__(self) -> None:
        D = check_array(self.D, "D", ndim=2)
        self.D = np.asfortranarray(D)
        if self.b_dec is None:
            self.b_dec = np.zeros(D.shape[0], dtype=D.dtype)
        b = check_array(self.b_dec, "b_dec", ndim=1)
        if b.shape != (D.shape[0],):
            raise ValueError(f"b_dec must have shape ({D.shape[0]},) (the rows of D), got {b.shape}")
        self.b_dec = b.astype(D.dtype)

    @classmethod
    def from_arrays(cls, W_dec: Any, b_dec: Any = None, layout: str = "dm") -> SAEDecoderAdapter:
        """From a decoder matrix in ``layout`` "dm" (d, m) or "md" (m, d) (SAELens' ``W_dec``)."""
        if layout not in ("dm", "md"):
            raise ValueError(f"layout must be 'dm' or 'md', got {layout!r}")
        W = check_array(W_dec, "W_dec", ndim=2)
        if W.size == 0:
            raise ValueError(f"W_dec must hold at least one atom of one dimension, got shape {W.shape}")
        return cls(W if layout == "dm" else W.T, b_dec)

    @classmethod
    def from_torch(cls, sae: Any) -> SAEDecoderAdapter:
        """From a torch SAE or its decoder. Exactly these forms are accepted:

        1. a ``torch.nn.Linear`` decoder: its weight (d, m) maps m latents to d dims, so
           ``D = weight`` and ``b_dec = bias`` (zeros without a bias);
        2. a module whose ``.decoder`` is such a Linear (or any object with a 2-D ``.weight``
           of shape (d, m) and an optional ``.bias``); without a decoder bias the module's
           ``b_dec`` is used if it has one;
        3. a module with a ``W_dec`` parameter of shape (m, d) and an optional ``b_dec`` (d,)
           (SAELens ``SAE``, TransformerLens ``HookedSAE``): ``D = W_dec.T``.

        Tensors are detached and copied to the CPU; float16/bfloat16 become float32.
        """
        torch = sys.modules.get("torch")
        linear = torch.nn.Linear if torch is not None else ()
        own_b = getattr(sae, "b_dec", None)
        if torch is not None and isinstance(sae, linear):
            W, b, layout = sae.weight, sae.bias, "dm"
        elif getattr(sae, "W_dec", None) is not None:
            W, b, layout = sae.W_dec, own_b, "md"
        elif getattr(getattr(sae, "decoder", None), "weight", None) is not None:
            dec = sae.decoder
            b = getattr(dec, "bias", None)
            W, b, layout = dec.weight, own_b if b is None else b, "dm"
        else:
            raise TypeError(
                "sae must be a torch.nn.Linear decoder (weight (d, m): m latents -> d dims), a "
                "module whose .decoder is such a Linear, or a module with a W_dec parameter of "
                f"shape (m, d) [+ b_dec (d,)] (SAELens / TransformerLens); got {type(sae).__name__}")
        W = _to_numpy(W, "W_dec" if layout == "md" else "decoder weight")
        b = None if b is None else _to_numpy(b, "b_dec")
        return cls.from_arrays(W, b, layout=layout)

    def decode(self, z: Any) -> np.ndarray:
        """``z @ D^T + b_dec`` for latents of shape (..., m)."""
        z = check_array(z, "z")
        if z.shape[-1:] != (self.D.shape[1],):
            raise ValueError(f"z must have last dimension m={self.D.shape[1]}, got shape {z.shape}")
        return z @ self.D.T + self.b_dec


def _to_numpy(t: Any, name: str) -> np.ndarray:
    """A torch tensor (any device; half precision -> float32) or array-like as a NumPy array."""
    if hasattr(t, "detach") and hasattr(t, "cpu"):
        t = t.detach()
        if t.is_floating_point() and t.element_size() < 4:
            t = t.float()
        return t.cpu().numpy()
    return check_array(t, name)


def _is_torch_decoder(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.nn.Linear):
        return True
    if getattr(obj, "W_dec", None) is not None:
        return True
    return getattr(getattr(obj, "decoder", None), "weight", None) is not None


def _decoder_matrix(D: Any) -> np.ndarray:
    """The (d, m) decoder array of any accepted form of ``D`` (see ``SRLS.fit``)."""
    if isinstance(D, SAEDecoderAdapter):
        return D.D
    if _is_torch_decoder(D):
        return SAEDecoderAdapter.from_torch(D).D
    try:
        return check_array(D, "D", ndim=2)
    except TypeError as exc:
        raise TypeError(f"D must be {_DECODER_FORMS}; {exc}") from exc
