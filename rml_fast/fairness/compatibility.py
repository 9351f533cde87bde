"""Game-theoretic fairness-metric compatibility (spec ``tabular_decisions.md`` §3; PROPOSED).

The paper (ICML 2026; title and arXiv id not found) is known only from its abstract; everything
here is the spec's PROPOSED concrete instantiation. Players ``N = {0..d-1}`` are features or
feature groups. For a fitted model ``f``, data ``(X, y, A)`` and a metric ``m`` oriented so that
larger is better, the game is

    v_m(S) = m(f with the features outside S masked)        (S subset of N),

its Harsanyi dividends (Moebius transform) are
``a_m(T) = sum_{S <= T} (-1)^{|T|-|S|} v_m(S)``, the interaction vector of ``m`` is
``I_m = (a_m(T))_{1 <= |T| <= k}`` and the compatibility of two metrics is the cosine

    C(m1, m2) = <I_m1, I_m2> / (||I_m1|| ||I_m2||)   in [-1, 1],

attributed to coalitions by ``c_T = a_m1(T) a_m2(T) / (||I_m1|| ||I_m2||)`` (``sum_T c_T = C``;
``c_T < 0`` is a conflict, ``c_T > 0`` a synergy). Shapley values
``phi_i = sum_{T containing i} a(T) / |T|`` summarise the first order.

Coalitions are bitmasks: column ``S`` of a ``(M, 2**d)`` array holds ``v(S)`` with bit ``i`` of
``S`` set when player ``i`` is in ``S``. Exact enumeration is for ``d <= 16``; for larger ``d``,
:func:`low_order_dividends` is exact for the dividends of order ``<= k`` (it needs only the
coalitions of size ``<= k``) and :func:`sampled_shapley` estimates Shapley values by permutation
sampling with a stated standard error.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.utils import ClassifierTags, Tags
from sklearn.utils.validation import check_is_fitted
from tqdm.auto import tqdm

from rml_fast._sklearn_validation import check_targets_named as check_targets
from rml_fast._sklearn_validation import validate_named
from rml_fast._validation import Interval, check_array, check_rng, check_scalar
from rml_fast.fairness._compatibility_game import MASKINGS, MetricGame
from rml_fast.fairness._compatibility_kernels import (
    moebius_inplace,
    moebius_reference,
    popcounts,
    shapley_kernel,
)
from rml_fast.fairness._compatibility_metrics import METRICS, check_metrics, metric_names

__all__ = [
    "MAX_EXACT_PLAYERS", "METRICS", "MetricCompatibility", "MetricGame", "ShapleyEstimate",
    "attribution_by_order", "coalition_attribution", "coalition_values", "compatibility_matrix",
    "interaction_coalitions", "interaction_vectors", "inverse_moebius", "low_order_dividends",
    "metric_game", "moebius_transform", "moebius_transform_reference", "sampled_shapley",
    "shapley_from_moebius",
]

#: largest number of players for exact enumeration of the 2**d coalitions
MAX_EXACT_PLAYERS = 16

DEFAULT_METRICS = ("accuracy", "demographic_parity", "equalized_odds", "equal_opportunity",
                   "predictive_parity", "calibration")


# --- validation helpers -------------------------------------------------------------------------


def _n_players_of(values: np.ndarray, name: str) -> int:
    n = values.shape[-1]
    d = n.bit_length() - 1
    if n < 1 or (1 << d) != n:
        raise ValueError(f"{name} must have a last axis of length 2**d (one entry per coalition), "
                         f"got length {n}")
    return d


def _as_games(values: Any, name: str) -> np.ndarray:
    arr = check_array(values, name, dtypes=(np.float64,), ndim=None)
    if arr.ndim == 0:
        raise ValueError(f"{name} must have at least one axis, got a scalar")
    return arr


def _check_labels(y: Any, n: int) -> tuple[np.ndarray, np.ndarray, Any]:
    y_arr = np.asarray(y)
    if y_arr.ndim != 1 or y_arr.shape[0] != n:
        raise ValueError(f"y must have shape ({n},), got {y_arr.shape}")
    classes = np.unique(y_arr)
    if classes.size != 2:
        raise ValueError(f"y must hold exactly two labels (binary classification), got "
                         f"{classes.size}: {classes[:5].tolist()}")
    return y_arr, (y_arr == classes[1]).astype(np.int64), classes[1]


def _check_sensitive(sensitive: Any, n: int, name: str = "sensitive") -> np.ndarray:
    if hasattr(sensitive, "detach") and hasattr(sensitive, "cpu"):  # torch tensor
        raise TypeError(f"{name} must be a NumPy array-like, got a torch tensor; call .numpy()")
    try:
        a = np.asarray(sensitive)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{name} must be array-like, got {type(sensitive).__name__}") from exc
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"{name} must have shape ({n},) (one group label per row), got "
                         f"{a.shape}")
    if a.dtype.kind == "c":
        raise TypeError(f"{name} must hold group labels, got complex dtype {a.dtype}")
    if a.dtype.kind == "f" and np.isnan(a).any():
        raise ValueError(f"{name} must not contain NaN group labels")
    try:
        _, codes = np.unique(a, return_inverse=True)
    except TypeError as exc:  # unorderable object labels
        raise TypeError(f"{name} must hold sortable group labels: {exc}") from exc
    if codes.max(initial=0) < 1:
        raise ValueError(f"{name} must hold at least two groups, got a single group "
                         f"{a[0]!r}")
    return codes.astype(np.int64)


def _check_players(players: Any, p: int) -> list[list[int]]:
    if players is None:
        return [[j] for j in range(p)]
    out = []
    for i, cols in enumerate(players):
        cols = [cols] if isinstance(cols, (int, np.integer)) else list(cols)
        if not cols:
            raise ValueError(f"players[{i}] must list at least one feature index, got []")
        for c in cols:
            if not isinstance(c, (int, np.integer)) or isinstance(c, bool) or not 0 <= c < p:
                raise ValueError(f"players[{i}] must hold feature indices in [0, {p}), got {c!r}")
        out.append([int(c) for c in cols])
    if not out:
        raise ValueError("players must hold at least one player, got an empty list")
    return out


def _all_coalitions(d: int) -> np.ndarray:
    """Boolean player masks of the coalitions ``0 .. 2**d - 1``; (2**d, d)."""
    s = np.arange(1 << d, dtype=np.int64)
    return ((s[:, None] >> np.arange(d)) & 1).astype(bool)


def _masks_to_bool(masks: Sequence[int] | np.ndarray, d: int) -> np.ndarray:
    s = np.asarray(masks, dtype=np.int64)
    return ((s[:, None] >> np.arange(d)) & 1).astype(bool)


# --- the game -----------------------------------------------------------------------------------


def metric_game(model: Any, X: Any, y: Any, sensitive: Any,
                metrics: Sequence[str | Callable[..., float]] = DEFAULT_METRICS, *,
                players: Sequence[Sequence[int]] | None = None,
                masking: str = "interventional", background: Any = None,
                n_background: int = 64, random_state: Any = None, chunk_rows: int = 1 << 16,
                tabulate: bool | str = "auto", max_table: int = 1 << 16,
                progress: bool = True) -> MetricGame:
    """Build the metric game ``v_m(S)`` of a fitted binary classifier (PROPOSED, spec §3.1).

    ``v_m(S)`` is metric ``m`` of ``model`` on ``(X, y, sensitive)`` when the features of the
    players outside ``S`` are masked:

    * ``"interventional"`` (default): each masked column takes the values of ``n_background``
      background rows, and the model's positive-class probability is averaged over them,
      ``p_S(x) = mean_b f(x_S, b_{-S})``;
    * ``"baseline"``: masked columns take the background's column mode (integer-valued columns)
      or mean;
    * ``"retrain"``: a fresh ``clone(model)`` is fitted on the kept columns (``2**d`` fits) of
      the training data ``background = (X_train, y_train)`` (default ``(X, y)``, in-sample);
      the empty coalition predicts the base rate.

    Predictions are ``yhat = 1[p_S >= 0.5]``; the metrics are those of :data:`METRICS`
    (``accuracy``, ``-|DP diff|``, ``-|EO diff|``, ``-|EOP diff|``, ``-|PPV diff|``,
    ``-calibration gap``; differences are ``max_g - min_g`` over the groups where the rate is
    defined, 0 when fewer than two are) or callables
    ``f(y_true, y_pred, y_prob, groups) -> float`` (larger = better; called once per coalition).

    Parameters
    ----------
    model : fitted classifier
        Has ``predict_proba`` (its ``classes_`` order is used) or ``predict``.
    X : array-like of shape (n, p)
        Evaluation features.
    y : array-like of shape (n,)
        Binary labels; the larger label is the positive class.
    sensitive : array-like of shape (n,)
        Group labels (at least two groups).
    metrics : sequence of str or callable, default=all six built-in metrics
    players : list of lists of int, optional
        Feature columns of each player; default one player per column.
    masking : {"interventional", "baseline", "retrain"}, default="interventional"
    background : array-like of shape (n_bg, p) or tuple (X_train, y_train), optional
        Background rows (default: ``n_background`` rows of ``X`` drawn without replacement);
        for ``"retrain"``, the training data.
    n_background : int, default=64
    random_state : None, int or numpy.random.Generator
        Draws the background rows.
    chunk_rows : int, default=2**16
        Most rows passed to ``model`` in one call.
    tabulate : {"auto", True, False}, default="auto"
        Discrete features (binarised data): every masked row lies on the product grid of the
        columns' observed levels; when that grid has at most ``max_table`` points, the model
        is evaluated once on the grid and masked rows are looked up by an additive
        mixed-radix code (exact for a model that scores rows independently, as scikit-learn
        classifiers do). ``"auto"`` does so when the grid is small enough and smaller than the
        masked evaluation; ``True`` requires it; ``False`` never. Not used by ``"retrain"``.
    max_table : int, default=2**16
    progress : bool, default=True
        Show a tqdm bar over the chunks.

    Returns
    -------
    game : MetricGame
        ``game(coalitions)`` maps boolean player masks of shape (B, d) to metric values of
        shape (M, B); ``game.n_players == d``.

    Raises
    ------
    ValueError
        On an unknown metric or masking, a single group, non-binary ``y``, bad players.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); a = (rng.random(200) < 0.5).astype(int)
    >>> y = (X[:, 0] + a + rng.normal(size=200) > 0.5).astype(int)
    >>> game = metric_game(LogisticRegression().fit(X, y), X, y, a, ["accuracy"],
    ...                    n_background=16, random_state=0, progress=False)
    >>> game(np.array([[True, True, True]])).shape
    (1, 1)
    """
    X_arr = check_array(X, "X", ndim=2)
    n, p = X_arr.shape
    if n < 2:
        raise ValueError(f"X must have at least 2 rows, got {n}")
    y_raw, y01, positive = _check_labels(y, n)
    groups = _check_sensitive(sensitive, n)
    metric_list = check_metrics(metrics)
    if masking not in MASKINGS:
        raise ValueError(f"masking must be one of {MASKINGS}, got {masking!r}")
    player_list = _check_players(players, p)
    n_bg = check_scalar(n_background, "n_background", Interval("int", 1, None))
    chunk = check_scalar(chunk_rows, "chunk_rows", Interval("int", 1, None))
    if tabulate not in ("auto", True, False):
        raise ValueError(f"tabulate must be 'auto', True or False, got {tabulate!r}")
    table_max = check_scalar(max_table, "max_table", Interval("int", 1, None))
    rng = check_rng(random_state, "random_state")
    train = None
    if masking == "retrain":
        if background is None:
            train = (X_arr, y_raw)
        else:
            if not (isinstance(background, tuple) and len(background) == 2):
                raise TypeError("background must be a tuple (X_train, y_train) for masking="
                                f"'retrain', got {type(background).__name__}")
            X_tr = check_array(background[0], "background[0]", ndim=2)
            y_tr = np.asarray(background[1])
            if X_tr.shape[1] != p or y_tr.shape != (X_tr.shape[0],):
                raise ValueError(f"background must be (X_train of shape (m, {p}), y_train of "
                                 f"shape (m,)), got {X_tr.shape} and {y_tr.shape}")
            train = (X_tr, y_tr)
        bg = X_arr[:1]
    elif background is None:
        idx = rng.choice(n, size=min(n_bg, n), replace=False)
        bg = X_arr[np.sort(idx)]
    else:
        bg = check_array(background, "background", ndim=2)
        if bg.shape[1] != p or bg.shape[0] < 1:
            raise ValueError(f"background must have shape (n_bg >= 1, {p}), got {bg.shape}")
    return MetricGame(model, X_arr, y01, groups, metric_list, player_list, masking, bg, positive,
                      train, int(chunk), bool(progress), tabulate, int(table_max))


def coalition_values(model: Any, X: Any, y: Any, sensitive: Any,
                     metrics: Sequence[str | Callable[..., float]] = DEFAULT_METRICS,
                     players: Sequence[Sequence[int]] | None = None, *,
                     masking: str = "interventional", background: Any = None,
                     n_background: int = 64, random_state: Any = None,
                     chunk_rows: int = 1 << 16, tabulate: bool | str = "auto",
                     max_table: int = 1 << 16, progress: bool = True) -> np.ndarray:
    """Metric values of all ``2**d`` coalitions, ``V[m, S] = v_m(S)`` (PROPOSED, spec §3.1).

    Parameters are those of :func:`metric_game`; ``d = len(players)`` must be at most
    :data:`MAX_EXACT_PLAYERS` (16).

    Returns
    -------
    values : ndarray of shape (M, 2**d), float64
        Column index = bitmask of the coalition ``S``.

    Raises
    ------
    ValueError
        If ``d > 16`` (use :func:`low_order_dividends` or :func:`sampled_shapley`), or as
        :func:`metric_game`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); a = (rng.random(200) < 0.5).astype(int)
    >>> y = (X[:, 0] + a + rng.normal(size=200) > 0.5).astype(int)
    >>> V = coalition_values(LogisticRegression().fit(X, y), X, y, a,
    ...                      ["accuracy", "demographic_parity"], n_background=16,
    ...                      random_state=0, progress=False)
    >>> V.shape
    (2, 8)
    >>> bool(V[0, 0b001] > V[0, 0b110])  # feature 0 alone beats features 1 and 2
    True
    """
    p = np.shape(X)[1] if np.ndim(X) == 2 else 0
    d = len(players) if players is not None else p
    if d > MAX_EXACT_PLAYERS:
        raise ValueError(f"players: exact enumeration needs d <= {MAX_EXACT_PLAYERS} players, got "
                         f"d = {d}; group features into players, or use low_order_dividends / "
                         "sampled_shapley")
    game = metric_game(model, X, y, sensitive, metrics, players=players, masking=masking,
                       background=background, n_background=n_background,
                       random_state=random_state, chunk_rows=chunk_rows, tabulate=tabulate,
                       max_table=max_table, progress=progress)
    return game(_all_coalitions(game.n_players))


# --- transforms ---------------------------------------------------------------------------------


def _transform(values: Any, name: str, inverse: bool, inplace: bool) -> np.ndarray:
    arr = _as_games(values, name)
    d = _n_players_of(arr, name)
    if inplace:
        if not (isinstance(values, np.ndarray) and values.dtype == np.float64
                and values.flags.c_contiguous and values.flags.writeable):
            raise ValueError(f"inplace=True needs {name} to be a writeable C-contiguous float64 "
                             "ndarray")
        out = values
    else:
        out = np.array(arr, dtype=np.float64, order="C", copy=True)
    moebius_inplace(out.reshape(-1, 1 << d), d, inverse=inverse)
    return out


def moebius_transform(values: Any, *, inplace: bool = False) -> np.ndarray:
    """Harsanyi dividends ``a(T) = sum_{S <= T} (-1)^{|T|-|S|} v(S)`` by the fast butterfly.

    ``O(d 2**d)`` per game (numba): for each player ``i``, ``v[S] -= v[S without i]`` for every
    ``S`` containing ``i``.

    Parameters
    ----------
    values : array-like of shape (..., 2**d)
        Game values, last index = coalition bitmask.
    inplace : bool, default=False
        Overwrite ``values`` (a writeable C-contiguous float64 ndarray) and return it.

    Returns
    -------
    dividends : ndarray of shape (..., 2**d), float64

    Examples
    --------
    >>> import numpy as np
    >>> v = np.array([0.0, 1.0, 2.0, 5.0])   # v({0,1}) = 5 = 1 + 2 + 2
    >>> moebius_transform(v)
    array([0., 1., 2., 2.])
    """
    return _transform(values, "values", inverse=False, inplace=inplace)


def inverse_moebius(dividends: Any, *, inplace: bool = False) -> np.ndarray:
    """Game values from dividends, ``v(S) = sum_{T <= S} a(T)`` (fast zeta transform).

    Parameters
    ----------
    dividends : array-like of shape (..., 2**d)
    inplace : bool, default=False
        Overwrite ``dividends`` (a writeable C-contiguous float64 ndarray) and return it.

    Returns
    -------
    values : ndarray of shape (..., 2**d), float64

    Examples
    --------
    >>> inverse_moebius([0.0, 1.0, 2.0, 2.0])
    array([0., 1., 2., 5.])
    """
    return _transform(dividends, "dividends", inverse=True, inplace=inplace)


def moebius_transform_reference(values: Any) -> np.ndarray:
    """Plain-Python twin of :func:`moebius_transform` (same butterfly, Python loops).

    Parameters
    ----------
    values : array-like of shape (..., 2**d)

    Returns
    -------
    dividends : ndarray of shape (..., 2**d), float64

    Examples
    --------
    >>> moebius_transform_reference([0.0, 1.0, 2.0, 5.0])
    array([0., 1., 2., 2.])
    """
    arr = _as_games(values, "values")
    d = _n_players_of(arr, "values")
    flat = arr.reshape(-1, 1 << d)
    out = np.array([moebius_reference(row, d) for row in flat], dtype=np.float64)
    return out.reshape(arr.shape)


def shapley_from_moebius(dividends: Any, d: int | None = None) -> np.ndarray:
    """Shapley values ``phi_i = sum_{T containing i} a(T) / |T|`` from the dividends.

    Parameters
    ----------
    dividends : array-like of shape (..., 2**d)
    d : int, optional
        Number of players (checked against the last axis); inferred when omitted.

    Returns
    -------
    phi : ndarray of shape (..., d), float64
        Efficiency: ``phi.sum(-1) == v(N) - v(empty)``.

    Examples
    --------
    >>> shapley_from_moebius([0.0, 1.0, 2.0, 2.0])   # the pair's dividend is split equally
    array([2., 3.])
    """
    arr = _as_games(dividends, "dividends")
    d_found = _n_players_of(arr, "dividends")
    if d is not None and check_scalar(d, "d", Interval("int", 0, None)) != d_found:
        raise ValueError(f"d must match the last axis of dividends (2**d = {arr.shape[-1]}), got "
                         f"d = {d}")
    flat = np.ascontiguousarray(arr.reshape(-1, 1 << d_found))
    return shapley_kernel(flat, d_found).reshape((*arr.shape[:-1], d_found))


# --- interaction vectors and compatibility ------------------------------------------------------


def interaction_coalitions(d: int, max_order: int | None = None) -> np.ndarray:
    """Bitmasks of the coalitions ``T`` with ``1 <= |T| <= max_order``, ascending.

    This is the coordinate order of :func:`interaction_vectors`.

    Parameters
    ----------
    d : int
        Number of players (at most 62).
    max_order : int, optional
        Largest coalition size ``k`` (default ``d``).

    Returns
    -------
    coalitions : ndarray of shape (n_coalitions,), int64
        ``n_coalitions = sum_{r=1..k} binom(d, r)``.

    Examples
    --------
    >>> interaction_coalitions(3, max_order=1)
    array([1, 2, 4])
    """
    d = int(check_scalar(d, "d", Interval("int", 1, 62)))
    k = d if max_order is None else int(check_scalar(max_order, "max_order", Interval("int", 1, d)))
    if d <= 24:
        sizes = popcounts(1 << d)
        return np.flatnonzero((sizes >= 1) & (sizes <= k)).astype(np.int64)
    masks = [sum(1 << i for i in c) for r in range(1, k + 1)
             for c in itertools.combinations(range(d), r)]
    return np.sort(np.asarray(masks, dtype=np.int64))


def interaction_vectors(values: Any, max_order: int | None = None, *,
                        dividends: bool = False) -> np.ndarray:
    """Interaction vectors ``I_m = (a_m(T))_{1 <= |T| <= k}`` of ``M`` games (spec §3.1).

    Parameters
    ----------
    values : array-like of shape (M, 2**d)
        Game values (or dividends when ``dividends=True``).
    max_order : int, optional
        ``k``; default ``d``.
    dividends : bool, default=False
        ``values`` already holds the dividends.

    Returns
    -------
    vectors : ndarray of shape (M, n_coalitions), float64
        Coordinates in the order of :func:`interaction_coalitions` ``(d, max_order)``.

    Examples
    --------
    >>> interaction_vectors([[0.0, 1.0, 2.0, 5.0]])
    array([[1., 2., 2.]])
    >>> interaction_vectors([[0.0, 1.0, 2.0, 5.0]], max_order=1)
    array([[1., 2.]])
    """
    arr = _as_games(values, "values")
    if arr.ndim != 2:
        raise ValueError(f"values must have shape (M, 2**d), got {arr.shape}")
    d = _n_players_of(arr, "values")
    if d < 1:
        raise ValueError("values must describe at least one player (2**d >= 2 columns)")
    a = arr if dividends else moebius_transform(arr)
    return np.ascontiguousarray(a[:, interaction_coalitions(d, max_order)])


def compatibility_matrix(vectors: Any) -> np.ndarray:
    """Cosine compatibility ``C(m1, m2) = <I_m1, I_m2> / (||I_m1|| ||I_m2||)`` (spec §3.1).

    Parameters
    ----------
    vectors : array-like of shape (M, n_coalitions)

    Returns
    -------
    C : ndarray of shape (M, M), float64
        Entries in ``[-1, 1]``; rows/columns of a metric whose vector is zero (it does not depend
        on any coalition) are NaN.

    Examples
    --------
    >>> compatibility_matrix([[1.0, 2.0], [-1.0, -2.0], [2.0, -1.0]]).round(12) + 0.0
    array([[ 1., -1.,  0.],
           [-1.,  1.,  0.],
           [ 0.,  0.,  1.]])
    """
    v = check_array(vectors, "vectors", dtypes=(np.float64,), ndim=2)
    norm = np.sqrt(np.einsum("ij,ij->i", v, v))
    safe = np.where(norm > 0, norm, 1.0)
    unit = v / safe[:, None]
    c = np.clip(unit @ unit.T, -1.0, 1.0)
    zero = norm == 0
    c[zero, :] = np.nan
    c[:, zero] = np.nan
    return c


def _coalition_tuple(mask: int) -> tuple[int, ...]:
    return tuple(i for i in range(int(mask).bit_length()) if (mask >> i) & 1)


def _shares(vectors: Any, i: int, j: int, coalitions: Any) -> tuple[np.ndarray, np.ndarray]:
    v = check_array(vectors, "vectors", dtypes=(np.float64,), ndim=2)
    m = v.shape[0]
    for name, k in (("i", i), ("j", j)):
        check_scalar(k, name, Interval("int", 0, m - 1))
    if coalitions is None:
        n = v.shape[1] + 1
        d = n.bit_length() - 1
        if (1 << d) != n:
            raise ValueError("coalitions must be given (interaction_coalitions(d, max_order)) "
                             f"unless vectors has all 2**d - 1 coordinates; got {v.shape[1]}")
        masks = np.arange(1, n, dtype=np.int64)
    else:
        masks = np.asarray(coalitions, dtype=np.int64)
        if masks.shape != (v.shape[1],):
            raise ValueError(f"coalitions must have shape ({v.shape[1]},), got {masks.shape}")
    ni, nj = np.linalg.norm(v[i]), np.linalg.norm(v[j])
    if ni == 0 or nj == 0:
        raise ValueError(f"vectors[{i if ni == 0 else j}] is zero: compatibility is undefined")
    return v[i] * v[j] / (ni * nj), masks


def coalition_attribution(vectors: Any, i: int, j: int, top: int = 10, *,
                          coalitions: Any = None, kind: str = "all"
                          ) -> list[tuple[tuple[int, ...], float]]:
    """Coalition shares ``c_T = a_i(T) a_j(T) / (||I_i|| ||I_j||)`` of ``C(i, j)`` (spec §3.1).

    ``sum_T c_T = C(i, j)``; ``c_T < 0`` marks a conflicting coalition, ``c_T > 0`` a
    synergistic one.

    Parameters
    ----------
    vectors : array-like of shape (M, n_coalitions)
    i, j : int
        Metric rows.
    top : int, default=10
        Number of coalitions returned.
    coalitions : array-like of shape (n_coalitions,), optional
        Bitmasks of the coordinates (:func:`interaction_coalitions`); needed unless
        ``vectors`` holds all ``2**d - 1`` non-empty coalitions.
    kind : {"all", "conflict", "synergy"}, default="all"
        ``"all"``: largest ``|c_T|`` first; ``"conflict"``: negative shares, most negative
        first; ``"synergy"``: positive shares, largest first.

    Returns
    -------
    shares : list of (tuple of int, float)
        ``(players of T, c_T)``.

    Examples
    --------
    >>> I = [[1.0, 0.0, 2.0], [1.0, 0.0, -2.0]]   # coalitions {0}, {1}, {0, 1}
    >>> [(T, round(c, 12)) for T, c in coalition_attribution(I, 0, 1, top=2)]
    [((0, 1), -0.8), ((0,), 0.2)]
    """
    if kind not in ("all", "conflict", "synergy"):
        raise ValueError(f"kind must be 'all', 'conflict' or 'synergy', got {kind!r}")
    top = int(check_scalar(top, "top", Interval("int", 1, None)))
    c, masks = _shares(vectors, i, j, coalitions)
    if kind == "conflict":
        order = [k for k in np.argsort(c, kind="stable") if c[k] < 0]
    elif kind == "synergy":
        order = [k for k in np.argsort(-c, kind="stable") if c[k] > 0]
    else:
        order = list(np.argsort(-np.abs(c), kind="stable"))
    return [(_coalition_tuple(int(masks[k])), float(c[k])) for k in order[:top]]


def attribution_by_order(vectors: Any, i: int, j: int, *, coalitions: Any = None) -> np.ndarray:
    """Per-order totals ``sum_{|T| = r} c_T`` of the coalition shares, ``r = 1..k``.

    Parameters
    ----------
    vectors, i, j, coalitions
        As :func:`coalition_attribution`.

    Returns
    -------
    totals : ndarray of shape (k,), float64
        ``totals[r - 1]``; they sum to ``C(i, j)``.

    Examples
    --------
    >>> attribution_by_order([[1.0, 0.0, 2.0], [1.0, 0.0, -2.0]], 0, 1).round(12)
    array([ 0.2, -0.8])
    """
    c, masks = _shares(vectors, i, j, coalitions)
    sizes = np.array([bin(int(s)).count("1") for s in masks], dtype=np.int64)
    return np.bincount(sizes - 1, weights=c, minlength=int(sizes.max()))


# --- larger d: exact low orders and sampled Shapley ---------------------------------------------


def _check_game(game: Any, n_players: int) -> int:
    if not callable(game):
        raise TypeError(f"game must be callable on boolean masks (B, d), got {type(game).__name__}")
    return int(check_scalar(n_players, "n_players", Interval("int", 1, 62)))


def _call_game(game: Callable[[np.ndarray], Any], masks: np.ndarray) -> np.ndarray:
    out = np.asarray(game(masks), dtype=np.float64)
    if out.ndim == 1:
        out = out[None, :]
    if out.ndim != 2 or out.shape[1] != masks.shape[0]:
        raise ValueError(f"game must return values of shape (M, B) = (M, {masks.shape[0]}), got "
                         f"{out.shape}")
    return out


def low_order_dividends(game: Callable[[np.ndarray], Any], n_players: int,
                        max_order: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Exact dividends of order ``<= k`` from the coalitions of size ``<= k`` only.

    ``a(T)`` depends on ``v(S)`` for ``S <= T`` only, so the interaction vector truncated at
    order ``k`` needs ``sum_{r<=k} binom(d, r)`` game evaluations instead of ``2**d``: exact
    for any ``d <= 62``.

    Parameters
    ----------
    game : callable
        Boolean player masks of shape (B, d) -> values of shape (M, B) (or (B,)), e.g. a
        :func:`metric_game`.
    n_players : int
        ``d``.
    max_order : int, default=2
        ``k``.

    Returns
    -------
    dividends : ndarray of shape (M, n_coalitions), float64
        Ordered as ``coalitions``; an interaction vector for :func:`compatibility_matrix`.
    coalitions : ndarray of shape (n_coalitions,), int64
        :func:`interaction_coalitions` ``(d, k)``.

    Examples
    --------
    >>> import numpy as np
    >>> w = np.arange(1.0, 31.0)
    >>> a, T = low_order_dividends(lambda S: S @ w + S[:, 0] * S[:, 1], 30, max_order=2)
    >>> a.shape, float(a[0, list(T).index(0b11)]), float(a[0, list(T).index(0b100)])
    ((1, 465), 1.0, 3.0)
    """
    d = _check_game(game, n_players)
    k = int(check_scalar(max_order, "max_order", Interval("int", 1, d)))
    coalitions = interaction_coalitions(d, k)
    masks = np.concatenate([[0], coalitions])
    column = {int(s): c for c, s in enumerate(masks)}
    vals = _call_game(game, _masks_to_bool(masks, d))  # (M, 1 + n_T)
    out = np.zeros((vals.shape[0], coalitions.size))
    for c, t in enumerate(coalitions):
        t = int(t)
        size_t = bin(t).count("1")
        s = t
        while True:  # submasks of t
            sign = -1.0 if (size_t - bin(s).count("1")) % 2 else 1.0
            out[:, c] += sign * vals[:, column[s]]
            if s == 0:
                break
            s = (s - 1) & t
    return out, coalitions


