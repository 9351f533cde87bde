"""A tiny vision-language model on scikit-learn's digits, trained offline on a CPU in seconds.

:class:`TinyVLM` is the test model of the GTM defense (:mod:`rml_fast.security.gtm`); it has the
parts of a LLaVA-style VLM:

* a vision encoder ``V``: the (B, 1, 16, 16) image in [0, 1] is cut into ``N = (16 / p)^2``
  patches of ``p x p`` pixels (``p = 4``: N = 16), each flattened, embedded linearly, plus a
  learned patch position, GELU, linear -- ``V(x)`` of shape (B, N, d_vision);
* a projector ``P`` (linear) to the language model width: ``E = P(V(x))`` of shape (B, N, D);
* a small causal transformer (:class:`~rml_fast.models.transformer.TinyTransformer` blocks)
  over a tiny vocabulary (:data:`VOCAB`: the ten digit words, a few prompt words, ``<bos>``,
  ``<eos>``, the image placeholder ``<image>``). The token sequence is
  ``<bos> <image> x N  prompt words  answer``; the ``<image>`` rows of the input embeddings are
  replaced by ``E`` ("splicing").

Task: "what digit is this ?" (four prompt templates, :data:`PROMPTS`) -> the digit's word and
``<eos>``. :func:`train_digits_vlm` trains it with cross-entropy on the answer tokens only
(Adam, seeded, resumable from a checkpoint). ``token_dropout`` zeroes each image embedding row
with that probability during training, so that a model which loses a few image tokens (as under
GTM masking, whose fill is 0) still sees in-distribution input.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from rml_fast._validation import Interval, check_scalar, check_tensor
from rml_fast.models.digits_diffusion import _check_losses
from rml_fast.models.transformer import TinyConfig, TinyTransformer

__all__ = [
    "DIGIT_WORDS",
    "PROMPTS",
    "VOCAB",
    "TinyVLM",
    "TinyVLMConfig",
    "TrainedVLM",
    "decode",
    "digit_of_token",
    "digits_vlm_images",
    "digits_vlm_split",
    "encode",
    "train_digits_vlm",
]

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: the vocabulary: specials, prompt words, digit words (32 tokens)
VOCAB: tuple[str, ...] = (
    "<pad>", "<bos>", "<eos>", "<image>",
    "what", "which", "digit", "number", "is", "this", "in", "the", "image", "picture", "name",
    "do", "you", "see", "?", "answer", ":", "ok",
    *DIGIT_WORDS,
)  # fmt: skip
_ID = {w: i for i, w in enumerate(VOCAB)}
BOS, EOS, IMAGE = _ID["<bos>"], _ID["<eos>"], _ID["<image>"]
#: the prompt templates of the task
PROMPTS = (
    "what digit is this ?",
    "which number is in the image ?",
    "name the digit in the picture ?",
    "what number do you see ?",
)


def encode(text: str) -> list[int]:
    """Token ids of a whitespace-separated string of :data:`VOCAB` words.

    Examples
    --------
    >>> encode("seven <eos>")
    [29, 2]
    """
    return _encode(text, "text")


def _encode(text: Any, name: str) -> list[int]:
    """:func:`encode`; errors name the caller's argument ``name``."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    out = []
    for w in text.split():
        if w not in _ID:
            raise ValueError(f"{name}: word {w!r} is not in the TinyVLM vocabulary")
        out.append(_ID[w])
    return out


