"""The shared dispatch helper: backend choice per device and its errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rml_fast.kernels._dispatch import NUMPY, Device, Kernel, device_of, resolve_device


def _kernel() -> Kernel:
    k = Kernel("test.double")

    @k.register("reference")
    def _ref(x, *, device):
        return ("reference", x * 2)

    @k.register("native")
    def _nat(x, *, device):
        return ("native", x * 2)

    return k


def test_auto_picks_native_on_cpu_and_reference_on_request():
    k = _kernel()
    assert k(3, device=NUMPY) == ("native", 6)
    assert k(3, device=Device("cpu", "cpu")) == ("native", 6)
    assert k(3, device=NUMPY, backend="reference") == ("reference", 6)
    assert k.backends == ("native", "reference")


def test_auto_picks_triton_on_cuda():
    k = _kernel()
    with pytest.raises(ValueError, match="no 'triton' implementation"):
        k.select(Device("cuda", "cuda:0"))
    with pytest.raises(ValueError, match="native backend runs on CPU"):
        k.select(Device("cuda", "cuda:0"), "native")


def test_registration_errors():
    k = _kernel()
    with pytest.raises(ValueError, match="registered twice"):
        k.register("native")(lambda x, *, device: x)
    with pytest.raises(ValueError, match="backend must be one of"):
        k.register("opencl")


def test_triton_backend_on_cpu_needs_the_interpreter(monkeypatch):
    pytest.importorskip("triton")
    k = Kernel("test.t")
    k.register("triton")(lambda *, device: "ran")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        k(device=Device("cpu", "cpu"), backend="triton")
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        k(device=NUMPY, backend="triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert k(device=Device("cpu", "cpu"), backend="triton") == "ran"


def test_resolve_device_and_device_of():
    assert resolve_device(None) is NUMPY
    assert resolve_device("numpy") is NUMPY
    assert resolve_device("cpu") == Device("cpu", "cpu")
    assert resolve_device(torch.device("cpu")) == Device("cpu", "cpu")
    for bad in ("cpu:0", "gpu", "cuda:x"):
        with pytest.raises(ValueError, match="device must be"):
            resolve_device(bad)
    assert device_of(np.zeros(2)) is NUMPY
    assert device_of(torch.zeros(2)) == Device("cpu", "cpu")
