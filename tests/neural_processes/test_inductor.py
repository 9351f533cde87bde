"""SFConvCNP under ``torch.compile`` with the default Inductor backend (issue 23 §4).

Inductor's vectorised CPU code (torch 2.13) corrupted the heap in the backward of the split
spectral product's graph when more than one thread ran ("double free or corruption"); traced
graphs now take the embedding formulation. The run is in a subprocess: a regression aborts
the interpreter rather than failing an assertion.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

_SCRIPT = textwrap.dedent(
    """
    import torch
    from rml_fast.neural_processes.models import SFConvCNP

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = SFConvCNP(embed_channels=32, feedforward_channels=64, num_layers=2, groups=4)
    g = torch.Generator().manual_seed(1)
    xc, xq = torch.rand(16, 64, 1, generator=g), torch.rand(16, 64, 1, generator=g)
    yc, yq = torch.sin(8 * xc), torch.sin(8 * xq)

    def step():
        model.zero_grad()
        loss = -model(xc, yc, xq).log_prob(yq).mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    loss_e, grads_e = step()
    compiled = torch.compile(step)
    for _ in range(3):
        loss_c, grads_c = compiled()
    assert len(grads_c) == len(grads_e) > 0
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-4, atol=1e-5)
    for a, b in zip(grads_c, grads_e):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4 * float(b.abs().max()) + 1e-6)
    print("OK")
    """
)


def test_inductor_train_step_equals_eager_with_two_threads(tmp_path):
    env_cache = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    import os

    env = {**os.environ, **env_cache, "OMP_NUM_THREADS": "2"}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), (
        f"exit code {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
