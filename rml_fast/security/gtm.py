"""GTM: gradient-guided token masking against visual prompt injection (ICML 2026).

A vision-language model (VLM) maps an image to ``N`` visual token embeddings
``E = P(V(x))`` (vision encoder ``V``, projector ``P``) that are spliced into the language
model's input embeddings at the image-placeholder positions. GTM scores every image token by
the **hidden-state gradient norm** (HSGN)

    J(E) = ||H^(L)_t(E)||_2,      s_i = ||dJ / dE_i||_2,   i = 1..N,

where ``H^(L)`` are the last-layer hidden states and ``t`` is a target position (the first token
of the user's instruction by default), then sets the ``k = floor(N r / 100)`` highest-scoring
rows of ``E`` to ``fill`` (0) and generates from the masked embeddings. The cost is one extra
forward and one backward pass of the language model; no labels or target strings are needed.

Models are reached through a :class:`VLMAdapter` (batch-first: ``B`` images at once):
:class:`TinyVLMAdapter` for the offline toy :class:`~rml_fast.models.digits_vlm.TinyVLM`,
:class:`CallableVLMAdapter` for any torch VLM given as callables, and :class:`LlavaAdapter`
for Hugging Face ``LlavaForConditionalGeneration`` models.

The injection attack used to evaluate the defense is :func:`image_hijack_pgd` (signed-gradient
descent with gradient accumulation on the teacher-forced cross-entropy of a target response, in
an L-infinity ball or as a square patch) and its metric :func:`attack_success_rate`.

The paper's full text was not available (spec: ``specs/robust_media.md`` §1, reconstructed from
the abstract and the reference code); the target-position modes other than ``"first_text"``,
the configurable ``fill``, greedy decoding as the default, ``mode="contains"`` of the metric and
:func:`ranking_consistency` are **PROPOSED** details.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast, runtime_checkable

import torch
from torch import Tensor

from rml_fast._validation import Interval, check_scalar, check_tensor

__all__ = [
    "CallableVLMAdapter",
    "GTMDefense",
    "LlavaAdapter",
    "TinyVLMAdapter",
    "VLMAdapter",
    "VLMInputs",
    "adversarial_loss",
    "attack_success_rate",
    "hsgn_scores",
    "image_hijack_pgd",
    "n_masked",
    "ranking_consistency",
    "topk_mask",
]

_TARGET_MODES = ("first_text", "last")


# --------------------------------------------------------------------------- checks


def _check_mask_rate(mask_rate: Any) -> float:
    return float(check_scalar(mask_rate, "mask_rate", Interval("real", 0.0, 100.0)))


def _check_fill(fill: Any) -> float:
    return float(check_scalar(fill, "fill", Interval("real", None, None)))


def _check_target_mode(target: Any) -> str | int:
    if isinstance(target, bool) or not isinstance(target, (str, numbers.Integral)):
        raise TypeError(
            f"target must be one of {_TARGET_MODES} or an int position, got "
            f"{type(target).__name__} {target!r}"
        )
    if isinstance(target, str) and target not in _TARGET_MODES:
        raise ValueError(f"target must be one of {_TARGET_MODES} or an int, got {target!r}")
    return target if isinstance(target, str) else int(target)


def _check_embeds(x: Any, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim not in (2, 3) or not x.is_floating_point():
        raise ValueError(
            f"{name} must be a float tensor of shape (N, d) or (B, N, d), got dtype {x.dtype} "
            f"and shape {tuple(x.shape)}"
        )
    if x.shape[-2] < 1 or x.shape[-1] < 1:
        raise ValueError(f"{name} must have at least one token and one feature, got {tuple(x.shape)}")
    return x


def n_masked(n_tokens: int, mask_rate: float) -> int:
    """Number of masked tokens ``k = floor(N r / 100)`` (rounding guarded against float error).

    Examples
    --------
    >>> n_masked(576, 5.0), n_masked(16, 12.5), n_masked(16, 0.0)
    (28, 2, 0)
    """
    n = int(check_scalar(n_tokens, "n_tokens", Interval("int", 0, None)))
    r = _check_mask_rate(mask_rate)
    return min(n, math.floor(round(n * r / 100.0, 9)))


# --------------------------------------------------------------------------- HSGN and masking


def hsgn_scores(
    forward_from_image_embeds: Callable[[Tensor], Tensor],
    image_embeds: Tensor,
    target_index: int | Sequence[int] | Tensor,
) -> Tensor:
    """Hidden-state gradient norm scores ``s_i = ||d ||H_t|| / dE_i||_2`` of the image tokens.

    Implements step 1-3 of GTM (spec §1.1): one forward from the image embeddings ``E`` to the
    last-layer hidden states ``H``, the objective ``J = ||H_t||_2`` at the target position ``t``,
    one backward to ``E``, and the L2 norm of each row of the gradient. Model parameters get no
    gradient. For a batch, ``J = sum_b ||H_{b, t_b}||`` (samples do not interact, so one
    backward gives every sample's gradient).

    Parameters
    ----------
    forward_from_image_embeds : callable
        ``E -> H``: (N, d) -> (T, D), or (B, N, d) -> (B, T, D) for a batch.
    image_embeds : Tensor of shape (N, d) or (B, N, d)
        Float; detached and copied internally (the caller's tensor is not changed).
    target_index : int, or sequence / LongTensor of shape (B,)
        The position ``t`` (negative counts from the end), one per sample for a batch.

    Returns
    -------
    Tensor of shape (N,) or (B, N)
        Non-negative scores, the dtype of ``image_embeds``.

    Examples
    --------
    >>> import torch
    >>> A = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0]])
    >>> f = lambda E: (E @ A.T).sum(0, keepdim=True)   # H_0 = A (E_1 + E_2): (N, 2) -> (1, 3)
    >>> hsgn_scores(f, torch.tensor([[1.0, 1.0], [0.0, 2.0]]), 0)   # ||A^T H_0|| / ||H_0||
    tensor([2.3031, 2.3031])
    """
    if not callable(forward_from_image_embeds):
        raise TypeError("forward_from_image_embeds must be callable (E -> last hidden states)")
    image_embeds = _check_embeds(image_embeds, "image_embeds")
    batched = image_embeds.ndim == 3
    if batched:
        t = torch.as_tensor(target_index, dtype=torch.int64).reshape(-1)
        if t.numel() == 1:
            t = t.expand(image_embeds.shape[0])
        if t.numel() != image_embeds.shape[0]:
            raise ValueError(
                f"target_index must hold one position per sample ({image_embeds.shape[0]}), "
                f"got {t.numel()}"
            )
    else:
        if isinstance(target_index, bool) or not isinstance(target_index, numbers.Integral):
            raise TypeError(
                f"target_index must be an int for image_embeds of shape (N, d), got "
                f"{type(target_index).__name__}"
            )
        t = torch.tensor([int(target_index)])
    e = image_embeds.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        h = forward_from_image_embeds(e)
        if not isinstance(h, Tensor) or h.ndim != (3 if batched else 2):
            raise ValueError(
                "forward_from_image_embeds must return hidden states of shape "
                f"{'(B, T, D)' if batched else '(T, D)'}, got "
                f"{tuple(h.shape) if isinstance(h, Tensor) else type(h).__name__}"
            )
        hb = h if batched else h[None]
        n_pos = hb.shape[1]
        if bool(((t < -n_pos) | (t >= n_pos)).any()):
            raise ValueError(f"target_index {t.tolist()} is out of range for {n_pos} positions")
        rows = hb[torch.arange(hb.shape[0]), t % n_pos]  # (B, D)
        j = torch.linalg.vector_norm(rows, dim=-1).sum()
        (g,) = torch.autograd.grad(j, e)
    return torch.linalg.vector_norm(g, dim=-1).detach()


def topk_mask(
    image_embeds: Tensor, scores: Tensor, mask_rate: float = 5.0, fill: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Set the ``k = floor(N r / 100)`` highest-scoring image tokens to ``fill``.

    Parameters
    ----------
    image_embeds : Tensor of shape (N, d) or (B, N, d)
    scores : Tensor of shape (N,) or (B, N)
        E.g. :func:`hsgn_scores`; ties are broken by the lower token index.
    mask_rate : float in [0, 100], default=5.0
        ``r``, in percent of the ``N`` tokens.
    fill : float, default=0.0
        Value written into the masked rows (**PROPOSED** option; the reference code uses 0).

    Returns
    -------
    masked : Tensor, the shape and dtype of ``image_embeds``
        A detached copy; masked rows are exactly ``fill``, the others bitwise unchanged.
    indices : LongTensor of shape (k,) or (B, k)
        The masked token indices, highest score first.

    Examples
    --------
    >>> import torch
    >>> E = torch.arange(12.0).reshape(4, 3)
    >>> masked, idx = topk_mask(E, torch.tensor([0.1, 0.9, 0.5, 0.2]), mask_rate=50)
    >>> idx.tolist(), masked[:, 0].tolist()
    ([1, 2], [0.0, 0.0, 0.0, 9.0])
    """
    image_embeds = _check_embeds(image_embeds, "image_embeds")
    check_tensor(scores, "scores", floating=False)
    if scores.is_complex() or scores.dtype == torch.bool:
        raise TypeError(f"scores must hold real numbers, got dtype {scores.dtype}")
    if tuple(scores.shape) != tuple(image_embeds.shape[:-1]):
        raise ValueError(
            f"scores must have shape {tuple(image_embeds.shape[:-1])} (one per image token of "
            f"image_embeds of shape {tuple(image_embeds.shape)}), got {tuple(scores.shape)}"
        )
    k = n_masked(image_embeds.shape[-2], mask_rate)
    fill = _check_fill(fill)
    masked = image_embeds.detach().clone()
    order = torch.sort(scores.detach(), dim=-1, descending=True, stable=True).indices
    idx = order[..., :k]
    if k:
        where = idx[..., None].expand(*idx.shape, masked.shape[-1])
        masked.scatter_(-2, where, fill)
    return masked, idx