def _check_ids(ids: Any, name: str, ndim: int | None = None) -> Tensor:
    """Token ids: an integer tensor with values (not ``meta``) in ``[0, len(VOCAB))``."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor of token ids, got {ids.dtype}")
    if ndim is not None and ids.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(ids.shape)}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= len(VOCAB)):
        raise ValueError(f"{name} must hold TinyVLM token ids in [0, {len(VOCAB)})")
    return ids


def decode(ids: Sequence[int] | Tensor, *, stop_at_eos: bool = True) -> str:
    """The words of token ids joined by spaces (up to and including the first ``<eos>``).

    Examples
    --------
    >>> decode([29, 2, 18])
    'seven <eos>'
    """
    if isinstance(ids, Tensor):
        ids = _check_ids(ids, "ids").reshape(-1).tolist()
    elif isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"ids must be a sequence of token ids, got {type(ids).__name__}")
    ids = list(ids)
    for t in ids:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise TypeError(f"ids must hold int token ids, got {type(t).__name__} {t!r}")
    words = []
    for i in [int(t) for t in ids]:
        if not 0 <= i < len(VOCAB):
            raise ValueError(f"ids: {i} is not a TinyVLM token id (0..{len(VOCAB) - 1})")
        words.append(VOCAB[i])
        if stop_at_eos and i == EOS:
            break
    return " ".join(words)


def digits_vlm_images(size: int = 16) -> tuple[Tensor, Tensor]:
    """scikit-learn's 1,797 digits, bilinearly upsampled, as float32 (n, 1, size, size) in [0, 1].

    Returns the images and the int64 labels (n,).

    Examples
    --------
    >>> x, y = digits_vlm_images()
    >>> tuple(x.shape), float(x.min()) >= 0.0, float(x.max()) <= 1.0, int(y[3])
    ((1797, 1, 16, 16), True, True, 3)
    """
    from sklearn.datasets import load_digits

    size = int(check_scalar(size, "size", Interval("int", 8, None)))
    d = load_digits()
    x = torch.as_tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    if size != 8:
        x = nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return x.clamp(0.0, 1.0), torch.as_tensor(d.target, dtype=torch.int64)


def digits_vlm_split(seed: int = 0, test_size: float = 0.25) -> tuple[Tensor, Tensor]:
    """Seeded train / test index split of the 1,797 digits: ``(train_idx, test_idx)`` (int64).

    Examples
    --------
    >>> tr, te = digits_vlm_split(0)
    >>> len(tr), len(te)
    (1348, 449)
    """
    seed = int(check_scalar(seed, "seed", Interval("int", 0, None)))
    check_scalar(test_size, "test_size", Interval("real", 0.0, 1.0, "neither"))
    perm = np.random.default_rng(seed).permutation(1797)
    n_test = round(test_size * 1797)
    return torch.as_tensor(perm[n_test:]), torch.as_tensor(perm[:n_test])


@dataclass(frozen=True)
class TinyVLMConfig:
    """Shape of a :class:`TinyVLM`.

    Parameters
    ----------
    image_size : int, default=16
        Side of the square grey image (pixels in [0, 1]).
    patch : int, default=4
        Patch side; ``N = (image_size // patch) ** 2`` image tokens (16 by default).
    d_vision : int, default=32
        Width ``d`` of the vision features ``V(x)``.
    d_model, n_layers, n_heads, d_mlp : int
        The language model (:class:`~rml_fast.models.transformer.TinyConfig`).
    n_ctx : int, default=32
        Maximum sequence length (image tokens + prompt + answer + 1).
    """

    image_size: int = 16
    patch: int = 4
    d_vision: int = 32
    d_model: int = 48
    n_layers: int = 2
    n_heads: int = 4
    d_mlp: int = 96
    n_ctx: int = 32

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            check_scalar(value, f"TinyVLMConfig.{name}", Interval("int", 1, None))
        if self.image_size % self.patch:
            raise ValueError(
                f"TinyVLMConfig.patch={self.patch} must divide image_size={self.image_size}"
            )
        if self.n_tokens + 10 > self.n_ctx:
            raise ValueError(
                f"TinyVLMConfig.n_ctx={self.n_ctx} is too short for {self.n_tokens} image tokens"
            )

    @property
    def n_tokens(self) -> int:
        """Number of image tokens ``N``."""
        return (self.image_size // self.patch) ** 2


class TinyVLM(nn.Module):
    """Vision encoder -> projector -> causal transformer over :data:`VOCAB` (see the module doc).

    Parameters
    ----------
    cfg : TinyVLMConfig, optional
    seed : int, default=0
        Seeds the weight initialisation (global RNG state untouched).

    Examples
    --------
    >>> vlm = TinyVLM(seed=0)
    >>> x = torch.zeros(2, 1, 16, 16)
    >>> ids = vlm.input_ids("what digit is this ?", batch=2)
    >>> tuple(vlm.image_embeds(x).shape), tuple(vlm(x, ids).shape)
    ((2, 16, 48), (2, 22, 32))
    """

    def __init__(self, cfg: TinyVLMConfig | None = None, *, seed: int = 0) -> None:
        super().__init__()
        cfg = TinyVLMConfig() if cfg is None else cfg
        if not isinstance(cfg, TinyVLMConfig):
            raise TypeError(f"cfg must be a TinyVLMConfig, got {type(cfg).__name__}")
        seed = int(check_scalar(seed, "seed", Interval("int", 0, 2**64 - 1)))
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.patch_embed = nn.Linear(cfg.patch * cfg.patch, cfg.d_vision)
            self.patch_pos = nn.Parameter(torch.randn(cfg.n_tokens, cfg.d_vision) * 0.1)
            self.vision_out = nn.Linear(cfg.d_vision, cfg.d_vision)
            self.projector = nn.Linear(cfg.d_vision, cfg.d_model)
            self.lm = TinyTransformer(
                TinyConfig(
                    n_layers=cfg.n_layers,
                    d_model=cfg.d_model,
                    n_heads=cfg.n_heads,
                    d_mlp=cfg.d_mlp,
                    n_ctx=cfg.n_ctx,
                    d_vocab=len(VOCAB),
                ),
                seed=seed,
            )

    # --- parts ---------------------------------------------------------------------------

    def check_pixels(self, pixels: Any, name: str = "pixels") -> Tensor:
        """``pixels`` as a float tensor (B, 1, S, S); raises naming ``name`` otherwise."""
        s = self.cfg.image_size
        if not isinstance(pixels, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(pixels).__name__}")
        if pixels.device.type == "meta":
            raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
        if pixels.ndim != 4 or tuple(pixels.shape[1:]) != (1, s, s):
            raise ValueError(
                f"{name} must have shape (batch, 1, {s}, {s}), got {tuple(pixels.shape)}"
            )
        if not pixels.is_floating_point():
            raise TypeError(f"{name} must be a float tensor, got {pixels.dtype}")
        return pixels

    def vision(self, pixels: Tensor) -> Tensor:
        """Vision features ``V(x)``: (B, N, d_vision) for images (B, 1, S, S)."""
        pixels = self.check_pixels(pixels)
        p = self.cfg.patch
        b = pixels.shape[0]
        patches = pixels.unfold(2, p, p).unfold(3, p, p)  # (B, 1, S/p, S/p, p, p)
        patches = patches.reshape(b, self.cfg.n_tokens, p * p)
        h = nn.functional.gelu(self.patch_embed(patches) + self.patch_pos)
        return self.vision_out(h)

    def image_embeds(self, pixels: Tensor) -> Tensor:
        """Projected image tokens ``E = P(V(x))``: (B, N, D)."""
        return self.projector(self.vision(pixels))

    def input_ids(self, prompt: str, answer: str | None = None, *, batch: int = 1) -> Tensor:
        """``<bos> <image> x N prompt [answer]`` as a LongTensor (batch, T).

        Examples
        --------
        >>> TinyVLM().input_ids("what digit is this ?", "seven <eos>").shape
        torch.Size([1, 24])
        """
        batch = int(check_scalar(batch, "batch", Interval("int", 1, None)))
        ids = [BOS, *([IMAGE] * self.cfg.n_tokens), *_encode(prompt, "prompt")]
        if answer is not None:
            ids += _encode(answer, "answer")
        if len(ids) > self.cfg.n_ctx:
            raise ValueError(f"prompt + answer: {len(ids)} tokens exceed n_ctx={self.cfg.n_ctx}")
        return torch.tensor([ids] * batch, dtype=torch.int64)

    def _check_embeds(self, x: Any, name: str) -> Tensor:
        """Embeddings (B, T, d_model): real floating, with values; non-finite values propagate."""
        check_tensor(x, name, ndim=3, finite=False)
        if x.shape[-1] != self.cfg.d_model:
            raise ValueError(f"{name} must have shape (B, T, {self.cfg.d_model}), got {tuple(x.shape)}")
        if x.device != self.lm.W_E.device:
            raise ValueError(f"{name} must be on the model's device {self.lm.W_E.device}, got {x.device}")
        return x

    def splice(self, input_ids: Tensor, image_embeds: Tensor) -> Tensor:
        """Input embeddings (B, T, D): token embeddings with the ``<image>`` rows set to ``E``."""
        _check_ids(input_ids, "input_ids", 2)
        self._check_embeds(image_embeds, "image_embeds")
        if image_embeds.shape[0] != input_ids.shape[0]:
            raise ValueError(
                f"image_embeds must have input_ids' batch size {input_ids.shape[0]}, got "
                f"{tuple(image_embeds.shape)}"
            )
        emb = self.lm.W_E[input_ids]
        where = input_ids == IMAGE
        b, n = image_embeds.shape[:2]
        if int(where.sum()) != b * n:
            raise ValueError(
                f"input_ids holds {int(where.sum())} <image> tokens for {b} x {n} image "
                f"embeddings (image_embeds of shape {tuple(image_embeds.shape)})"
            )
        return emb.masked_scatter(where[..., None], image_embeds.to(emb.dtype))

    def hidden(self, inputs_embeds: Tensor, *, final_norm: bool = True) -> Tensor:
        """Last-layer hidden states (B, T, D) (after the final layer norm when ``final_norm``)."""
        self._check_embeds(inputs_embeds, "inputs_embeds")
        t = inputs_embeds.shape[1]
        if t > self.cfg.n_ctx:
            raise ValueError(f"inputs_embeds has {t} positions; n_ctx={self.cfg.n_ctx}")
        resid = inputs_embeds + self.lm.W_pos[:t]
        for block in self.lm.blocks:
            resid = block(resid)
        if final_norm and self.lm.ln_final is not None:
            resid = self.lm.ln_final(resid)
        return resid

    def logits_from_embeds(self, inputs_embeds: Tensor) -> Tensor:
        """Next-token logits (B, T, V)."""
        return self.hidden(inputs_embeds) @ self.lm.unembed + self.lm.b_U

    def forward(self, pixels: Tensor, input_ids: Tensor) -> Tensor:
        """Logits (B, T, V) for images (B, 1, S, S) and token ids (B, T)."""
        pixels = self.check_pixels(pixels)
        _check_ids(input_ids, "input_ids", 2)
        if pixels.shape[0] != input_ids.shape[0]:
            raise ValueError(
                f"pixels and input_ids must have the same batch size, got {pixels.shape[0]} "
                f"and {input_ids.shape[0]}"
            )
        return self.logits_from_embeds(self.splice(input_ids, self.image_embeds(pixels)))

    @torch.no_grad()
    def generate_from_embeds(
        self, inputs_embeds: Tensor, max_new_tokens: int = 2, *, greedy: bool = True,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Greedy (or sampled) continuation ids (B, max_new_tokens), no KV cache (tiny model).

        ``inputs_embeds`` (B, T, d_model) must be finite and leave room for the new tokens:
        ``T + max_new_tokens - 1 <= n_ctx``.

        Examples
        --------
        >>> vlm = TinyVLM()
        >>> vlm.generate_from_embeds(torch.zeros(2, 5, vlm.cfg.d_model), 3).shape
        torch.Size([2, 3])
        """
        check_tensor(inputs_embeds, "inputs_embeds", ndim=3, nonempty=True)
        if inputs_embeds.shape[-1] != self.cfg.d_model:
            raise ValueError(f"inputs_embeds must have d_model={self.cfg.d_model} features, "
                             f"got shape {tuple(inputs_embeds.shape)}")
        room = self.cfg.n_ctx - inputs_embeds.shape[1] + 1
        max_new_tokens = check_scalar(max_new_tokens, "max_new_tokens",
                                      Interval("int", 1, max(room, 1)))
        if room < 1:
            raise ValueError(f"inputs_embeds has {inputs_embeds.shape[1]} positions, more than "
                             f"n_ctx={self.cfg.n_ctx}")
        emb = inputs_embeds.detach()
        out = []
        for _ in range(int(max_new_tokens)):
            logits = self.logits_from_embeds(emb)[:, -1]
            if greedy:
                nxt = logits.argmax(-1)
            else:
                nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)[:, 0]
            out.append(nxt)
            emb = torch.cat([emb, self.lm.W_E[nxt][:, None].to(emb.dtype)], dim=1)
        return torch.stack(out, dim=1)

    @torch.no_grad()
    def predict_digit(self, pixels: Tensor, prompt: str = PROMPTS[0]) -> Tensor:
        """The digit (0..9) the model answers for each image, -1 for a non-digit answer (B,).

        Examples
        --------
        >>> TinyVLM().predict_digit(torch.zeros(3, 1, 16, 16)).shape
        torch.Size([3])
        """
        pixels = self.check_pixels(pixels)
        check_tensor(pixels, "pixels", nonempty=True)  # finite: a NaN image has no answer
        ids = self.input_ids(prompt, batch=pixels.shape[0])
        first = self(pixels, ids)[:, -1].argmax(-1)
        return digit_of_token(first)