class ShapleyEstimate(NamedTuple):
    """Permutation-sampling Shapley estimate with its standard error (see
    :func:`sampled_shapley`)."""

    values: np.ndarray
    stderr: np.ndarray
    n_permutations: int


def sampled_shapley(game: Callable[[np.ndarray], Any], n_players: int,
                    n_permutations: int = 64, *, batch: int = 16, rng: Any = None,
                    progress: bool = True) -> ShapleyEstimate:
    """Monte-Carlo permutation estimate of Shapley values with a standard error, for large ``d``.

    For ``n_permutations`` uniform random orders ``pi`` of the players, the marginal
    contribution of player ``i`` is ``Delta_i(pi) = v(P_i(pi) + {i}) - v(P_i(pi))`` (``P_i``:
    the players before ``i``). ``phi_i = E[Delta_i]``; the estimate is the sample mean and the
    reported error is the standard error of that mean,

        stderr_i = std(Delta_i, ddof=1) / sqrt(n_permutations),

    so ``values +/- 1.96 stderr`` is an asymptotic (CLT) 95% interval for each ``phi_i``. Each
    permutation satisfies efficiency exactly: ``values.sum(-1) == v(N) - v(empty)``.

    Parameters
    ----------
    game : callable
        Boolean player masks of shape (B, d) -> values of shape (M, B) (or (B,)).
    n_permutations : int, default=64
        At least 2. Costs ``n_permutations (d - 1) + 2`` game evaluations.
    batch : int, default=16
        Permutations evaluated per call of ``game``.
    rng : None, int or numpy.random.Generator
    progress : bool, default=True

    Returns
    -------
    estimate : ShapleyEstimate
        ``values`` and ``stderr`` of shape (M, d), ``n_permutations``.

    Examples
    --------
    >>> import numpy as np
    >>> w = np.arange(1.0, 41.0)
    >>> est = sampled_shapley(lambda S: S @ w, 40, n_permutations=8, rng=0, progress=False)
    >>> bool(np.allclose(est.values, w)), float(est.stderr.max())   # additive: no error
    (True, 0.0)
    """
    d = _check_game(game, n_players)
    n_perm = int(check_scalar(n_permutations, "n_permutations", Interval("int", 2, None)))
    batch = int(check_scalar(batch, "batch", Interval("int", 1, None)))
    gen = check_rng(rng, "rng")
    ends = _call_game(game, np.array([[False] * d, [True] * d]))  # v(empty), v(N)
    m = ends.shape[0]
    total = np.zeros((m, d))
    total_sq = np.zeros((m, d))
    done = 0
    with tqdm(total=n_perm, disable=not progress, desc="permutations", leave=False) as bar:
        while done < n_perm:
            b = min(batch, n_perm - done)
            perms = np.argsort(gen.random((b, d)), axis=1)
            # prefixes of sizes 1..d-1 of each permutation: (b, d-1, d) boolean masks
            rank = np.empty_like(perms)
            np.put_along_axis(rank, perms, np.arange(d)[None, :], axis=1)
            prefix = rank[:, None, :] < np.arange(1, d)[None, :, None]
            inner = _call_game(game, prefix.reshape(-1, d)) if d > 1 else np.zeros((m, 0))
            chain = np.concatenate([np.repeat(ends[:, :1, None], b, axis=1),
                                    inner.reshape(m, b, d - 1),
                                    np.repeat(ends[:, 1:, None], b, axis=1)], axis=2)
            delta_pos = np.diff(chain, axis=2)  # (m, b, d): contribution of the r-th player
            delta = np.empty_like(delta_pos)
            np.put_along_axis(delta, np.broadcast_to(perms[None], delta.shape), delta_pos, axis=2)
            total += delta.sum(axis=1)
            total_sq += (delta**2).sum(axis=1)
            done += b
            bar.update(b)
    mean = total / n_perm
    var = np.maximum(total_sq / n_perm - mean**2, 0.0) * n_perm / (n_perm - 1)
    return ShapleyEstimate(mean, np.sqrt(var / n_perm), n_perm)


