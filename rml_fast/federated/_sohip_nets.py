"""Heterogeneous feature extractors and training helpers shared by SoHip and its baselines."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

#: The extractor zoo: five architectures that differ in kind (MLP / CNN), depth and width, in the
#: spirit of the authors' heterogeneous "CNN_1..CNN_5" family, scaled to 8x8 digits.
ARCHITECTURES: tuple[dict[str, object], ...] = (
    {"kind": "mlp", "hidden": (64,)},
    {"kind": "mlp", "hidden": (128, 64)},
    {"kind": "cnn", "channels": (8, 16), "fc": 64},
    {"kind": "mlp", "hidden": (96,)},
    {"kind": "cnn", "channels": (16, 16), "fc": 48},
)


class _CNN(nn.Module):
    def __init__(self, image_shape: tuple[int, int], channels: tuple[int, int], fc: int) -> None:
        super().__init__()
        self.image_shape = image_shape
        c1, c2 = channels
        self.conv = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(),
            nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
        )  # fmt: skip
        h, w = image_shape
        self.fc = nn.Sequential(nn.Linear(c2 * (h // 2) * (w // 2), fc), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.conv(x.reshape(x.shape[0], 1, *self.image_shape))
        return self.fc(z.flatten(1))


def build_extractor(
    arch: int, in_features: int, image_shape: tuple[int, int] | None
) -> tuple[nn.Module, int]:
    """Extractor number ``arch`` of :data:`ARCHITECTURES` and its output width ``d_k``."""
    spec = ARCHITECTURES[arch]
    if spec["kind"] == "cnn":
        if image_shape is None:
            raise ValueError(
                f"arch={arch} is a CNN and needs image_shape=(H, W) with H * W == in_features"
            )
        fc = int(spec["fc"])  # type: ignore[call-overload]
        return _CNN(image_shape, spec["channels"], fc), fc  # type: ignore[arg-type]
    layers: list[nn.Module] = []
    width = in_features
    for hidden in spec["hidden"]:  # type: ignore[attr-defined]
        layers += [nn.Linear(width, int(hidden)), nn.ReLU()]
        width = int(hidden)
    return nn.Sequential(*layers), width


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with ``n`` torch threads, restoring the previous count afterwards."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def round_generator(seed: int, client_id: int, server_round: int) -> torch.Generator:
    """A torch generator seeded from ``(seed, client id, round)`` (order-independent streams)."""
    ss = np.random.SeedSequence([int(seed), int(client_id), int(server_round)])
    gen = torch.Generator()
    gen.manual_seed(int(ss.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)))
    return gen


def optimizer_state_to_arrays(opt: torch.optim.Optimizer) -> dict[str, np.ndarray]:
    """Flatten an optimizer's per-parameter state to ``opt/<index>/<name>`` arrays."""
    out: dict[str, np.ndarray] = {}
    for idx, state in opt.state_dict()["state"].items():
        for name, value in state.items():
            arr = value.detach().cpu().numpy() if torch.is_tensor(value) else np.asarray(value)
            out[f"opt/{idx}/{name}"] = np.array(arr, copy=True)
    return out


def optimizer_state_from_arrays(opt: torch.optim.Optimizer, arrays: dict[str, np.ndarray]) -> None:
    """Inverse of :func:`optimizer_state_to_arrays` on a freshly built optimizer."""
    sd = opt.state_dict()
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in arrays.items():
        if not key.startswith("opt/"):
            continue
        _, idx, name = key.split("/", 2)
        state.setdefault(int(idx), {})[name] = torch.from_numpy(np.array(value, copy=True))
    if state:
        sd["state"] = state
        opt.load_state_dict(sd)
