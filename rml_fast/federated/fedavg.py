"""Plain FedAvg (McMahan et al., 2017) on the :mod:`rml_fast.federated.protocol`, for torch modules.

A :class:`FedAvgServer` holds the global weights and averages the clients' uploads; a
:class:`FedAvgClient` trains a fresh copy of the model on its own numpy partition (AdamW by
default) from the broadcast weights and uploads the new weights. The pair is the FedAvg baseline of
every federated method in rml_fast and the base the threshold-watermark client builds on.

Wire format: model weights travel as one array per ``state_dict`` key, under the message key
``"param/<state-dict key>"`` (shapes kept; floating tensors as float32 unless the model is
float64); the client's example count travels as ``"num_examples"``.

One round of FedAvg (equation (1) of McMahan et al.)::

    theta <- sum_k (n_k / n) theta_k            (weighting="examples")
    theta <- (1 / K) sum_k theta_k              (weighting="uniform")

with BatchNorm's ``num_batches_tracked`` (integer buffers) aggregated by ``max``.

Determinism: a client's local training draws its batch order from
``numpy.random.SeedSequence([seed, client_id, round])`` and runs torch with ``num_threads``
threads inside :meth:`FedAvgClient.handle`, so the same seed gives the same model whether the
clients run in process (:func:`rml_fast.federated.run_federated`) or on Flower.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_array, check_rng, check_scalar
from rml_fast.federated.protocol import (
    FederatedClient,
    FederatedServer,
    Message,
    _check_round,
    check_message,
)

__all__ = [
    "PARAM_PREFIX",
    "FedAvgClient",
    "FedAvgServer",
    "arrays_to_model",
    "evaluate_accuracy",
    "fedavg_aggregate",
    "iid_partition",
    "make_mlp",
    "model_to_arrays",
    "pack_weights",
    "unpack_weights",
]

#: Message key prefix of model weights (``"param/<state-dict key>"``).
PARAM_PREFIX = "param/"

_OPTIMIZERS = ("adamw", "adam", "sgd")


def _torch() -> Any:
    import torch

    return torch


@contextlib.contextmanager
def _torch_threads(num_threads: int) -> Iterator[None]:
    """Run torch with ``num_threads`` intra-op threads, restoring the previous count afterwards."""
    torch = _torch()
    old = torch.get_num_threads()
    torch.set_num_threads(int(num_threads))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _check_module(model: Any, name: str = "model") -> Any:
    torch = _torch()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(model).__name__}")
    return model


def model_to_arrays(model: Any) -> dict[str, np.ndarray]:
    """A module's ``state_dict`` as numpy arrays (copies), one per key.

    Parameters
    ----------
    model : torch.nn.Module
        The module.

    Returns
    -------
    dict[str, numpy.ndarray]
        State-dict key -> array of the tensor's shape and dtype.

    Examples
    --------
    >>> from rml_fast.federated.fedavg import make_mlp, model_to_arrays
    >>> {k: v.shape for k, v in model_to_arrays(make_mlp(4, [3], 2, seed=0)).items()}
    {'0.weight': (3, 4), '0.bias': (3,), '2.weight': (2, 3), '2.bias': (2,)}
    """
    _check_module(model)
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def arrays_to_model(model: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """Load numpy arrays into a module's ``state_dict`` (in place), checking keys and shapes.

    Parameters
    ----------
    model : torch.nn.Module
        The module to overwrite.
    arrays : Mapping[str, numpy.ndarray]
        State-dict key -> array; must have exactly the module's keys and shapes.

    Returns
    -------
    torch.nn.Module
        ``model``.

    Raises
    ------
    ValueError
        If a key is missing or extra, or a shape differs (named), before anything is loaded.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.fedavg import arrays_to_model, make_mlp, model_to_arrays
    >>> a, b = make_mlp(4, [3], 2, seed=0), make_mlp(4, [3], 2, seed=1)
    >>> _ = arrays_to_model(b, model_to_arrays(a))
    >>> bool(np.array_equal(model_to_arrays(b)["0.weight"], model_to_arrays(a)["0.weight"]))
    True
    """
    torch = _torch()
    _check_module(model)
    state = model.state_dict()
    missing = sorted(set(state) - set(arrays))
    extra = sorted(set(arrays) - set(state))
    if missing or extra:
        raise ValueError(f"model weights do not match the model: missing {missing}, unexpected {extra}")
    for key, tensor in state.items():
        arr = np.asarray(arrays[key])
        if tuple(arr.shape) != tuple(tensor.shape):
            raise ValueError(
                f"model weight {key!r} has shape {tuple(arr.shape)}, the model expects {tuple(tensor.shape)}"
            )
    new = {key: torch.as_tensor(np.array(arrays[key], copy=True), dtype=t.dtype) for key, t in state.items()}
    model.load_state_dict(new)
    return model


def pack_weights(arrays: Mapping[str, np.ndarray]) -> Message:
    """Prefix state-dict keys with :data:`PARAM_PREFIX` for the wire.

    Parameters
    ----------
    arrays : Mapping[str, numpy.ndarray]
        State-dict key -> array.

    Returns
    -------
    dict[str, numpy.ndarray]
        ``"param/<key>"`` -> array (not copied).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.fedavg import pack_weights
    >>> list(pack_weights({"w": np.zeros(2)}))
    ['param/w']
    """
    return {PARAM_PREFIX + k: np.asarray(v) for k, v in arrays.items()}


def unpack_weights(message: Message) -> dict[str, np.ndarray]:
    """The model weights of a message (keys with :data:`PARAM_PREFIX`, prefix removed).

    Parameters
    ----------
    message : dict[str, numpy.ndarray]
        A message.

    Returns
    -------
    dict[str, numpy.ndarray]
        State-dict key -> array, in the message's order.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.fedavg import unpack_weights
    >>> list(unpack_weights({"param/w": np.zeros(2), "num_examples": np.array(3)}))
    ['w']
    """
    check_message(message)
    n = len(PARAM_PREFIX)
    return {k[n:]: v for k, v in message.items() if k.startswith(PARAM_PREFIX)}


def fedavg_aggregate(
    states: Mapping[int, Mapping[str, np.ndarray]],
    weights: Mapping[int, float] | None = None,
) -> dict[str, np.ndarray]:
    """Weighted FedAvg of client weight dicts (McMahan et al. 2017, eq. (1)).

    ``theta = sum_k w_k theta_k / sum_k w_k`` per key, summed over ``sorted(states)`` in float64
    and cast back to the input dtype; integer arrays (BatchNorm's ``num_batches_tracked``) take
    the ``max`` over clients.

    Parameters
    ----------
    states : Mapping[int, Mapping[str, numpy.ndarray]]
        Client id -> weights (same keys and shapes for every client).
    weights : Mapping[int, float], optional
        Client id -> non-negative weight (e.g. its number of examples); uniform if None.

    Returns
    -------
    dict[str, numpy.ndarray]
        The averaged weights.

    Raises
    ------
    ValueError
        If ``states`` is empty, the clients' keys or shapes differ, or the weights are negative,
        missing or all zero.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.fedavg import fedavg_aggregate
    >>> out = fedavg_aggregate({0: {"w": np.array([1.0, 2.0])}, 1: {"w": np.array([3.0, 6.0])}},
    ...                        weights={0: 1.0, 1: 3.0})
    >>> out["w"]
    array([2.5, 5. ])
    """
    if not isinstance(states, Mapping) or not states:
        raise ValueError("states must be a non-empty mapping client id -> weights")
    ids = sorted(states)
    ref = states[ids[0]]
    for cid in ids[1:]:
        s = states[cid]
        if set(s) != set(ref):
            raise ValueError(
                f"client {cid}'s weights have keys {sorted(s)}, client {ids[0]}'s have {sorted(ref)}"
            )
        for key in ref:
            if np.shape(s[key]) != np.shape(ref[key]):
                raise ValueError(
                    f"client {cid}'s weight {key!r} has shape {np.shape(s[key])}, "
                    f"client {ids[0]}'s has {np.shape(ref[key])}"
                )
    if weights is None:
        w = np.ones(len(ids))
    else:
        missing = [cid for cid in ids if cid not in weights]
        if missing:
            raise ValueError(f"weights has no entry for clients {missing}")
        w = np.array([float(weights[cid]) for cid in ids], dtype=np.float64)
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"weights must be finite, non-negative and not all zero, got {w.tolist()}")
    w = w / w.sum()
    out: dict[str, np.ndarray] = {}
    for key in ref:
        arr0 = np.asarray(ref[key])
        if arr0.dtype.kind in "biu":
            out[key] = np.max(np.stack([np.asarray(states[c][key]) for c in ids]), axis=0).astype(arr0.dtype)
            continue
        acc = np.zeros(arr0.shape, dtype=np.float64)
        for wk, cid in zip(w, ids, strict=True):
            acc += wk * np.asarray(states[cid][key], dtype=np.float64)
        out[key] = acc.astype(arr0.dtype)
    return out


def make_mlp(
    in_features: int, hidden: Sequence[int], out_features: int, *, seed: int = 0
) -> Any:
    """A ReLU multilayer perceptron ``Linear -> ReLU -> ... -> Linear`` with a seeded init.

    Parameters
    ----------
    in_features : int
        Input dimension.
    hidden : sequence of int
        Hidden widths (may be empty: a linear model).
    out_features : int
        Number of outputs (classes).
    seed : int, default=0
        Seed of the initialisation (``torch.Generator``; the global torch RNG is not touched).

    Returns
    -------
    torch.nn.Sequential
        The network (float32).

    Examples
    --------
    >>> from rml_fast.federated.fedavg import make_mlp
    >>> make_mlp(64, [32], 10, seed=0)
    Sequential(
      (0): Linear(in_features=64, out_features=32, bias=True)
      (1): ReLU()
      (2): Linear(in_features=32, out_features=10, bias=True)
    )
    """
    torch = _torch()
    in_features = int(check_scalar(in_features, "in_features", Interval("int", 1, None)))
    out_features = int(check_scalar(out_features, "out_features", Interval("int", 1, None)))
    widths = [int(check_scalar(h, "hidden width", Interval("int", 1, None))) for h in hidden]
    seed = int(check_scalar(seed, "seed", Interval("int", 0, None)))
    dims = [in_features, *widths, out_features]
    layers: list[Any] = []
    gen = torch.Generator().manual_seed(seed)
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        lin = torch.nn.Linear(a, b)
        bound = 1.0 / np.sqrt(a)  # PyTorch's default Linear init range, from our generator
        with torch.no_grad():
            lin.weight.uniform_(-bound, bound, generator=gen)
            lin.bias.uniform_(-bound, bound, generator=gen)
        layers.append(lin)
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def evaluate_accuracy(model: Any, X: Any, y: Any, *, batch_size: int = 4096) -> float:
    """Classification accuracy of ``model`` (argmax of its outputs) on numpy data.

    Parameters
    ----------
    model : torch.nn.Module
        A classifier returning logits of shape (n, classes).
    X : array-like of shape (n, ...)
        Inputs (cast to the model's float dtype).
    y : array-like of shape (n,)
        Integer labels.
    batch_size : int, default=4096
        Evaluation batch size.

    Returns
    -------
    float
        Fraction correct in [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.fedavg import evaluate_accuracy, make_mlp
    >>> acc = evaluate_accuracy(make_mlp(2, [], 2, seed=0), np.zeros((4, 2)), np.zeros(4, int))
    >>> acc in (0.0, 1.0)
    True
    """
    torch = _torch()
    _check_module(model)
    X = check_array(X, "X", dtypes=(np.float32, np.float64))
    y = check_array(y, "y", dtypes=(np.int64,), ndim=1)
    if len(X) != len(y):
        raise ValueError(f"X and y must have the same length, got {len(X)} and {len(y)}")
    dtype = next((p.dtype for p in model.parameters()), torch.float32)
    correct = 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, len(X), batch_size):
            logits = model(torch.as_tensor(X[i:i + batch_size], dtype=dtype))
            correct += int((logits.argmax(dim=1).numpy() == y[i:i + batch_size]).sum())
    model.train(was_training)
    return correct / max(len(y), 1)


def iid_partition(n: int, num_clients: int, rng: Any = None) -> list[np.ndarray]:
    """Split ``range(n)`` into ``num_clients`` IID parts of (almost) equal size.

    Parameters
    ----------
    n : int
        Number of examples.
    num_clients : int
        Number of parts K, 1 <= K <= n.
    rng : numpy.random.Generator, int or None
        Randomness of the permutation.

    Returns
    -------
    list of numpy.ndarray
        K sorted index arrays whose sizes differ by at most one; together a partition of ``range(n)``.

    Examples
    --------
    >>> from rml_fast.federated.fedavg import iid_partition
    >>> [len(p) for p in iid_partition(10, 3, rng=0)]
    [4, 3, 3]
    """
    n = int(check_scalar(n, "n", Interval("int", 1, None)))
    num_clients = int(check_scalar(num_clients, "num_clients", Interval("int", 1, n)))
    perm = check_rng(rng).permutation(n)
    return [np.sort(part) for part in np.array_split(perm, num_clients)]


def _initial_arrays(initial: Any) -> dict[str, np.ndarray]:
    torch = _torch()
    if isinstance(initial, torch.nn.Module):
        return model_to_arrays(initial)
    if isinstance(initial, Mapping):
        out = {}
        for k, v in initial.items():
            if not isinstance(k, str):
                raise TypeError(f"initial weights keys must be str, got {type(k).__name__}")
            out[k] = np.array(v, copy=True)
        return out
    raise TypeError(f"initial must be a torch.nn.Module or a dict of arrays, got {type(initial).__name__}")


class FedAvgServer(FederatedServer):
    """The FedAvg server: broadcasts the global weights, averages the uploads.

    Parameters
    ----------
    initial : torch.nn.Module or dict[str, numpy.ndarray]
        The initial global model (its ``state_dict`` is copied) or its weights.
    weighting : {"examples", "uniform"}, default="examples"
        Weight client k by its ``num_examples`` (McMahan et al.) or uniformly.
    model_fn : callable, optional
        ``model_fn() -> torch.nn.Module`` of the same architecture, needed for :meth:`model` and
        for the accuracy metric.
    test_data : tuple (X, y), optional
        Held-out data; with ``model_fn`` the server reports ``"accuracy"`` after each round.

    Attributes
    ----------
    weights : dict[str, numpy.ndarray]
        The current global weights (state-dict key -> array).
    phases : tuple of str
        ``("fit",)``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_digits
    >>> from rml_fast.federated import run_federated
    >>> from rml_fast.federated.fedavg import FedAvgClient, FedAvgServer, iid_partition, make_mlp
    >>> X, y = load_digits(return_X_y=True)
    >>> X = (X / 16.0).astype(np.float32)
    >>> parts = iid_partition(1500, 4, rng=0)
    >>> model_fn = lambda: make_mlp(64, [32], 10, seed=0)
    >>> server = FedAvgServer(model_fn(), model_fn=model_fn, test_data=(X[1500:], y[1500:]))
    >>> client_fn = lambda cid: FedAvgClient(model_fn, X[parts[cid]], y[parts[cid]],
    ...                                      client_id=cid, seed=0, lr=3e-3)
    >>> history = run_federated(server, client_fn, num_clients=4, rounds=5, progress=False)
    >>> history.metrics[-1]["accuracy"] > 0.8
    True
    """

    phases: tuple[str, ...] = ("fit",)

    def __init__(
        self,
        initial: Any,
        *,
        weighting: str = "examples",
        model_fn: Callable[[], Any] | None = None,
        test_data: tuple[Any, Any] | None = None,
    ) -> None:
        if weighting not in ("examples", "uniform"):
            raise ValueError(f"weighting must be 'examples' or 'uniform', got {weighting!r}")
        if model_fn is not None and not callable(model_fn):
            raise TypeError(f"model_fn must be callable, got {type(model_fn).__name__}")
        self.weights = _initial_arrays(initial)
        self.weighting = weighting
        self.model_fn = model_fn
        if test_data is not None:
            if model_fn is None:
                raise ValueError("test_data needs model_fn to build the model to evaluate")
            X, y = test_data
            X = check_array(X, "test_data X", dtypes=(np.float32, np.float64))
            y = check_array(y, "test_data y", dtypes=(np.int64,), ndim=1)
            if len(X) != len(y):
                raise ValueError(f"test_data X and y must have the same length, got {len(X)} and {len(y)}")
            test_data = (X, y)
        self.test_data = test_data
        if model_fn is not None:
            arrays_to_model(_check_module(model_fn(), "model_fn()"), self.weights)  # shape check

    def model(self) -> Any:
        """A fresh ``model_fn()`` loaded with the current global weights.

        Returns
        -------
        torch.nn.Module
            The global model.

        Examples
        --------
        >>> from rml_fast.federated.fedavg import FedAvgServer, make_mlp
        >>> fn = lambda: make_mlp(3, [], 2, seed=0)
        >>> FedAvgServer(fn(), model_fn=fn).model()[0].weight.shape
        torch.Size([2, 3])
        """
        if self.model_fn is None:
            raise ValueError("this server was built without model_fn")
        return arrays_to_model(self.model_fn(), self.weights)

    def configure(self, phase: str, server_round: int) -> Message:
        """Broadcast the global weights (``"param/<key>"``).

        Parameters
        ----------
        phase : str
            ``"fit"``.
        server_round : int
            The 0-based round.

        Returns
        -------
        dict[str, numpy.ndarray]
            The packed global weights.
        """
        return pack_weights(self.weights)

    def _check_replies(self, replies: Mapping[int, Message]) -> dict[int, dict[str, np.ndarray]]:
        states: dict[int, dict[str, np.ndarray]] = {}
        for cid in sorted(replies):
            w = unpack_weights(replies[cid])
            if set(w) != set(self.weights):
                raise ValueError(
                    f"client {cid} uploaded weights with keys {sorted(w)}, the model has {sorted(self.weights)}"
                )
            for key, arr in w.items():
                if arr.shape != self.weights[key].shape:
                    raise ValueError(
                        f"client {cid} uploaded weight {key!r} of shape {arr.shape}, "
                        f"the model has {self.weights[key].shape}"
                    )
            states[cid] = w
        return states

    def _client_weights(self, replies: Mapping[int, Message]) -> dict[int, float] | None:
        if self.weighting == "uniform":
            return None
        return {cid: float(replies[cid].get("num_examples", np.array(1.0))) for cid in replies}

    def aggregate(self, phase: str, server_round: int, replies: Mapping[int, Message]) -> None:
        """Average the uploaded weights (:func:`fedavg_aggregate`).

        Parameters
        ----------
        phase : str
            ``"fit"``.
        server_round : int
            The 0-based round.
        replies : Mapping[int, dict[str, numpy.ndarray]]
            Client id -> upload (``"param/<key>"`` and ``"num_examples"``).
        """
        if not replies:
            return
        states = self._check_replies(replies)
        self.weights = fedavg_aggregate(states, self._client_weights(replies))

    def metrics(self, server_round: int) -> dict[str, float]:
        """``{"accuracy": ...}`` on ``test_data`` when given, else nothing.

        Parameters
        ----------
        server_round : int
            The round just finished.

        Returns
        -------
        dict[str, float]
            Metric name -> value.
        """
        if self.test_data is None:
            return {}
        return {"accuracy": evaluate_accuracy(self.model(), *self.test_data)}

    def get_state(self) -> Message:
        """The global weights (``"param/<key>"``).

        Returns
        -------
        dict[str, numpy.ndarray]
            The state.
        """
        return {k: v.copy() for k, v in pack_weights(self.weights).items()}

    def set_state(self, state: Message) -> None:
        """Restore the global weights from :meth:`get_state`.

        Parameters
        ----------
        state : dict[str, numpy.ndarray]
            A state from :meth:`get_state`.
        """
        check_message(state, "state")
        w = unpack_weights(state)
        if w:
            if set(w) != set(self.weights):
                raise ValueError(f"state has weights {sorted(w)}, the model has {sorted(self.weights)}")
            self.weights = {k: np.array(w[k], copy=True) for k in self.weights}


class FedAvgClient(FederatedClient):
    """A FedAvg client: local training of a fresh model from the broadcast weights.

    Parameters
    ----------
    model_fn : callable
        ``model_fn() -> torch.nn.Module``; the same architecture on every client and the server.
    X : array-like of shape (n, ...)
        This client's inputs (float32 or float64). Never sent.
    y : array-like of shape (n,)
        This client's integer labels. Never sent.
    client_id : int
        The client's id (part of its randomness).
    seed : int, default=0
        Run seed; the batch order of round r is drawn from ``SeedSequence([seed, client_id, r])``.
    epochs : int, default=1
        Local epochs per round.
    batch_size : int, default=32
        Local mini-batch size.
    lr : float, default=1e-3
        Learning rate.
    weight_decay : float, default=0.01
        Decoupled weight decay (AdamW) or L2 (SGD, Adam).
    optimizer : {"adamw", "adam", "sgd"}, default="adamw"
        Local optimiser, created fresh every round (its state does not persist).
    num_threads : int, default=1
        torch threads used inside :meth:`handle` (restored afterwards).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.fedavg import FedAvgClient, make_mlp, model_to_arrays, pack_weights
    >>> fn = lambda: make_mlp(2, [], 2, seed=0)
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32); y = np.array([0, 1])
    >>> reply = FedAvgClient(fn, X, y, client_id=0).handle("fit", 0, pack_weights(model_to_arrays(fn())))
    >>> sorted(reply)
    ['num_examples', 'param/0.bias', 'param/0.weight']
    """

    def __init__(
        self,
        model_fn: Callable[[], Any],
        X: Any,
        y: Any,
        *,
        client_id: int,
        seed: int = 0,
        epochs: int = 1,
        batch_size: int = 32,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        optimizer: str = "adamw",
        num_threads: int = 1,
    ) -> None:
        if not callable(model_fn):
            raise TypeError(f"model_fn must be callable, got {type(model_fn).__name__}")
        X = check_array(X, "X", dtypes=(np.float32, np.float64))
        y = check_array(y, "y", dtypes=(np.int64,), ndim=1)
        if len(X) != len(y) or len(y) == 0:
            raise ValueError(f"X and y must have the same non-zero length, got {len(X)} and {len(y)}")
        if optimizer not in _OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {_OPTIMIZERS}, got {optimizer!r}")
        self.model_fn = model_fn
        self.X, self.y = X, y
        self.client_id = int(check_scalar(client_id, "client_id", Interval("int", 0, None)))
        self.seed = int(check_scalar(seed, "seed", Interval("int", 0, None)))
        self.epochs = int(check_scalar(epochs, "epochs", Interval("int", 1, None)))
        self.batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
        self.lr = float(check_scalar(lr, "lr", Interval("real", 0, None, closed="neither")))
        self.weight_decay = float(check_scalar(weight_decay, "weight_decay", Interval("real", 0, None)))
        self.optimizer = optimizer
        self.num_threads = int(check_scalar(num_threads, "num_threads", Interval("int", 1, None)))

    # -- pieces subclasses reuse ------------------------------------------------------------

    def round_rng(self, server_round: int, stream: int = 0) -> np.random.Generator:
        """The client's generator for one round: ``SeedSequence([seed, client_id, round, stream])``.

        Parameters
        ----------
        server_round : int
            The 0-based round.
        stream : int, default=0
            Sub-stream (0: batch order; others free for subclasses).

        Returns
        -------
        numpy.random.Generator
            A fresh generator.
        """
        server_round = _check_round(server_round)
        stream = int(check_scalar(stream, "stream", Interval("int", 0, None)))
        return np.random.default_rng(
            np.random.SeedSequence([self.seed, self.client_id, server_round, stream])
        )

    def _make_optimizer(self, model: Any) -> Any:
        torch = _torch()
        params = model.parameters()
        if self.optimizer == "adamw":
            return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.SGD(params, lr=self.lr, weight_decay=self.weight_decay)

    def train_local(self, weights: Mapping[str, np.ndarray], server_round: int) -> dict[str, np.ndarray]:
        """Local training from ``weights``: ``epochs`` epochs of cross-entropy mini-batch steps.

        Parameters
        ----------
        weights : Mapping[str, numpy.ndarray]
            The broadcast global weights (state-dict key -> array).
        server_round : int
            The 0-based round (seeds the batch order).

        Returns
        -------
        dict[str, numpy.ndarray]
            The client's new weights theta_k.
        """
        server_round = _check_round(server_round)
        torch = _torch()
        model = arrays_to_model(_check_module(self.model_fn(), "model_fn()"), weights)
        model.train()
        opt = self._make_optimizer(model)
        rng = self.round_rng(server_round)
        dtype = next((p.dtype for p in model.parameters()), torch.float32)
        X = torch.as_tensor(self.X, dtype=dtype)
        y = torch.as_tensor(self.y)
        n = len(self.y)
        for _ in range(self.epochs):
            order = torch.as_tensor(rng.permutation(n))
            for i in range(0, n, self.batch_size):
                idx = order[i:i + self.batch_size]
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
                loss.backward()
                opt.step()
        return model_to_arrays(model)

    def handle(self, phase: str, server_round: int, message: Message) -> Message:
        """Train locally from the broadcast weights and upload the result.

        Parameters
        ----------
        phase : str
            ``"fit"``.
        server_round : int
            The 0-based round.
        message : dict[str, numpy.ndarray]
            The broadcast (``"param/<key>"``).

        Returns
        -------
        dict[str, numpy.ndarray]
            ``"param/<key>"`` (new weights) and ``"num_examples"``.
        """
        if phase != "fit":
            raise ValueError(f"FedAvgClient handles phase 'fit', got {phase!r}")
        server_round = _check_round(server_round)
        weights = unpack_weights(check_message(message))
        with _torch_threads(self.num_threads):
            new = self.train_local(weights, server_round)
        reply = pack_weights(new)
        reply["num_examples"] = np.array(len(self.y), dtype=np.int64)
        return reply
