"""Disjoint LinUCB for BITE (public through :mod:`rml_fast.evaluation.bite`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numba
import numpy as np
import scipy.linalg
from scipy.linalg.blas import dsyrk
from scipy.linalg.lapack import dpotrf, dpotri

from rml_fast._validation import Interval, check_array, check_scalar

__all__ = ["LinUCB"]

_SM_EPS = 1e-12
_VAR_FLOOR = 1e-18


# --------------------------------------------------------------------------------------------
# LinUCB
# --------------------------------------------------------------------------------------------


# One context at a time, the work is O(K d^2) on matrices that stay in cache: serial numba
# loops, not BLAS, whose thread pool costs more than the arithmetic at this size (and far more
# on a loaded machine, where a woken BLAS thread may wait for a core).


@numba.njit(cache=True, nogil=True, fastmath=True)
def _quad_one(A_inv: np.ndarray, x: np.ndarray) -> np.ndarray:  # pragma: no cover - numba
    """``x^T A_k^{-1} x`` for every arm ``k``: (K, d, d), (d,) -> (K,)."""
    K, d = A_inv.shape[0], x.shape[0]
    out = np.empty(K)
    for k in range(K):
        acc = 0.0
        for i in range(d):
            row = 0.0
            for j in range(d):
                row += A_inv[k, i, j] * x[j]
            acc += row * x[i]
        out[k] = acc
    return out


@numba.njit(cache=True, nogil=True, fastmath=True)
def _sherman_morrison(
    A: np.ndarray, A_inv: np.ndarray, x: np.ndarray, eps: float
) -> tuple[np.ndarray, float]:  # pragma: no cover - numba
    """``A += x x^T``; ``A^{-1} -= z z^T / (1 + x^T z)`` with ``z = A^{-1} x`` unless the
    denominator is ``<= eps`` or not finite (then ``A^{-1}`` is left for the caller to
    refactorise). Returns ``(z, 1 + x^T z)``."""
    d = x.shape[0]
    z = np.empty(d)
    for i in range(d):
        acc = 0.0
        for j in range(d):
            acc += A_inv[i, j] * x[j]
        z[i] = acc
    den = 1.0
    for i in range(d):
        den += x[i] * z[i]
    for i in range(d):
        for j in range(d):
            A[i, j] += x[i] * x[j]
    if den > eps and np.isfinite(den):
        scale = 1.0 / den
        for i in range(d):
            zi = z[i] * scale
            for j in range(d):
                A_inv[i, j] -= zi * z[j]
    return z, den


def _symmetric(upper: np.ndarray) -> np.ndarray:
    """The symmetric matrix whose upper triangle is that of ``upper``."""
    return np.triu(upper) + np.triu(upper, 1).T


def _chol_inverse(A: np.ndarray) -> np.ndarray:
    """Inverse of a symmetric positive-definite matrix from its Cholesky factor (LAPACK
    potrf + potri, ``d^3`` flops against ``2 d^3`` for an LU inverse)."""
    c, info = dpotrf(A, lower=0, clean=0)
    if info != 0:
        raise np.linalg.LinAlgError("matrix is not positive definite")
    inv, info = dpotri(c, lower=0)
    if info != 0:
        raise np.linalg.LinAlgError("Cholesky inverse failed")
    return _symmetric(inv)


class _Policy:
    """The per-arm ridge statistics of one policy (allocated on its first update)."""

    def __init__(self, n_arms: int, d: int, lam: float) -> None:
        eye = np.eye(d)
        self.A = np.repeat((lam * eye)[None], n_arms, axis=0)
        self.A_inv = np.repeat((eye / lam)[None], n_arms, axis=0)
        self.b = np.zeros((n_arms, d))
        self.theta = np.zeros((n_arms, d))
        self.n_pulls = np.zeros(n_arms, dtype=np.int64)

    def rank_one(self, a: int, x: np.ndarray, r: float) -> None:
        z, den = _sherman_morrison(self.A[a], self.A_inv[a], np.ascontiguousarray(x), _SM_EPS)
        self.b[a] += r * x
        if den > _SM_EPS and math.isfinite(den):
            # theta' = (A^-1 - z z^T / den)(b + r x) = theta + z (r - z^T b' / den): O(d)
            self.theta[a] += (r - float(z @ self.b[a]) / den) * z
        else:  # Sherman-Morrison breakdown: refactorise
            self.A_inv[a] = _chol_inverse(self.A[a])
            self.theta[a] = self.A_inv[a] @ self.b[a]
        self.n_pulls[a] += 1

    def rank_k(self, a: int, X: np.ndarray, r: np.ndarray) -> None:
        k, d = X.shape
        self.A[a] += _symmetric(dsyrk(1.0, X, trans=1))  # X^T X, half the flops of a GEMM
        self.b[a] += X.T @ r
        done = False
        if 4 * k < d:  # Woodbury: A^-1 <- A^-1 - Z (I + X Z)^-1 Z^T with Z = A^-1 X^T
            Z = self.A_inv[a] @ X.T
            try:
                c = scipy.linalg.cho_factor(np.eye(k) + X @ Z, lower=True, check_finite=False)
                self.A_inv[a] -= Z @ scipy.linalg.cho_solve(c, Z.T, check_finite=False)
                done = bool(np.isfinite(self.A_inv[a]).all())
            except np.linalg.LinAlgError:
                done = False
        if not done:
            self.A_inv[a] = _chol_inverse(self.A[a])
        self.theta[a] = self.A_inv[a] @ self.b[a]
        self.n_pulls[a] += k


class LinUCB:
    """Disjoint LinUCB (Li et al., 2010), vectorised over arms and contexts, in float64.

    For each arm ``a`` and policy ``p``: ``A_a = lambda I + sum x x^T`` and ``b_a = sum r x`` over
    the updates of that arm, ``theta_a = A_a^{-1} b_a`` and

        UCB_a(x) = theta_a^T x + alpha * sqrt(max(x^T A_a^{-1} x, 1e-18)).

    ``A_a^{-1}`` is kept by Sherman-Morrison: ``z = A^{-1} x``,
    ``A^{-1} <- A^{-1} - z z^T / (1 + x^T z)``, refactorised by Cholesky when
    ``1 + x^T z <= 1e-12`` or is not finite. A batch of ``k`` updates of one arm is a Woodbury
    rank-``k`` update (``4k < d``) or a Cholesky re-inverse. ``n_policies`` independent policies
    share the object; each is allocated (``2 K d^2`` floats) only on its first update, so
    unused policies cost nothing (an untouched policy is the prior ``theta = 0``,
    ``A = lambda I``).

    Parameters
    ----------
    n_arms : int
        Number of arms ``K``.
    n_features : int
        Context dimension ``d``.
    alpha : float, default=1.0
        Exploration weight (>= 0).
    lambda_reg : float, default=1.0
        Ridge regulariser ``lambda`` (> 0).
    n_policies : int, default=1
        Number of independent policies.

    Examples
    --------
    >>> import numpy as np
    >>> bandit = LinUCB(n_arms=3, n_features=2)
    >>> bandit.update(1, [1.0, 0.0], 2.0)
    >>> np.round(bandit.ucb([[1.0, 0.0]]), 3)        # arm 1: 2/2 + sqrt(1/2)
    array([[1.   , 1.707, 1.   ]])
    >>> bandit.select([[1.0, 0.0], [0.0, 1.0]])      # ties go to the first arm
    array([1, 0])
    """

    def __init__(
        self,
        n_arms: int,
        n_features: int,
        alpha: float = 1.0,
        lambda_reg: float = 1.0,
        n_policies: int = 1,
    ) -> None:
        self.n_arms = int(check_scalar(n_arms, "n_arms", Interval("int", 1, None)))
        self.n_features = int(check_scalar(n_features, "n_features", Interval("int", 1, None)))
        self.alpha = float(check_scalar(alpha, "alpha", Interval("real", 0, None)))
        self.lambda_reg = float(
            check_scalar(lambda_reg, "lambda_reg", Interval("real", 0, None, "neither"))
        )
        self.n_policies = int(check_scalar(n_policies, "n_policies", Interval("int", 1, None)))
        self._policies: dict[int, _Policy] = {}

    # ---- checks -----------------------------------------------------------------------------
    def _policy_index(self, policy: Any) -> int:
        return int(check_scalar(policy, "policy", Interval("int", 0, self.n_policies - 1)))

    def _contexts(self, X: Any, name: str = "X") -> np.ndarray:
        X = check_array(X, name, dtypes=(np.float64,), ndim=(1, 2))
        X = X.reshape(1, -1) if X.ndim == 1 else X
        if X.shape[1] != self.n_features:
            raise ValueError(
                f"{name} must have {self.n_features} features (n_features), got shape {X.shape}"
            )
        return X

    # ---- public -----------------------------------------------------------------------------
    def ucb(self, X: Any, policy: int = 0) -> np.ndarray:
        """Upper confidence bounds of every arm for every context.

        Parameters
        ----------
        X : array-like of shape (n, d) or (d,)
            Contexts (a 1-D array is one context).
        policy : int, default=0
            Which policy.

        Returns
        -------
        ucb : ndarray of shape (n, n_arms), float64
            ``theta_a^T x + alpha sqrt(max(x^T A_a^{-1} x, 1e-18))``.

        Examples
        --------
        >>> LinUCB(2, 2, lambda_reg=4.0).ucb([3.0, 4.0])     # prior: alpha |x| / sqrt(lambda)
        array([[2.5, 2.5]])
        """
        X = self._contexts(X)
        p = self._policies.get(self._policy_index(policy))
        n, d, K = X.shape[0], self.n_features, self.n_arms
        if p is None:
            quad = np.repeat((np.einsum("nd,nd->n", X, X) / self.lambda_reg)[:, None], K, 1)
            mean = np.zeros((n, K))
        else:
            if n == 1:  # K mat-vecs, serial (see _quad_one)
                quad = _quad_one(p.A_inv, np.ascontiguousarray(X[0]))[None, :]
            else:  # (K d, d) @ (d, n): one GEMM for all arms and contexts
                XA = (p.A_inv.reshape(K * d, d) @ X.T).reshape(K, d, n)
                quad = np.einsum("kdn,nd->nk", XA, X)
            mean = X @ p.theta.T
        return mean + self.alpha * np.sqrt(np.maximum(quad, _VAR_FLOOR))

    def select(self, X: Any, policy: int = 0) -> np.ndarray:
        """The arm of highest UCB for every context (the first index on ties).

        Parameters
        ----------
        X : array-like of shape (n, d) or (d,)
            Contexts.
        policy : int, default=0
            Which policy.

        Returns
        -------
        arms : ndarray of shape (n,), int64

        Examples
        --------
        >>> LinUCB(4, 3).select([[1.0, 0.0, 0.0]])
        array([0])
        """
        return np.argmax(self.ucb(X, policy), axis=1)

    def update(self, arm: Any, x: Any, reward: Any, policy: int = 0) -> None:
        """Add observations ``(arm, x, reward)``: one, or a batch applied as if in sequence.

        A single update is a Sherman-Morrison step (``O(d^2)``); a batch groups the rows by arm
        and applies one rank-``k`` update per arm (the same ``A``, ``b`` as ``k`` single updates,
        equal up to rounding).

        Parameters
        ----------
        arm : int or array-like of shape (m,)
            Arm indices in ``[0, n_arms)``.
        x : array-like of shape (d,) or (m, d)
            Contexts.
        reward : float or array-like of shape (m,)
            Rewards.
        policy : int, default=0
            Which policy.

        Examples
        --------
        >>> import numpy as np
        >>> b = LinUCB(2, 2)
        >>> b.update([0, 0, 1], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [1.0, 3.0, 0.0])
        >>> b.theta_[0, 0]                                   # ridge: (I + X^T X)^-1 X^T r
        array([0.5, 1.5])
        """
        pol = self._policy_index(policy)
        X = self._contexts(x, "x")
        m = X.shape[0]
        arms = np.asarray(arm)
        if arms.dtype.kind not in "iu" or arms.ndim > 1:
            raise TypeError(f"arm must be an int or a 1-D array of ints, got {arm!r}")
        arms = np.broadcast_to(arms, (m,)) if arms.ndim == 0 else arms
        if arms.shape != (m,):
            raise ValueError(f"arm must have {m} entries (one per row of x), got {arms.shape}")
        if m and (arms.min() < 0 or arms.max() >= self.n_arms):
            raise ValueError(f"arm must lie in [0, {self.n_arms}), got {arms.tolist()}")
        r = check_array(reward, "reward", dtypes=(np.float64,), ndim=(0, 1)).reshape(-1)
        if r.shape != (m,):
            raise ValueError(f"reward must have {m} entries (one per row of x), got {r.shape}")
        if m == 0:
            return
        p = self._policies.get(pol)
        if p is None:
            p = self._policies[pol] = _Policy(self.n_arms, self.n_features, self.lambda_reg)
        if m == 1:
            p.rank_one(int(arms[0]), np.ascontiguousarray(X[0]), float(r[0]))
            return
        for a in np.unique(arms):
            rows = np.flatnonzero(arms == a)
            if rows.size == 1:
                p.rank_one(int(a), np.ascontiguousarray(X[rows[0]]), float(r[rows[0]]))
            else:
                p.rank_k(int(a), X[rows], r[rows])

    def reset(self, policy: int | None = None) -> None:
        """Forget one policy (or all, ``policy=None``), freeing its memory.

        Examples
        --------
        >>> b = LinUCB(2, 2); b.update(0, [1.0, 0.0], 1.0); b.reset()
        >>> b.allocated_policies
        []
        """
        if policy is None:
            self._policies.clear()
        else:
            self._policies.pop(self._policy_index(policy), None)

    @property
    def allocated_policies(self) -> list[int]:
        """Indices of the policies that hold statistics (sorted)."""
        return sorted(self._policies)

    @property
    def theta_(self) -> np.ndarray:
        """Ridge estimates ``A_a^{-1} b_a``, shape (n_policies, n_arms, d) (zeros if unused)."""
        out = np.zeros((self.n_policies, self.n_arms, self.n_features))
        for i, p in self._policies.items():
            out[i] = p.theta
        return out

    @property
    def n_pulls_(self) -> np.ndarray:
        """Updates seen per policy and arm, shape (n_policies, n_arms), int64."""
        out = np.zeros((self.n_policies, self.n_arms), dtype=np.int64)
        for i, p in self._policies.items():
            out[i] = p.n_pulls
        return out

    def A_inv(self, policy: int = 0) -> np.ndarray:
        """A copy of ``A_a^{-1}`` for every arm of one policy, shape (n_arms, d, d).

        Examples
        --------
        >>> LinUCB(1, 2, lambda_reg=2.0).A_inv()[0]
        array([[0.5, 0. ],
               [0. , 0.5]])
        """
        p = self._policies.get(self._policy_index(policy))
        if p is None:
            eye = np.eye(self.n_features) / self.lambda_reg
            return np.repeat(eye[None], self.n_arms, axis=0)
        return p.A_inv.copy()

    def state_dict(self) -> dict[str, Any]:
        """The bandit's configuration and statistics as plain values and arrays (copies).

        Keys: ``n_arms``, ``n_features``, ``alpha``, ``lambda_reg``, ``n_policies``,
        ``policies`` (allocated indices, list of int) and, stacked over those policies, ``A``
        (m, K, d, d), ``b`` (m, K, d), ``n_pulls`` (m, K).

        Examples
        --------
        >>> b = LinUCB(2, 3); b.update(1, [1.0, 0.0, 0.0], 1.0)
        >>> c = LinUCB(2, 3); c.load_state_dict(b.state_dict())
        >>> bool(np.allclose(c.theta_, b.theta_))
        True
        """
        ids = self.allocated_policies
        K, d = self.n_arms, self.n_features
        stack = lambda attr, shape: (  # noqa: E731
            np.stack([getattr(self._policies[i], attr) for i in ids]) if ids else np.zeros(shape)
        )
        return {
            "n_arms": K,
            "n_features": d,
            "alpha": self.alpha,
            "lambda_reg": self.lambda_reg,
            "n_policies": self.n_policies,
            "policies": list(ids),
            "A": stack("A", (0, K, d, d)).copy(),
            "b": stack("b", (0, K, d)).copy(),
            "n_pulls": stack("n_pulls", (0, K)).copy(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the statistics by those of :meth:`state_dict` (``A^{-1}`` is recomputed).

        ``n_arms``, ``n_features`` and ``lambda_reg`` must match this bandit; ``alpha`` and
        ``n_policies`` are this bandit's own.

        Parameters
        ----------
        state : mapping
            As returned by :meth:`state_dict`.

        Examples
        --------
        >>> b = LinUCB(2, 2); b.load_state_dict(LinUCB(2, 2).state_dict()); b.allocated_policies
        []
        """
        if not isinstance(state, Mapping):
            raise TypeError(
                f"state must be a mapping from state_dict(), got {type(state).__name__}"
            )
        missing = {"n_arms", "n_features", "lambda_reg", "policies", "A", "b"} - set(state)
        if missing:
            raise ValueError(f"state is missing the keys {sorted(missing)}")
        for key in ("n_arms", "n_features", "lambda_reg"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"state has {key}={state[key]!r}, this bandit {getattr(self, key)!r}"
                )
        ids = [int(i) for i in state["policies"]]
        m, K, d = len(ids), self.n_arms, self.n_features
        A = check_array(state["A"], "state['A']", dtypes=(np.float64,), ndim=4)
        b = check_array(state["b"], "state['b']", dtypes=(np.float64,), ndim=3)
        if A.shape != (m, K, d, d) or b.shape != (m, K, d):
            raise ValueError(
                f"state['A'] / state['b'] must have shapes {(m, K, d, d)} / {(m, K, d)}, "
                f"got {A.shape} / {b.shape}"
            )
        if any(not 0 <= i < self.n_policies for i in ids) or len(set(ids)) != m:
            raise ValueError(f"state['policies'] must be distinct ints in [0, {self.n_policies})")
        n_pulls = np.asarray(state.get("n_pulls", np.zeros((m, K))), dtype=np.int64)
        policies = {}
        for j, i in enumerate(ids):
            p = _Policy(K, d, self.lambda_reg)
            p.A[:] = A[j]
            p.b[:] = b[j]
            p.n_pulls[:] = n_pulls[j]
            for a in range(K):
                try:
                    p.A_inv[a] = _chol_inverse(p.A[a])
                except np.linalg.LinAlgError as exc:
                    raise ValueError(f"state['A'][{j}, {a}] is not positive definite") from exc
            p.theta[:] = np.einsum("kde,ke->kd", p.A_inv, p.b)
            policies[i] = p
        self._policies = policies