# --- the estimator ------------------------------------------------------------------------------


class MetricCompatibility(BaseEstimator):
    """Fairness-metric compatibility of a classifier over feature coalitions (PROPOSED, §3).

    ``fit(X, y, sensitive_features)`` fits ``clone(estimator)`` on ``(X, y)`` (or uses
    ``estimator`` as is when ``prefit=True``), evaluates the metric games ``v_m(S)`` on
    ``(X, y)`` (:func:`coalition_values`), and stores the dividends, interaction vectors,
    the cosine compatibility matrix ``C`` and the Shapley values. For ``d > 16`` players,
    ``max_order`` must be set: the dividends of order ``<= max_order`` are then computed exactly
    from the small coalitions (:func:`low_order_dividends`) and ``shapley_`` is None.

    Parameters
    ----------
    estimator : classifier, default=None
        ``None`` means ``LogisticRegression(max_iter=1000)``.
    metrics : sequence of str or callable, default=all six built-in metrics
    players : list of lists of int, optional
        Feature columns of each player (default one per column).
    masking : {"interventional", "baseline", "retrain"}, default="interventional"
    n_background : int, default=64
    max_order : int, optional
        Largest coalition size in the interaction vectors (default ``d``).
    prefit : bool, default=False
        Use ``estimator`` as already fitted (``X, y`` are then evaluation data only).
    sensitive_column : int, default=0
        Used only when ``fit`` gets no ``sensitive_features``: the groups are then
        ``X[:, sensitive_column] > median`` (PROPOSED fallback, so the estimator works in
        scikit-learn pipelines; pass ``sensitive_features`` for real use).
    tabulate : {"auto", True, False}, default="auto"
        Grid-table evaluation for discrete features (see :func:`metric_game`).
    random_state : None, int or numpy.random.Generator
    progress : bool, default=False

    Attributes
    ----------
    estimator_ : fitted classifier
    metric_names_ : list of str of length M
    values_ : ndarray of shape (M, 2**d) or None (``d > 16``)
    dividends_ : ndarray of shape (M, 2**d) or None (``d > 16``)
    coalitions_ : ndarray of shape (n_coalitions,), int64
        Bitmasks of the interaction-vector coordinates.
    interaction_vectors_ : ndarray of shape (M, n_coalitions)
    compatibility_ : ndarray of shape (M, M)
    shapley_ : ndarray of shape (M, d) or None
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 4)); a = (rng.random(300) < 0.5).astype(int)
    >>> y = (X[:, 0] + X[:, 1] + a + rng.normal(size=300) > 0.5).astype(int)
    >>> mc = MetricCompatibility(metrics=["accuracy", "demographic_parity"], n_background=16,
    ...                          random_state=0).fit(X, y, sensitive_features=a)
    >>> mc.compatibility_.shape, bool(np.allclose(np.diag(mc.compatibility_), 1.0))
    ((2, 2), True)
    >>> len(mc.attributions(0, 1, top=3))
    3
    """

    def __init__(self, estimator: Any = None, metrics: Sequence[Any] = DEFAULT_METRICS,
                 players: Any = None, masking: str = "interventional", n_background: int = 64,
                 max_order: int | None = None, prefit: bool = False, sensitive_column: int = 0,
                 tabulate: bool | str = "auto", random_state: Any = None,
                 progress: bool = False) -> None:
        self.estimator = estimator
        self.metrics = metrics
        self.players = players
        self.masking = masking
        self.n_background = n_background
        self.max_order = max_order
        self.prefit = prefit
        self.sensitive_column = sensitive_column
        self.tabulate = tabulate
        self.random_state = random_state
        self.progress = progress

    def __sklearn_tags__(self) -> Tags:
        """Binary targets are required (the fairness metrics are for binary classifiers)."""
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.classifier_tags = ClassifierTags(multi_class=False)
        return tags

    def fit(self, X: Any, y: Any, sensitive_features: Any = None) -> MetricCompatibility:
        """Fit the model (unless ``prefit``) and compute the compatibility of the metrics.

        Parameters
        ----------
        X : array-like of shape (n, p)
        y : array-like of shape (n,)
            Binary labels.
        sensitive_features : array-like of shape (n,), optional
            Group labels; see ``sensitive_column`` when omitted.

        Returns
        -------
        self : MetricCompatibility

        Examples
        --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(1)
        >>> X = rng.normal(size=(200, 3)); y = (X[:, 0] > 0).astype(int)
        >>> mc = MetricCompatibility(metrics=["accuracy"], n_background=8).fit(
        ...     X, y, sensitive_features=X[:, 1] > 0)
        >>> mc.shapley_.shape
        (1, 3)
        """
        from sklearn.linear_model import LogisticRegression

        X_arr, y = validate_named(self, X, y, dtype=[np.float64, np.float32],
                               ensure_min_samples=2)
        n, p = X_arr.shape
        check_targets(y)
        _check_labels(y, n)
        if sensitive_features is None:
            col = int(check_scalar(self.sensitive_column, "sensitive_column",
                                   Interval("int", 0, p - 1)))
            sensitive = X_arr[:, col] > np.median(X_arr[:, col])
        else:
            _check_sensitive(sensitive_features, n, "sensitive_features")
            sensitive = sensitive_features
        players = _check_players(self.players, p)
        d = len(players)
        if d > MAX_EXACT_PLAYERS and self.max_order is None:
            raise ValueError(f"players: d = {d} > {MAX_EXACT_PLAYERS} needs max_order (exact "
                             "low-order dividends), or fewer players")
        if self.prefit:
            if self.estimator is None:
                raise ValueError("estimator must be a fitted classifier when prefit=True, got None")
            model = self.estimator
        else:
            base = LogisticRegression(max_iter=1000) if self.estimator is None else self.estimator
            model = clone(base).fit(X_arr, np.asarray(y))
        game = metric_game(model, X_arr, y, sensitive, self.metrics, players=players,
                           masking=self.masking, n_background=self.n_background,
                           random_state=self.random_state, tabulate=self.tabulate,
                           progress=self.progress)
        k = d if self.max_order is None else int(
            check_scalar(self.max_order, "max_order", Interval("int", 1, d)))
        self.values_: np.ndarray | None
        self.dividends_: np.ndarray | None
        self.shapley_: np.ndarray | None
        if d <= MAX_EXACT_PLAYERS:
            self.values_ = game(_all_coalitions(d))
            self.coalitions_ = interaction_coalitions(d, k)
            dividends = moebius_transform(self.values_)
            self.dividends_ = dividends
            self.interaction_vectors_ = np.ascontiguousarray(dividends[:, self.coalitions_])
            self.shapley_ = shapley_from_moebius(dividends, d)
        else:
            self.values_ = self.dividends_ = self.shapley_ = None
            self.interaction_vectors_, self.coalitions_ = low_order_dividends(game, d, k)
        self.compatibility_ = compatibility_matrix(self.interaction_vectors_)
        self.metric_names_ = metric_names(list(game.metrics))
        self.estimator_ = model
        return self

    def attributions(self, i: int, j: int, top: int = 10, *,
                     kind: str = "all") -> list[tuple[tuple[int, ...], float]]:
        """Top coalition shares ``c_T`` of ``C(i, j)`` (see :func:`coalition_attribution`).

        Parameters
        ----------
        i, j : int
            Metric rows (``metric_names_`` order).
        top : int, default=10
        kind : {"all", "conflict", "synergy"}, default="all"

        Returns
        -------
        shares : list of (tuple of int, float)
            ``(players of T, c_T)``.

        Examples
        --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(2)
        >>> X = rng.normal(size=(200, 3)); a = rng.random(200) < 0.5
        >>> y = (X[:, 0] + a > 0.5).astype(int)
        >>> mc = MetricCompatibility(metrics=["accuracy", "demographic_parity"],
        ...                          n_background=8, random_state=0).fit(X, y, a)
        >>> T, c = mc.attributions(0, 1, top=1)[0]
        >>> isinstance(T, tuple) and -1.0 <= c <= 1.0
        True
        """
        check_is_fitted(self, "compatibility_")
        return coalition_attribution(self.interaction_vectors_, i, j, top,
                                     coalitions=self.coalitions_, kind=kind)

