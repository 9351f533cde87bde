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
from dataclasses import dataclass
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_array, check_rng, check_scalar
from rml_fast.kernels.lasso import lambda_max, lasso_path
from rml_fast.steering._ridge import gcv_ridge_mu, ridge_refit

__all__ = ["SRLS", "SAEDecoderAdapter", "srls_steering_vector"]

log = logging.getLogger(__name__)

_SUPPORT = ("cv", "stability", "fixed_k")
_RIDGE = ("gcv", "fixed", "none")


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
        Folds of the grouped cross-validation (``support="cv"``).
    support : {"cv", "stability", "fixed_k"}, default="cv"
        ``"cv"``: largest ``lambda`` within one standard error of the best held-out mean
        squared residual of the refitted vector (**[PROPOSAL]**); ``"stability"``: features
        selected in at least ``stability_threshold`` of ``n_subsamples`` half-subsamples of
        the pair groups at ``stability_alpha``; ``"fixed_k"``: the ``k`` largest
        coefficients at the first ``lambda`` of the path whose support reaches ``k``.
    k : int, optional
        Support size for ``support="fixed_k"``.
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
    device : {"auto", "numpy"}, default="auto"
        Where the Lasso runs ("auto": the native CPU solver for NumPy inputs).
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
        if self.device not in ("auto", "numpy", "cpu"):
            raise ValueError(f"device must be 'auto', 'numpy' or 'cpu', got {self.device!r}")

    def _solver_kw(self) -> dict[str, Any]:
        return {"tol": self.tol, "max_epochs": self.max_epochs,
                "screening": "gap_safe" if self.screening else None,
                "working_set": bool(self.working_set), "n_threads": self.n_threads}

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

        Parameters
        ----------
        D : array-like of shape (d, m), float32 or float64
            SAE decoder, atoms as columns (Fortran order avoids a copy).
        deltas : array-like of shape (n, d) or (n, T, d)
            Per-pair embedding differences (target minus source); with a token axis they
            are averaged over the aligned tokens (**[PROPOSAL]**). Cast to the dtype of D.
        groups : array-like of shape (n,), optional
            Group label of each pair for the cross-validation and subsampling (pairs with
            the same subject/template share a label); default one group per pair.

        Returns
        -------
        self : SRLS
        """
        self._validate_params()
        D = check_array(D, "D", ndim=2)
        d = D.shape[0]
        deltas = check_array(deltas, "deltas", ndim=(2, 3))
        if deltas.shape[-1] != d:
            raise ValueError(f"deltas must have last dimension d={d} (rows of D), got {deltas.shape}")
        if deltas.ndim == 3:
            deltas = deltas.mean(axis=1)
        n = deltas.shape[0]
        if n == 0:
            raise ValueError("deltas must hold at least one pair")
        if groups is None:
            groups = np.arange(n)
        groups = np.asarray(groups)
        if groups.shape != (n,):
            raise ValueError(f"groups must have shape ({n},), got {groups.shape}")
        gen = check_rng(self.rng)
        deltas64 = deltas.astype(np.float64)
        ybar = deltas64.mean(axis=0)
        if self.alphas is None:
            lm = float(lambda_max(D.astype(np.float64, copy=False), ybar))
            if lm == 0.0:
                raise ValueError("mean(deltas) is orthogonal to every atom of D: nothing to select")
            lambdas = np.geomspace(lm, lm * self.eps, self.n_alphas)
        else:
            lambdas = check_array(self.alphas, "alphas", dtypes=(np.float64,), ndim=(0, 1))
            lambdas = np.atleast_1d(lambdas).astype(np.float64)
            if (lambdas <= 0).any() or (np.diff(lambdas) > 0).any():
                raise ValueError("alphas must be strictly positive and non-increasing")
        Df = np.asfortranarray(D)
        Y = ybar.astype(D.dtype)[:, None]
        self.cv_scores_ = None
        self.stability_scores_ = None
        if self.support == "stability":
            lam = self.stability_alpha
            if lam is None:
                lam = 0.1 * float(lambda_max(D.astype(np.float64, copy=False), ybar))
            self._fit_stability(Df, deltas64, groups, float(lam), gen)
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
                    log.warning("SRLS: the path never reached k=%d features; using %d", self.k,
                                sizes[idx])
            self.alpha_ = float(self.path_[idx])
            self.lasso_coef_ = coefs[idx].astype(np.float64)
            self.dual_gap_ = float(gaps[idx])
            order = np.argsort(-np.abs(self.lasso_coef_), kind="stable")
            nnz = int(np.count_nonzero(self.lasso_coef_))
            keep = order[: min(nnz, self.k)] if self.support == "fixed_k" else order[:nnz]
            self.support_ = np.sort(keep).astype(np.int64)
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
            mu = float(self.ridge_mu)
        else:
            mu = 0.0
        refit = ridge_refit(D.astype(np.float64, copy=False), y, S, mu)
        restricted = np.zeros(m)
        restricted[S] = lasso_coef[S]
        return self.relax_phi * restricted + (1.0 - self.relax_phi) * refit, mu

    def _choose_cv(self, D, deltas, groups, lambdas, gen) -> int:
        ug = np.unique(groups)
        K = min(self.cv, ug.size)
        if K < 2:
            raise ValueError("support='cv' needs at least 2 distinct groups of pairs")
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
        ug = np.unique(groups)
        if ug.size < 2:
            raise ValueError("support='stability' needs at least 2 distinct groups of pairs")
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
                mask = torch.as_tensor(token_mask, device=H.device).to(H.dtype)
                add = mask[..., None] * add
            return H + add
        H = check_array(H, "H")
        add = strength * self.steering_vector_.astype(H.dtype)
        if token_mask is not None:
            mask = np.asarray(token_mask, dtype=bool)
            try:
                np.broadcast_shapes(mask.shape, H.shape[:-1])
            except ValueError as exc:
                raise ValueError(
                    f"token_mask of shape {mask.shape} does not broadcast to {H.shape[:-1]}"
                ) from exc
            add = mask[..., None].astype(H.dtype) * add
        return H + add


def srls_steering_vector(D: Any, deltas: Any, groups: Any = None, **kwargs: Any):
    """Fit :class:`SRLS` and return ``(delta (m,), v (d,))`` (``coef_``, ``steering_vector_``).

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
    ``D delta``, so :class:`SRLS` only needs ``D``.

    Attributes
    ----------
    D : ndarray of shape (d, m), Fortran order
    b_dec : ndarray of shape (d,)
    """

    D: np.ndarray
    b_dec: np.ndarray

    @classmethod
    def from_arrays(cls, W_dec: Any, b_dec: Any = None, layout: str = "dm") -> SAEDecoderAdapter:
        """From a decoder matrix in ``layout`` "dm" (d, m) or "md" (m, d) (SAELens' ``W_dec``)."""
        W = check_array(W_dec, "W_dec", ndim=2)
        if layout not in ("dm", "md"):
            raise ValueError(f"layout must be 'dm' or 'md', got {layout!r}")
        D = np.asfortranarray(W if layout == "dm" else W.T)
        b = np.zeros(D.shape[0], dtype=D.dtype) if b_dec is None else check_array(b_dec, "b_dec", ndim=1)
        if b.shape != (D.shape[0],):
            raise ValueError(f"b_dec must have shape ({D.shape[0]},), got {b.shape}")
        return cls(D, b.astype(D.dtype))

    @classmethod
    def from_torch(cls, sae: Any) -> SAEDecoderAdapter:
        """From a torch SAE with ``W_dec`` (m, d) and ``b_dec`` (SAELens), or a ``decoder`` Linear."""
        if hasattr(sae, "W_dec"):
            W = sae.W_dec.detach().cpu().numpy()
            b = getattr(sae, "b_dec", None)
            return cls.from_arrays(W, None if b is None else b.detach().cpu().numpy(), layout="md")
        dec = getattr(sae, "decoder", None)
        if dec is not None and hasattr(dec, "weight"):
            b = dec.bias.detach().cpu().numpy() if getattr(dec, "bias", None) is not None else None
            return cls.from_arrays(dec.weight.detach().cpu().numpy(), b, layout="dm")
        raise TypeError("sae must have W_dec (m, d) [+ b_dec] or a decoder nn.Linear(m, d)")

    def decode(self, z: Any) -> np.ndarray:
        """``z @ D^T + b_dec`` for latents of shape (..., m)."""
        z = check_array(z, "z")
        return z @ self.D.T + self.b_dec
