r"""Neural Concept Verifier (NCV): a prover-verifier game over concept encodings.

A concept encoding ``z in R^m`` (one named, human-meaningful concept per coordinate) is shown to a
nonlinear verifier ("Arthur") only through a binary mask ``s`` with exactly ``k`` ones chosen by a
prover. Arthur outputs ``K + 1`` logits, the last one "I don't know" (reject). Two provers play:

* Merlin (cooperative) shows the concepts that best support the true class,
  :math:`s_M = \arg\min_{\|s\|_0 = k} \mathrm{CE}(V(z, s), y)`;
* Morgana (adversarial) shows the concepts that best push Arthur to a wrong class,
  :math:`s_A = \arg\max_{\|s\|_0 = k} -\log(p_y + p_{idk})`.

Arthur is trained on :math:`L_V = \mathrm{CE}(V(z, s_M), y) + \gamma\,[-\log(p_y + p_{idk})](V(z, s_A))`
with both masks computed for the frozen verifier on each batch. Completeness is
:math:`P(\arg\max V(z, s_M) = y)`, soundness :math:`P(\arg\max V(z, s_A) \in \{y, idk\})` against an
adversary that searches all k-subsets (or greedily / by Frank-Wolfe when there are too many).

References
----------
B. Turan, S. Asadulla, D. Steinmann, K. Kersting, W. Stammer, S. Pokutta, "Neural Concept Verifier:
Scaling Prover-Verifier Games via Concept Encodings", arXiv:2507.07532. The prover-verifier core follows
S. Waeldchen, K. Sharma, B. Turan, M. Zimmer, S. Pokutta, "Interpretability Guarantees with
Merlin-Arthur Classifiers", AISTATS 2024.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import nn

from rml_fast._sklearn_validation import validate_named
from rml_fast._validation import Interval, check_scalar, check_tensor
from rml_fast.verification import _ncv_checkpoint as _ckpt
from rml_fast.verification import _ncv_provers as _pv

__all__ = ["ConceptVerifier", "KSparseProver", "NeuralConceptVerifier", "morgana_loss"]

PROVER_METHODS = ("auto", "exact", "greedy", "fw")


def _check_labels(y: object, n: int, n_classes: int, rows: str, name: str = "y") -> torch.Tensor:
    """``y`` as an int64 tensor of shape (n,) with values in [0, n_classes), or an error naming it."""
    check_tensor(y, name, ndim=1, floating=False, finite=False)
    assert isinstance(y, torch.Tensor)
    if y.dtype != torch.int64:
        raise TypeError(f"{name} must be an int64 tensor of class indices, got {y.dtype}")
    if y.shape[0] != n:
        raise ValueError(f"{name} must have one label per row of {rows} ({n} rows), "
                         f"got shape {tuple(y.shape)}")
    if n and (int(y.min()) < 0 or int(y.max()) >= n_classes):
        raise ValueError(f"{name} must hold class indices in [0, {n_classes}), got values in "
                         f"[{int(y.min())}, {int(y.max())}]")
    return y


def _check_flag(value: object, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def morgana_loss(logits: torch.Tensor, y: torch.Tensor, reject: bool = True) -> torch.Tensor:
    r"""Per-sample Morgana loss :math:`-\log(p_y + p_{idk})` of the verifier's logits.

    Parameters
    ----------
    logits : Tensor of shape (B, K+1) (or (B, K) when ``reject=False``)
        Verifier logits; the last column is "I don't know" when ``reject``.
    y : Tensor of shape (B,), int64
        True classes in ``[0, K)``.
    reject : bool, default=True
        Whether the last logit is the reject class; without it the loss is :math:`-\log p_y`.

    Returns
    -------
    loss : Tensor of shape (B,)
        :math:`-\log(p_y + p_{idk}) = \log\sum_c e^{l_c} - \log(e^{l_y} + e^{l_{idk}})`, computed with
        log-sum-exp (stable for any logits; NaN logits give NaN losses).

    Raises
    ------
    TypeError, ValueError
        If ``logits`` is not a real floating tensor of shape (B, K+1) (K >= 1), ``y`` not an int64
        tensor of shape (B,) with values in ``[0, K)``, or ``reject`` not a bool.

    Examples
    --------
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, 1.0]])          # classes 0, 1 and "I don't know"
    >>> p = logits.softmax(-1)
    >>> float(morgana_loss(logits, torch.tensor([1]))), float(-(p[0, 1] + p[0, 2]).log())
    (1.0943443775177002, 1.0943443775177002)
    """
    reject = _check_flag(reject, "reject")
    check_tensor(logits, "logits", ndim=2, finite=False)
    n_classes = logits.shape[1] - (1 if reject else 0)
    if n_classes < 1:
        raise ValueError(f"logits must have at least {2 if reject else 1} columns "
                         f"(K classes{' and the reject class' if reject else ''}), "
                         f"got shape {tuple(logits.shape)}")
    _check_labels(y, logits.shape[0], n_classes, "logits")
    return _pv.morgana_loss_from_logprobs(torch.log_softmax(logits, dim=-1), y, reject)


class ConceptVerifier(nn.Module):
    r"""Arthur: an MLP that decides from the concepts a prover reveals.

    ``forward(z, s)`` sees only :math:`z \odot s` and (with ``reveal_mask``) the mask ``s`` itself,
    never the hidden concepts: changing a concept with ``s_j = 0`` cannot change the output.

    Parameters
    ----------
    n_concepts : int
        ``m``, the length of a concept encoding.
    n_classes : int
        ``K``; the verifier outputs ``K + 1`` logits when ``reject`` (last = "I don't know").
    hidden : sequence of int, default=(64, 64)
        Hidden widths (ReLU). The paper's MLP verifier uses wider layers (e.g. 256).
    reveal_mask : bool, default=True
        PROPOSED: feed ``[z * s, s]`` so that a revealed concept equal to 0 differs from a hidden one
        (binary concepts need this). ``False`` gives the paper's literal input ``z * s``.
    reject : bool, default=True
        Add the "I don't know" output.
    generator : torch.Generator, optional
        Seeds the weight initialisation (PyTorch's default ``nn.Linear`` scheme).

    Examples
    --------
    >>> import torch
    >>> v = ConceptVerifier(4, 2, hidden=(8,), generator=torch.Generator().manual_seed(0))
    >>> z, s = torch.randn(3, 4), torch.tensor([[1.0, 1, 0, 0]] * 3)
    >>> z2 = z.clone(); z2[:, 2:] = 100.0                  # change only hidden concepts
    >>> v(z, s).shape, bool(torch.equal(v(z, s), v(z2, s)))
    (torch.Size([3, 3]), True)
    """

    def __init__(self, n_concepts: int, n_classes: int, hidden: Sequence[int] = (64, 64),
                 reveal_mask: bool = True, reject: bool = True,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.n_concepts = int(check_scalar(n_concepts, "n_concepts", Interval("int", 1, None)))
        self.n_classes = int(check_scalar(n_classes, "n_classes", Interval("int", 1, None)))
        if isinstance(hidden, (str, bytes)) or not isinstance(hidden, (Sequence, np.ndarray)):
            raise TypeError(f"hidden must be a sequence of ints, got {type(hidden).__name__}")
        widths = [int(check_scalar(h, "hidden", Interval("int", 1, None))) for h in hidden]
        self.reveal_mask, self.reject = bool(reveal_mask), bool(reject)
        sizes = [self.n_concepts * (2 if self.reveal_mask else 1), *widths,
                 self.n_classes + (1 if self.reject else 0)]
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)
        if generator is not None:
            for layer in self.net:
                if isinstance(layer, nn.Linear):
                    nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
                    bound = 1.0 / math.sqrt(layer.in_features)
                    nn.init.uniform_(layer.bias, -bound, bound, generator=generator)

    def forward(self, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, K+1)`` from concepts ``z`` ``(B, m)`` and a mask ``s`` ``(B, m)`` in [0, 1].

        Both are finite tensors of the verifier's dtype (a TypeError / ValueError naming the
        argument otherwise).

        Examples
        --------
        >>> import torch
        >>> v = ConceptVerifier(4, 2, hidden=(8,), generator=torch.Generator().manual_seed(0))
        >>> v(torch.randn(3, 4), torch.ones(3, 4)).shape
        torch.Size([3, 3])
        """
        self._check_concepts(z, "z")
        self._check_concepts(s, "s", mask=True)
        if s.shape != z.shape:
            raise ValueError(f"s must have the shape of z {tuple(z.shape)}, got {tuple(s.shape)}")
        return self._forward(z, s)

    def _check_concepts(self, t: object, name: str, nonempty: bool = False,
                        mask: bool = False) -> torch.Tensor:
        # a mask may also be bool / integer 0-1 (it is multiplied into z)
        check_tensor(t, name, ndim=2, nonempty=nonempty, floating=not mask)
        assert isinstance(t, torch.Tensor)
        if t.is_complex():
            raise TypeError(f"{name} must be real, got {t.dtype}")
        if t.shape[1] != self.n_concepts:
            raise ValueError(f"{name} must have shape (B, {self.n_concepts}), got {tuple(t.shape)}")
        dtype = self.net[0].weight.dtype
        if t.is_floating_point() and t.dtype != dtype:
            raise TypeError(f"{name} must have the verifier's dtype {dtype}, got {t.dtype}")
        return t

    def _forward(self, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        x = z * s
        if self.reveal_mask:
            x = torch.cat([x, s], dim=-1)
        return self.net(x)


class KSparseProver:
    r"""Select ``k`` concepts per example to maximise a prover's objective for a fixed verifier.

    Parameters
    ----------
    k : int
        Number of concepts revealed (exactly ``k`` ones per mask).
    mode : {"merlin", "morgana", "fool"}, default="merlin"
        ``"merlin"`` maximises :math:`\log p_y` (certificate for ``y``); ``"morgana"`` maximises the
        Morgana loss :math:`-\log(p_y + p_{idk})` (used in training); ``"fool"`` maximises
        :math:`\max_{c \notin \{y, idk\}} \log p_c - \max(\log p_y, \log p_{idk})`, positive exactly when
        the verifier is fooled into a wrong class (the evaluation adversary).
    method : {"exact", "greedy", "fw"}, default="exact"
        ``"exact"``: all :math:`\binom{m}{k}` subsets in batched forward passes (the true optimum);
        ``"greedy"``: ``k`` rounds adding the best concept; ``"fw"``: stochastic Frank-Wolfe on
        :math:`\{s \in [0,1]^m: \sum s \le k\}` then top-k (the paper's prover; ``"fool"`` is relaxed
        to the Morgana loss there).
    iters, lr, momentum, patience, l1 : Frank-Wolfe settings
        Defaults 250, 0.1, 0.9, 8, 0.0 as in the paper (``l1`` optional, 0.01 there).
    restarts : int, default=0
        PROPOSED: extra Frank-Wolfe runs from random vertices (the same for every example, seeded
        by the restart's index), keeping the best mask; 0 is the paper's single run from the
        uniform point ``k/m``.

    Examples
    --------
    >>> import torch
    >>> v = ConceptVerifier(5, 2, hidden=(8,), generator=torch.Generator().manual_seed(0))
    >>> z, y = torch.randn(4, 5), torch.tensor([0, 1, 0, 1])
    >>> s = KSparseProver(2, "merlin", "exact")(v, z, y)
    >>> s.shape, s.sum(1).tolist()
    (torch.Size([4, 5]), [2.0, 2.0, 2.0, 2.0])
    """

    def __init__(self, k: int, mode: str = "merlin", method: str = "exact", iters: int = 250,
                 lr: float = 0.1, momentum: float = 0.9, patience: int = 8, l1: float = 0.0,
                 restarts: int = 0) -> None:
        self.k = int(check_scalar(k, "k", Interval("int", 1, None)))
        if mode not in _pv.OBJECTIVES:
            raise ValueError(f"mode must be one of {_pv.OBJECTIVES}, got {mode!r}")
        if method not in PROVER_METHODS[1:]:
            raise ValueError(f"method must be one of {PROVER_METHODS[1:]}, got {method!r}")
        self.mode, self.method = mode, method
        self.iters = int(check_scalar(iters, "iters", Interval("int", 1, None)))
        self.lr = float(check_scalar(lr, "lr", Interval("real", 0.0, 1.0, "right")))
        self.momentum = float(check_scalar(momentum, "momentum", Interval("real", 0.0, 1.0, "left")))
        self.patience = int(check_scalar(patience, "patience", Interval("int", 1, None)))
        self.l1 = float(check_scalar(l1, "l1", Interval("real", 0.0, None)))
        self.restarts = int(check_scalar(restarts, "restarts", Interval("int", 0, None)))

    def select(self, verifier: ConceptVerifier, z: torch.Tensor,
               y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masks ``(B, m)`` (0/1, ``z``'s dtype) and their objective values ``(B,)``.

        Parameters
        ----------
        verifier : ConceptVerifier
            The (frozen) verifier.
        z : torch.Tensor, shape (B, m), B >= 1
            Finite concepts of the verifier's dtype.
        y : torch.Tensor, shape (B,), int64
            Class indices in ``[0, K)``.

        Returns
        -------
        masks : torch.Tensor, shape (B, m)
        scores : torch.Tensor, shape (B,)

        Examples
        --------
        >>> import torch
        >>> v = ConceptVerifier(5, 2, hidden=(8,), generator=torch.Generator().manual_seed(0))
        >>> s, sc = KSparseProver(1).select(v, torch.randn(2, 5), torch.tensor([0, 1]))
        >>> s.sum(1).tolist(), sc.shape
        ([1.0, 1.0], torch.Size([2]))
        """
        if not isinstance(verifier, ConceptVerifier):
            raise TypeError(f"verifier must be a ConceptVerifier, got {type(verifier).__name__}")
        verifier._check_concepts(z, "z", nonempty=True)
        _check_labels(y, z.shape[0], verifier.n_classes, "z")
        if self.k > z.shape[1]:
            raise ValueError(f"k={self.k} is larger than the number of concepts m={z.shape[1]}")
        args = (verifier, z, y, self.k, self.mode, verifier.reject)
        if self.method == "exact":
            return _pv.exact_select(*args)
        if self.method == "greedy":
            return _pv.greedy_select(*args)
        return _pv.fw_select(*args, iters=self.iters, lr=self.lr, momentum=self.momentum,
                             patience=self.patience, l1=self.l1, restarts=self.restarts)

    def __call__(self, verifier: ConceptVerifier, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Masks ``(B, m)`` in {0, 1} for concepts ``z`` ``(B, m)`` and labels ``y`` ``(B,)``."""
        return self.select(verifier, z, y)[0]


class NeuralConceptVerifier(ClassifierMixin, BaseEstimator):
    r"""Neural Concept Verifier: a classifier that decides from ``k`` concepts a prover reveals.

    Trains a :class:`ConceptVerifier` in the Merlin-Arthur game (module docstring): per mini-batch,
    Merlin's and Morgana's masks are computed for the frozen verifier, then the verifier takes one
    Adam step on :math:`L_V = \mathrm{CE}(V(z, s_M), y) + \gamma [-\log(p_y + p_{idk})](V(z, s_A))`.
    ``gamma=0`` is the baseline trained without the game (Merlin only).

    Prediction (PROPOSED, the paper's Merlin knows the label): for every class ``c`` the honest prover
    finds the certificate :math:`s_c = \arg\max_s \log p_c(V(z, s))`;
    ``predict_proba[:, c]`` :math:`\propto p_c(V(z, s_c))` and ``predict`` is its arg max.

    Parameters
    ----------
    k : int, default=2
        Concepts revealed per example; must not exceed the number of features (``ValueError``).
    gamma : float, default=1.0
        Weight of the Morgana term (PROPOSED default 1).
    prover : {"auto", "exact", "greedy", "fw"}, default="auto"
        Prover used in training and prediction; ``"auto"`` is ``"exact"`` when
        :math:`\binom{m}{k} \le` ``max_exact_subsets`` else ``"fw"`` (the paper's Frank-Wolfe prover).
    hidden : tuple of int, default=(64, 64)
        Verifier hidden widths.
    reveal_mask : bool, default=True
        PROPOSED: the verifier also sees which concepts are revealed (see :class:`ConceptVerifier`).
    reject : bool, default=True
        Give the verifier the "I don't know" output.
    epochs : int, default=40
        Passes over the data (a resumed run continues to this total).
    batch_size : int, default=64
    lr : float, default=1e-3
        Adam learning rate.
    fw_iters : int, default=250
        Frank-Wolfe iterations (early stop after 8 without improvement).
    fw_restarts : int, default=2
        PROPOSED: extra Frank-Wolfe runs from random vertices (:class:`KSparseProver` ``restarts``);
        on ``(c1 AND c2) OR c5`` the single paper run reaches completeness 0.89 where exact
        enumeration reaches 1.00, two restarts 1.00.
    max_exact_subsets : int, default=2048
        Threshold of ``prover="auto"``.
    warmup_epochs : int, default=5
        PROPOSED (not in the paper; 0 turns it off): the first epochs (counted in ``epochs``) train
        the verifier by cross-entropy on uniformly random k-subsets instead of the game, so that it
        has seen every concept combination before Merlin starts choosing. Without it the game can
        settle where Merlin never shows the decisive concepts (on ``(c1 AND c2) OR c5``: test
        completeness 0.62 without, 1.00 with 5 warm-up epochs).
    random_state : int, numpy Generator or None, default=None
        Seeds the initialisation and the batch order.
    progress : bool, default=False
        tqdm bar over epochs.
    checkpoint_dir : str or path, optional
        Write ``ncv.pt`` there after every epoch; ``fit`` resumes from it (same result as an
        uninterrupted run) when ``resume`` and its configuration and data match, else ``ValueError``.
    resume : bool, default=True

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
    verifier_ : ConceptVerifier
    prover_method_ : str
        The resolved prover.
    history_ : list of dict
        Per epoch: mean ``loss``, ``merlin`` and ``morgana`` terms.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> Z = rng.integers(0, 2, size=(400, 8)).astype(float)      # eight binary concepts
    >>> y = ((Z[:, 0] * Z[:, 1] == 1) | (Z[:, 4] == 1)).astype(int)  # (c1 AND c2) OR c5
    >>> ncv = NeuralConceptVerifier(k=2, epochs=40, random_state=0).fit(Z, y)
    >>> ncv.completeness_score(Z, y) > 0.95, ncv.soundness_score(Z, y) > 0.95
    (True, True)
    >>> int(ncv.explain(Z[:1]).sum())                          # two concepts per certificate
    2
    """

    def __init__(self, k: int = 2, gamma: float = 1.0, prover: str = "auto",
                 hidden: tuple[int, ...] = (64, 64), reveal_mask: bool = True, reject: bool = True,
                 epochs: int = 40, batch_size: int = 64, lr: float = 1e-3, fw_iters: int = 250,
                 fw_restarts: int = 2,
                 max_exact_subsets: int = 2048, warmup_epochs: int = 5, random_state=None, progress: bool = False,
                 checkpoint_dir=None, resume: bool = True) -> None:
        self.k = k
        self.gamma = gamma
        self.prover = prover
        self.hidden = hidden
        self.reveal_mask = reveal_mask
        self.reject = reject
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.fw_iters = fw_iters
        self.fw_restarts = fw_restarts
        self.max_exact_subsets = max_exact_subsets
        self.warmup_epochs = warmup_epochs
        self.random_state = random_state
        self.progress = progress
        self.checkpoint_dir = checkpoint_dir
        self.resume = resume

    # ------------------------------------------------------------------ checks and helpers
    def _check_params(self, m: int) -> None:
        k = check_scalar(self.k, "k", Interval("int", 1, None))
        if k > m:
            raise ValueError(f"k={k} is larger than the number of concepts (n_features = {m}); "
                             f"choose k <= {m}")
        check_scalar(self.gamma, "gamma", Interval("real", 0.0, None))
        check_scalar(self.epochs, "epochs", Interval("int", 0, None))
        check_scalar(self.batch_size, "batch_size", Interval("int", 1, None))
        check_scalar(self.lr, "lr", Interval("real", 0.0, None, "neither"))
        check_scalar(self.fw_iters, "fw_iters", Interval("int", 1, None))
        check_scalar(self.fw_restarts, "fw_restarts", Interval("int", 0, None))
        check_scalar(self.max_exact_subsets, "max_exact_subsets", Interval("int", 1, None))
        check_scalar(self.warmup_epochs, "warmup_epochs", Interval("int", 0, None))
        if self.prover not in PROVER_METHODS:
            raise ValueError(f"prover must be one of {PROVER_METHODS}, got {self.prover!r}")
        if not isinstance(self.hidden, (tuple, list)) or not self.hidden:
            raise TypeError(f"hidden must be a non-empty tuple of ints, got {self.hidden!r}")

    def _method(self, m: int, method: str) -> str:
        if method == "auto":
            return "exact" if _pv.n_subsets(m, self.k) <= self.max_exact_subsets else "fw"
        if method not in PROVER_METHODS:
            raise ValueError(f"method must be one of {PROVER_METHODS}, got {method!r}")
        return method

    def _prover(self, mode: str, method: str | None = None) -> KSparseProver:
        return KSparseProver(self.k, mode, method or self.prover_method_, iters=self.fw_iters,
                             restarts=self.fw_restarts)

    def _z(self, X, reset: bool = False) -> torch.Tensor:
        # scikit-learn's messages ("Reshape your data", "Found array with 0 sample(s)") do not
        # always name the argument
        X = validate_named(self, X, reset=reset, dtype=[np.float64, np.float32])
        return torch.tensor(np.asarray(X), dtype=self._dtype)

    def _y(self, y, n: int | None = None) -> torch.Tensor:
        y = np.asarray(y)
        if y.ndim != 1:
            raise ValueError(f"y must have shape (n,), got {y.shape}")
        if n is not None and y.shape[0] != n:
            raise ValueError(f"y must have one label per row of X ({n} rows), got {y.shape[0]}")
        idx = np.searchsorted(self.classes_, y)
        idx = np.clip(idx, 0, len(self.classes_) - 1)
        if not np.array_equal(self.classes_[idx], y):
            raise ValueError(f"y holds labels not seen in fit; expected a subset of {self.classes_}")
        return torch.as_tensor(idx, dtype=torch.long)

    def _seed_sequence(self) -> np.random.SeedSequence:
        rs = self.random_state
        if isinstance(rs, np.random.Generator):
            return np.random.SeedSequence(int(rs.integers(2**63)))
        if isinstance(rs, np.random.RandomState):
            return np.random.SeedSequence(int(rs.randint(2**31)))
        if rs is not None and (isinstance(rs, (bool, np.bool_)) or not isinstance(rs, (int, np.integer))
                               or int(rs) < 0):
            raise TypeError("random_state must be a non-negative int, a numpy Generator / "
                            f"RandomState or None, got {rs!r}")
        return np.random.SeedSequence(None if rs is None else int(rs))

    @property
    def _dtype(self) -> torch.dtype:
        return self.dtype_

    # ------------------------------------------------------------------ training
    def fit(self, X, y) -> NeuralConceptVerifier:
        """Train the verifier in the prover-verifier game.

        Parameters
        ----------
        X : array-like of shape (n, m)
            Concept encodings (binary or real); float64 input trains in float64, float32 in float32.
        y : array-like of shape (n,)
            Class labels.

        Returns
        -------
        self : NeuralConceptVerifier

        Raises
        ------
        ValueError
            ``k`` larger than ``m``, bad hyper-parameters or data, or a checkpoint of another run.
        """
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        m = X.shape[1]
        self._check_params(m)
        self.classes_, y_idx = np.unique(y, return_inverse=True)
        self.dtype_ = torch.float64 if X.dtype == np.float64 else torch.float32
        self.prover_method_ = self._method(m, self.prover)
        seed = self._seed_sequence()
        torch_seed, batch_seed = seed.spawn(2)
        gen = torch.Generator().manual_seed(int(torch_seed.generate_state(1, np.uint64)[0] >> 1))
        self.verifier_ = ConceptVerifier(m, len(self.classes_), tuple(self.hidden), self.reveal_mask,
                                         self.reject, generator=gen).to(self._dtype)
        opt = torch.optim.Adam(self.verifier_.parameters(), lr=float(self.lr))
        rng = np.random.default_rng(batch_seed)
        self.history_ = []
        start = 0
        config = self._config(X, y_idx, seed)
        if self.checkpoint_dir is not None and self.resume:
            saved = _ckpt.load(self.checkpoint_dir)
            if saved is not None:
                diff = _ckpt.config_differences(saved["config"], config)
                if diff:
                    raise ValueError("checkpoint_dir holds a different run; use resume=False or "
                                     "another directory. Differences: " + "; ".join(diff))
                self.verifier_.load_state_dict(saved["verifier"])
                opt.load_state_dict(saved["optimizer"])
                rng.bit_generator.state = saved["rng"]
                self.history_ = list(saved["history"])
                start = int(saved["epoch"])
        z = torch.tensor(np.asarray(X), dtype=self._dtype)
        yt = torch.as_tensor(y_idx, dtype=torch.long)
        from tqdm.auto import tqdm

        bar = tqdm(range(start, int(self.epochs)), desc="NCV", disable=not self.progress,
                   leave=False)
        for epoch in bar:
            self.history_.append(self._epoch(z, yt, opt, rng, epoch < int(self.warmup_epochs)))
            if self.checkpoint_dir is not None:
                _ckpt.save(self.checkpoint_dir, {
                    "config": config, "epoch": epoch + 1, "verifier": self.verifier_.state_dict(),
                    "optimizer": opt.state_dict(), "rng": rng.bit_generator.state,
                    "history": self.history_})
            bar.set_postfix(loss=f"{self.history_[-1]['loss']:.4f}")
        self.verifier_.eval()
        return self

    def _config(self, X, y_idx, seed) -> dict:
        return {"k": int(self.k), "gamma": float(self.gamma), "prover": self.prover_method_,
                "hidden": [int(h) for h in self.hidden], "reveal_mask": bool(self.reveal_mask),
                "reject": bool(self.reject), "batch_size": int(self.batch_size),
                "lr": float(self.lr), "fw_iters": int(self.fw_iters),
                "fw_restarts": int(self.fw_restarts),
                "warmup_epochs": int(self.warmup_epochs),
                "seed": (int(self.random_state) if isinstance(self.random_state, (int, np.integer))
                         else "unseeded"), "dtype": str(self._dtype),
                "data": _ckpt.data_digest(X, y_idx)}

    def _epoch(self, z, y, opt, rng, warmup: bool) -> dict:
        v = self.verifier_
        perm = rng.permutation(z.shape[0])
        tot = {"loss": 0.0, "merlin": 0.0, "morgana": 0.0}
        for i in range(0, len(perm), int(self.batch_size)):
            idx = torch.as_tensor(perm[i:i + int(self.batch_size)])
            zb, yb = z[idx], y[idx]
            v.eval()
            if warmup:  # random k-subsets, no adversary
                keys = rng.random((len(idx), z.shape[1])).argsort(1)[:, : int(self.k)]
                s_m = torch.zeros_like(zb).scatter_(1, torch.as_tensor(keys), 1.0)
                s_a = None
            else:
                s_m, s_a = self._game_masks(zb, yb)
            v.train()
            lm = nn.functional.cross_entropy(v._forward(zb, s_m), yb)
            if s_a is not None:
                lp_a = torch.log_softmax(v._forward(zb, s_a), dim=-1)
                la = _pv.morgana_loss_from_logprobs(lp_a, yb, v.reject).mean()
                loss = lm + float(self.gamma) * la
            else:
                la, loss = lm.detach() * 0, lm
            opt.zero_grad()
            loss.backward()
            opt.step()
            w = len(idx) / len(perm)
            tot["loss"] += w * float(loss.detach())
            tot["merlin"] += w * float(lm.detach())
            tot["morgana"] += w * float(la.detach())
        return tot

    def _game_masks(self, zb, yb):
        v, game = self.verifier_, float(self.gamma) > 0
        if self.prover_method_ == "exact":  # one enumeration serves both provers
            lp, masks = _pv.exact_logprobs(v, zb, int(self.k))
            yy = yb.unsqueeze(1).expand(lp.shape[:2])
            s_m = masks[_pv.score(lp, yy, "merlin", v.reject).argmax(1)].to(zb.dtype)
            s_a = masks[_pv.score(lp, yy, "morgana", v.reject).argmax(1)].to(zb.dtype) if game else None
            return s_m, s_a
        s_m = self._prover("merlin")(v, zb, yb)
        return s_m, (self._prover("morgana")(v, zb, yb) if game else None)

    # ------------------------------------------------------------------ prediction
    def _certificates(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per class ``c`` the honest certificate ``(n, K, m)`` and log-probs there ``(n, K, K+1)``."""
        v, n_cls = self.verifier_, len(self.classes_)
        if self.prover_method_ == "exact":
            lp, masks = _pv.exact_logprobs(v, z, int(self.k))
            best = lp[..., :n_cls].argmax(1)  # (n, K)
            cert = masks[best].to(z.dtype)
            lpc = lp.gather(1, best.unsqueeze(-1).expand(-1, -1, lp.shape[-1]))
            return cert, lpc
        certs, lps = [], []
        for c in range(n_cls):
            s = self._prover("merlin")(v, z, torch.full((z.shape[0],), c, dtype=torch.long))
            certs.append(s)
            with torch.no_grad():
                lps.append(torch.log_softmax(v._forward(z, s), -1))
        return torch.stack(certs, 1), torch.stack(lps, 1)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities ``(n, K)``: :math:`p_c(V(z, s_c))` normalised over the classes.

        Examples
        --------
        >>> import numpy as np
        >>> Z = np.eye(4)[np.arange(200) % 4]; y = np.arange(200) % 2
        >>> p = NeuralConceptVerifier(k=1, epochs=5, random_state=0).fit(Z, y).predict_proba(Z)
        >>> p.shape, bool(np.allclose(p.sum(1), 1.0))
        ((200, 2), True)
        """
        check_is_fitted(self)
        z = self._z(X)
        n_cls = len(self.classes_)
        _, lpc = self._certificates(z)
        own = lpc[:, torch.arange(n_cls), torch.arange(n_cls)]  # log p_c at s_c, (n, K)
        return torch.softmax(own, dim=1).double().numpy()

    def predict(self, X) -> np.ndarray:
        """The class with the most convincing certificate, ``(n,)`` (labels of ``classes_``).

        Examples
        --------
        >>> import numpy as np
        >>> Z = np.eye(4)[np.arange(200) % 4]; y = np.arange(200) % 2
        >>> ncv = NeuralConceptVerifier(k=1, epochs=30, lr=3e-3, random_state=0).fit(Z, y)
        >>> ncv.predict(Z[:4]).tolist()
        [0, 1, 0, 1]
        """
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(1)]

    def predict_or_reject(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Predictions ``(n,)`` and whether the verifier accepts them ``(n,)`` bool.

        Accepted means the verifier's arg max at the predicted class's certificate is that class,
        not "I don't know" (nor another class).

        Examples
        --------
        >>> import numpy as np
        >>> Z = np.eye(4)[np.arange(200) % 4]; y = np.arange(200) % 2
        >>> ncv = NeuralConceptVerifier(k=1, epochs=30, lr=3e-3, random_state=0).fit(Z, y)
        >>> pred, ok = ncv.predict_or_reject(Z); bool(ok.all())
        True
        """
        check_is_fitted(self)
        z = self._z(X)
        n_cls = len(self.classes_)
        _, lpc = self._certificates(z)
        own = lpc[:, torch.arange(n_cls), torch.arange(n_cls)]
        c = own.argmax(1)
        accepted = lpc[torch.arange(len(c)), c].argmax(-1) == c
        return self.classes_[c.numpy()], accepted.numpy()

    def explain(self, X, y=None) -> np.ndarray:
        """The honest prover's selected concepts, bool ``(n, m)`` with ``k`` ones per row.

        Parameters
        ----------
        X : array-like of shape (n, m)
        y : array-like of shape (n,), optional
            Certify these labels (Merlin knows the label); default: the predicted classes.

        Examples
        --------
        >>> import numpy as np
        >>> Z = np.eye(4)[np.arange(200) % 4]; y = np.arange(200) % 2
        >>> ncv = NeuralConceptVerifier(k=1, epochs=30, lr=3e-3, random_state=0).fit(Z, y)
        >>> ncv.explain(Z[:2]).astype(int).tolist()                # the one active concept
        [[1, 0, 0, 0], [0, 1, 0, 0]]
        """
        check_is_fitted(self)
        z = self._z(X)
        if y is None:
            cert, lpc = self._certificates(z)
            n_cls = len(self.classes_)
            c = lpc[:, torch.arange(n_cls), torch.arange(n_cls)].argmax(1)
            return cert[torch.arange(len(c)), c].bool().numpy()
        return self._prover("merlin")(self.verifier_, z, self._y(y, z.shape[0])).bool().numpy()

    def verifier_logits(self, X, masks) -> np.ndarray:
        """The verifier's logits ``(n, K+1)`` for concepts ``X`` ``(n, m)`` revealed by ``masks`` ``(n, m)``.

        Examples
        --------
        >>> import numpy as np
        >>> Z = np.eye(4)[np.arange(200) % 4]; y = np.arange(200) % 2
        >>> ncv = NeuralConceptVerifier(k=1, epochs=3, random_state=0).fit(Z, y)
        >>> ncv.verifier_logits(Z[:2], np.eye(4)[:2]).shape
        (2, 3)
        """
        check_is_fitted(self)
        z = self._z(X)
        s = np.asarray(masks)
        if s.shape != tuple(z.shape):
            raise ValueError(f"masks must have shape {tuple(z.shape)}, got {s.shape}")
        if not np.isin(s, (0, 1)).all():
            raise ValueError("masks must hold only 0/1 (or bool) values")
        with torch.no_grad():
            out = self.verifier_(z, torch.as_tensor(s.astype(np.float64), dtype=self._dtype))
        return out.double().numpy()

    # ------------------------------------------------------------------ the game's metrics
    def completeness_score(self, X, y) -> float:
        r"""Completeness :math:`P(\arg\max V(z, s_M) = y)` with Merlin certifying the true label.

        Examples
        --------
        >>> import numpy as np
        >>> Z = np.eye(4)[np.arange(200) % 4]; y = np.arange(200) % 2
        >>> NeuralConceptVerifier(k=1, epochs=30, lr=3e-3, random_state=0).fit(Z, y).completeness_score(Z, y)
        1.0
        """
        check_is_fitted(self)
        z = self._z(X)
        yt = self._y(y, z.shape[0])
        s = self._prover("merlin")(self.verifier_, z, yt)
        with torch.no_grad():
            pred = self.verifier_(z, s).argmax(-1)
        return float((pred == yt).double().mean())

    def adversarial_masks(self, X, y, adversary: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        r"""The adversary's masks ``(n, m)`` bool and whether they fool the verifier ``(n,)`` bool.

        The adversary maximises the ``"fool"`` objective of :class:`KSparseProver`; ``"exact"`` (all
        k-subsets) finds a fooling mask whenever one exists. ``"auto"``: exact when
        :math:`\binom{m}{k} \le` ``max_exact_subsets``, else greedy and Frank-Wolfe, keeping the
        stronger per example.

        Examples
        --------
        >>> import numpy as np
        >>> Z = np.eye(4)[np.arange(200) % 4]; y = np.arange(200) % 2
        >>> ncv = NeuralConceptVerifier(k=1, epochs=30, lr=3e-3, random_state=0).fit(Z, y)
        >>> masks, fooled = ncv.adversarial_masks(Z, y); int(masks.sum(1).max()), float(fooled.mean())
        (1, 0.0)
        """
        check_is_fitted(self)
        z = self._z(X)
        yt = self._y(y, z.shape[0])
        method = self._method(z.shape[1], adversary)
        v = self.verifier_
        if method == "fw" and adversary == "auto":
            s1, sc1 = self._prover("fool", "greedy").select(v, z, yt)
            s2, sc2 = self._prover("fool", "fw").select(v, z, yt)
            s = torch.where((sc2 > sc1).unsqueeze(1), s2, s1)
        else:
            s = self._prover("fool", method)(v, z, yt)
        with torch.no_grad():
            pred = v(z, s).argmax(-1)
        n_cls = len(self.classes_)
        fooled = (pred != yt) & (pred < n_cls)
        return s.bool().numpy(), fooled.numpy()

    def soundness_score(self, X, y, adversary: str = "auto") -> float:
        r"""Soundness :math:`P(\arg\max V(z, s_A) \in \{y, idk\})` against the adversary.

        Examples
        --------
        >>> import numpy as np
        >>> Z = np.eye(4)[np.arange(200) % 4]; y = np.arange(200) % 2
        >>> NeuralConceptVerifier(k=1, epochs=30, lr=3e-3, random_state=0).fit(Z, y).soundness_score(Z, y)
        1.0
        """
        return float(1.0 - self.adversarial_masks(X, y, adversary)[1].mean())