# --------------------------------------------------------------------------- adapters


@dataclass
class VLMInputs:
    """A batch of prompts with their images, as an adapter prepares it.

    Attributes
    ----------
    input_ids : LongTensor of shape (B, T)
        Token ids, with the image placeholders and, if ``n_answer > 0``, the answer at the end.
    pixel_values : Tensor
        The images in the model's input format, e.g. (B, C, H, W).
    image_token_id : int
        The placeholder id whose rows receive the image embeddings.
    n_answer : int, default=0
        Number of trailing answer tokens (teacher forcing for the attack's loss).
    extra : dict
        Adapter-specific tensors (e.g. ``attention_mask``).
    """

    input_ids: Tensor
    pixel_values: Tensor
    image_token_id: int
    n_answer: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        px = self.pixel_values
        if isinstance(px, Tensor) and px.is_floating_point() and px.device.type != "meta":
            with torch.no_grad():
                if not bool(torch.isfinite(px).all()):
                    raise ValueError("pixel_values must be finite, got NaN or infinite values")

    def with_pixels(self, pixel_values: Tensor) -> VLMInputs:
        """The same prompts with other images (same shape)."""
        return replace(self, pixel_values=pixel_values)

    def without_answer(self) -> VLMInputs:
        """The prompt part only (answer tokens removed)."""
        if not self.n_answer:
            return self
        extra = {
            k: (v[:, : -self.n_answer] if isinstance(v, Tensor) and v.shape[:2] == self.input_ids.shape else v)
            for k, v in self.extra.items()
        }
        return replace(self, input_ids=self.input_ids[:, : -self.n_answer], n_answer=0, extra=extra)