def digit_of_token(ids: Tensor) -> Tensor:
    """Map token ids to digits 0..9 (-1 for a non-digit token), same shape.

    Examples
    --------
    >>> digit_of_token(torch.tensor([29, 2])).tolist()
    [7, -1]
    """
    _check_ids(ids, "ids")
    d = ids - _ID["zero"]
    return torch.where((d >= 0) & (d <= 9), d, torch.full_like(d, -1))


@dataclass
class TrainedVLM:
    """A trained :class:`TinyVLM` (eval mode), its loss per step and held-out accuracy."""

    model: TinyVLM
    losses: list[float] = field(default_factory=list)
    test_accuracy: float = float("nan")

    def __post_init__(self) -> None:
        if not isinstance(self.model, TinyVLM):
            raise TypeError(f"model must be a TinyVLM, got {type(self.model).__name__}")
        self.losses = _check_losses(self.losses)
        acc = self.test_accuracy
        if isinstance(acc, bool) or not isinstance(acc, (int, float, np.integer, np.floating)):
            raise TypeError(f"test_accuracy must be a float (NaN if not measured), got {acc!r}")
        if not (math.isnan(acc) or 0.0 <= acc <= 1.0):
            raise ValueError(f"test_accuracy must lie in [0, 1] (or be NaN), got {acc!r}")


