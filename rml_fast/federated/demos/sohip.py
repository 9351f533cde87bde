"""SoHip vs local-only, FedProto and FedAvg on scikit-learn's digits with 10 heterogeneous agents.

Ten agents each hold 2 of the 10 digit classes (:func:`rml_fast.federated.sohip.label_skew_split`,
10% of each share for training and 90% for testing, so that an agent alone is data-starved)
and run one of five extractor architectures (three MLPs, two CNNs; agent ``k`` runs
``ARCHITECTURES[k % 5]``). The methods, all on :func:`rml_fast.federated.run_federated`:

* ``sohip``: :class:`~rml_fast.federated.sohip.SoHipClient` / ``SoHipServer`` (memories only);
* ``local``: local-only training of the same models;
* ``fedproto``: FedProto-style prototype sharing of the same width;
* ``fedavg``: FedAvg of one MLP shared by every agent (the models must match, so the agents are
  *not* heterogeneous there); its accuracy is the global model's on each agent's test set.

The reported accuracy is the mean over agents of the local test accuracy (personalised
evaluation), averaged over seeds; communication is the bytes of array payload per round.

``run(quick=True)``: one seed, 3 rounds (seconds). The full run: 3 seeds x 30 rounds (3.7
minutes on a busy 2-core machine).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["compare_methods", "format_table", "run"]

METHODS = ("sohip", "fedproto", "local", "fedavg")


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return (X / 16.0).astype(np.float32), y.astype(np.int64)


def compare_methods(
    seeds: tuple[int, ...] = (0, 1, 2),
    rounds: int = 30,
    *,
    methods: tuple[str, ...] = METHODS,
    num_clients: int = 10,
    classes_per_client: int = 2,
    test_fraction: float = 0.9,
    memory_dim: int = 32,
    progress: bool = False,
) -> dict[str, Any]:
    """Run each method on the digits label-skew split for every seed.

    Parameters
    ----------
    seeds : tuple of int, default=(0, 1, 2)
        Seeds of the split, the initialisations and the batch orders.
    rounds : int, default=30
    methods : tuple of str, default=("sohip", "fedproto", "local", "fedavg")
    num_clients : int, default=10
    classes_per_client : int, default=2
    test_fraction : float, default=0.9
        Share of every agent's data held out for its test set.
    memory_dim : int, default=32
        SoHip's memory width ``m`` (and FedProto's prototype width).
    progress : bool, default=False
        tqdm bars per run.

    Returns
    -------
    dict
        ``methods``: name -> ``{"accuracy": (S, R) per-round mean agent accuracy, "final": (S,),
        "mean": float, "bytes_up": int, "bytes_down": int}`` (bytes of the last round); ``seeds``,
        ``rounds``.

    Examples
    --------
    >>> from rml_fast.federated.demos.sohip import compare_methods
    >>> res = compare_methods(seeds=(0,), rounds=1, methods=("local",), num_clients=2)
    >>> len(res["methods"]["local"]["final"])
    1
    """
    from rml_fast.federated.baselines import (
        FedProtoClient,
        FedProtoServer,
        LocalClient,
        LocalServer,
    )
    from rml_fast.federated.fedavg import FedAvgClient, FedAvgServer, evaluate_accuracy, make_mlp
    from rml_fast.federated.simulation import run_federated
    from rml_fast.federated.sohip import SoHipClient, SoHipServer, label_skew_split

    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"methods must be among {METHODS}, got {sorted(unknown)}")
    X, y = _digits()
    C = 10
    out: dict[str, Any] = {"seeds": list(seeds), "rounds": rounds, "methods": {}}
    for name in methods:
        accs, finals, up, down = [], [], 0, 0
        for seed in seeds:
            parts = label_skew_split(X, y, num_clients, classes_per_client,
                                     test_fraction=test_fraction, rng=seed)
            common = {"num_classes": C, "image_shape": (8, 8), "memory_dim": memory_dim,
                      "seed": seed, "lr": 0.01, "batch_size": 16}
            if name == "fedavg":
                def model_fn(seed: int = seed) -> Any:
                    return make_mlp(64, [64], C, seed=seed)

                class _PerAgent(FedAvgServer):
                    def metrics(self, server_round: int, parts: Any = parts) -> dict[str, float]:
                        model = self.model()
                        return {"accuracy": float(np.mean(
                            [evaluate_accuracy(model, p[2], p[3]) for p in parts]))}

                server: Any = _PerAgent(model_fn(), model_fn=model_fn)

                def fedavg_client(cid: int, parts: Any = parts, seed: int = seed,
                                  model_fn: Any = model_fn) -> Any:
                    return FedAvgClient(model_fn, parts[cid][0], parts[cid][1], client_id=cid,
                                        seed=seed, lr=0.01, batch_size=16, optimizer="adam",
                                        weight_decay=0.0)

                client_fn: Any = fedavg_client
            else:
                server, cls = {
                    "sohip": (SoHipServer(C, memory_dim), SoHipClient),
                    "fedproto": (FedProtoServer(C, memory_dim), FedProtoClient),
                    "local": (LocalServer(), LocalClient),
                }[name]

                def agent_client(cid: int, parts: Any = parts, cls: Any = cls,
                                 common: Any = common) -> Any:
                    return cls(cid, *parts[cid], arch=cid % 5, **common)

                client_fn = agent_client

            history = run_federated(server, client_fn, num_clients, rounds, progress=progress)
            acc = [m["accuracy"] for m in history.metrics]
            accs.append(acc)
            finals.append(acc[-1])
            up, down = history.bytes_up[-1], history.bytes_down[-1]
        out["methods"][name] = {
            "accuracy": np.asarray(accs), "final": np.asarray(finals),
            "mean": float(np.mean(finals)), "bytes_up": int(up), "bytes_down": int(down),
        }  # fmt: skip
    return out


def run(
    *, seed: int = 0, quick: bool = False, out: str | Path | None = None, progress: bool = True
) -> dict[str, Any]:
    """SoHip vs local-only, FedProto and FedAvg on digits (10 heterogeneous agents, 2 classes each).

    Parameters
    ----------
    seed : int, default=0
        First seed (the full run uses ``seed, seed + 1, seed + 2``).
    quick : bool, default=False
        One seed, 3 rounds.
    out : str or Path, optional
        Write a PNG figure there (accuracy per round; bytes per round), needs matplotlib.
    progress : bool, default=True
        tqdm bars per run.

    Returns
    -------
    dict
        As :func:`compare_methods`.

    Examples
    --------
    >>> from rml_fast.federated.demos.sohip import run
    >>> sorted(run(quick=True, progress=False)["methods"])
    ['fedavg', 'fedproto', 'local', 'sohip']
    """
    seeds = (seed,) if quick else (seed, seed + 1, seed + 2)
    result = compare_methods(seeds, 3 if quick else 30, progress=progress)
    if out is not None:
        _plot(result, Path(out))
    return result


def format_table(result: Mapping[str, Any]) -> str:
    """Final mean agent accuracy (mean +- sd over seeds) and bytes per round of each method.

    Parameters
    ----------
    result : dict
        The return value of :func:`run`.

    Returns
    -------
    str

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.demos.sohip import format_table
    >>> row = {"final": np.array([0.9, 0.92]), "mean": 0.91, "bytes_up": 13760, "bytes_down": 13760}
    >>> print(format_table({"methods": {"sohip": row}, "rounds": 30}).splitlines()[1])
    sohip         0.910   0.014          13760            13760
    """
    lines = [f"{'method':<10} {'accuracy':>8} {'sd':>7} {'bytes up/round':>14} {'bytes down/round':>16}"]
    for name, row in result["methods"].items():
        final = np.asarray(row["final"], dtype=float)
        sd = float(final.std(ddof=1)) if final.size > 1 else 0.0
        lines.append(
            f"{name:<10} {row['mean']:>8.3f} {sd:>7.3f} {row['bytes_up']:>14d} {row['bytes_down']:>16d}"
        )
    return "\n".join(lines)


def _plot(result: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    names = list(result["methods"])
    for name in names:
        acc = np.asarray(result["methods"][name]["accuracy"], dtype=float)
        ax1.plot(np.arange(1, acc.shape[1] + 1), acc.mean(0), label=name)
    ax1.set_xlabel("round")
    ax1.set_ylabel("mean agent test accuracy")
    ax1.set_title("digits, 10 heterogeneous agents, 2 classes each")
    ax1.legend()
    ups = [max(result["methods"][n]["bytes_up"], 1) for n in names]
    ax2.bar(names, ups, color="tab:gray")
    ax2.set_yscale("log")
    ax2.set_ylabel("bytes uploaded per round (all agents)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