@runtime_checkable
class VLMAdapter(Protocol):
    """What GTM and the attack need from a vision-language model (all batch-first).

    ``prepare(pixel_values, prompt, answer=None) -> VLMInputs``;
    ``image_embeds(inputs) -> (B, N, d)`` (differentiable in ``inputs.pixel_values``);
    ``splice(inputs, image_embeds) -> (B, T, D)`` input embeddings;
    ``last_hidden(inputs, inputs_embeds) -> (B, T, D)`` last-layer hidden states;
    ``logits(inputs, inputs_embeds) -> (B, T, V)``;
    ``target_index(inputs, mode) -> LongTensor (B,)``;
    ``generate_from_embeds(inputs, inputs_embeds, max_new_tokens, greedy) -> (B, n)`` new ids;
    ``decode(ids) -> str``.
    """

    def prepare(self, pixel_values: Tensor, prompt: Any, answer: Any = None) -> VLMInputs:
        """Tokenise ``prompt`` (and a teacher-forced ``answer``) around the image placeholders."""
        ...

    def image_embeds(self, inputs: VLMInputs) -> Tensor:
        """Projected image tokens ``E = P(V(x))`` (B, N, d)."""
        ...

    def splice(self, inputs: VLMInputs, image_embeds: Tensor) -> Tensor:
        """Input embeddings (B, T, D) with the placeholder rows replaced by ``image_embeds``."""
        ...

    def last_hidden(self, inputs: VLMInputs, inputs_embeds: Tensor) -> Tensor:
        """Last-layer hidden states ``H^(L)`` (B, T, D)."""
        ...

    def logits(self, inputs: VLMInputs, inputs_embeds: Tensor) -> Tensor:
        """Next-token logits (B, T, V)."""
        ...

    def target_index(self, inputs: VLMInputs, mode: str | int) -> Tensor:
        """The objective's position ``t`` per sample (B,)."""
        ...

    def generate_from_embeds(
        self, inputs: VLMInputs, inputs_embeds: Tensor, max_new_tokens: int, greedy: bool
    ) -> Tensor:
        """New token ids (B, max_new_tokens) continuing ``inputs_embeds``."""
        ...

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """Text of token ids."""
        ...


class _AdapterBase:
    """Shared ``target_index`` (placeholder-based) for the adapters."""

    def target_index(self, inputs: VLMInputs, mode: str | int = "first_text") -> Tensor:
        """Target positions (B,): ``"first_text"`` = first position after the last image
        placeholder (the first token of the instruction); ``"last"`` = last prompt position (where
        the first answer token is predicted); an int = that position (negative from the end).
        """
        mode = _check_target_mode(mode)
        ids = inputs.input_ids
        b, t = ids.shape
        prompt_len = t - inputs.n_answer
        if isinstance(mode, int):
            if not -prompt_len <= mode < prompt_len:
                raise ValueError(f"target position {mode} is out of range for {prompt_len} prompt tokens")
            return torch.full((b,), mode % prompt_len, dtype=torch.int64)
        if mode == "last":
            return torch.full((b,), prompt_len - 1, dtype=torch.int64)
        is_img = ids[:, :prompt_len] == inputs.image_token_id
        if not bool(is_img.any(1).all()):
            raise ValueError("inputs.input_ids has a row without image placeholder tokens")
        pos = torch.arange(prompt_len).expand(b, -1)
        last_img = torch.where(is_img, pos, torch.full_like(pos, -1)).max(1).values
        return torch.clamp(last_img + 1, max=prompt_len - 1)


class TinyVLMAdapter(_AdapterBase):
    """:class:`VLMAdapter` for :class:`~rml_fast.models.digits_vlm.TinyVLM`.

    Prompts and answers are strings of :data:`~rml_fast.models.digits_vlm.VOCAB` words (or token
    id sequences); images are (B, 1, 16, 16) in [0, 1].

    Parameters
    ----------
    model : TinyVLM
    final_norm : bool, default=False
        Whether ``last_hidden`` is taken after the final LayerNorm. Off by default: a LayerNorm
        output with unit gain and zero bias has norm exactly ``sqrt(D)`` whatever its input, so
        ``||H_t||`` after it carries almost no gradient (exactly none at initialisation).

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models.digits_vlm import TinyVLM
    >>> ad = TinyVLMAdapter(TinyVLM(seed=0))
    >>> inp = ad.prepare(torch.zeros(2, 1, 16, 16), "what digit is this ?")
    >>> tuple(ad.image_embeds(inp).shape), ad.target_index(inp, "first_text").tolist()
    ((2, 16, 48), [17, 17])
    """

    def __init__(self, model: Any, *, final_norm: bool = False) -> None:
        from rml_fast.models.digits_vlm import TinyVLM

        if not isinstance(model, TinyVLM):
            raise TypeError(f"model must be a TinyVLM, got {type(model).__name__}")
        if not isinstance(final_norm, bool):
            raise TypeError(f"final_norm must be a bool, got {type(final_norm).__name__}")
        self.model = model
        self.final_norm = final_norm

    def prepare(self, pixel_values: Tensor, prompt: Any, answer: Any = None) -> VLMInputs:
        """Inputs for images (B, 1, S, S), a prompt and an optional teacher-forced answer."""
        from rml_fast.models.digits_vlm import IMAGE

        pixel_values = self.model.check_pixels(pixel_values, "pixel_values")
        check_tensor(pixel_values, "pixel_values", nonempty=True)
        prompt = _tiny_words(prompt, "prompt")
        if answer is not None:
            answer = _tiny_words(answer, "answer")
        ids = self.model.input_ids(prompt, answer, batch=pixel_values.shape[0])
        n_answer = 0 if answer is None else len(answer.split())
        return VLMInputs(ids, pixel_values, IMAGE, n_answer)

    def image_embeds(self, inputs: VLMInputs) -> Tensor:
        """``P(V(x))``: (B, N, D)."""
        return self.model.image_embeds(inputs.pixel_values)

    def splice(self, inputs: VLMInputs, image_embeds: Tensor) -> Tensor:
        """Input embeddings (B, T, D)."""
        from rml_fast.models.digits_vlm import IMAGE

        check_tensor(image_embeds, "image_embeds", ndim=3, finite=False)
        n = int((inputs.input_ids == IMAGE).sum())
        b, t, d = image_embeds.shape
        if b * t != n or d != self._d_model:
            raise ValueError(
                f"image_embeds must have shape (B, N, {self._d_model}) with B x N = {n} (the "
                f"<image> tokens of inputs.input_ids), got {tuple(image_embeds.shape)}"
            )
        return self.model.splice(inputs.input_ids, image_embeds)

    @property
    def _d_model(self) -> int:
        return int(self.model.lm.W_E.shape[1])

    def _check_inputs_embeds(self, inputs_embeds: Any, finite: bool = False) -> Tensor:
        check_tensor(inputs_embeds, "inputs_embeds", ndim=3, finite=finite, nonempty=True)
        if inputs_embeds.shape[-1] != self._d_model:
            raise ValueError(f"inputs_embeds must have shape (B, T, {self._d_model}), got "
                             f"{tuple(inputs_embeds.shape)}")
        return inputs_embeds

    def last_hidden(self, inputs: VLMInputs, inputs_embeds: Tensor) -> Tensor:
        """Last-layer hidden states (B, T, D): the residual stream after the last block, or
        after the final layer norm when ``final_norm``."""
        self._check_inputs_embeds(inputs_embeds)
        return self.model.hidden(inputs_embeds, final_norm=self.final_norm)

    def logits(self, inputs: VLMInputs, inputs_embeds: Tensor) -> Tensor:
        """Logits (B, T, V)."""
        self._check_inputs_embeds(inputs_embeds)
        return self.model.logits_from_embeds(inputs_embeds)

    def generate_from_embeds(
        self, inputs: VLMInputs, inputs_embeds: Tensor, max_new_tokens: int = 2, greedy: bool = True
    ) -> Tensor:
        """New token ids (B, max_new_tokens); ``T + max_new_tokens - 1 <= n_ctx``."""
        self._check_inputs_embeds(inputs_embeds, finite=True)
        n_new = int(check_scalar(max_new_tokens, "max_new_tokens", Interval("int", 0, None)))
        n_ctx = int(self.model.cfg.n_ctx)
        if inputs_embeds.shape[1] + n_new - 1 > n_ctx:
            raise ValueError(
                f"max_new_tokens={n_new} after {inputs_embeds.shape[1]} positions of "
                f"inputs_embeds exceeds the context n_ctx={n_ctx}"
            )
        if n_new == 0:
            return torch.zeros(inputs_embeds.shape[0], 0, dtype=torch.int64)
        return self.model.generate_from_embeds(inputs_embeds, n_new, greedy=greedy)

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """Words up to ``<eos>``."""
        from rml_fast.models.digits_vlm import decode

        return decode(ids)


