"""``FallingTree``: one tree of a GraviTree result as flat arrays, with prediction and rules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_array, check_scalar


def check_binary_X(X: Any, n_features: int | None = None, name: str = "X") -> np.ndarray:
    """Validate a 0/1 feature matrix; returns it as uint8 of shape (n, p)."""
    x = check_array(X, name, dtypes=None, ndim=2)
    if not np.isin(x, (0, 1)).all():
        raise ValueError(f"{name} must be binary (0/1 only); binarise numeric data first, "
                         "e.g. with rml_fast.trees.QuantileBinarizer")
    if n_features is not None and x.shape[1] != n_features:
        raise ValueError(f"{name} has {x.shape[1]} features, but the model was fitted "
                         f"with {n_features}")
    return x.astype(np.uint8, copy=False)


@dataclass(frozen=True, eq=False)
class FallingTree:
    """A binary tree of literals ``x_j = o`` with leaves in prioritisation order.

    Node 0 is the root; the arrays are in pre-order, visiting the priority child (the one
    satisfying the literal) first, so the leaves appear in prioritisation order. For a
    falling tree their risks are non-increasing.

    Attributes
    ----------
    feature : ndarray of shape (n_nodes,), int32
        Feature tested at each internal node, -1 at leaves.
    orient : ndarray of shape (n_nodes,), int8
        ``o``: rows with ``x_j == o`` go to the priority child; -1 at leaves.
    priority, second : ndarray of shape (n_nodes,), int32
        Child node ids, -1 at leaves.
    risk : ndarray of shape (n_nodes,), float64
        Weighted positive fraction of the training rows reaching the node.
    objective : float
        ``R(T)`` on the training data.
    tau : float
        Decision threshold: a leaf predicts 1 iff its risk ``>= tau``.
    """

    feature: np.ndarray
    orient: np.ndarray
    priority: np.ndarray
    second: np.ndarray
    risk: np.ndarray
    objective: float
    tau: float = 0.5

    def __post_init__(self) -> None:
        """Validate the arrays (1-d, one entry per node, integer / finite real) and scalars."""
        n = None
        for name in ("feature", "orient", "priority", "second", "risk"):
            a = getattr(self, name)
            arr = check_array(a, name, dtypes=None, ndim=1, finite=True)
            if name != "risk" and arr.dtype.kind not in "iu":
                raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
            if n is None:
                n = arr.shape[0]
            elif arr.shape[0] != n:
                raise ValueError(f"{name} must have one entry per node, as feature ({n} nodes), "
                                 f"got shape {arr.shape}")
        if n == 0:
            raise ValueError("feature must have at least one node (the root), got an empty array")
        check_scalar(self.objective, "objective", Interval("real", None, None))
        check_scalar(self.tau, "tau", Interval("real", None, None))

    @classmethod
    def from_dict(cls, d: dict[str, Any], tau: float = 0.5) -> FallingTree:
        """From a dict with keys ``feature``, ``orient``, ``priority``, ``second``, ``risk``
        (sequences of length n_nodes) and ``objective`` (as ``GraviTreeResult.tree(i)`` returns);
        the arrays are copied to the attribute dtypes and made read-only."""
        arrays: dict[str, np.ndarray] = {
            "feature": np.asarray(d["feature"], dtype=np.int32),
            "orient": np.asarray(d["orient"], dtype=np.int8),
            "priority": np.asarray(d["priority"], dtype=np.int32),
            "second": np.asarray(d["second"], dtype=np.int32),
            "risk": np.asarray(d["risk"], dtype=np.float64),
        }
        for a in arrays.values():
            a.setflags(write=False)
        return cls(arrays["feature"], arrays["orient"], arrays["priority"], arrays["second"],
                   arrays["risk"], objective=float(d["objective"]), tau=float(tau))

    # --- structure -------------------------------------------------------------------

    @property
    def leaves(self) -> np.ndarray:
        """Node ids of the leaves in prioritisation order, shape (n_leaves,)."""
        return np.flatnonzero(self.feature < 0)

    @property
    def n_leaves(self) -> int:
        """Number of leaves."""
        return int((self.feature < 0).sum())

    @property
    def leaf_risks(self) -> np.ndarray:
        """Risks of the leaves in prioritisation order, shape (n_leaves,)."""
        return self.risk[self.leaves]

    @property
    def is_falling(self) -> bool:
        """Whether the leaf risks are non-increasing in prioritisation order."""
        r = self.leaf_risks
        return bool(np.all(r[:-1] >= r[1:]))

    def depth(self) -> int:
        """Maximum number of literals on a root-to-leaf path."""
        return int(self._node_depths().max())

    def n_branching(self) -> int:
        """Internal nodes whose two children are both internal."""
        internal = self.feature >= 0
        return int(sum(1 for i in np.flatnonzero(internal)
                       if internal[self.priority[i]] and internal[self.second[i]]))

    def features_used(self) -> np.ndarray:
        """Sorted distinct features tested anywhere in the tree."""
        return np.unique(self.feature[self.feature >= 0])

    def _node_depths(self) -> np.ndarray:
        d = np.zeros(len(self.feature), dtype=np.int64)
        for i in range(len(self.feature)):  # pre-order: parents come first
            if self.feature[i] >= 0:
                d[self.priority[i]] = d[i] + 1
                d[self.second[i]] = d[i] + 1
        return d

    def canonical_string(self, oriented: bool = True) -> str:
        """``(j=o:P|S)`` (oriented) or ``(j:A|B)`` with ``A`` the ``x_j = 1`` subtree."""
        from rml_fast.kernels.gravitree import canonical_string

        return canonical_string(self.__dict__, oriented=oriented)

    # --- prediction --------------------------------------------------------------------

    def _leaf_nodes(self, x: np.ndarray) -> np.ndarray:
        node = np.zeros(x.shape[0], dtype=np.int64)
        rows = np.arange(x.shape[0])
        for _ in range(len(self.feature)):
            f = self.feature[node]
            inner = f >= 0
            if not inner.any():
                break
            go = x[rows[inner], f[inner]] == self.orient[node[inner]]
            node[inner] = np.where(go, self.priority[node[inner]], self.second[node[inner]])
        return node

    def apply(self, X: Any) -> np.ndarray:
        """Leaf rank in prioritisation order (0 = first, highest-risk leaf), shape (n,) int64."""
        x = check_binary_X(X)
        rank = np.full(len(self.feature), -1, dtype=np.int64)
        rank[self.leaves] = np.arange(self.n_leaves)
        return rank[self._leaf_nodes(x)]

    def predict_proba(self, X: Any) -> np.ndarray:
        """Leaf risk of each row: array of shape (n, 2), float64, column 1 = risk."""
        x = check_binary_X(X)
        r = self.risk[self._leaf_nodes(x)]
        return np.column_stack([1.0 - r, r])

    def predict(self, X: Any) -> np.ndarray:
        """``1[risk >= tau]``, shape (n,) int64."""
        return (self.predict_proba(X)[:, 1] >= self.tau).astype(np.int64)

    def decision_path_length(self, X: Any) -> np.ndarray:
        """Number of literals on each row's root-to-leaf path, shape (n,) int64."""
        x = check_binary_X(X)
        return self._node_depths()[self._leaf_nodes(x)]

    def to_rules(self, feature_names: Sequence[str] | None = None) -> list[str]:
        """The tree as a falling rule list: one rule per leaf, in prioritisation order.

        Each rule is the conjunction of literals on the leaf's path; rules are read in
        order ("if ... else if ..."), and the risks fall from rule to rule.

        Examples
        --------
        >>> import numpy as np
        >>> t = FallingTree.from_dict(dict(feature=[0, -1, -1], orient=[1, -1, -1],
        ...     priority=[1, -1, -1], second=[2, -1, -1], risk=[0.5, 0.9, 0.1], objective=0.2))
        >>> t.to_rules(["smoker"])
        ['if smoker == 1 then risk = 0.900 (predict 1)', 'else risk = 0.100 (predict 0)']
        """
        names = list(feature_names) if feature_names is not None else None
        if names is not None and self.n_leaves > 1:
            needed = int(self.feature.max()) + 1
            if len(names) < needed:
                raise ValueError(f"feature_names must name at least {needed} features, "
                                 f"got {len(names)}")
        paths: dict[int, list[str]] = {0: []}
        rules: list[str] = []
        for i in range(len(self.feature)):
            lits = paths[i]
            if self.feature[i] >= 0:
                j, o = int(self.feature[i]), int(self.orient[i])
                nm = names[j] if names is not None else f"x{j}"
                paths[int(self.priority[i])] = [*lits, f"{nm} == {o}"]
                paths[int(self.second[i])] = [*lits, f"{nm} == {1 - o}"]
                continue
            r = float(self.risk[i])
            tail = f"risk = {r:.3f} (predict {int(r >= self.tau)})"
            k = len(rules)
            if k == self.n_leaves - 1:
                rules.append(("else " if k else "") + tail)
            else:
                rules.append(f"{'else if' if k else 'if'} {' and '.join(lits)} then {tail}")
        return rules
