"""The message protocol every federated method of rml_fast implements.

A federated method is a :class:`FederatedServer` plus a factory ``client_fn(client_id) ->
FederatedClient``. Everything that crosses the wire is a :data:`Message`: a flat ``dict[str,
numpy.ndarray]``. That is exactly what a Flower ``ArrayRecord`` carries, so the same pair runs in
process (:func:`rml_fast.federated.simulation.run_federated`) and on Flower
(:mod:`rml_fast.federated.flower`) and gives the same result for the same seed.

One round is a sequence of *phases* (``server.phases``): for each phase the server broadcasts one
message to the selected clients, each client answers, and the server aggregates the answers keyed by
client id. FedAvg has one phase (``"fit"``); the threshold watermark has two (scales, then the
watermarked upload).

Clients keep nothing in Python objects between calls: whatever must survive a round lives in
``get_state()`` / ``set_state()`` (Flower re-creates a client for every message and keeps its state
in the node's context). The server's ``get_state()`` / ``set_state()`` make runs resumable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["FederatedClient", "FederatedServer", "Message", "check_message"]

#: What crosses the wire: flat names -> numpy arrays (scalars as 0-d arrays).
Message = dict[str, np.ndarray]


def check_message(message: object, name: str = "message") -> Message:
    """Validate a :data:`Message`: a dict of ``str`` keys to numpy arrays.

    Parameters
    ----------
    message : object
        The candidate message.
    name : str, default="message"
        The argument name used in error messages.

    Returns
    -------
    dict[str, numpy.ndarray]
        The same dict (not copied).

    Raises
    ------
    TypeError
        If ``message`` is not a dict, a key is not a ``str`` or a value is not a numpy array.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.protocol import check_message
    >>> sorted(check_message({"w": np.zeros(3), "n": np.array(5)}))
    ['n', 'w']
    >>> check_message({"w": [0.0]})
    Traceback (most recent call last):
    ...
    TypeError: message['w'] must be a numpy array, got list
    """
    if not isinstance(message, dict):
        raise TypeError(f"{name} must be a dict[str, numpy.ndarray], got {type(message).__name__}")
    for key, value in message.items():
        if not isinstance(key, str):
            raise TypeError(f"{name} keys must be str, got {type(key).__name__}")
        if not isinstance(value, np.ndarray):
            raise TypeError(f"{name}[{key!r}] must be a numpy array, got {type(value).__name__}")
    return message


def _check_round(server_round: object) -> int:
    """``server_round`` as a non-negative int, or a TypeError/ValueError naming it."""
    from rml_fast._validation import Interval, check_scalar

    return int(check_scalar(server_round, "server_round", Interval("int", 0, None)))


class FederatedClient(ABC):
    """One participant of a federated method.

    Subclasses implement :meth:`handle` and the state pair. A client must be deterministic given
    its construction arguments, its state, the phase, the round and the message: that is what
    makes in-process and Flower runs agree.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.protocol import FederatedClient
    >>> class MeanClient(FederatedClient):
    ...     def __init__(self, data):
    ...         self.data = np.asarray(data, dtype=np.float64)
    ...     def handle(self, phase, server_round, message):
    ...         return {"sum": np.array(self.data.sum()), "n": np.array(self.data.size)}
    >>> MeanClient([1.0, 2.0]).handle("fit", 0, {})["sum"]
    array(3.)
    """

    @abstractmethod
    def handle(self, phase: str, server_round: int, message: Message) -> Message:
        """Answer one broadcast.

        Parameters
        ----------
        phase : str
            One of the server's ``phases``.
        server_round : int
            The 0-based round.
        message : dict[str, numpy.ndarray]
            The server's broadcast for this phase.

        Returns
        -------
        dict[str, numpy.ndarray]
            The reply. It must never contain raw data.
        """

    def get_state(self) -> Message:
        """Everything that must persist between calls (default: nothing).

        Returns
        -------
        dict[str, numpy.ndarray]
            The state; :meth:`set_state` of a freshly built client restores it.
        """
        return {}

    def set_state(self, state: Message) -> None:
        """Restore what :meth:`get_state` returned (default: nothing to restore).

        Parameters
        ----------
        state : dict[str, numpy.ndarray]
            A state from :meth:`get_state` (possibly empty on the first call).
        """
        check_message(state, "state")


class FederatedServer(ABC):
    """The coordinating side of a federated method.

    Attributes
    ----------
    phases : tuple of str
        The phases of one round, in order (default ``("fit",)``).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.protocol import FederatedServer
    >>> class MeanServer(FederatedServer):
    ...     def __init__(self):
    ...         self.mean = 0.0
    ...     def configure(self, phase, server_round):
    ...         return {}
    ...     def aggregate(self, phase, server_round, replies):
    ...         total = sum(float(r["sum"]) for r in replies.values())
    ...         self.mean = total / sum(int(r["n"]) for r in replies.values())
    >>> server = MeanServer()
    >>> server.aggregate("fit", 0, {0: {"sum": np.array(3.0), "n": np.array(2)},
    ...                             1: {"sum": np.array(6.0), "n": np.array(1)}})
    >>> server.mean
    3.0
    """

    phases: tuple[str, ...] = ("fit",)

    @abstractmethod
    def configure(self, phase: str, server_round: int) -> Message:
        """The broadcast of one phase of one round.

        Parameters
        ----------
        phase : str
            One of :attr:`phases`.
        server_round : int
            The 0-based round.

        Returns
        -------
        dict[str, numpy.ndarray]
            The message every selected client receives.
        """

    @abstractmethod
    def aggregate(self, phase: str, server_round: int, replies: Mapping[int, Message]) -> None:
        """Fold the clients' replies of one phase into the server's state.

        Parameters
        ----------
        phase : str
            One of :attr:`phases`.
        server_round : int
            The 0-based round.
        replies : Mapping[int, dict[str, numpy.ndarray]]
            Client id -> reply. Implementations must not depend on the mapping's order (iterate
            ``sorted(replies)``), so that any transport gives the same result.
        """

    def select(self, server_round: int, client_ids: Sequence[int]) -> list[int]:
        """The clients that take part in a round (default: all of them).

        Parameters
        ----------
        server_round : int
            The 0-based round.
        client_ids : Sequence[int]
            Every client id, ascending.

        Returns
        -------
        list of int
            The participating ids, ascending.
        """
        return list(client_ids)

    def metrics(self, server_round: int) -> dict[str, float]:
        """Numbers to report after a round (progress bars, histories); default none.

        Parameters
        ----------
        server_round : int
            The round just finished.

        Returns
        -------
        dict[str, float]
            Metric name -> value.
        """
        return {}

    def get_state(self) -> Message:
        """The server's state for checkpoints (default: nothing).

        Returns
        -------
        dict[str, numpy.ndarray]
            The state; :meth:`set_state` restores it.
        """
        return {}

    def set_state(self, state: Message) -> None:
        """Restore what :meth:`get_state` returned.

        Parameters
        ----------
        state : dict[str, numpy.ndarray]
            A state from :meth:`get_state`.
        """
        check_message(state, "state")