class CallableVLMAdapter(_AdapterBase):
    """A :class:`VLMAdapter` built from callables, for any torch VLM.

    Parameters
    ----------
    prepare : callable ``(pixel_values, prompt, answer) -> VLMInputs``
    image_embeds : callable ``(pixel_values) -> (B, N, d)``
        Vision encoder + projector.
    embed_tokens : callable ``(input_ids) -> (B, T, D)``
        The language model's token embedding; image rows are replaced by ``image_embeds``.
    last_hidden : callable ``(inputs_embeds) -> (B, T, D)``
    lm_head : callable ``(hidden) -> (B, T, V)``
    decode : callable ``(ids) -> str``, optional
        Default: the ids joined by spaces.

    Generation is greedy (or multinomial) decoding without a KV cache through ``last_hidden`` and
    ``lm_head``, appending ``embed_tokens`` of each new token.

    Examples
    --------
    >>> import torch
    >>> emb = torch.nn.Embedding(10, 4)
    >>> proj = torch.nn.Linear(3, 4)
    >>> def prepare(px, prompt, answer=None):
    ...     ids = torch.tensor([[1, 9, 9, *prompt, *(answer or [])]] * px.shape[0])
    ...     return VLMInputs(ids, px, 9, len(answer or []))
    >>> ad = CallableVLMAdapter(prepare, proj, emb, lambda e: torch.tanh(e),
    ...                         lambda h: h @ emb.weight.T)
    >>> inp = ad.prepare(torch.ones(1, 2, 3), [4, 5])
    >>> ad.splice(inp, ad.image_embeds(inp)).shape, ad.target_index(inp).tolist()
    (torch.Size([1, 5, 4]), [3])
    """

    def __init__(
        self,
        prepare: Callable[..., VLMInputs],
        image_embeds: Callable[[Tensor], Tensor],
        embed_tokens: Callable[[Tensor], Tensor],
        last_hidden: Callable[[Tensor], Tensor],
        lm_head: Callable[[Tensor], Tensor],
        decode: Callable[[Sequence[int] | Tensor], str] | None = None,
    ) -> None:
        for name, fn in (
            ("prepare", prepare), ("image_embeds", image_embeds), ("embed_tokens", embed_tokens),
            ("last_hidden", last_hidden), ("lm_head", lm_head),
        ):  # fmt: skip
            if not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        if decode is not None and not callable(decode):
            raise TypeError(f"decode must be callable or None, got {type(decode).__name__}")
        self._prepare, self._image_embeds, self._embed = prepare, image_embeds, embed_tokens
        self._last_hidden, self._lm_head = last_hidden, lm_head
        self._decode = decode

    def prepare(self, pixel_values: Tensor, prompt: Any, answer: Any = None) -> VLMInputs:
        """Calls the ``prepare`` callable."""
        check_tensor(pixel_values, "pixel_values", floating=False)
        try:
            out = self._prepare(pixel_values, prompt, answer)
        except (TypeError, ValueError) as exc:
            raise _same_kind(exc)(
                f"the prepare callable failed on pixel_values of shape "
                f"{tuple(pixel_values.shape)}, prompt {prompt!r} and answer {answer!r}: {exc}"
            ) from exc
        if not isinstance(out, VLMInputs):
            raise TypeError(f"prepare must return VLMInputs, got {type(out).__name__}")
        return out

    def image_embeds(self, inputs: VLMInputs) -> Tensor:
        """(B, N, d) from the ``image_embeds`` callable."""
        return self._image_embeds(inputs.pixel_values)

    def splice(self, inputs: VLMInputs, image_embeds: Tensor) -> Tensor:
        """Token embeddings with the placeholder rows replaced (masked scatter)."""
        check_tensor(image_embeds, "image_embeds", finite=False)
        return _masked_splice(self._embed(inputs.input_ids), inputs.input_ids,
                              inputs.image_token_id, image_embeds)

    def last_hidden(self, inputs: VLMInputs, inputs_embeds: Tensor) -> Tensor:
        """(B, T, D) from the ``last_hidden`` callable."""
        return self._last_hidden(inputs_embeds)

    def logits(self, inputs: VLMInputs, inputs_embeds: Tensor) -> Tensor:
        """``lm_head(last_hidden(inputs_embeds))``."""
        return self._lm_head(self._last_hidden(inputs_embeds))

    @torch.no_grad()
    def generate_from_embeds(
        self, inputs: VLMInputs, inputs_embeds: Tensor, max_new_tokens: int = 16, greedy: bool = True
    ) -> Tensor:
        """Greedy / sampled new ids (B, max_new_tokens)."""
        return _decode_loop(
            lambda e: self._lm_head(self._last_hidden(e))[:, -1], self._embed, inputs_embeds,
            max_new_tokens, greedy,
        )

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """The ``decode`` callable, or the ids joined by spaces."""
        if self._decode is not None:
            return self._decode(ids)
        return " ".join(str(int(i)) for i in ids)


