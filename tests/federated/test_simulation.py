"""The in-process federated runner: phases, ordering, bytes, checkpoints and resume."""

from __future__ import annotations

import numpy as np
import pytest

from rml_fast.federated import FederatedClient, FederatedServer, run_federated


class NoisyMeanClient(FederatedClient):
    """Keeps a running local value that drifts with seeded noise, so state matters."""

    def __init__(self, cid: int, seed: int = 0) -> None:
        self.cid, self.seed = cid, seed
        self.value = np.array(float(cid))

    def handle(self, phase, server_round, message):
        if phase == "propose":
            rng = np.random.default_rng([self.seed, self.cid, server_round])
            self.value = 0.5 * (self.value + message["mean"]) + rng.normal(scale=0.1)
            return {"value": np.array(self.value), "weight": np.array(self.cid + 1.0)}
        return {"ack": np.array(float(message["mean"]) * 0 + self.cid)}

    def get_state(self):
        return {"value": np.array(self.value)}

    def set_state(self, state):
        if "value" in state:
            self.value = np.array(state["value"])


class WeightedMeanServer(FederatedServer):
    phases = ("propose", "confirm")

    def __init__(self) -> None:
        self.mean = np.array(0.0)
        self.acks: list[float] = []

    def configure(self, phase, server_round):
        return {"mean": np.array(self.mean)}

    def aggregate(self, phase, server_round, replies):
        if phase == "propose":
            ids = sorted(replies)
            w = np.array([float(replies[c]["weight"]) for c in ids])
            v = np.array([float(replies[c]["value"]) for c in ids])
            self.mean = np.array(float(w @ v / w.sum()))
        else:
            self.acks.append(float(sum(float(replies[c]["ack"]) for c in sorted(replies))))

    def select(self, server_round, client_ids):
        return [c for c in client_ids if (c + server_round) % 3 != 0]

    def metrics(self, server_round):
        return {"mean": float(self.mean)}

    def get_state(self):
        return {"mean": np.array(self.mean), "acks": np.array(self.acks)}

    def set_state(self, state):
        self.mean = np.array(state["mean"])
        self.acks = [float(a) for a in state["acks"]]


def _reference(num_clients: int, rounds: int) -> tuple[float, list[float]]:
    """The same protocol written as a plain loop."""
    values = {c: float(c) for c in range(num_clients)}
    mean, acks = 0.0, []
    for r in range(rounds):
        ids = [c for c in range(num_clients) if (c + r) % 3 != 0]
        for c in ids:
            rng = np.random.default_rng([0, c, r])
            values[c] = 0.5 * (values[c] + mean) + rng.normal(scale=0.1)
        w = np.array([c + 1.0 for c in ids])
        mean = float(w @ np.array([values[c] for c in ids]) / w.sum())
        acks.append(float(sum(ids)))
    return mean, acks


def test_matches_a_plain_loop_of_the_same_protocol():
    server = WeightedMeanServer()
    history = run_federated(server, NoisyMeanClient, num_clients=5, rounds=6, progress=False)
    mean, acks = _reference(5, 6)
    assert float(server.mean) == pytest.approx(mean, rel=1e-12)
    assert server.acks == acks
    assert history.rounds == 6
    assert history.metrics[-1]["mean"] == pytest.approx(mean, rel=1e-12)


def test_counts_bytes_per_selected_client_and_phase():
    history = run_federated(WeightedMeanServer(), NoisyMeanClient, num_clients=5, rounds=2,
                            progress=False)
    # round 0 selects clients 1, 2, 4; each gets two 8-byte broadcasts and sends 16 + 8 bytes
    assert history.bytes_down[0] == 3 * 2 * 8
    assert history.bytes_up[0] == 3 * (16 + 8)


def test_interrupted_run_resumes_to_the_same_result(tmp_path):
    full = WeightedMeanServer()
    run_federated(full, NoisyMeanClient, num_clients=4, rounds=7, progress=False)

    ckpt = tmp_path / "run.npz"
    first = WeightedMeanServer()
    partial = run_federated(first, NoisyMeanClient, num_clients=4, rounds=7, checkpoint=ckpt,
                            progress=False, stop_after=3)
    assert partial.rounds == 3
    resumed = WeightedMeanServer()  # a fresh process would start from nothing but the file
    history = run_federated(resumed, NoisyMeanClient, num_clients=4, rounds=7, checkpoint=ckpt,
                            progress=False)
    assert history.rounds == 7
    assert float(resumed.mean) == float(full.mean)
    assert resumed.acks == full.acks


def test_clients_cannot_mutate_the_broadcast():
    class Mutating(FederatedClient):
        def __init__(self, cid):
            pass

        def handle(self, phase, server_round, message):
            message["mean"] += 100.0
            return {"value": np.array(1.0), "weight": np.array(1.0)}

    class Server(WeightedMeanServer):
        phases = ("propose",)

        def select(self, server_round, client_ids):
            return list(client_ids)

    server = Server()
    run_federated(server, Mutating, num_clients=2, rounds=1, progress=False)
    assert float(server.mean) == 1.0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_clients": 0}, ValueError, "num_clients"),
        ({"rounds": 0}, ValueError, "rounds"),
        ({"rounds": 1.5}, TypeError, "rounds"),
        ({"client_fn": 3}, TypeError, "client_fn"),
        ({"server": object()}, TypeError, "server"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    args = {"server": WeightedMeanServer(), "client_fn": NoisyMeanClient, "num_clients": 2,
            "rounds": 1, "progress": False}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        run_federated(**args)


def test_a_reply_that_is_not_a_message_is_rejected():
    class Bad(FederatedClient):
        def __init__(self, cid):
            pass

        def handle(self, phase, server_round, message):
            return {"value": [1.0]}

    with pytest.raises(TypeError, match=r"reply of client 1\['value'\]"):
        run_federated(WeightedMeanServer(), Bad, num_clients=2, rounds=1, progress=False)
