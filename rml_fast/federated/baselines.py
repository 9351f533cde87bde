"""Baselines for SoHip on the same protocol: local-only training and FedProto-style prototypes.

* **Local-only**: every agent trains its own model (the same heterogeneous extractors, projector
  and head as :class:`~rml_fast.federated.sohip.SoHipAgent` with ``fusion=False``) on its own data;
  nothing but the 0-d test counts leaves it.
* **FedProto** (Tan et al., AAAI 2022), prototype sharing: agent ``k`` uploads its class
  prototypes ``p_{k,c} = mean_{i: y_i = c} q_i`` of the projected representation (``(C, m)``) and
  the class counts; the server's global prototypes are the count-weighted means
  ``pbar_c = sum_k n_{k,c} p_{k,c} / sum_k n_{k,c}``; the local loss is
  ``CE(W_k [h; q], y) + mu ||q - pbar_y||^2``. Prediction uses the local head (as in the
  heterogeneous-FL benchmarks of the SoHip authors).

FedAvg where the models match is :mod:`rml_fast.federated.fedavg`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from rml_fast._validation import Interval, check_scalar
from rml_fast.federated.protocol import FederatedServer, Message, check_message
from rml_fast.federated.sohip import SoHipServer, _AgentClient

__all__ = ["FedProtoClient", "FedProtoServer", "LocalClient", "LocalServer"]


class LocalClient(_AgentClient):
    """Local-only training of a heterogeneous agent (no memory, no sharing).

    Parameters
    ----------
    client_id : int
    X_train, y_train, X_test, y_test : array-like
        Local data ``(n, p)`` and labels ``(n,)``.
    num_classes : int
    arch : int, default=0
        Extractor architecture (:data:`rml_fast.federated.sohip.ARCHITECTURES`).
    image_shape : tuple of int, optional
    memory_dim : int, default=32
        Width of the projector (kept so that the model equals SoHip's without memory).
    lr : float, default=0.01
    batch_size : int, default=32
    local_epochs : int, default=1
    seed : int, default=0
    threads : int, default=1

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.baselines import LocalClient
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(40, 6)).astype(np.float32), np.repeat([2, 5], 20)
    >>> sorted(LocalClient(0, X, y, X, y, num_classes=10, memory_dim=4).handle("fit", 0, {}))
    ['test_correct', 'test_total']
    """

    def handle(self, phase: str, server_round: int, message: Message) -> Message:
        """Local epochs of cross-entropy; reply with the 0-d test counts only.

        Parameters
        ----------
        phase : str
            ``"fit"``.
        server_round : int
        message : dict[str, numpy.ndarray]
            Ignored (the local-only server sends nothing).

        Returns
        -------
        dict[str, numpy.ndarray]
        """
        return super().handle(phase, server_round, message)


class LocalServer(FederatedServer):
    """The server of local-only training: broadcasts nothing, reports the mean test accuracy.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.baselines import LocalServer
    >>> s = LocalServer()
    >>> s.aggregate("fit", 0, {0: {"test_correct": np.array(1), "test_total": np.array(2)}})
    >>> s.metrics(0)
    {'accuracy': 0.5}
    """

    def __init__(self) -> None:
        self._accuracy = float("nan")

    def configure(self, phase: str, server_round: int) -> Message:
        """An empty broadcast.

        Parameters
        ----------
        phase : str
        server_round : int

        Returns
        -------
        dict[str, numpy.ndarray]
        """
        return {}

    def aggregate(self, phase: str, server_round: int, replies: Mapping[int, Message]) -> None:
        """Mean of the clients' local test accuracies.

        Parameters
        ----------
        phase : str
        server_round : int
        replies : Mapping[int, dict[str, numpy.ndarray]]
        """
        accs = []
        for cid in sorted(replies):
            reply = check_message(replies[cid], f"reply of client {cid}")
            if int(reply["test_total"]) > 0:
                accs.append(int(reply["test_correct"]) / int(reply["test_total"]))
        self._accuracy = float(np.mean(accs)) if accs else float("nan")

    def metrics(self, server_round: int) -> dict[str, float]:
        """``accuracy``: the mean local test accuracy.

        Parameters
        ----------
        server_round : int

        Returns
        -------
        dict[str, float]
        """
        return {"accuracy": self._accuracy}

    def get_state(self) -> Message:
        """The last accuracy.

        Returns
        -------
        dict[str, numpy.ndarray]
        """
        return {"accuracy": np.array(self._accuracy)}

    def set_state(self, state: Message) -> None:
        """Restore :meth:`get_state`.

        Parameters
        ----------
        state : dict[str, numpy.ndarray]
        """
        check_message(state, "state")
        if state:
            self._accuracy = float(state["accuracy"])


class FedProtoClient(_AgentClient):
    """FedProto-style agent: uploads class prototypes ``(C, m)`` and counts ``(C,)``.

    Parameters
    ----------
    client_id : int
    X_train, y_train, X_test, y_test : array-like
    num_classes : int
    mu : float, default=1.0
        Weight of the prototype-alignment term ``mu ||q - pbar_y||^2``.
    **kwargs
        ``arch``, ``image_shape``, ``memory_dim``, ``lr``, ``batch_size``, ``local_epochs``,
        ``seed``, ``threads`` as in :class:`LocalClient`.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.baselines import FedProtoClient
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(40, 6)).astype(np.float32), np.repeat([2, 5], 20)
    >>> reply = FedProtoClient(0, X, y, X, y, num_classes=10, memory_dim=4).handle(
    ...     "fit", 0, {"memory": np.zeros((10, 4), np.float32), "counts": np.zeros(10, np.int64)})
    >>> {k: v.shape for k, v in reply.items()}
    {'memory': (10, 4), 'counts': (10,), 'test_correct': (), 'test_total': ()}
    """

    def __init__(
        self,
        client_id: int,
        X_train: Any,
        y_train: Any,
        X_test: Any,
        y_test: Any,
        *,
        num_classes: int,
        mu: float = 1.0,
        **kwargs: Any,
    ) -> None:
        self.mu = float(check_scalar(mu, "mu", Interval("real", 0.0, None)))
        super().__init__(client_id, X_train, y_train, X_test, y_test, num_classes=num_classes, **kwargs)
        self._protos: torch.Tensor | None = None
        self._have: torch.Tensor | None = None

    def _read(self, message: Message) -> None:
        C, m = self.num_classes, self.agent.memory_dim
        if "memory" not in message or "counts" not in message:
            raise ValueError("the FedProto broadcast must hold 'memory' (C, m) and 'counts' (C,)")
        if message["memory"].shape != (C, m) or message["counts"].shape != (C,):
            raise ValueError(
                f"broadcast memory/counts must have shapes {(C, m)} and {(C,)}, "
                f"got {message['memory'].shape} and {message['counts'].shape}"
            )
        self._protos = torch.from_numpy(np.asarray(message["memory"], dtype=np.float32).copy())
        self._have = torch.from_numpy(np.asarray(message["counts"], dtype=np.int64) > 0)

    def _loss(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        h = self.agent.extractor(xb)
        q = self.agent.projector(h)
        loss = F.cross_entropy(self.agent.head(torch.cat([h, q], dim=1)), yb)
        if self.mu > 0 and self._have is not None and self._protos is not None:
            have = self._have[yb]
            if bool(have.any()):
                loss = loss + self.mu * ((q[have] - self._protos[yb[have]]) ** 2).mean()
        return loss

    def _upload(self) -> Message:
        self.agent.eval()
        with torch.no_grad():
            q = self.agent.projector(self.agent.extractor(self.X_train))
            protos, _ = self.agent._short_term_memory(q, self.y_train)
        return {"memory": protos.numpy().astype(np.float32), "counts": self.class_counts.copy()}

    def handle(self, phase: str, server_round: int, message: Message) -> Message:
        """Local epochs with prototype alignment; upload prototypes, counts and test counts.

        Parameters
        ----------
        phase : str
            ``"fit"``.
        server_round : int
        message : dict[str, numpy.ndarray]
            ``memory`` (global prototypes, (C, m)) and ``counts`` (C,).

        Returns
        -------
        dict[str, numpy.ndarray]
        """
        return super().handle(phase, server_round, message)


class FedProtoServer(SoHipServer):
    """FedProto's server: count-weighted mean of the uploaded prototypes (as :class:`SoHipServer`).

    Parameters
    ----------
    num_classes : int
    memory_dim : int
        Prototype width ``m``.
    fraction : float, default=1.0
    seed : int, default=0

    Examples
    --------
    >>> from rml_fast.federated.baselines import FedProtoServer
    >>> FedProtoServer(10, 4).configure("fit", 0)["memory"].shape
    (10, 4)
    """