def _same_kind(exc: Exception) -> type[Exception]:
    """TypeError or ValueError, whichever ``exc`` is (a plain class: any message fits)."""
    return TypeError if isinstance(exc, TypeError) else ValueError


def _tiny_words(x: Any, name: str) -> str:
    """A TinyVLM prompt/answer as a str of vocabulary words (from a str or token ids)."""
    from rml_fast.models.digits_vlm import decode, encode

    if isinstance(x, str):
        try:
            encode(x)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from exc
        return x
    if not isinstance(x, (Sequence, Tensor)):
        raise TypeError(f"{name} must be a str of TinyVLM words or a sequence of token ids, got "
                        f"{type(x).__name__}")
    try:
        return decode(x, stop_at_eos=False)
    except (TypeError, ValueError) as exc:
        raise _same_kind(exc)(f"{name}: {exc}") from exc


def _masked_splice(emb: Tensor, ids: Tensor, image_token_id: int, image_embeds: Tensor) -> Tensor:
    where = ids == image_token_id
    n = int(where.sum())
    if image_embeds.ndim != 3 or n != image_embeds.shape[0] * image_embeds.shape[1]:
        raise ValueError(
            f"input_ids holds {n} image placeholders for image_embeds of shape "
            f"{tuple(image_embeds.shape)}"
        )
    return emb.masked_scatter(where[..., None], image_embeds.to(emb.dtype))


def _decode_loop(
    next_logits: Callable[[Tensor], Tensor],
    embed: Callable[[Tensor], Tensor],
    inputs_embeds: Tensor,
    max_new_tokens: int,
    greedy: bool,
) -> Tensor:
    emb = inputs_embeds.detach()
    out = []
    for _ in range(int(max_new_tokens)):
        logits = next_logits(emb)
        nxt = logits.argmax(-1) if greedy else torch.multinomial(torch.softmax(logits, -1), 1)[:, 0]
        out.append(nxt)
        emb = torch.cat([emb, embed(nxt[:, None]).to(emb.dtype)], dim=1)
    if not out:
        return torch.zeros(inputs_embeds.shape[0], 0, dtype=torch.int64)
    return torch.stack(out, dim=1)


