"""Protocol methods on Flower: the Simulation Engine and a real SuperLink + SuperNodes on loopback
give the same final server state as the in-process ``run_federated`` with the same seed."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

# flwr is imported lazily by rml_fast.federated.flower (which filters its peers' import
# warnings); ray, the Simulation Engine's backend, only ever runs in child interpreters here
if importlib.util.find_spec("flwr") is None or importlib.util.find_spec("ray") is None:
    pytest.skip("flwr[simulation] is not installed", allow_module_level=True)

import contextlib

from rml_fast.federated import run_federated
from rml_fast.federated.flower import (
    from_array_record,
    run_flower_simulation,
    run_server,
    server_app,
    to_array_record,
)

# A tiny two-phase method with stateful clients and partial participation, written as an app
# module: the deployment test installs it as a Flower app, the other tests import it from a file.
_METHOD_SOURCE = textwrap.dedent('''
    """Tiny two-phase protocol method (test fixture) and its Flower apps."""
    from __future__ import annotations

    import numpy as np

    from rml_fast.federated.protocol import FederatedClient, FederatedServer


    class TinyClient(FederatedClient):
        """Phase "stat": a noisy scalar; phase "update": a noisy vector that grows with the
        number of messages this client has answered (kept only in its state)."""

        def __init__(self, cid):
            self.cid = int(cid)
            self.calls = np.array(0, dtype=np.int64)

        def handle(self, phase, server_round, message):
            rng = np.random.default_rng([7, self.cid, server_round, len(phase)])
            self.calls = np.array(self.calls + 1, dtype=np.int64)
            if phase == "stat":
                return {"s": np.array(rng.normal() + float(message["w"].sum()))}
            g = message["w"] * (self.cid + 1) + rng.normal(size=3) + float(self.calls)
            return {"g": g.astype(np.float32), "calls": self.calls}

        def get_state(self):
            return {"calls": self.calls}

        def set_state(self, state):
            if state:
                self.calls = np.array(state["calls"], dtype=np.int64)


    class TinyServer(FederatedServer):
        phases = ("stat", "update")

        def __init__(self):
            self.w = np.zeros(3)
            self.s = 0.0
            self.calls = np.zeros(0, dtype=np.int64)

        def select(self, server_round, client_ids):
            # round 1 leaves the last client out (its state must not advance)
            return list(client_ids[:-1]) if server_round == 1 else list(client_ids)

        def configure(self, phase, server_round):
            return {"w": self.w, "s": np.array(self.s)}

        def aggregate(self, phase, server_round, replies):
            ids = sorted(replies)
            if phase == "stat":
                self.s = float(sum(float(replies[c]["s"]) for c in ids))
            else:
                g = np.mean([replies[c]["g"].astype(np.float64) for c in ids], axis=0)
                self.w = 0.5 * self.w + 0.1 * g + 0.01 * self.s
                self.calls = np.array([int(replies[c]["calls"]) for c in ids])

        def metrics(self, server_round):
            return {"w0": float(self.w[0]), "s": self.s}

        def get_state(self):
            return {"w": self.w, "s": np.array(self.s), "calls": self.calls}


    def _save(server, history, context):
        np.savez(context.run_config["out"], **server.get_state(),
                 w0=np.array([m["w0"] for m in history.metrics]))


    try:
        from rml_fast.federated.flower import client_app, server_app
    except ImportError:  # pragma: no cover
        pass
    else:
        server = server_app(lambda context: TinyServer(), on_finish=_save)
        client = client_app(TinyClient)
''')


def _load_method(directory: Path, name: str):
    """Write the tiny method to ``directory/name.py`` and import it."""
    path = directory / f"{name}.py"
    path.write_text(_METHOD_SOURCE)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_TINY_APP = "rml_fast_tiny_app"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny")
    module = _load_method(directory, _TINY_APP)
    module.directory = directory
    yield module
    sys.modules.pop(_TINY_APP, None)


def test_array_record_round_trip_keeps_shapes_and_dtypes():
    message = {
        "scalar": np.array(2.5),
        "int": np.array(7, dtype=np.int64),
        "matrix": np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2],  # not contiguous
        "empty": np.zeros((0, 4)),
        "names": np.array(["a", "bc"]),
        "mask": np.array([True, False]),
    }
    back = from_array_record(to_array_record(message))
    assert list(back) == list(message)
    for key, value in message.items():
        assert back[key].shape == value.shape, key
        assert back[key].dtype == value.dtype, key
        np.testing.assert_array_equal(back[key], value)
    with pytest.raises(TypeError, match="dtype=object"):
        to_array_record({"bad": np.array([None, 1], dtype=object)})
    with pytest.raises(TypeError, match="must be a numpy array"):
        to_array_record({"bad": [1.0]})
    with pytest.raises(TypeError, match="ArrayRecord"):
        from_array_record({"x": np.zeros(1)})


def test_bad_input_raises_before_any_work(tiny):
    with pytest.raises(TypeError, match="server must be a FederatedServer"):
        run_flower_simulation(object(), tiny.TinyClient, 2, 1)
    with pytest.raises(TypeError, match="client_fn must be callable"):
        run_flower_simulation(tiny.TinyServer(), 3, 2, 1)
    with pytest.raises(ValueError, match="num_clients"):
        run_flower_simulation(tiny.TinyServer(), tiny.TinyClient, 0, 1)
    with pytest.raises(ValueError, match="rounds"):
        run_flower_simulation(tiny.TinyServer(), tiny.TinyClient, 2, 0)
    with pytest.raises(TypeError, match="server_fn must be callable"):
        server_app("not a factory")
    with pytest.raises(TypeError, match="server must be a FederatedServer"):
        run_server(object(), None, 1)


# The Simulation Engine runs in a child interpreter: Ray leaves ResourceWarnings (unclosed
# /dev/null handles, still-running helper processes) that pytest's ``filterwarnings = error``
# would turn into errors at session end. The child writes the server state and the history.
_DRIVER = textwrap.dedent('''
    import json
    import sys

    import numpy as np

    from rml_fast.federated.flower import run_flower_simulation

    {setup}
    history = run_flower_simulation(server, client_fn, {num_clients}, {rounds})
    np.savez(sys.argv[1], **{{"state/" + k: v for k, v in server.get_state().items()}},
             metrics=np.array(json.dumps(history.metrics)),
             bytes_up=np.array(history.bytes_up), bytes_down=np.array(history.bytes_down))
''')


def _simulate_in_child(procs, setup: str, num_clients: int, rounds: int, pythonpath: Path):
    """Run ``setup`` + :func:`run_flower_simulation` in a child interpreter; its results."""
    script = procs.workdir / "driver.py"
    script.write_text(_DRIVER.format(setup=setup, num_clients=num_clients, rounds=rounds))
    out = procs.workdir / "simulation.npz"
    procs.env["PYTHONPATH"] = os.pathsep.join(
        [str(pythonpath)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = procs.start("simulation", sys.executable, str(script), str(out))
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("the Flower simulation did not finish in 300 s\n" + procs.tails())
    assert proc.returncode == 0 and out.exists(), procs.tails()
    with np.load(out) as data:
        state = {k[len("state/"):]: data[k] for k in data.files if k.startswith("state/")}
        return (state, json.loads(str(data["metrics"])), data["bytes_up"].tolist(),
                data["bytes_down"].tolist())


def test_simulation_engine_equals_run_federated(tiny, processes):
    k, rounds = 3, 3
    setup = f"from {_TINY_APP} import TinyClient, TinyServer\n" \
            "server = TinyServer()\nclient_fn = TinyClient"
    namespace: dict = {}
    exec(setup, namespace)  # the same objects, from the module the fixture imported
    reference = namespace["server"]
    expected = run_federated(reference, namespace["client_fn"], k, rounds, progress=False)
    state, metrics, bytes_up, bytes_down = _simulate_in_child(processes, setup, k, rounds,
                                                               tiny.directory)
    np.testing.assert_allclose(state["w"], reference.w, rtol=1e-12, atol=0)
    assert float(state["s"]) == pytest.approx(reference.s, rel=1e-12)
    # client state survived between messages: clients 0 and 1 answered 2 + 2 + 2 phases, the
    # client left out of round 1 only 2 + 0 + 2
    np.testing.assert_array_equal(state["calls"], [6, 6, 4])
    np.testing.assert_array_equal(state["calls"], reference.calls)
    assert bytes_up == expected.bytes_up
    assert bytes_down == expected.bytes_down
    for got, want in zip(metrics, expected.metrics, strict=True):
        assert got == pytest.approx(want, rel=1e-12)


# The untrusted threshold watermark: FedAvg local training (AdamW, torch) plus two phases per
# round, the client keeping its trained weights in its state between them.
_WATERMARK_SETUP = textwrap.dedent('''
    import numpy as np
    from sklearn.datasets import load_digits

    from rml_fast.federated.fedavg import iid_partition, make_mlp
    from rml_fast.federated.threshold_watermark import (
        ThresholdWatermarkClient,
        ThresholdWatermarkServer,
        additive_shares,
        generate_key,
        watermark_shapes,
    )

    X, y = load_digits(return_X_y=True)
    X, y = (X / 16.0).astype(np.float32), y.astype(np.int64)
    parts = iid_partition(900, 2, rng=1)


    def model_fn():
        return make_mlp(64, [16], 10, seed=1)


    key = generate_key(watermark_shapes(model_fn()), seed=2)
    shares = additive_shares(key, 2, rng=2)


    def client_fn(cid):
        return ThresholdWatermarkClient(model_fn, X[parts[cid]], y[parts[cid]], client_id=cid,
                                        key=shares[cid], variant="untrusted", c=0.5, seed=1,
                                        lr=3e-3)


    server = ThresholdWatermarkServer(model_fn(), variant="untrusted", model_fn=model_fn,
                                      test_data=(X[900:], y[900:]), monitor_key=key)
''')


# SoHip: three heterogeneous agents (different extractors), only memories and counts travel.
_SOHIP_SETUP = textwrap.dedent('''
    import numpy as np
    from sklearn.datasets import load_digits

    from rml_fast.federated.sohip import SoHipClient, SoHipServer, label_skew_split

    X, y = load_digits(return_X_y=True)
    parts = label_skew_split((X / 16.0).astype(np.float32), y, 3, 2, test_fraction=0.5, rng=0)


    def client_fn(cid):
        return SoHipClient(cid, *parts[cid], arch=cid % 5, num_classes=10, image_shape=(8, 8),
                           memory_dim=16, seed=0, batch_size=16)


    server = SoHipServer(10, 16)
''')


@pytest.mark.slow
@pytest.mark.parametrize(("setup", "num_clients", "phases"), [
    pytest.param(_WATERMARK_SETUP, 2, ("fit", "embed"), id="threshold-watermark-untrusted"),
    pytest.param(_SOHIP_SETUP, 3, ("fit",), id="sohip"),
])
def test_method_on_simulation_engine_equals_run_federated(processes, tmp_path, setup,
                                                          num_clients, phases):
    pytest.importorskip("torch")
    namespace: dict = {}
    exec(setup, namespace)
    reference = namespace["server"]
    assert tuple(reference.phases) == phases
    expected = run_federated(reference, namespace["client_fn"], num_clients, 2, progress=False)
    state, metrics, bytes_up, _ = _simulate_in_child(processes, setup, num_clients, 2, tmp_path)
    want = reference.get_state()
    assert sorted(state) == sorted(want)
    for key, value in want.items():
        np.testing.assert_allclose(state[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
    for got, exp in zip(metrics, expected.metrics, strict=True):
        assert sorted(got) == sorted(exp)
        assert got["accuracy"] == pytest.approx(exp["accuracy"], abs=2e-3)
        if "z" in exp:
            assert got["z"] == pytest.approx(exp["z"], abs=1e-3)
    assert bytes_up == expected.bytes_up


# ------------------------------------------------------------------------------------------------
# Deployment Engine: a SuperLink and two SuperNodes as processes on 127.0.0.1


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early with code {proc.returncode}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class _Processes:
    """Started processes; ``stop()`` ends them and every descendant (Flower detaches some)."""

    def __init__(self, workdir: Path, env: dict[str, str]):
        self.workdir, self.env, self.procs, self.logs = workdir, env, [], []

    def start(self, name: str, *args: str) -> subprocess.Popen:
        log = self.workdir / f"{name}.log"
        fh = open(log, "wb")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen(list(args), stdout=fh, stderr=subprocess.STDOUT, env=self.env,
                                cwd=self.workdir, start_new_session=True)
        self.procs.append((proc, fh))
        self.logs.append(log)
        return proc

    def tails(self) -> str:
        return "\n".join(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace")
                                                          .splitlines()[-15:])
                         for log in self.logs if log.exists())

    def stop(self) -> None:
        import psutil

        victims = []
        for proc, _ in self.procs:
            try:
                parent = psutil.Process(proc.pid)
                victims += [*parent.children(recursive=True), parent]
            except psutil.NoSuchProcess:
                pass
        for victim in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                victim.terminate()
        _, alive = psutil.wait_procs(victims, timeout=10)
        for victim in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                victim.kill()
        psutil.wait_procs(alive, timeout=5)
        for proc, fh in self.procs:
            proc.poll()
            fh.close()


@pytest.fixture
def processes(tmp_path):
    """Child processes of one test, all stopped (with their descendants) at teardown."""
    pytest.importorskip("psutil")
    bindir = Path(sys.executable).parent
    home = tmp_path / "flwr_home"
    home.mkdir()
    env = dict(os.environ, FLWR_HOME=str(home), PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}",
               PYTHONUNBUFFERED="1")
    procs = _Processes(tmp_path, env)
    try:
        yield procs
    finally:
        procs.stop()


@pytest.mark.slow
def test_superlink_and_two_supernodes_equal_run_federated(processes, tiny, tmp_path):
    bindir = Path(sys.executable).parent
    if shutil.which("flower-superlink", path=str(bindir)) is None:
        pytest.skip("the flower-superlink executable is not next to this interpreter")
    deployment = processes
    link_port = _free_port()
    (Path(deployment.env["FLWR_HOME"]) / "config.toml").write_text(
        f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\n'
        f'address = "127.0.0.1:{link_port}"\ninsecure = true\n')
    app = tmp_path / "app"
    app.mkdir()
    (app / f"{_TINY_APP}.py").write_text(_METHOD_SOURCE)
    (app / "pyproject.toml").write_text(textwrap.dedent('''
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "rml-fast-tiny-app"
        version = "1.0.0"
        description = "rml_fast test app"
        license = "MIT"
        dependencies = []

        [tool.hatch.build.targets.wheel]
        packages = ["."]

        [tool.flwr.app]
        publisher = "rml-fast"

        [tool.flwr.app.components]
        serverapp = "rml_fast_tiny_app:server"
        clientapp = "rml_fast_tiny_app:client"

        [tool.flwr.app.config]
        num-server-rounds = 2
        num-clients = 2
        out = ""
    '''))
    superlink = deployment.start(
        "superlink", str(bindir / "flower-superlink"), "--insecure", "--host", "127.0.0.1",
        "--port", str(link_port), "--disable-runtime-dependency-installation")
    try:
        _wait_for_port(link_port, superlink, timeout=60)
        for cid in range(2):
            deployment.start(
                f"supernode{cid}", str(bindir / "flower-supernode"), "--insecure",
                "--superlink", f"127.0.0.1:{link_port}", "--port", str(_free_port()),
                "--node-config", f"partition-id={cid} num-partitions=2")
        out = tmp_path / "server_state.npz"
        done = subprocess.run(
            [str(bindir / "flwr"), "run", str(app), "loopback", "--stream",
             "--run-config", f"out='{out}'"],
            env=deployment.env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert out.exists(), done.stdout[-3000:]
    except BaseException:
        print(deployment.tails())
        raise
    reference = tiny.TinyServer()
    expected = run_federated(reference, tiny.TinyClient, 2, 2, progress=False)
    with np.load(out) as got:
        np.testing.assert_allclose(got["w"], reference.w, rtol=1e-12, atol=0)
        assert float(got["s"]) == pytest.approx(reference.s, rel=1e-12)
        np.testing.assert_array_equal(got["calls"], reference.calls)
        np.testing.assert_allclose(got["w0"], [m["w0"] for m in expected.metrics], rtol=1e-12)
