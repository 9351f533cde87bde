"""Run any :mod:`rml_fast.federated.protocol` method on Flower (``flwr``, the ``federated`` extra).

The adapter turns a :class:`~rml_fast.federated.protocol.FederatedServer` factory into a Flower
``ServerApp`` and a ``client_fn(client_id)`` into a Flower ``ClientApp``; nothing in the method
changes. The mapping is one to one with :func:`rml_fast.federated.simulation.run_federated`:

* **client id** = the SuperNode's ``partition-id`` (``context.node_config``). At start the
  ServerApp asks every node for it once (a ``query`` message), then addresses clients by id.
* **one Flower message per phase**: for every round ``r`` and phase ``p`` of ``server.phases``,
  the ServerApp sends each selected client a ``train`` message whose ``RecordDict`` holds the
  broadcast as an ``ArrayRecord`` (one ``Array`` per message entry) and ``(p, r)`` in a
  ``ConfigRecord``; the reply is an ``ArrayRecord`` of the client's answer.
* **client state** lives in the node's ``context.state`` (an ``ArrayRecord``) between messages:
  the ClientApp rebuilds the client from ``client_fn``, calls ``set_state``, ``handle``,
  ``get_state`` and stores the state back -- exactly what ``run_federated`` does.
* **aggregation** gets the replies keyed by client id, so the server sees the same mapping as in
  process. With deterministic clients the final server state is the same as ``run_federated``'s
  for the same seed (the test suite checks this on Flower's Simulation Engine and on a real
  SuperLink with two SuperNodes).

Two ways to run:

* :func:`run_flower_simulation` -- Flower's Simulation Engine (Ray actors) on one machine.
* Deployment Engine -- write an app module that exposes ``app = server_app(...)`` and
  ``client = client_app(...)``, point a Flower app ``pyproject.toml`` at them and start a
  ``flower-superlink`` plus one ``flower-supernode`` per client (see docs/federated.md).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rml_fast._validation import Interval, check_scalar
from rml_fast.federated.protocol import FederatedClient, FederatedServer, Message, check_message
from rml_fast.federated.simulation import FederatedHistory

if TYPE_CHECKING:  # pragma: no cover
    from flwr.app import ArrayRecord, Context
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp

__all__ = [
    "client_app",
    "from_array_record",
    "run_flower_simulation",
    "run_server",
    "server_app",
    "to_array_record",
]

#: Record names inside a Flower ``RecordDict`` / ``context.state``.
MESSAGE_KEY = "rml_fast.message"
CONFIG_KEY = "rml_fast.config"
STATE_KEY = "rml_fast.state"
#: Message types (``<category>.<action>``) the ClientApp registers.
HELLO_TYPE = "query.rml_fast_hello"
PHASE_TYPE = "train.rml_fast_phase"


_FLWR_IMPORT_WARNINGS = (
    # typer (imported by flwr's logger) uses click.utils names that click 8.2+ deprecates
    r"'click\.utils\.\w+' is deprecated",
)


def _require_flwr(*extra: str) -> None:
    """Import flwr's app modules (and ``extra`` ones) once, without the peers' import warnings."""
    import importlib
    import warnings

    with warnings.catch_warnings():
        for message in _FLWR_IMPORT_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=DeprecationWarning)
        try:
            for module in ("flwr", "flwr.app", "flwr.clientapp", "flwr.serverapp", *extra):
                importlib.import_module(module)
        except ImportError as exc:  # pragma: no cover - flwr is in the federated extra
            raise ImportError(
                "rml_fast.federated.flower needs Flower: pip install 'rml_fast[federated]'"
            ) from exc


def to_array_record(message: Message) -> ArrayRecord:
    """Pack a :data:`~rml_fast.federated.protocol.Message` into a Flower ``ArrayRecord``.

    Parameters
    ----------
    message : dict[str, numpy.ndarray]
        Flat names -> arrays of any shape and a numeric/bool/str dtype (0-d for scalars).

    Returns
    -------
    flwr.app.ArrayRecord
        One ``Array`` per entry, same names, shapes and dtypes; the arrays are copied.

    Raises
    ------
    TypeError
        If ``message`` is not a message, or an entry has ``dtype=object``.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.flower import from_array_record, to_array_record
    >>> record = to_array_record({"w": np.arange(3.0), "n": np.array(5)})
    >>> sorted(record)
    ['n', 'w']
    >>> back = from_array_record(record)
    >>> back["w"], back["n"]
    (array([0., 1., 2.]), array(5))
    """
    _require_flwr()
    from flwr.app import Array, ArrayRecord

    check_message(message)
    for key, value in message.items():
        if value.dtype == object:
            raise TypeError(f"message[{key!r}] must not have dtype=object")
    return ArrayRecord(
        {key: Array(np.require(value, requirements="C")) for key, value in message.items()}
    )


def from_array_record(record: ArrayRecord) -> Message:
    """Unpack a Flower ``ArrayRecord`` into a :data:`~rml_fast.federated.protocol.Message`.

    Parameters
    ----------
    record : flwr.app.ArrayRecord
        Named arrays (e.g. from :func:`to_array_record`).

    Returns
    -------
    dict[str, numpy.ndarray]
        Name -> array (writable copies, in the record's order).

    Raises
    ------
    TypeError
        If ``record`` is not an ``ArrayRecord``.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.flower import from_array_record, to_array_record
    >>> from_array_record(to_array_record({"x": np.ones((2, 2), dtype=np.float32)}))["x"].dtype
    dtype('float32')
    """
    _require_flwr()
    from flwr.app import ArrayRecord

    if not isinstance(record, ArrayRecord):
        raise TypeError(f"record must be a flwr ArrayRecord, got {type(record).__name__}")
    return {key: np.array(array.numpy(), copy=True) for key, array in record.items()}


def _payload_bytes(message: Message) -> int:
    return int(sum(value.nbytes for value in message.values()))


def client_app(client_fn: Callable[[int], FederatedClient]) -> ClientApp:
    """A Flower ``ClientApp`` that answers with ``client_fn(partition_id)``.

    For every message the node's client is rebuilt from ``client_fn(cid)`` (``cid`` = the
    SuperNode's ``node_config["partition-id"]``), its state is restored from ``context.state``,
    it handles the phase and its new state is stored back -- the same sequence as
    :func:`rml_fast.federated.simulation.run_federated`.

    Parameters
    ----------
    client_fn : callable
        ``client_fn(client_id: int) -> FederatedClient``. On the Simulation Engine it is pickled
        to the Ray workers; in a deployment it must be importable from the app module.

    Returns
    -------
    flwr.clientapp.ClientApp
        Handles ``query.rml_fast_hello`` (replies the client id) and ``train.rml_fast_phase``
        (one protocol phase).

    Raises
    ------
    TypeError
        If ``client_fn`` is not callable.

    Examples
    --------
    >>> from rml_fast.federated.flower import client_app
    >>> type(client_app(lambda cid: None)).__name__
    'ClientApp'
    """
    if not callable(client_fn):
        raise TypeError(f"client_fn must be callable, got {type(client_fn).__name__}")
    _require_flwr()
    from flwr.app import ConfigRecord, RecordDict
    from flwr.app import Message as FlwrMessage
    from flwr.clientapp import ClientApp

    app = ClientApp()

    def _client_id(context: Context) -> int:
        if "partition-id" not in context.node_config:
            raise ValueError(
                "the SuperNode has no 'partition-id' in its node config; start it with "
                "--node-config 'partition-id=<k> num-partitions=<K>'"
            )
        return int(context.node_config["partition-id"])

    @app.query("rml_fast_hello")
    def _hello(msg: FlwrMessage, context: Context) -> FlwrMessage:
        content = RecordDict({CONFIG_KEY: ConfigRecord({"client_id": _client_id(context)})})
        return FlwrMessage(content, reply_to=msg)

    @app.train("rml_fast_phase")
    def _phase(msg: FlwrMessage, context: Context) -> FlwrMessage:
        cid = _client_id(context)
        config: Any = msg.content[CONFIG_KEY]  # a ConfigRecord (RecordDict items are a union)
        broadcast = from_array_record(cast("ArrayRecord", msg.content[MESSAGE_KEY]))
        client = client_fn(cid)
        state = context.state.get(STATE_KEY)
        client.set_state(from_array_record(cast("ArrayRecord", state)) if state is not None else {})
        reply = check_message(
            client.handle(str(config["phase"]), int(config["round"]), broadcast),
            f"reply of client {cid}",
        )
        context.state[STATE_KEY] = to_array_record(check_message(client.get_state(), "state"))
        content = RecordDict({MESSAGE_KEY: to_array_record(reply),
                              CONFIG_KEY: ConfigRecord({"client_id": cid})})
        return FlwrMessage(content, reply_to=msg)

    return app


def _raise_errors(replies: list[Any], what: str) -> None:
    for reply in replies:
        if reply.has_error():
            raise RuntimeError(
                f"a Flower client failed during {what}: {reply.error.reason} "
                f"(code {reply.error.code})"
            )


def _wait_for_nodes(grid: Grid, num_clients: int | None, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        node_ids = sorted(int(n) for n in grid.get_node_ids())
        if (num_clients is None and node_ids) or (
            num_clients is not None and len(node_ids) >= num_clients
        ):
            return node_ids
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"only {len(node_ids)} Flower nodes connected within {timeout} s, "
                f"expected {num_clients}"
            )
        time.sleep(0.2)


def run_server(
    server: FederatedServer,
    grid: Grid,
    rounds: int,
    *,
    num_clients: int | None = None,
    timeout: float = 600.0,
    progress: bool = False,
) -> FederatedHistory:
    """Drive ``server`` for ``rounds`` rounds over a Flower ``Grid`` (the body of the ServerApp).

    Parameters
    ----------
    server : FederatedServer
        The method's server; updated in place.
    grid : flwr.serverapp.Grid
        The grid handed to ``ServerApp.main``.
    rounds : int
        Number of rounds >= 1.
    num_clients : int, optional
        Wait until this many nodes are connected (default: use the nodes present when the first
        one shows up). Client ids must then be exactly ``0..K-1``.
    timeout : float, default=600
        Seconds to wait for the nodes and for the replies of each phase.
    progress : bool, default=False
        Show a tqdm bar with the server's metrics.

    Returns
    -------
    FederatedHistory
        Per-round metrics and array payload bytes, as :func:`run_federated` reports them.

    Raises
    ------
    TypeError
        If ``server`` is not a :class:`FederatedServer`.
    ValueError
        If ``rounds`` is not a positive int or the nodes' partition ids are not ``0..K-1``.
    RuntimeError
        If a client fails or does not answer within ``timeout``.

    Examples
    --------
    >>> from rml_fast.federated.flower import run_server
    >>> run_server(object(), None, 1)
    Traceback (most recent call last):
    ...
    TypeError: server must be a FederatedServer, got object
    """
    if not isinstance(server, FederatedServer):
        raise TypeError(f"server must be a FederatedServer, got {type(server).__name__}")
    rounds = int(check_scalar(rounds, "rounds", Interval("int", 1, None)))
    if num_clients is not None:
        num_clients = int(check_scalar(num_clients, "num_clients", Interval("int", 1, None)))
    _require_flwr()
    from flwr.app import ConfigRecord, RecordDict
    from flwr.app import Message as FlwrMessage

    node_ids = _wait_for_nodes(grid, num_clients, timeout)
    hello = [FlwrMessage(RecordDict({CONFIG_KEY: ConfigRecord({"op": "hello"})}), node_id,
                         HELLO_TYPE) for node_id in node_ids]
    answers = list(grid.send_and_receive(hello, timeout=timeout))
    _raise_errors(answers, "the hello")
    node_of = {int(cast(Any, a.content[CONFIG_KEY])["client_id"]): int(a.metadata.src_node_id)
               for a in answers}
    client_ids = sorted(node_of)
    if client_ids != list(range(len(node_ids))):
        raise ValueError(
            f"the nodes' partition ids must be 0..{len(node_ids) - 1} (one per node), got "
            f"{client_ids}"
        )

    history = FederatedHistory()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=rounds, desc="flower rounds", unit="round")
    try:
        for server_round in range(rounds):
            up = down = 0
            selected = [int(c) for c in server.select(server_round, client_ids)]
            if not set(selected) <= set(client_ids):
                raise ValueError(f"server.select returned unknown client ids "
                                 f"{sorted(set(selected) - set(client_ids))}")
            for phase in server.phases:
                broadcast = check_message(server.configure(phase, server_round), "broadcast")
                messages = []
                for cid in selected:
                    content = RecordDict({
                        MESSAGE_KEY: to_array_record(broadcast),
                        CONFIG_KEY: ConfigRecord({"phase": phase, "round": server_round}),
                    })
                    messages.append(FlwrMessage(content, node_of[cid], PHASE_TYPE,
                                                group_id=str(server_round)))
                    down += _payload_bytes(broadcast)
                got = list(grid.send_and_receive(messages, timeout=timeout))
                _raise_errors(got, f"phase {phase!r} of round {server_round}")
                replies: dict[int, Message] = {}
                for reply in got:
                    cid = int(cast(Any, reply.content[CONFIG_KEY])["client_id"])
                    replies[cid] = from_array_record(cast("ArrayRecord", reply.content[MESSAGE_KEY]))
                    up += _payload_bytes(replies[cid])
                if sorted(replies) != sorted(selected):
                    raise RuntimeError(
                        f"phase {phase!r} of round {server_round}: replies from "
                        f"{sorted(replies)}, expected {sorted(selected)} (timeout {timeout} s)"
                    )
                server.aggregate(phase, server_round, replies)
            history.metrics.append(dict(server.metrics(server_round)))
            history.bytes_up.append(up)
            history.bytes_down.append(down)
            if bar is not None:
                bar.set_postfix({k: f"{v:.4g}" for k, v in history.metrics[-1].items()})
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return history


def server_app(
    server_fn: Callable[[Context], FederatedServer],
    rounds: int | None = None,
    *,
    num_clients: int | None = None,
    timeout: float = 600.0,
    on_finish: Callable[[FederatedServer, FederatedHistory, Context], None] | None = None,
    progress: bool = False,
) -> ServerApp:
    """A Flower ``ServerApp`` whose ``main(grid, context)`` runs a protocol server.

    Parameters
    ----------
    server_fn : callable
        ``server_fn(context) -> FederatedServer``, called once per run (``context.run_config``
        holds the app's ``[tool.flwr.app.config]`` and ``--run-config`` values).
    rounds : int, optional
        Number of rounds; default ``context.run_config["num-server-rounds"]``.
    num_clients : int, optional
        Wait for this many nodes (default ``run_config["num-clients"]`` if present, else the
        nodes connected when the run starts).
    timeout : float, default=600
        Seconds to wait for nodes and for each phase's replies.
    on_finish : callable, optional
        ``on_finish(server, history, context)`` after the last round (e.g. save the model).
    progress : bool, default=False
        Show a tqdm bar on the ServerApp side.

    Returns
    -------
    flwr.serverapp.ServerApp
        The app; pass it to :func:`flwr.simulation.run_simulation` or expose it in an app module.

    Raises
    ------
    TypeError
        If ``server_fn`` or ``on_finish`` is not callable.

    Examples
    --------
    >>> from rml_fast.federated.flower import server_app
    >>> type(server_app(lambda context: None, rounds=3)).__name__
    'ServerApp'
    """
    if not callable(server_fn):
        raise TypeError(f"server_fn must be callable, got {type(server_fn).__name__}")
    if on_finish is not None and not callable(on_finish):
        raise TypeError(f"on_finish must be callable, got {type(on_finish).__name__}")
    if rounds is not None:
        rounds = int(check_scalar(rounds, "rounds", Interval("int", 1, None)))
    _require_flwr()
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        server = server_fn(context)
        n_rounds = rounds if rounds is not None else int(context.run_config["num-server-rounds"])
        n_clients = num_clients
        if n_clients is None and "num-clients" in context.run_config:
            n_clients = int(context.run_config["num-clients"])
        history = run_server(server, grid, n_rounds, num_clients=n_clients, timeout=timeout,
                             progress=progress)
        if on_finish is not None:
            on_finish(server, history, context)

    return app


def run_flower_simulation(
    server: FederatedServer | Callable[[], FederatedServer],
    client_fn: Callable[[int], FederatedClient],
    num_clients: int,
    rounds: int,
    *,
    backend_config: Mapping[str, Any] | None = None,
    progress: bool = False,
    verbose: bool = False,
) -> FederatedHistory:
    """Run a protocol method on Flower's Simulation Engine (Ray) with ``num_clients`` SuperNodes.

    Same contract as :func:`rml_fast.federated.simulation.run_federated`: the server is updated
    in place and the per-round history is returned; for deterministic clients the final server
    state equals ``run_federated``'s.

    Parameters
    ----------
    server : FederatedServer or callable
        The server (updated in place) or a zero-argument factory.
    client_fn : callable
        ``client_fn(client_id) -> FederatedClient``; must be picklable (cloudpickle) for Ray.
    num_clients : int
        Number of virtual SuperNodes K >= 1 (partition ids ``0..K-1``).
    rounds : int
        Number of rounds >= 1.
    backend_config : mapping, optional
        Flower's backend config; default one CPU per client actor
        (``{"client_resources": {"num_cpus": 1, "num_gpus": 0.0}}``).
    progress : bool, default=False
        Show a tqdm bar over rounds.
    verbose : bool, default=False
        Flower's DEBUG logging.

    Returns
    -------
    FederatedHistory
        Per-round metrics and payload bytes.

    Raises
    ------
    TypeError
        If ``server`` is neither a server nor a factory of one, or ``client_fn`` is not callable.
    ValueError
        If ``num_clients`` or ``rounds`` is not a positive int.
    RuntimeError
        If the ServerApp failed (the cause is chained).

    Examples
    --------
    >>> from rml_fast.federated.flower import run_flower_simulation
    >>> run_flower_simulation(object(), lambda cid: None, 2, 1)
    Traceback (most recent call last):
    ...
    TypeError: server must be a FederatedServer or a factory of one, got object
    """
    if not isinstance(server, FederatedServer):
        if not callable(server):
            raise TypeError(
                f"server must be a FederatedServer or a factory of one, got {type(server).__name__}"
            )
        server = server()
        if not isinstance(server, FederatedServer):
            raise TypeError(
                f"server must be a FederatedServer or a factory of one, got a factory of "
                f"{type(server).__name__}"
            )
    if not callable(client_fn):
        raise TypeError(f"client_fn must be callable, got {type(client_fn).__name__}")
    num_clients = int(check_scalar(num_clients, "num_clients", Interval("int", 1, None)))
    rounds = int(check_scalar(rounds, "rounds", Interval("int", 1, None)))
    _require_flwr("flwr.simulation")
    from flwr.simulation import run_simulation

    result: dict[str, Any] = {}

    def _finish(srv: FederatedServer, history: FederatedHistory, context: Context) -> None:
        result["history"] = history

    app = server_app(lambda context: server, rounds, num_clients=num_clients, on_finish=_finish,
                     progress=progress)
    config: dict[str, Any] = dict(backend_config) if backend_config is not None else {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0}}
    with warnings.catch_warnings():
        # Ray's notice about a future default for accelerator env vars (num_gpus=0 here)
        warnings.filterwarnings("ignore", message="Tip: In future versions of Ray",
                                category=FutureWarning)
        run_simulation(server_app=app, client_app=client_app(client_fn),
                       num_supernodes=num_clients, backend_config=config, verbose_logging=verbose)
    if "history" not in result:
        raise RuntimeError("the Flower simulation ended without finishing its rounds "
                           "(see Flower's log above for the ServerApp's error)")
    return result["history"]