class LlavaAdapter(_AdapterBase):
    """:class:`VLMAdapter` for Hugging Face ``LlavaForConditionalGeneration`` models.

    The image embeddings are the projector output of ``model.model.get_image_features`` (the
    rows that the model itself scatters into the ``image_token_id`` placeholders); the hidden
    states are ``model.model.language_model(inputs_embeds=...).last_hidden_state`` (after the
    final norm) and the logits ``model.lm_head`` of them.

    Parameters
    ----------
    model : transformers.LlavaForConditionalGeneration
        Frozen (eval mode); its parameters get no gradient.
    tokenizer : optional
        A tokenizer to encode string prompts and decode outputs; without one, prompts and answers
        are token-id sequences.
    final_norm : bool, default=True
        ``last_hidden`` after the language model's final norm (``last_hidden_state``, as the
        reference code reads it) or, if False, its input (the last decoder layer's output).

    Prompts: a sequence of ids that contains the image placeholder once (it is expanded to the
    ``N`` image tokens) or already ``N`` times. Tested on randomly initialised tiny configs
    (``tests/security/test_gtm.py``); no weights are downloaded.
    """

    def __init__(self, model: Any, tokenizer: Any = None, *, final_norm: bool = True) -> None:
        cfg = getattr(model, "config", None)
        if cfg is None or not hasattr(getattr(model, "model", None), "get_image_features"):
            raise TypeError(
                f"model must be a transformers LlavaForConditionalGeneration, got {type(model).__name__}"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.image_token_id = int(cfg.image_token_id)
        if not isinstance(final_norm, bool):
            raise TypeError(f"final_norm must be a bool, got {type(final_norm).__name__}")
        self.final_norm = final_norm

    def _ids(self, x: Any, name: str) -> list[int]:
        if isinstance(x, str):
            if self.tokenizer is None:
                raise TypeError(f"{name} is a str but the adapter has no tokenizer; pass token ids")
            return list(self.tokenizer(x, add_special_tokens=False)["input_ids"])
        return [int(i) for i in x]

    def image_embeds(self, inputs: VLMInputs) -> Tensor:
        """Projected image features (B, N, D)."""
        cfg = self.model.config
        out = self.model.model.get_image_features(
            pixel_values=inputs.pixel_values,
            vision_feature_layer=cfg.vision_feature_layer,
            vision_feature_select_strategy=cfg.vision_feature_select_strategy,
            return_dict=True,
        )
        feats = out.pooler_output
        return torch.stack(list(feats)) if isinstance(feats, (list, tuple)) else feats

    def prepare(self, pixel_values: Tensor, prompt: Any, answer: Any = None) -> VLMInputs:
        """Inputs for images (B, C, H, W), a prompt (ids or str) and an optional answer."""
        if not isinstance(pixel_values, Tensor) or pixel_values.ndim != 4:
            raise ValueError(
                "pixel_values must be a tensor of shape (B, C, H, W), got "
                f"{tuple(pixel_values.shape) if isinstance(pixel_values, Tensor) else type(pixel_values).__name__}"
            )
        with torch.no_grad():
            n_img = self.image_embeds(VLMInputs(torch.zeros(1, 1), pixel_values[:1], 0)).shape[1]
        ids = self._ids(prompt, "prompt")
        count = sum(i == self.image_token_id for i in ids)
        if count == 1:
            at = ids.index(self.image_token_id)
            ids = ids[:at] + [self.image_token_id] * n_img + ids[at + 1 :]
        elif count != n_img:
            raise ValueError(
                f"prompt must contain the image token {self.image_token_id} once or {n_img} times, "
                f"got {count}"
            )
        ans = [] if answer is None else self._ids(answer, "answer")
        row = torch.tensor(ids + ans, dtype=torch.int64)
        b = pixel_values.shape[0]
        ids_t = row.expand(b, -1).clone()
        return VLMInputs(ids_t, pixel_values, self.image_token_id, len(ans),
                         {"attention_mask": torch.ones_like(ids_t)})

    def splice(self, inputs: VLMInputs, image_embeds: Tensor) -> Tensor:
        """``inputs_embeds`` (B, T, D) as the model builds them."""
        emb = self.model.get_input_embeddings()(inputs.input_ids)
        return _masked_splice(emb, inputs.input_ids, self.image_token_id, image_embeds)

    def _hidden(self, inputs_embeds: Tensor) -> Tensor:
        mask = torch.ones(inputs_embeds.shape[:2], dtype=torch.int64, device=inputs_embeds.device)
        lm = self.model.model.language_model
        if self.final_norm:
            return lm(inputs_embeds=inputs_embeds, attention_mask=mask).last_hidden_state
        grabbed: list[Tensor] = []
        handle = lm.norm.register_forward_pre_hook(lambda mod, args: grabbed.append(args[0]))
        try:
            lm(inputs_embeds=inputs_embeds, attention_mask=mask)
        finally:
            handle.remove()
        return grabbed[0]

    def last_hidden(self, inputs: VLMInputs, inputs_embeds: Tensor) -> Tensor:
        """Last-layer hidden states (B, T, D)."""
        return self._hidden(inputs_embeds)

    def logits(self, inputs: VLMInputs, inputs_embeds: Tensor) -> Tensor:
        """Logits (B, T, V)."""
        mask = torch.ones(inputs_embeds.shape[:2], dtype=torch.int64, device=inputs_embeds.device)
        h = self.model.model.language_model(inputs_embeds=inputs_embeds, attention_mask=mask)
        return self.model.lm_head(h.last_hidden_state)

    @torch.no_grad()
    def generate_from_embeds(
        self, inputs: VLMInputs, inputs_embeds: Tensor, max_new_tokens: int = 16, greedy: bool = True
    ) -> Tensor:
        """New ids (B, max_new_tokens), greedy or sampled, without a KV cache."""
        return _decode_loop(
            lambda e: self.logits(inputs, e)[:, -1],
            self.model.get_input_embeddings(), inputs_embeds, max_new_tokens, greedy,
        )

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """The tokenizer's decoding, or the ids joined by spaces."""
        if self.tokenizer is not None:
            return str(self.tokenizer.decode([int(i) for i in ids]))
        return " ".join(str(int(i)) for i in ids)


def _check_adapter(adapter: Any) -> Any:
    if not isinstance(adapter, VLMAdapter):
        raise TypeError(
            f"adapter must implement the VLMAdapter protocol (prepare, image_embeds, splice, "
            f"last_hidden, logits, target_index, generate_from_embeds, decode), got "
            f"{type(adapter).__name__}"
        )
    return adapter


def _check_inputs(inputs: Any) -> VLMInputs:
    if not isinstance(inputs, VLMInputs):
        raise TypeError(f"inputs must be VLMInputs (from adapter.prepare), got {type(inputs).__name__}")
    return inputs


# --------------------------------------------------------------------------- the defense


class GTMDefense:
    """Gradient-guided token masking: score image tokens by HSGN, mask the top ``r`` %, generate.

    Parameters
    ----------
    mask_rate : float in [0, 100], default=5.0
        ``r``: ``k = floor(N r / 100)`` tokens are masked; 0 leaves the model's input unchanged.
    target : {"first_text", "last"} or int, default="first_text"
        The position ``t`` of the objective ``||H_t||``: the first instruction token (reference
        code), the last prompt position, or a fixed position (the last two are **PROPOSED**).
    fill : float, default=0.0
        Value of masked rows (**PROPOSED** option).

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models.digits_vlm import TinyVLM
    >>> ad = TinyVLMAdapter(TinyVLM(seed=0))
    >>> inp = ad.prepare(torch.rand(2, 1, 16, 16, generator=torch.Generator().manual_seed(0)),
    ...                  "what digit is this ?")
    >>> gtm = GTMDefense(mask_rate=12.5)
    >>> gtm.scores(ad, inp).shape, gtm.defend(ad, inp).shape, gtm.generate(ad, inp, 2).shape
    (torch.Size([2, 16]), torch.Size([2, 22, 48]), torch.Size([2, 2]))
    """

    def __init__(self, mask_rate: float = 5.0, target: str | int = "first_text", fill: float = 0.0):
        self.mask_rate = _check_mask_rate(mask_rate)
        self.target = _check_target_mode(target)
        self.fill = _check_fill(fill)

    def __repr__(self) -> str:
        return f"GTMDefense(mask_rate={self.mask_rate}, target={self.target!r}, fill={self.fill})"

    def scores(self, adapter: VLMAdapter, inputs: VLMInputs) -> Tensor:
        """HSGN scores (B, N) of the image tokens of ``inputs`` (one forward + one backward)."""
        adapter, inputs = _check_adapter(adapter), _check_inputs(inputs)
        inputs = inputs.without_answer()
        with torch.no_grad():
            e = adapter.image_embeds(inputs)
        return self._scores(adapter, inputs, e)

    def _scores(self, adapter: VLMAdapter, inputs: VLMInputs, e: Tensor) -> Tensor:
        t = adapter.target_index(inputs, self.target)
        return hsgn_scores(lambda x: adapter.last_hidden(inputs, adapter.splice(inputs, x)), e, t)

    def defend(
        self, adapter: VLMAdapter, inputs: VLMInputs, *, return_indices: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """``inputs_embeds`` (B, T, D) with the top-``k`` image rows set to ``fill``.

        With ``return_indices`` also the masked token indices (B, k).
        """
        adapter, inputs = _check_adapter(adapter), _check_inputs(inputs)
        inputs = inputs.without_answer()
        with torch.no_grad():
            e = adapter.image_embeds(inputs)
        if n_masked(e.shape[1], self.mask_rate) == 0:
            masked, idx = e, torch.zeros(e.shape[0], 0, dtype=torch.int64)
        else:
            s = self._scores(adapter, inputs, e)
            masked, idx = topk_mask(e, s, self.mask_rate, self.fill)
        with torch.no_grad():
            out = adapter.splice(inputs, masked)
        return (out, idx) if return_indices else out

    def generate(
        self, adapter: VLMAdapter, inputs: VLMInputs, max_new_tokens: int = 64, greedy: bool = True
    ) -> Tensor:
        """New token ids (B, max_new_tokens) generated from the defended embeddings.

        Greedy decoding by default (**PROPOSED**: the reference samples at T = 0.2, top-p 0.9).
        """
        check_scalar(max_new_tokens, "max_new_tokens", Interval("int", 0, None))
        emb = cast(Tensor, self.defend(adapter, inputs))  # return_indices=False: a Tensor
        return adapter.generate_from_embeds(inputs.without_answer(), emb, max_new_tokens, greedy)


# --------------------------------------------------------------------------- the attack


def adversarial_loss(adapter: VLMAdapter, inputs: VLMInputs, image_embeds: Tensor | None = None) -> Tensor:
    """Teacher-forced cross-entropy of the answer tokens, per sample (B,).

    ``L_adv = mean_j CE(logits_{T-n+j-1}, y*_j)`` over the ``n = inputs.n_answer`` trailing answer
    tokens; ``image_embeds`` replaces the model's own (to differentiate w.r.t. ``E``).

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models.digits_vlm import TinyVLM
    >>> ad = TinyVLMAdapter(TinyVLM(seed=0))
    >>> inp = ad.prepare(torch.zeros(2, 1, 16, 16), "what digit is this ?", "seven <eos>")
    >>> adversarial_loss(ad, inp).shape
    torch.Size([2])
    """
    n = inputs.n_answer
    if n < 1:
        raise ValueError("inputs must carry a teacher-forced answer (prepare(..., answer=...))")
    e = adapter.image_embeds(inputs) if image_embeds is None else image_embeds
    logits = adapter.logits(inputs, adapter.splice(inputs, e))
    span = logits[:, -n - 1 : -1]
    tgt = inputs.input_ids[:, -n:]
    ce = torch.nn.functional.cross_entropy(
        span.reshape(-1, span.shape[-1]).float(), tgt.reshape(-1), reduction="none"
    )
    return ce.view(tgt.shape).mean(1)


def _parse_patch(patch: Any, shape: tuple[int, ...], generator: torch.Generator | None) -> tuple[int, int, int] | None:
    h, w = shape[-2:]
    if patch is None:
        return None
    if isinstance(patch, str):
        if len(patch) < 2 or patch[0] not in "sp" or not patch[1:].isdigit():
            raise ValueError(f"patch must be 's<n>' (fixed corner) or 'p<n>' (random place), got {patch!r}")
        n = int(patch[1:])
        if not 1 <= n <= min(h, w):
            raise ValueError(f"patch size {n} must be in [1, {min(h, w)}]")
        if patch[0] == "s":
            return n, h - n, w - n  # bottom-right corner
        r = int(torch.randint(0, h - n + 1, (1,), generator=generator))
        c = int(torch.randint(0, w - n + 1, (1,), generator=generator))
        return n, r, c
    if isinstance(patch, numbers.Integral) and not isinstance(patch, bool):
        patch = (int(patch), h - int(patch), w - int(patch))
    if (not isinstance(patch, (tuple, list)) or len(patch) != 3
            or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in patch)):
        raise TypeError(f"patch must be None, an int size, (size, row, col) or 's<n>'/'p<n>', got {patch!r}")
    n, r, c = (int(v) for v in patch)
    if n < 1 or r < 0 or c < 0 or r + n > h or c + n > w:
        raise ValueError(f"patch (size={n}, row={r}, col={c}) does not fit in a {h}x{w} image")
    return n, r, c


def image_hijack_pgd(
    adapter: VLMAdapter,
    image: Tensor,
    prompts: Any,
    target_ids: Any,
    *,
    eps: float = 32 / 255,
    alpha: float = 1 / 255,
    steps: int = 10_000,
    accum: int = 8,
    patch: Any = None,
    generator: torch.Generator | None = None,
    progress: bool = False,
) -> Tensor:
    """Image-hijack attack: signed-gradient descent on the target response's cross-entropy.

    ``L_adv(delta) = mean_prompts mean_j CE(logits(x + delta, prompt), y*_j)`` (teacher forcing,
    loss on the answer span, :func:`adversarial_loss`). Every iteration takes the gradient for
    one prompt (cycling through ``prompts``); every ``accum`` iterations
    ``delta <- clip_eps(delta - alpha sign(sum of the last accum gradients))`` and
    ``delta <- clip(x + delta, 0, 1) - x``. With ``patch`` the perturbation is instead a square
    patch with free values in [0, 1] pasted over the image (``eps`` unused), started uniform
    at random.

    Parameters
    ----------
    adapter : VLMAdapter
    image : Tensor of shape (C, H, W) or (B, C, H, W)
        Pixel values in [0, 1]; each image gets its own perturbation.
    prompts : str / id sequence, or a list of them
        The prompt corpus.
    target_ids : str or sequence of int
        The target response ``y*`` (as accepted by ``adapter.prepare(..., answer=)``).
    eps : float, default=32/255
        L-infinity radius.
    alpha : float, default=1/255
        Step size per update.
    steps : int, default=10000
        Gradient evaluations (``steps // accum`` updates).
    accum : int, default=8
    patch : None, int, (size, row, col), "s<n>" or "p<n>"
        An int or ``"s<n>"``: an n x n patch in the bottom-right corner; ``"p<n>"``: at a random
        place (drawn from ``generator``); a tuple: at (row, col).
    generator : torch.Generator, optional
        Randomness of the patch place and initial values.
    progress : bool, default=False

    Returns
    -------
    Tensor
        The adversarial image(s), the shape of ``image``, in [0, 1].

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models.digits_vlm import TinyVLM
    >>> ad = TinyVLMAdapter(TinyVLM(seed=0))
    >>> x = torch.full((1, 16, 16), 0.5)
    >>> adv = image_hijack_pgd(ad, x, "what digit is this ?", "seven <eos>", steps=4, accum=2)
    >>> float((adv - x).abs().max()) <= 32 / 255 + 1e-6, adv.shape
    (True, torch.Size([1, 16, 16]))
    """
    adapter = _check_adapter(adapter)
    if not isinstance(image, Tensor) or image.ndim not in (3, 4) or not image.is_floating_point():
        raise ValueError(
            "image must be a float tensor of shape (C, H, W) or (B, C, H, W), got "
            f"{tuple(image.shape) if isinstance(image, Tensor) else type(image).__name__}"
        )
    check_tensor(image, "image", nonempty=True)
    if target_ids is None:
        raise TypeError("target_ids must be a str or a sequence of token ids, got None")
    eps = float(check_scalar(eps, "eps", Interval("real", 0.0, 1.0)))
    alpha = float(check_scalar(alpha, "alpha", Interval("real", 0.0, None, "neither")))
    steps = int(check_scalar(steps, "steps", Interval("int", 1, None)))
    accum = int(check_scalar(accum, "accum", Interval("int", 1, None)))
    if steps < accum:
        raise ValueError(f"steps={steps} must be >= accum={accum} (no update would happen)")
    if isinstance(prompts, str) or (isinstance(prompts, Sequence) and prompts and isinstance(prompts[0], numbers.Integral)):
        prompts = [prompts]
    if not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError("prompts must be a prompt or a non-empty list of prompts")
    single = image.ndim == 3
    x = (image[None] if single else image).detach().clone()
    if float(x.min()) < 0.0 or float(x.max()) > 1.0:
        raise ValueError("image must have pixel values in [0, 1]")
    where = _parse_patch(patch, tuple(x.shape), generator)
    for p in prompts:  # validates the prompts, then the target, once
        try:
            adapter.prepare(x, p)
        except (TypeError, ValueError) as exc:
            raise _same_kind(exc)(f"prompts: {exc}") from exc
    try:
        base = [adapter.prepare(x, p, target_ids) for p in prompts]
    except (TypeError, ValueError) as exc:
        raise _same_kind(exc)(f"target_ids: {exc}") from exc
    if base[0].n_answer < 1:
        raise ValueError(f"target_ids must hold at least one token, got {target_ids!r}")
    if where is None:
        delta = torch.zeros_like(x)
    else:
        n, _r, _c = where
        delta = torch.rand((x.shape[0], x.shape[1], n, n), generator=generator, dtype=x.dtype)

    def perturbed(d: Tensor) -> Tensor:
        if where is None:
            return x + d
        n, r, c = where
        out = x.clone()
        out[..., r : r + n, c : c + n] = d
        return out

    it: Any = range(steps)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="image hijack")
    g_sum = torch.zeros_like(delta)
    for i in it:
        d = delta.clone().requires_grad_(True)
        inp = base[i % len(base)].with_pixels(perturbed(d))
        with torch.enable_grad():
            loss = adversarial_loss(adapter, inp).sum()
            (g,) = torch.autograd.grad(loss, d)
        g_sum += g
        if (i + 1) % accum == 0:
            with torch.no_grad():
                delta = delta - alpha * g_sum.sign()
                if where is None:
                    delta = delta.clamp(-eps, eps)
                    delta = (x + delta).clamp(0.0, 1.0) - x
                else:
                    delta = delta.clamp(0.0, 1.0)
            g_sum.zero_()
    adv = perturbed(delta).detach()
    return adv[0] if single else adv


