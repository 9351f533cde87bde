"""In-process federated runs of any :mod:`rml_fast.federated.protocol` method, resumable.

The runner mirrors what Flower does with the same server and clients: for each round, for each of
the server's phases, it broadcasts the server's message, builds every selected client afresh from
``client_fn``, restores its state, lets it answer, stores its new state and hands the replies,
keyed by client id, to the server. Because clients keep state only through ``get_state`` /
``set_state``, the in-process run and a Flower run of the same seed give the same result.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rml_fast._validation import Interval, check_scalar
from rml_fast.federated.protocol import FederatedClient, FederatedServer, Message, check_message

__all__ = ["FederatedHistory", "run_federated"]


@dataclass
class FederatedHistory:
    """What a federated run reports per round.

    Attributes
    ----------
    metrics : list of dict[str, float]
        ``server.metrics(r)`` after each round ``r``.
    bytes_up : list of int
        Bytes of array payload sent by the clients in each round (all phases).
    bytes_down : list of int
        Bytes of array payload broadcast to the clients in each round (counted per receiving client).

    Examples
    --------
    >>> from rml_fast.federated.simulation import FederatedHistory
    >>> FederatedHistory().rounds
    0
    """

    metrics: list[dict[str, float]] = field(default_factory=list)
    bytes_up: list[int] = field(default_factory=list)
    bytes_down: list[int] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        """Number of rounds recorded."""
        return len(self.metrics)


def _payload_bytes(message: Message) -> int:
    return int(sum(value.nbytes for value in message.values()))


def _copy(message: Message) -> Message:
    return {key: np.array(value, copy=True) for key, value in message.items()}


def _save_checkpoint(path: Path, next_round: int, server: FederatedServer,
                     client_states: dict[int, Message], history: FederatedHistory) -> None:
    arrays: dict[str, np.ndarray] = {"__next_round__": np.array(next_round)}
    arrays.update({f"server/{k}": v for k, v in server.get_state().items()})
    for cid, state in client_states.items():
        arrays.update({f"client/{cid}/{k}": v for k, v in state.items()})
    names = sorted({name for row in history.metrics for name in row})
    arrays["history/names"] = np.array(names, dtype=np.str_)
    arrays["history/metrics"] = np.array(
        [[row.get(n, np.nan) for n in names] for row in history.metrics], dtype=np.float64
    ).reshape(len(history.metrics), len(names))
    arrays["history/bytes_up"] = np.array(history.bytes_up, dtype=np.int64)
    arrays["history/bytes_down"] = np.array(history.bytes_down, dtype=np.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
    os.close(fd)
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)  # type: ignore[arg-type]  # numpy's stub: a key could be allow_pickle
    os.replace(tmp, path)


def _load_checkpoint(path: Path, server: FederatedServer,
                     client_states: dict[int, Message]) -> tuple[int, FederatedHistory]:
    with np.load(path, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    server.set_state({k[len("server/"):]: v for k, v in arrays.items() if k.startswith("server/")})
    for key, value in arrays.items():
        if key.startswith("client/"):
            _, cid, name = key.split("/", 2)
            client_states.setdefault(int(cid), {})[name] = value
    names = [str(n) for n in arrays["history/names"]]
    history = FederatedHistory(
        metrics=[dict(zip(names, map(float, row), strict=True)) for row in arrays["history/metrics"]],
        bytes_up=[int(b) for b in arrays["history/bytes_up"]],
        bytes_down=[int(b) for b in arrays["history/bytes_down"]],
    )
    return int(arrays["__next_round__"]), history


def run_federated(
    server: FederatedServer,
    client_fn: Callable[[int], FederatedClient],
    num_clients: int,
    rounds: int,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    progress: bool = True,
    stop_after: int | None = None,
) -> FederatedHistory:
    """Run ``rounds`` federated rounds of ``server`` with ``num_clients`` clients in this process.

    Parameters
    ----------
    server : FederatedServer
        The method's server; it is updated in place.
    client_fn : callable
        ``client_fn(client_id) -> FederatedClient`` for ``client_id`` in ``range(num_clients)``;
        called afresh for every message, as Flower does.
    num_clients : int
        Number of clients K >= 1.
    rounds : int
        Total number of rounds >= 1 (counted from the start of the run, also after a resume).
    checkpoint : path-like, optional
        An ``.npz`` file written atomically after every round (server state, client states,
        history). If it exists when the run starts, the run resumes from it; the result is the
        same as an uninterrupted run.
    progress : bool, default=True
        Show a tqdm bar with the server's metrics.
    stop_after : int, optional
        Stop after this many rounds of *this call* (for tests of interruption and resume).

    Returns
    -------
    FederatedHistory
        Per-round metrics and communication bytes (all rounds, including resumed ones).

    Raises
    ------
    TypeError
        If ``server`` is not a :class:`FederatedServer` or ``client_fn`` is not callable, or a
        client returns something that is not a message.
    ValueError
        If ``num_clients`` or ``rounds`` is not a positive int.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.protocol import FederatedClient, FederatedServer
    >>> from rml_fast.federated.simulation import run_federated
    >>> class Client(FederatedClient):
    ...     def __init__(self, cid):
    ...         self.x = float(cid)
    ...     def handle(self, phase, server_round, message):
    ...         return {"x": np.array((self.x + float(message["mean"])) / 2)}
    >>> class Server(FederatedServer):
    ...     def __init__(self):
    ...         self.mean = 0.0
    ...     def configure(self, phase, server_round):
    ...         return {"mean": np.array(self.mean)}
    ...     def aggregate(self, phase, server_round, replies):
    ...         self.mean = float(np.mean([replies[c]["x"] for c in sorted(replies)]))
    ...     def metrics(self, server_round):
    ...         return {"mean": self.mean}
    >>> history = run_federated(Server(), Client, num_clients=3, rounds=4, progress=False)
    >>> round(history.metrics[-1]["mean"], 4)
    0.9375
    """
    if not isinstance(server, FederatedServer):
        raise TypeError(f"server must be a FederatedServer, got {type(server).__name__}")
    if not callable(client_fn):
        raise TypeError(f"client_fn must be callable, got {type(client_fn).__name__}")
    num_clients = int(check_scalar(num_clients, "num_clients", Interval("int", 1, None)))
    rounds = int(check_scalar(rounds, "rounds", Interval("int", 1, None)))
    if stop_after is not None:
        stop_after = int(check_scalar(stop_after, "stop_after", Interval("int", 1, None)))
    path = Path(checkpoint) if checkpoint is not None else None

    client_ids = list(range(num_clients))
    client_states: dict[int, Message] = {cid: {} for cid in client_ids}
    start, history = 0, FederatedHistory()
    if path is not None and path.exists():
        start, history = _load_checkpoint(path, server, client_states)

    end = rounds if stop_after is None else min(rounds, start + stop_after)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=rounds, initial=start, desc="federated rounds", unit="round")
    try:
        for server_round in range(start, end):
            up = down = 0
            selected = server.select(server_round, client_ids)
            for phase in server.phases:
                broadcast = check_message(server.configure(phase, server_round), "broadcast")
                replies: dict[int, Message] = {}
                for cid in selected:
                    client = client_fn(cid)
                    client.set_state(client_states[cid])
                    reply = client.handle(phase, server_round, _copy(broadcast))
                    replies[cid] = check_message(reply, f"reply of client {cid}")
                    client_states[cid] = client.get_state()
                    down += _payload_bytes(broadcast)
                    up += _payload_bytes(reply)
                server.aggregate(phase, server_round, replies)
            history.metrics.append(dict(server.metrics(server_round)))
            history.bytes_up.append(up)
            history.bytes_down.append(down)
            if path is not None:
                _save_checkpoint(path, server_round + 1, server, client_states, history)
            if bar is not None:
                bar.set_postfix({k: f"{v:.4g}" for k, v in history.metrics[-1].items()})
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return history
