"""An opacus-style ``PrivacyEngine`` whose per-sample clipping runs on rml_fast's kernels.

Swap ``from opacus import PrivacyEngine`` for ``from rml_fast.compat.opacus import
PrivacyEngine`` and keep the training loop::

    model, optimizer, data_loader = engine.make_private(module=model, optimizer=optimizer,
        data_loader=data_loader, noise_multiplier=1.0, max_grad_norm=1.0)
    for x, y in data_loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()

How it works: the returned module records every parametrised layer's input in its forward
pass and, through a hook on the layer's output, the gradient of the *batch* loss with
respect to that output during ``loss.backward()``. With ``loss_reduction="mean"`` the
per-sample output gradients are that gradient times the batch size (as in opacus), so
``optimizer.step()`` has everything a ghost-clipping pass has: it computes per-sample norms
with :class:`rml_fast.privacy.clipping.ClippingEngine` (ghost Grams or instantiated
per-sample gradients, whichever is cheaper per layer; no per-sample gradient is stored on
the parameters), writes ``sum_i c_i g_i + sigma C z`` with one weighted GEMM per layer
(``c_i = min(1, C / (||g_i|| + 1e-6))``, opacus' clip factor), divides by the expected
batch size for ``"mean"``, and calls the wrapped optimizer. The non-private ``.grad`` that
``loss.backward()`` wrote is replaced, never used.

Accounting is rml_fast's PLD accountant of the Poisson-subsampled Gaussian (pessimistic:
an upper bound on epsilon), whichever ``accountant`` name is given. opacus is needed by this
module only (its ``DPDataLoader`` does the Poisson sampling): ``pip install opacus``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

try:
    from opacus.data_loader import DPDataLoader
except ImportError as exc:  # pragma: no cover - exercised only without opacus
    raise ImportError(
        "rml_fast.compat.opacus needs the opacus package: pip install opacus"
    ) from exc

from rml_fast._validation import Interval, check_scalar
from rml_fast.kernels.random import MAX_COUNTER
from rml_fast.privacy.clipping import CapturedPass, ClippingEngine, NonFiniteGradientError
from rml_fast.privacy.dp_c4 import calibrate_noise_multiplier
from rml_fast.privacy.grad_norms import UnsupportedLayerError
from rml_fast.privacy.pld import PLDAccountant

__all__ = [
    "DPOptimizer",
    "GradSampleModule",
    "PLDPrivacyAccountant",
    "PrivacyEngine",
    "UnsupportedLayerError",
]

ACCOUNTANTS = ("prv", "rdp", "gdp")
LOSS_REDUCTIONS = ("mean", "sum")
_CLIP_EPS = 1e-6  # opacus' clip factor C / (||g_i|| + 1e-6)


_POSITIVE = Interval("real", 0.0, None, "neither")
_NON_NEGATIVE = Interval("real", 0.0, None, "left")


class PLDPrivacyAccountant:
    """The privacy ledger of a :class:`PrivacyEngine`: opacus' accountant interface
    (``step``, ``get_epsilon``, ``history``, ``len``, ``mechanism``) answered by rml_fast's
    PLD accountant of the Poisson-subsampled Gaussian.

    Parameters
    ----------
    mechanism : {"prv", "rdp", "gdp"}, default="prv"
        The name asked for (reported by :meth:`mechanism`). Every name gets the PLD answer,
        an upper bound on epsilon: within discretisation of opacus' PRV accountant and never
        above opacus' RDP bound (RDP is loose); opacus' "gdp" is a CLT approximation that is
        not a bound, so it is not reproduced.
    h : float, default=1e-4
        Discretisation interval of the privacy-loss distribution.
    """

    def __init__(self, mechanism: str = "prv", *, h: float = 1e-4) -> None:
        if mechanism not in ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {mechanism!r}")
        self._mechanism = mechanism
        self.h = check_scalar(h, "h", _POSITIVE)
        self.history: list[tuple[float, float, int]] = []

    def mechanism(self) -> str:
        """The accountant name this ledger was created with."""
        return self._mechanism

    def __len__(self) -> int:
        return len(self.history)

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """Record one step of the Poisson-subsampled Gaussian (merged with an equal last one)."""
        nm = check_scalar(noise_multiplier, "noise_multiplier", _NON_NEGATIVE)
        q = check_scalar(sample_rate, "sample_rate", _NON_NEGATIVE)
        if q > 1.0:
            raise ValueError(f"sample_rate must be in [0, 1], got {sample_rate!r}")
        if self.history and self.history[-1][:2] == (nm, q):
            self.history[-1] = (nm, q, self.history[-1][2] + 1)
        else:
            self.history.append((nm, q, 1))

    def get_epsilon(self, delta: float) -> float:
        """``epsilon`` of everything recorded at ``delta`` (``inf`` after a noiseless step)."""
        delta = check_scalar(delta, "delta", _POSITIVE)
        if delta >= 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        acc = PLDAccountant(h=self.h)
        used = False
        for nm, q, steps in self.history:
            if q == 0.0:
                continue
            if nm == 0.0:
                return math.inf
            acc.compose_gaussian(std=nm, sensitivity=1.0, count=steps, sampling_prob=q)
            used = True
        return float(acc.get_epsilon(delta)) if used else 0.0


class GradSampleModule(nn.Module):
    """The module returned by :meth:`PrivacyEngine.make_private` (opacus' wrapper's role).

    Calls the wrapped module; in a forward pass with gradients enabled it records each
    parametrised layer's input and, during ``backward``, the gradient of the loss with
    respect to the layer's output, for :class:`DPOptimizer` to clip. The parameters are
    frozen during that forward pass, so ``loss.backward()`` computes no (non-private)
    parameter gradient: ``.grad`` is written by ``optimizer.step()`` only. Attributes
    not found on the wrapper are looked up on the wrapped module (``_module``).

    Raises
    ------
    UnsupportedLayerError
        At construction, for a layer with trainable parameters that rml_fast's clipping has
        no rule for (supported: Linear, Conv1d, Conv2d, Embedding, LayerNorm, GroupNorm,
        RMSNorm), or tied weights.
    """

    def __init__(self, m: nn.Module, *, loss_reduction: str = "mean") -> None:
        super().__init__()
        if not isinstance(m, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(m).__name__}")
        if loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"loss_reduction must be one of {LOSS_REDUCTIONS}, got {loss_reduction!r}")
        self._module = m
        self.loss_reduction = loss_reduction
        engine = ClippingEngine(m)  # validates the layers (raises UnsupportedLayerError)
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_pass", 0)
        object.__setattr__(self, "_active", False)
        # layer index -> [input, output gradient or None, forward pass id]
        object.__setattr__(self, "_records", {})
        self._handles = [
            mod.register_forward_hook(self._forward_hook(i))
            for i, (_, mod) in enumerate(engine.layers)
        ]

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_module":
                raise
            return getattr(super().__getattr__("_module"), name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the wrapped module (recording layer inputs when gradients are enabled)."""
        object.__setattr__(self, "_pass", self._pass + 1)
        if not torch.is_grad_enabled():
            return self._module(*args, **kwargs)
        # the parameters are frozen for the forward pass, so that loss.backward() computes
        # only the layer-output gradients the clipping needs (each parametrised layer's
        # output is made to require grad in the hook), not the non-private weight gradients
        frozen = [p for p in self._engine.params if p.requires_grad]
        for p in frozen:
            p.requires_grad_(False)
        object.__setattr__(self, "_active", True)
        try:
            return self._module(*args, **kwargs)
        finally:
            object.__setattr__(self, "_active", False)
            for p in frozen:
                p.requires_grad_(True)

    def _forward_hook(self, i: int) -> Callable[..., None]:
        name = self._engine.layers[i][0]

        def hook(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> Any:
            if not self._active or not torch.is_grad_enabled():
                return None
            if not isinstance(output, torch.Tensor):
                raise UnsupportedLayerError(f"layer {name!r} returned a non-tensor")
            if not output.requires_grad:
                if not output.is_floating_point():
                    return None
                # no earlier layer feeds it a gradient: the output becomes a leaf of the
                # graph (no copy); an in-place operation on it is refused by autograd
                output.requires_grad_(True)
            old = self._records.get(i)
            if old is not None:
                if old[1] is not None:
                    raise ValueError(
                        "a second forward/backward before optimizer.step(): gradient "
                        "accumulation is not supported with Poisson sampling (as in opacus); "
                        "call optimizer.step() or optimizer.zero_grad() first"
                    )
                if old[2] == self._pass:
                    raise UnsupportedLayerError(
                        f"layer {name!r} ran twice in one forward pass; per-sample clipping "
                        "needs each layer to run once per pass"
                    )
            rec = [inputs[0].detach(), None, self._pass]
            self._records[i] = rec

            # a tensor hook gets the gradient w.r.t. the value the layer returned, also when
            # a later operation (ReLU(inplace=True)) modifies the tensor in place
            def grad_hook(g: torch.Tensor) -> None:
                if rec[1] is not None:
                    raise ValueError(
                        "a second backward through one forward pass before optimizer.step() "
                        "is not supported (gradient accumulation)"
                    )
                rec[1] = g.detach()

            output.register_hook(grad_hook)
            return output

        return hook

    def _take(self) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
        """The recorded (layer index, input, output gradient) of the last backward; clears."""
        recs = [(i, r[0], r[1]) for i, r in sorted(self._records.items()) if r[1] is not None]
        self._records.clear()
        return recs

    def _clear(self) -> None:
        self._records.clear()

    def cleanup(self) -> None:
        """Remove the hooks; the wrapped module is left as it was before ``make_private``."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self._engine.close()
        self._records.clear()


class DPOptimizer(torch.optim.Optimizer):
    """The optimizer returned by :meth:`PrivacyEngine.make_private` (opacus' ``DPOptimizer``).

    ``step()`` clips the per-sample gradients of the last ``loss.backward()`` through the
    :class:`GradSampleModule` to ``max_grad_norm`` (opacus' factor ``min(1, C / (||g_i||
    + 1e-6))``), adds Gaussian noise of std ``noise_multiplier * max_grad_norm`` (Philox
    stream, one fresh key per step drawn from ``noise_generator`` or torch's default
    generator), divides by ``expected_batch_size`` for ``loss_reduction="mean"``, and then
    steps the wrapped optimizer. ``param_groups``, ``state`` and ``defaults`` are the wrapped
    optimizer's.

    Attributes
    ----------
    last_per_sample_norms : torch.Tensor or None
        The per-sample gradient norms (float64) of the last step, before clipping.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        module: GradSampleModule,
        *,
        noise_multiplier: float,
        max_grad_norm: float,
        expected_batch_size: int | float,
        loss_reduction: str = "mean",
        generator: torch.Generator | None = None,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if not isinstance(module, GradSampleModule):
            raise TypeError(f"module must be a GradSampleModule, got {type(module).__name__}")
        if loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"loss_reduction must be one of {LOSS_REDUCTIONS}, got {loss_reduction!r}")
        self.original_optimizer = optimizer
        self.module = module
        self.noise_multiplier = check_scalar(noise_multiplier, "noise_multiplier", _NON_NEGATIVE)
        self.max_grad_norm = check_scalar(max_grad_norm, "max_grad_norm", _POSITIVE)
        self.expected_batch_size = expected_batch_size
        if loss_reduction == "mean":
            check_scalar(expected_batch_size, "expected_batch_size", _POSITIVE)
        self.loss_reduction = loss_reduction
        self.generator = generator
        self.step_hook: Callable[[DPOptimizer], None] | None = None
        self.accumulated_iterations = 1
        self.last_per_sample_norms: torch.Tensor | None = None

    # the wrapped optimizer's state, as opacus exposes it
    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """The wrapped optimizer's ``param_groups``."""
        return self.original_optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.original_optimizer.param_groups = value

    @property
    def state(self) -> defaultdict[Any, Any]:  # type: ignore[override]
        """The wrapped optimizer's ``state``."""
        return self.original_optimizer.state

    @state.setter
    def state(self, value: defaultdict[Any, Any]) -> None:
        self.original_optimizer.state = value

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        """The wrapped optimizer's ``defaults``."""
        return self.original_optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.original_optimizer.defaults = value

    @property
    def params(self) -> list[nn.Parameter]:
        """Every parameter of the wrapped optimizer's groups."""
        return [p for g in self.param_groups for p in g["params"]]

    def attach_step_hook(self, fn: Callable[[DPOptimizer], None]) -> None:
        """Call ``fn(self)`` after every private step (the accountant's hook)."""
        self.step_hook = fn

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients and the recorded per-sample data of the last pass."""
        self.module._clear()
        self.original_optimizer.zero_grad(set_to_none)

    def _seed(self) -> int:
        return int(torch.randint(0, MAX_COUNTER, (1,), generator=self.generator,
                                 dtype=torch.int64).item())

    def pre_step(self) -> bool:
        """Clip, noise and scale the gradients of the last backward into ``.grad``."""
        engine: ClippingEngine = self.module._engine
        recs = self.module._take()
        if not recs:
            raise ValueError(
                "optimizer.step() found no per-sample gradients: run the forward pass through "
                "the module returned by make_private and loss.backward() before step()"
            )
        sizes = {x.shape[0] for _, x, _ in recs}
        if len(sizes) != 1:
            raise ValueError(f"layers saw different batch sizes {sorted(sizes)}; the batch "
                             "must be dimension 0 (batch_first=True)")
        n = sizes.pop()
        scale = float(n) if self.loss_reduction == "mean" else 1.0
        cp = CapturedPass(n, [], engine.params)
        if n > 0:
            for i, x, g in recs:
                name, mod = engine.layers[i]
                dy = g * scale if scale != 1.0 else g
                cp.forms.append((name, engine.rules.lookup(mod)(mod, x, dy)))
            norms = engine.norms(cp)
            if not bool(torch.isfinite(norms).all()):
                bad = torch.nonzero(~torch.isfinite(norms)).flatten()[:10].tolist()
                raise NonFiniteGradientError(
                    "per-sample gradient norms are not finite (samples "
                    f"{bad}); no .grad was written and no step taken", samples=bad)
            w = (self.max_grad_norm / (norms + _CLIP_EPS)).clamp(max=1.0)
            terms = [(cp, w)]
        else:
            norms = torch.zeros(0, dtype=torch.float64)
            terms = []
        self.last_per_sample_norms = norms
        engine.accumulate(terms, noise_std=self.noise_multiplier * self.max_grad_norm,
                          seed=self._seed(), consume=True)
        if self.loss_reduction == "mean":
            denom = float(self.expected_batch_size) * self.accumulated_iterations
            for p in engine.params:
                p.grad.div_(denom)  # type: ignore[union-attr]
        if self.step_hook is not None:
            self.step_hook(self)
        return True

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Private step: ``closure`` (if given) runs forward and backward first."""
        if closure is not None:
            with torch.enable_grad():
                closure()
        self.pre_step()
        return self.original_optimizer.step()

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's ``state_dict()``."""
        return self.original_optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load into the wrapped optimizer."""
        self.original_optimizer.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return repr(self.original_optimizer)


class PrivacyEngine:
    """opacus' ``PrivacyEngine`` with rml_fast's clipping kernels and PLD accounting.

    Parameters
    ----------
    accountant : {"prv", "rdp", "gdp"}, default="prv"
        Accepted for compatibility; the epsilon is always rml_fast's PLD bound (see
        :class:`PLDPrivacyAccountant`).
    secure_mode : bool, default=False
        ``True`` raises ``ValueError``: rml_fast's noise is the Philox stream, not a
        cryptographically secure generator.
    """

    def __init__(self, *, accountant: str = "prv", secure_mode: bool = False) -> None:
        if secure_mode:
            raise ValueError("secure_mode=True is not supported by rml_fast.compat.opacus: the "
                             "noise comes from the Philox stream, which is not a cryptographically "
                             "secure generator; use opacus with torchcsprng for that")
        self.accountant = PLDPrivacyAccountant(accountant)
        self.secure_mode = False

    def make_private(
        self,
        *,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        data_loader: torch.utils.data.DataLoader[Any],
        noise_multiplier: float,
        max_grad_norm: float,
        criterion: Any = None,
        batch_first: bool = True,
        loss_reduction: str = "mean",
        poisson_sampling: bool = True,
        clipping: str = "flat",
        noise_generator: torch.Generator | None = None,
        grad_sample_mode: str = "hooks",
        wrap_model: bool = True,
        rand_on_empty: bool = False,
        **kwargs: Any,
    ) -> tuple[GradSampleModule, DPOptimizer, torch.utils.data.DataLoader[Any]]:
        """Return ``(module, optimizer, data_loader)`` for private training, as opacus does.

        The module is a :class:`GradSampleModule`, the optimizer a :class:`DPOptimizer`
        with ``expected_batch_size = int(len(dataset) / len(data_loader))``, the loader
        opacus' ``DPDataLoader`` (Poisson sampling at rate ``1 / len(data_loader)``) when
        ``poisson_sampling`` (else the loader itself).

        Raises
        ------
        UnsupportedLayerError
            For a layer with trainable parameters that rml_fast's clipping does not support.
        ValueError
            For options without an rml_fast equivalent: ``clipping`` other than ``"flat"``,
            per-layer ``max_grad_norm`` lists, ``batch_first=False``, ``wrap_model=False``,
            a ``grad_sample_mode`` other than ``"hooks"`` (ghost modes return a criterion
            in opacus), distributed modules, extra keyword arguments; and for optimizer
            parameters that are not the module's.
        """
        if kwargs:
            raise ValueError(f"unsupported keyword arguments {sorted(kwargs)}")
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if not isinstance(data_loader, torch.utils.data.DataLoader):
            raise TypeError(f"data_loader must be a DataLoader, got {type(data_loader).__name__}")
        noise_multiplier = check_scalar(noise_multiplier, "noise_multiplier", _NON_NEGATIVE)
        if isinstance(max_grad_norm, (list, tuple)):
            raise ValueError("max_grad_norm: per-layer clipping (a list) is not supported; "
                             "give one float (flat clipping)")
        max_grad_norm = check_scalar(max_grad_norm, "max_grad_norm", _POSITIVE)
        if clipping != "flat":
            raise ValueError(f"clipping={clipping!r} is not supported; only 'flat'")
        if loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"loss_reduction must be one of {LOSS_REDUCTIONS}, got {loss_reduction!r}")
        if not batch_first:
            raise ValueError("batch_first=False is not supported: the batch must be dimension 0")
        if not wrap_model:
            raise ValueError("wrap_model=False is not supported; use the returned module")
        if grad_sample_mode != "hooks":
            raise ValueError(f"grad_sample_mode={grad_sample_mode!r} is not supported; rml_fast "
                             "chooses ghost or instantiated norms per layer itself: use 'hooks'")
        if noise_generator is not None and not isinstance(noise_generator, torch.Generator):
            raise TypeError("noise_generator must be a torch.Generator or None, got "
                            f"{type(noise_generator).__name__}")
        if isinstance(module, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            raise ValueError("distributed / data-parallel modules are not supported")
        own = {id(p) for p in module.parameters()}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in own:
                    raise ValueError("optimizer: its parameters are not the module's parameters")
        wrapped = GradSampleModule(module, loss_reduction=loss_reduction)
        if poisson_sampling:
            data_loader = DPDataLoader.from_data_loader(
                data_loader, distributed=False, batch_first=True, rand_on_empty=rand_on_empty)
        sample_rate = 1.0 / len(data_loader)
        expected_batch_size = int(len(data_loader.dataset) * sample_rate)  # type: ignore[arg-type]
        dp_optimizer = DPOptimizer(
            optimizer, wrapped, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
            expected_batch_size=expected_batch_size, loss_reduction=loss_reduction,
            generator=noise_generator,
        )
        accountant = self.accountant

        def hook(opt: DPOptimizer) -> None:
            accountant.step(noise_multiplier=opt.noise_multiplier,
                            sample_rate=sample_rate * opt.accumulated_iterations)

        dp_optimizer.attach_step_hook(hook)
        return wrapped, dp_optimizer, data_loader

    def make_private_with_epsilon(
        self,
        *,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        data_loader: torch.utils.data.DataLoader[Any],
        target_epsilon: float,
        target_delta: float,
        epochs: int,
        max_grad_norm: float,
        **kwargs: Any,
    ) -> tuple[GradSampleModule, DPOptimizer, torch.utils.data.DataLoader[Any]]:
        """:meth:`make_private` with the smallest noise multiplier (PLD-calibrated, to 0.1 %)
        that keeps ``epochs * len(data_loader)`` steps ``(target_epsilon, target_delta)``-DP.

        Raises
        ------
        ValueError
            If privacy was already spent (the calibration assumes a fresh ledger), or on
            out-of-range targets.
        """
        epochs = int(check_scalar(epochs, "epochs", Interval("int", 1, None)))
        if len(self.accountant) > 0:
            raise ValueError("make_private_with_epsilon: privacy was already spent on this "
                             "engine; the calibrated noise would not meet target_epsilon")
        sample_rate = 1.0 / len(data_loader)
        sigma = calibrate_noise_multiplier(target_epsilon, target_delta, sample_rate,
                                           int(epochs) * len(data_loader))
        return self.make_private(module=module, optimizer=optimizer, data_loader=data_loader,
                                 noise_multiplier=sigma, max_grad_norm=max_grad_norm, **kwargs)

    def get_epsilon(self, delta: float) -> float:
        """Epsilon spent so far at ``delta`` (PLD upper bound)."""
        return self.accountant.get_epsilon(delta)