def attack_success_rate(outputs: Sequence[str], targets: str | Sequence[str], mode: str = "prefix") -> float:
    """Fraction of outputs that start with (``"prefix"``) or contain (``"contains"``) the target.

    Whitespace at both ends of outputs and targets is ignored. ``mode="contains"`` is
    **PROPOSED** (the reference code uses prefix matching).

    Examples
    --------
    >>> attack_success_rate(["seven <eos>", "one <eos>", "ok seven"], "seven")
    0.3333333333333333
    >>> attack_success_rate(["seven <eos>", "one <eos>", "ok seven"], "seven", mode="contains")
    0.6666666666666666
    """
    if mode not in ("prefix", "contains"):
        raise ValueError(f"mode must be 'prefix' or 'contains', got {mode!r}")
    if isinstance(outputs, str) or not all(isinstance(o, str) for o in outputs):
        raise TypeError("outputs must be a list of str")
    if isinstance(targets, str):
        targets = [targets] * len(outputs)
    if not isinstance(targets, Sequence):
        raise TypeError(f"targets must be a str or a sequence of str, got {type(targets).__name__}")
    if len(targets) != len(outputs) or not all(isinstance(t, str) for t in targets):
        raise ValueError(f"targets must be a str or {len(outputs)} strs, one per output")
    if not outputs:
        raise ValueError("outputs must not be empty")
    hits = [
        (o.strip().startswith(t.strip()) if mode == "prefix" else t.strip() in o)
        for o, t in zip(outputs, targets, strict=True)
    ]
    return sum(hits) / len(hits)