def _save(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def train_digits_vlm(
    *,
    steps: int = 600,
    batch_size: int = 32,
    lr: float = 3e-3,
    token_dropout: float = 0.25,
    cfg: TinyVLMConfig | None = None,
    seed: int = 0,
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 200,
    stop_after: int | None = None,
    progress: bool = False,
) -> TrainedVLM:
    """Train a :class:`TinyVLM` to answer "what digit is this ?" on the training split.

    Loss: mean cross-entropy of the answer tokens (digit word, ``<eos>``) under teacher forcing,
    Adam with a cosine learning-rate decay; each step draws ``batch_size`` training images and
    one prompt template.

    Parameters
    ----------
    steps : int, default=600
    batch_size : int, default=32
    lr : float, default=3e-3
    token_dropout : float in [0, 1), default=0.25
        Probability of zeroing each projected image token during training.
    cfg : TinyVLMConfig, optional
    seed : int, default=0
        Seeds the initialisation, the split (:func:`digits_vlm_split`) and the batches.
    checkpoint : path, optional
        Saved every ``checkpoint_every`` steps and at the end; an existing file resumes the run
        (same hyper-parameters required) and ends with the weights of an uninterrupted run.
    checkpoint_every : int, default=200
    stop_after : int, optional
        Stop (and checkpoint) after this many total steps, to resume later.
    progress : bool, default=False
        A tqdm bar with the running loss.

    Returns
    -------
    TrainedVLM
        ``test_accuracy`` is the first-token accuracy on the held-out split (prompt 0).

    Examples
    --------
    >>> res = train_digits_vlm(steps=3, batch_size=8)
    >>> len(res.losses), 0.0 <= res.test_accuracy <= 1.0
    (3, True)
    """
    cfg = TinyVLMConfig() if cfg is None else cfg
    check_scalar(steps, "steps", Interval("int", 1, None))
    check_scalar(batch_size, "batch_size", Interval("int", 1, None))
    check_scalar(lr, "lr", Interval("real", 0.0, None, "neither"))
    check_scalar(token_dropout, "token_dropout", Interval("real", 0.0, 1.0, "left"))
    check_scalar(checkpoint_every, "checkpoint_every", Interval("int", 1, None))
    hp = {
        "steps": steps, "batch_size": batch_size, "lr": lr, "token_dropout": token_dropout,
        "cfg": asdict(cfg), "seed": seed,
    }  # fmt: skip
    model = TinyVLM(cfg, seed=seed)
    x, y = digits_vlm_images(cfg.image_size)
    tr, te = digits_vlm_split(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1.0 + np.cos(np.pi * min(s, steps) / steps))
    )
    gen = torch.Generator().manual_seed(seed)
    prompt_ids = [model.input_ids(p) for p in PROMPTS]
    losses: list[float] = []
    start = 0
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.exists():
        state = torch.load(path, weights_only=False)
        if state["hp"] != hp:
            raise ValueError(f"checkpoint {path} was made with {state['hp']}, not {hp}")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        gen.set_state(state["gen"])
        losses, start = state["losses"], state["step"]
    end = steps if stop_after is None else min(steps, int(stop_after))
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, initial=start, desc="digits VLM")
    model.train()
    for step in range(start, end):
        idx = tr[torch.randint(0, len(tr), (batch_size,), generator=gen)]
        k = int(torch.randint(0, len(PROMPTS), (1,), generator=gen))
        keep = (torch.rand(batch_size, cfg.n_tokens, 1, generator=gen) >= token_dropout).float()
        ans = torch.stack([y[idx] + _ID["zero"], torch.full_like(y[idx], EOS)], dim=1)
        ids = torch.cat([prompt_ids[k].expand(batch_size, -1), ans], dim=1)
        logits = model.logits_from_embeds(model.splice(ids, model.image_embeds(x[idx]) * keep))
        loss = nn.functional.cross_entropy(logits[:, -3:-1].reshape(-1, len(VOCAB)), ans.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        done = step + 1
        if path is not None and (done % checkpoint_every == 0 or done == end):
            _save(path, {
                "hp": hp, "model": model.state_dict(), "opt": opt.state_dict(),
                "sched": sched.state_dict(), "gen": gen.get_state(), "losses": losses,
                "step": done,
            })  # fmt: skip
    if bar is not None:
        bar.close()
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    acc = float((model.predict_digit(x[te]) == y[te]).float().mean())
    return TrainedVLM(model, losses, acc)