def ranking_consistency(
    adapter: VLMAdapter, inputs: VLMInputs, *, target: str | int = "first_text", k: int | None = None
) -> dict[str, float]:
    """Agreement of HSGN with the attacker's own gradient norms ``||dL_adv/dE_i||`` (**PROPOSED**).

    The paper's theorem says their rankings agree. ``inputs`` must carry the attacker's target
    answer (``prepare(..., answer=target_ids)``). Returns the mean over the batch of the Spearman
    rank correlation and of the top-``k`` overlap fraction (default ``k = max(1, N // 8)``).

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models.digits_vlm import TinyVLM
    >>> ad = TinyVLMAdapter(TinyVLM(seed=0))
    >>> inp = ad.prepare(torch.rand(2, 1, 16, 16), "what digit is this ?", "seven <eos>")
    >>> sorted(ranking_consistency(ad, inp))
    ['spearman', 'topk_overlap']
    """
    from scipy.stats import spearmanr

    adapter, inputs = _check_adapter(adapter), _check_inputs(inputs)
    s = GTMDefense(0.0, target).scores(adapter, inputs)
    with torch.no_grad():
        e0 = adapter.image_embeds(inputs)
    e = e0.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad(adversarial_loss(adapter, inputs, e).sum(), e)
    a = torch.linalg.vector_norm(g, dim=-1)
    n = s.shape[1]
    k = max(1, n // 8) if k is None else int(check_scalar(k, "k", Interval("int", 1, n)))
    rho, ov = [], []
    for sb, ab in zip(s, a, strict=True):
        rho.append(float(spearmanr(sb.numpy(), ab.numpy()).statistic))
        top_s = set(torch.topk(sb, k).indices.tolist())
        top_a = set(torch.topk(ab, k).indices.tolist())
        ov.append(len(top_s & top_a) / k)
    return {"spearman": sum(rho) / len(rho), "topk_overlap": sum(ov) / len(ov)}
