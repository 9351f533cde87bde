"""(t, K)-threshold watermarking for federated learning (Bakr, Ambreth & Lukas, ICML 2026, arXiv 2602.10765).

K clients embed one shared white-box watermark key ``tau`` (a unit vector per trainable tensor)
into the jointly trained model while training; only a coalition of at least ``t`` clients can verify
it, and it does so without reconstructing ``tau`` in the clear.

* Key: ``tau_l = w_l / ||w_l||`` per tensor ``l``, ``w_l`` Rademacher or Gaussian, drawn from the
  package's Philox stream (:mod:`rml_fast.kernels.random`) and rounded to the fixed-point grid
  ``2^-f`` (:func:`generate_key`).
* Sharing: additive shares ``tau = sum_k tau^(k)`` for embedding (:func:`additive_shares`), Shamir
  (t, K) shares over GF(P), ``P = 2^61 - 1``, for verification (:class:`ShamirField`), or both from
  a dealer-free key generation (:func:`trustless_keygen`).
* Embedding (spec section 3.1): after local training, client k's pseudo-gradient
  ``Delta_{k,l} = theta_{k,l} - theta_l`` gives a per-tensor scale ``s_{k,l}``; a trusted-server
  client adds ``s_{k,l} tau_l``; an untrusted-server client uploads only ``s_{k,l}``, receives
  ``S_l = sum_k s_{k,l}`` and adds ``S_l tau^(k)_l``, so that FedAvg yields
  ``theta_l = mean_k theta_{k,l} + mean_k(s_{k,l}) tau_l`` without anyone holding ``tau``.
* Detection: ``cos_l = <theta_l, tau_l> / ||theta_l||``, ``score = (1/L) sum_l cos_l``,
  ``z = score / sigma0`` with the analytic null ``sigma0 = sqrt(sum_l 1/d_l) / L`` (or an empirical
  null over random keys); detect iff ``z >= 4``.
* Threshold verification (:func:`threshold_verify`): each coalition member j computes the field
  inner products ``y_{j,l} = <theta_l^fx, tau_l^[j]> mod P`` from its Shamir share; their Lagrange
  combination is ``<theta_l^fx, tau_l^fx>`` exactly, which decodes to ``cos_l``. Only L field
  elements per member are revealed; fewer than t members learn nothing about ``tau``.

The FedAvg pair it builds on is :mod:`rml_fast.federated.fedavg`; the robustness attacks
(fine-tuning on a fraction of the data, magnitude pruning, Gaussian noise, re-watermarking with
another key) are :func:`finetune_attack`, :func:`prune_attack`, :func:`noise_attack`,
:func:`overwrite_attack`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_array, check_rng, check_scalar
from rml_fast.federated import _field, _shamir
from rml_fast.federated.fedavg import (
    FedAvgClient,
    FedAvgServer,
    _check_module,
    _torch_threads,
    model_to_arrays,
    pack_weights,
    unpack_weights,
)
from rml_fast.federated.protocol import Message, _check_round, check_message

__all__ = [
    "DETECTION_THRESHOLD",
    "FIELD_PRIME",
    "KeyShare",
    "ShamirField",
    "ThresholdWatermarkClient",
    "ThresholdWatermarkServer",
    "additive_shares",
    "empirical_null",
    "finetune_attack",
    "generate_key",
    "noise_attack",
    "null_sigma",
    "overwrite_attack",
    "partial_inner_products",
    "prune_attack",
    "threshold_verify",
    "trustless_keygen",
    "watermark_score",
    "watermark_shapes",
    "z_score",
]

#: The field's prime, the Mersenne prime 2^61 - 1.
FIELD_PRIME = _field.P_INT
#: Detection threshold on the z-score.
DETECTION_THRESHOLD = 4.0

_KINDS = ("rademacher", "gaussian")
_VARIANTS = ("trusted", "untrusted")
_STRENGTHS = ("spec", "update")
_SCALE_PREFIX = "scale/"
_SUM_PREFIX = "scale_sum/"
_PENDING_PREFIX = "pending/"


# --------------------------------------------------------------------------- validation helpers


def _check_frac_bits(frac_bits: Any, name: str = "frac_bits") -> int:
    return int(check_scalar(frac_bits, name, Interval("int", 1, 40)))


def _check_shapes(shapes: Any) -> dict[str, tuple[int, ...]]:
    if not isinstance(shapes, Mapping) or not shapes:
        raise TypeError("shapes must be a non-empty dict name -> shape tuple")
    out: dict[str, tuple[int, ...]] = {}
    for name, shape in shapes.items():
        if not isinstance(name, str):
            raise TypeError(f"shapes keys must be str, got {type(name).__name__}")
        try:
            tup = tuple(int(s) for s in shape)
        except TypeError as exc:
            raise TypeError(f"shapes[{name!r}] must be a tuple of ints, got {shape!r}") from exc
        if any(s < 1 for s in tup):
            raise ValueError(f"shapes[{name!r}] must have positive sizes, got {tup}")
        out[name] = tup
    return out


def _check_key(key: Any, name: str = "key") -> dict[str, np.ndarray]:
    if not isinstance(key, Mapping) or not key:
        raise TypeError(f"{name} must be a non-empty dict name -> float array")
    out = {}
    for k, v in key.items():
        if not isinstance(k, str):
            raise TypeError(f"{name} keys must be str, got {type(k).__name__}")
        arr = np.asarray(v)
        if arr.dtype.kind != "f":
            raise TypeError(f"{name}[{k!r}] must be a float array, got dtype {arr.dtype}")
        if arr.size == 0 or not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}[{k!r}] must be a non-empty finite array")
        out[k] = arr.astype(np.float64, copy=False)
    return out


def _weights_dict(weights: Any, name: str = "weights") -> dict[str, np.ndarray]:
    try:
        import torch

        if isinstance(weights, torch.nn.Module):
            return model_to_arrays(weights)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    if not isinstance(weights, Mapping):
        raise TypeError(f"{name} must be a torch.nn.Module or a dict name -> array, got {type(weights).__name__}")
    return {str(k): np.asarray(v) for k, v in weights.items()}


def _match(weights: Mapping[str, np.ndarray], key: Mapping[str, np.ndarray],
           wname: str = "weights", kname: str = "key") -> None:
    for k, tau in key.items():
        if k not in weights:
            raise ValueError(f"{wname} has no tensor {k!r} named by the {kname}")
        if np.shape(weights[k]) != np.shape(tau):
            raise ValueError(
                f"{wname}[{k!r}] has shape {np.shape(weights[k])}, the {kname} has {np.shape(tau)}"
            )
        arr = np.asarray(weights[k])
        if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)):
            raise ValueError(f"{wname}[{k!r}] must be a finite float array")


def _seed_of(seed: Any) -> int:
    from rml_fast.kernels.random import MAX_COUNTER, seed_from_rng

    if seed is None or isinstance(seed, np.random.Generator):
        return seed_from_rng(seed)
    return int(check_scalar(seed, "seed", Interval("int", 0, MAX_COUNTER)))


def _norm(x: np.ndarray) -> float:
    """Euclidean norm in float64 without BLAS (no thread start-up on small tensors)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    return math.sqrt(float(np.einsum("i,i->", x, x)))


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.einsum("i,i->", np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()))


def _quantize(x: np.ndarray, frac_bits: int | None) -> np.ndarray:
    if frac_bits is None:
        return x
    scale = float(2 ** frac_bits)
    return np.rint(x * scale) / scale


# --------------------------------------------------------------------------- keys


def watermark_shapes(model: Any, *, include: str = "all") -> dict[str, tuple[int, ...]]:
    """The tensors a watermark key covers: a model's trainable parameters.

    Parameters
    ----------
    model : torch.nn.Module or dict[str, numpy.ndarray]
        The model (its ``named_parameters`` with ``requires_grad``) or weights (float arrays).
    include : {"all", "matrices"}, default="all"
        ``"all"``: every trainable tensor (the spec); ``"matrices"`` [PROPOSED]: only tensors with
        ``ndim >= 2`` (weight matrices and kernels, no biases or norms). The analytic null
        ``sigma0 = sqrt(sum_l 1/d_l) / L`` is dominated by the smallest tensors, so leaving out
        biases lowers ``sigma0`` on small models (see the docs' digits study).

    Returns
    -------
    dict[str, tuple of int]
        Tensor name -> shape, in the model's order.

    Examples
    --------
    >>> from rml_fast.federated.fedavg import make_mlp
    >>> from rml_fast.federated.threshold_watermark import watermark_shapes
    >>> watermark_shapes(make_mlp(4, [3], 2), include="matrices")
    {'0.weight': (3, 4), '2.weight': (2, 3)}
    """
    if include not in ("all", "matrices"):
        raise ValueError(f"include must be 'all' or 'matrices', got {include!r}")
    import torch

    if isinstance(model, torch.nn.Module):
        items = [(n, tuple(p.shape)) for n, p in model.named_parameters() if p.requires_grad]
    else:
        weights = _weights_dict(model, "model")
        items = [(n, tuple(np.shape(v))) for n, v in weights.items() if np.asarray(v).dtype.kind == "f"]
    out = {n: s for n, s in items if include == "all" or len(s) >= 2}
    if not out:
        raise ValueError("the model has no tensors to watermark")
    return out


def generate_key(
    shapes: Mapping[str, tuple[int, ...]],
    *,
    kind: str = "rademacher",
    seed: Any = None,
    frac_bits: int | None = 24,
) -> dict[str, np.ndarray]:
    """A watermark key: one unit vector per tensor, ``tau_l = w_l / ||w_l||`` (spec section 3.1).

    ``w`` is drawn from the Philox stream of ``seed`` (:func:`rml_fast.kernels.random.normal` /
    ``uniform``), tensor ``l`` from counter offset ``sum_{l' < l} d_{l'}``; Rademacher signs are
    ``uniform < 1/2``. The unit vector is rounded to the fixed-point grid ``2^-frac_bits`` so the
    key's field encoding is exact and threshold verification equals the plaintext z-score.

    Parameters
    ----------
    shapes : dict[str, tuple of int]
        Tensor name -> shape.
    kind : {"rademacher", "gaussian"}, default="rademacher"
        Distribution of ``w``.
    seed : int, numpy.random.Generator or None
        Philox stream key (an int in ``[0, 2^63)``, or drawn from a Generator / fresh entropy).
    frac_bits : int or None, default=24
        Fixed-point fractional bits f of the grid; None keeps the exact unit vector.

    Returns
    -------
    dict[str, numpy.ndarray]
        Tensor name -> float64 array of the tensor's shape with norm 1 (to ``2^-f`` rounding).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.threshold_watermark import generate_key
    >>> key = generate_key({"w": (4, 8), "b": (4,)}, seed=7)
    >>> round(float(np.linalg.norm(key["w"])), 6), np.abs(key["b"]).tolist()
    (1.0, [0.5, 0.5, 0.5, 0.5])
    """
    from rml_fast.kernels.random import normal, uniform

    shapes = _check_shapes(shapes)
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    if frac_bits is not None:
        frac_bits = _check_frac_bits(frac_bits)
    seed = _seed_of(seed)
    key: dict[str, np.ndarray] = {}
    offset = 0
    for name, shape in shapes.items():
        d = int(np.prod(shape))
        if kind == "gaussian":
            w = np.asarray(normal(d, seed, offset), dtype=np.float64)
        else:
            w = np.where(np.asarray(uniform(d, seed, offset)) < 0.5, 1.0, -1.0)
        offset += d
        norm = float(_norm(w))
        if norm == 0.0:  # pragma: no cover - probability 0
            w[0], norm = 1.0, 1.0
        key[name] = _quantize(w / norm, frac_bits).reshape(shape)
    return key


def additive_shares(
    key: Mapping[str, np.ndarray], K: int, *, rng: Any = None, mask_scale: float = 1.0,
    frac_bits: int | None = 24,
) -> list[dict[str, np.ndarray]]:
    """Additive shares ``tau = sum_k tau^(k)`` for embedding (the repo's K - 1 Gaussian masks).

    Shares ``0..K-2`` are Gaussian masks with per-entry std ``mask_scale / sqrt(d_l)`` (on the
    fixed-point grid), the last one is ``tau - sum`` of the others.

    Parameters
    ----------
    key : dict[str, numpy.ndarray]
        The key.
    K : int
        Number of clients, >= 1.
    rng : numpy.random.Generator, int or None
        Randomness of the masks.
    mask_scale : float, default=1.0
        Norm scale of each mask relative to the unit key.
    frac_bits : int or None, default=24
        Round masks to the grid ``2^-frac_bits`` (so a grid key stays on the grid).

    Returns
    -------
    list of dict[str, numpy.ndarray]
        K shares with the key's names and shapes; their sum is the key (to float64 rounding).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.threshold_watermark import additive_shares, generate_key
    >>> key = generate_key({"w": (5, 3)}, seed=1)
    >>> shares = additive_shares(key, 4, rng=0)
    >>> bool(np.allclose(sum(s["w"] for s in shares), key["w"], atol=1e-12))
    True
    """
    key = _check_key(key)
    K = int(check_scalar(K, "K", Interval("int", 1, None)))
    mask_scale = float(check_scalar(mask_scale, "mask_scale", Interval("real", 0, None)))
    if frac_bits is not None:
        frac_bits = _check_frac_bits(frac_bits)
    gen = check_rng(rng)
    shares: list[dict[str, np.ndarray]] = [{} for _ in range(K)]
    for name, tau in key.items():
        d = tau.size
        total = np.zeros_like(tau)
        for k in range(K - 1):
            mask = _quantize(gen.standard_normal(tau.shape) * (mask_scale / math.sqrt(d)), frac_bits)
            shares[k][name] = mask
            total += mask
        shares[K - 1][name] = tau - total
    return shares


@dataclass
class KeyShare:
    """One party's Shamir share of a watermark key: field elements per tensor.

    Attributes
    ----------
    party : int
        The holder's 0-based id j; the share is the sharing polynomial at ``x = j + 1``.
    t, K : int
        The threshold and the number of parties.
    prime : int
        The field's prime (must be :data:`FIELD_PRIME`).
    frac_bits : int
        Fixed-point fractional bits f of the shared key.
    arrays : dict[str, numpy.ndarray]
        Tensor name -> uint64 array of field elements (the tensor's shape).

    Examples
    --------
    >>> from rml_fast.federated.threshold_watermark import ShamirField, generate_key
    >>> share = ShamirField(2, 3).share(generate_key({"w": (2, 2)}, seed=0), rng=0)[1]
    >>> share.party, share.arrays["w"].dtype
    (1, dtype('uint64'))
    """

    party: int
    t: int
    K: int
    prime: int
    frac_bits: int
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def to_message(self) -> Message:
        """The share as a :data:`~rml_fast.federated.protocol.Message` (for a transport).

        Returns
        -------
        dict[str, numpy.ndarray]
            ``"share/<name>"`` -> uint64 array and ``"share_meta"`` = (party, t, K, prime, f).

        Examples
        --------
        >>> from rml_fast.federated.threshold_watermark import KeyShare, ShamirField, generate_key
        >>> s = ShamirField(2, 2).share(generate_key({"w": (3,)}, seed=0), rng=0)[0]
        >>> KeyShare.from_message(s.to_message()).arrays["w"].tolist() == s.arrays["w"].tolist()
        True
        """
        msg: Message = {"share/" + k: np.array(v, dtype=np.uint64) for k, v in self.arrays.items()}
        msg["share_meta"] = np.array([self.party, self.t, self.K, self.prime, self.frac_bits], dtype=np.int64)
        return msg

    @classmethod
    def from_message(cls, message: Message) -> KeyShare:
        """Rebuild a share from :meth:`to_message`.

        Parameters
        ----------
        message : dict[str, numpy.ndarray]
            A message from :meth:`to_message`.

        Returns
        -------
        KeyShare
            The share.

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.federated.threshold_watermark import KeyShare
        >>> meta = np.array([0, 1, 1, 2**61 - 1, 24])
        >>> KeyShare.from_message({"share/w": np.zeros(2, np.uint64), "share_meta": meta}).t
        1
        """
        check_message(message)
        if "share_meta" not in message or np.shape(message["share_meta"]) != (5,):
            raise ValueError("message has no 'share_meta' of 5 ints (party, t, K, prime, frac_bits)")
        party, t, K, prime, f = (int(v) for v in message["share_meta"])
        arrays = {k[len("share/"):]: np.asarray(v) for k, v in message.items() if k.startswith("share/")}
        return cls(party=party, t=t, K=K, prime=prime, frac_bits=f, arrays=arrays)


class ShamirField:
    """Shamir (t, K) secret sharing of watermark keys over GF(2^61 - 1) (Shamir 1979; spec section 3.1).

    Real values are encoded in fixed point, ``x -> round(x 2^f) mod P``, decoded signed. Each key
    entry gets its own degree-(t-1) polynomial with coefficients uniform in ``[0, P)``; party j
    holds its value at ``x = j + 1``. Any t shares reconstruct exactly (Lagrange at 0); any t - 1
    are uniform, independent of the key.

    Parameters
    ----------
    t : int
        Threshold, ``1 <= t <= K``.
    K : int
        Number of parties, ``1 <= K < P``.
    frac_bits : int, default=24
        Fixed-point fractional bits f.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.threshold_watermark import ShamirField, generate_key
    >>> key = generate_key({"w": (3, 4)}, seed=0)
    >>> field = ShamirField(t=3, K=5)
    >>> shares = field.share(key, rng=1)
    >>> rec = field.reconstruct([shares[4], shares[0], shares[2]])
    >>> bool(np.array_equal(rec["w"], key["w"]))
    True
    """

    prime = FIELD_PRIME

    def __init__(self, t: int, K: int, frac_bits: int = 24) -> None:
        K = int(check_scalar(K, "K", Interval("int", 1, FIELD_PRIME - 1)))
        t = int(check_scalar(t, "t", Interval("int", 1, None)))
        if t > K:
            raise ValueError(f"t must satisfy 1 <= t <= K = {K}, got t = {t}")
        self.t, self.K = t, K
        self.frac_bits = _check_frac_bits(frac_bits)

    def __repr__(self) -> str:
        return f"ShamirField(t={self.t}, K={self.K}, frac_bits={self.frac_bits})"

    def encode(self, x: Any) -> np.ndarray:
        """Fixed-point field encoding ``round(x 2^f) mod P`` (uint64, same shape).

        Parameters
        ----------
        x : array-like of float
            Values with ``|x| 2^f < P / 2``.

        Returns
        -------
        numpy.ndarray of uint64
            Field elements.

        Examples
        --------
        >>> from rml_fast.federated.threshold_watermark import ShamirField
        >>> f = ShamirField(1, 1, frac_bits=2)
        >>> f.encode([0.5, -0.25]).tolist() == [2, 2**61 - 2]
        True
        """
        return self._encode(x, "x")

    def _encode(self, x: Any, name: str) -> np.ndarray:
        arr = check_array(x, name, dtypes=(np.float64,), finite=False)  # the kernel checks
        try:
            return _field.encode(arr, self.frac_bits).reshape(arr.shape)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None

    def decode(self, u: Any) -> np.ndarray:
        """Signed fixed-point decoding (elements above P/2 are negative), float64.

        Parameters
        ----------
        u : array-like of uint64
            Field elements.

        Returns
        -------
        numpy.ndarray of float64
            ``signed(u) / 2^f``.

        Examples
        --------
        >>> from rml_fast.federated.threshold_watermark import ShamirField
        >>> f = ShamirField(1, 1, frac_bits=2)
        >>> f.decode(f.encode([0.5, -0.25])).tolist()
        [0.5, -0.25]
        """
        arr = np.asarray(u, dtype=np.uint64)
        return _field.decode(arr, self.frac_bits).reshape(arr.shape)

    def share(self, key: Mapping[str, np.ndarray], rng: Any = None) -> list[KeyShare]:
        """Shamir shares of a key, one :class:`KeyShare` per party.

        Parameters
        ----------
        key : dict[str, numpy.ndarray]
            Tensor name -> float array (encoded with f fractional bits).
        rng : numpy.random.Generator, int or None
            Source of the polynomial coefficients (uniform in ``[0, P)``). Use a cryptographic
            source (e.g. ``numpy.random.Generator(numpy.random.PCG64(secrets.randbits(128)))``
            seeded from ``secrets``) outside experiments.

        Returns
        -------
        list of KeyShare
            K shares.

        Examples
        --------
        >>> from rml_fast.federated.threshold_watermark import ShamirField, generate_key
        >>> shares = ShamirField(2, 4).share(generate_key({"w": (3,)}, seed=0), rng=0)
        >>> [s.party for s in shares]
        [0, 1, 2, 3]
        """
        key = _check_key(key)
        gen = check_rng(rng)
        # validates the range first
        encoded = {name: self._encode(tau, f"key[{name!r}]") for name, tau in key.items()}
        per_party: list[dict[str, np.ndarray]] = [{} for _ in range(self.K)]
        for name, enc in encoded.items():
            rows = _shamir.share_array(enc.ravel(), self.t, self.K, gen)
            for j in range(self.K):
                per_party[j][name] = rows[j].reshape(enc.shape)
        return [KeyShare(j, self.t, self.K, self.prime, self.frac_bits, per_party[j]) for j in range(self.K)]

    def check_share(self, share: Any, name: str = "share") -> KeyShare:
        """Validate that ``share`` is a :class:`KeyShare` of this field and sharing.

        Parameters
        ----------
        share : KeyShare
            The share.
        name : str, default="share"
            Used in error messages.

        Returns
        -------
        KeyShare
            ``share``.

        Raises
        ------
        TypeError
            If ``share`` is not a KeyShare or its arrays are not uint64.
        ValueError
            If it comes from another field (prime, fixed-point bits, t or K), its party id is out of
            range, or it holds values ``>= P``.

        Examples
        --------
        >>> from rml_fast.federated.threshold_watermark import KeyShare, ShamirField
        >>> ShamirField(2, 3).check_share(KeyShare(0, 2, 3, 2**31 - 1, 24, {}))
        Traceback (most recent call last):
        ...
        ValueError: share is from another field: prime 2147483647, expected 2305843009213693951 = 2^61 - 1
        """
        if not isinstance(share, KeyShare):
            raise TypeError(f"{name} must be a KeyShare, got {type(share).__name__}")
        if share.prime != self.prime:
            raise ValueError(f"{name} is from another field: prime {share.prime}, expected {self.prime} = 2^61 - 1")
        if share.frac_bits != self.frac_bits:
            raise ValueError(f"{name} has {share.frac_bits} fixed-point bits, this field uses {self.frac_bits}")
        if (share.t, share.K) != (self.t, self.K):
            raise ValueError(f"{name} belongs to a ({share.t}, {share.K}) sharing, this field is ({self.t}, {self.K})")
        if not 0 <= share.party < self.K:
            raise ValueError(f"{name} has party id {share.party}, expected 0 <= id < K = {self.K}")
        for k, arr in share.arrays.items():
            arr = np.asarray(arr)
            if arr.dtype != np.uint64:
                raise TypeError(f"{name}.arrays[{k!r}] must be uint64 field elements, got dtype {arr.dtype}")
            if arr.size and arr.max() >= np.uint64(self.prime):
                raise ValueError(f"{name}.arrays[{k!r}] holds values >= P: not elements of GF(2^61 - 1)")
        return share

    def _check_coalition(self, shares: Any, need: int) -> list[KeyShare]:
        if isinstance(shares, Mapping):
            shares = [shares[k] for k in sorted(shares)]
        if not isinstance(shares, Sequence) or isinstance(shares, (str, bytes)):
            raise TypeError(f"shares must be a list of KeyShare, got {type(shares).__name__}")
        shares = [self.check_share(s, f"shares[{i}]") for i, s in enumerate(shares)]
        parties = [s.party for s in shares]
        if len(set(parties)) != len(parties):
            raise ValueError(f"shares must come from distinct parties, got parties {parties}")
        if len(shares) < need:
            raise ValueError(f"a coalition needs at least t = {need} shares, got {len(shares)}")
        names = list(shares[0].arrays)
        for s in shares[1:]:
            if list(s.arrays) != names:
                raise ValueError(f"shares cover different tensors: {names} vs {list(s.arrays)}")
            for k in names:
                if s.arrays[k].shape != shares[0].arrays[k].shape:
                    raise ValueError(
                        f"share of party {s.party} has {k!r} of shape {s.arrays[k].shape}, "
                        f"party {shares[0].party}'s has {shares[0].arrays[k].shape}"
                    )
        return shares

    def lagrange_at_zero(self, ids: Sequence[int]) -> np.ndarray:
        """Lagrange weights at 0 for the parties ``ids`` (0-based; points ``x = id + 1``).

        ``lambda_j = prod_{m != j} x_m / (x_m - x_j) mod P``, so ``f(0) = sum_j lambda_j f(x_j)``
        for every polynomial of degree < len(ids).

        Parameters
        ----------
        ids : sequence of int
            Distinct party ids in ``[0, K)``.

        Returns
        -------
        numpy.ndarray of uint64, shape (len(ids),)
            The weights.

        Examples
        --------
        >>> from rml_fast.federated.threshold_watermark import ShamirField
        >>> ShamirField(2, 3).lagrange_at_zero([0, 1]).tolist()  # 2 * f(1) - f(2)
        [2, 2305843009213693950]
        """
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence | np.ndarray):
            raise TypeError(f"ids must be a sequence of int party ids, got {type(ids).__name__}")
        if any(isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) for i in ids):
            raise TypeError(f"ids must be a sequence of int party ids, got {list(ids)!r}")
        ids = [int(i) for i in ids]
        if len(set(ids)) != len(ids) or any(not 0 <= i < self.K for i in ids):
            raise ValueError(f"ids must be distinct party ids in [0, {self.K}), got {ids}")
        return _field.lagrange_at_zero([i + 1 for i in ids])

    def reconstruct_field(self, shares: Sequence[KeyShare]) -> dict[str, np.ndarray]:
        """The shared key's field elements from at least t shares (exact; tests and audits only).

        Parameters
        ----------
        shares : sequence of KeyShare
            At least t shares of distinct parties.

        Returns
        -------
        dict[str, numpy.ndarray of uint64]
            The encoded key.

        Examples
        --------
        >>> from rml_fast.federated.threshold_watermark import ShamirField
        >>> f = ShamirField(2, 3, frac_bits=4)
        >>> sh = f.share({"w": [1.0, -0.5]}, rng=0)
        >>> f.reconstruct_field(sh[1:])["w"].tolist() == f.encode([1.0, -0.5]).tolist()
        True
        """
        shares = self._check_coalition(shares, self.t)
        ids = [s.party + 1 for s in shares]
        out = {}
        for name, ref in shares[0].arrays.items():
            rec = _shamir.reconstruct_array([s.arrays[name] for s in shares], ids)
            out[name] = rec.reshape(ref.shape)
        return out

    def reconstruct(self, shares: Sequence[KeyShare]) -> dict[str, np.ndarray]:
        """The shared key (decoded, float64) from at least t shares (tests and audits only).

        Parameters
        ----------
        shares : sequence of KeyShare
            At least t shares of distinct parties.

        Returns
        -------
        dict[str, numpy.ndarray]
            The key, exactly as encoded (``round(tau 2^f) / 2^f``).

        Examples
        --------
        >>> from rml_fast.federated.threshold_watermark import ShamirField
        >>> f = ShamirField(2, 3)
        >>> f.reconstruct(f.share({"w": [0.25, -1.0]}, rng=0)[:2])["w"].tolist()
        [0.25, -1.0]
        """
        return {k: self.decode(v) for k, v in self.reconstruct_field(shares).items()}


def trustless_keygen(
    shapes: Mapping[str, tuple[int, ...]], t: int, K: int, *, kind: str = "gaussian", seed: Any = None,
    frac_bits: int = 24,
) -> tuple[list[dict[str, np.ndarray]], list[KeyShare], dict[str, float]]:
    """Dealer-free key generation (the repo's GJKR-style protocol, simulated in one process).

    Party k draws its own ``w^(k)`` (Philox stream ``seed + k``); a secure computation reveals only
    the per-tensor norms ``N_l = ||sum_k w^(k)_l||`` (here computed in the clear: the MPC itself is
    out of scope [PROPOSED stand-in]); party k's additive share is ``tau^(k) = w^(k) / N`` on the
    fixed-point grid; each party Shamir-shares its ``tau^(k)`` and party j sums what it received,
    which is a Shamir share of ``tau = sum_k tau^(k)`` (sharing is linear).

    Parameters
    ----------
    shapes : dict[str, tuple of int]
        Tensor name -> shape.
    t, K : int
        Threshold and number of parties, ``1 <= t <= K``.
    kind : {"gaussian", "rademacher"}, default="gaussian"
        Distribution of each ``w^(k)`` (a sum of Gaussians is Gaussian: tau is a uniform direction).
    seed : int, Generator or None
        Base seed (party k uses ``seed + k`` for its key and coefficient streams).
    frac_bits : int, default=24
        Fixed-point bits.

    Returns
    -------
    additive : list of dict
        The K additive shares ``tau^(k)`` (sum = the key).
    shamir : list of KeyShare
        The K Shamir shares of the key.
    norms : dict[str, float]
        The revealed norms ``N_l``.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.threshold_watermark import ShamirField, trustless_keygen
    >>> add, sham, norms = trustless_keygen({"w": (6, 5)}, t=2, K=3, seed=4)
    >>> key = {"w": sum(a["w"] for a in add)}
    >>> bool(np.array_equal(ShamirField(2, 3).reconstruct(sham[:2])["w"], key["w"]))
    True
    >>> round(float(np.linalg.norm(key["w"])), 6)
    1.0
    """
    shapes = _check_shapes(shapes)
    fieldobj = ShamirField(t, K, frac_bits)
    base = _seed_of(seed)
    raw = [generate_key(shapes, kind=kind, seed=(base + k) % (2**63), frac_bits=None) for k in range(K)]
    # generate_key normalises; undo to get w^(k) up to a per-party positive scale: use raw directions
    norms = {}
    additive: list[dict[str, np.ndarray]] = [{} for _ in range(K)]
    for name in shapes:
        total = np.sum([r[name] for r in raw], axis=0)
        n = float(_norm(total))
        norms[name] = n
        for k in range(K):
            additive[k][name] = _quantize(raw[k][name] / n, frac_bits)
    shares_sum: list[dict[str, np.ndarray]] = [{} for _ in range(K)]
    for k in range(K):
        sub = fieldobj.share(additive[k], rng=np.random.default_rng([base % (2**63), k, 1]))
        for j in range(K):
            for name, arr in sub[j].arrays.items():
                if name in shares_sum[j]:
                    flat = _field.as_field(shares_sum[j][name]).ravel()
                    add = arr.ravel()
                    s = flat + add  # both < 2^61: no wrap
                    s = np.where(s >= _field.P, s - _field.P, s)
                    shares_sum[j][name] = s.reshape(arr.shape)
                else:
                    shares_sum[j][name] = arr.copy()
    shamir = [KeyShare(j, t, K, FIELD_PRIME, fieldobj.frac_bits, shares_sum[j]) for j in range(K)]
    return additive, shamir, norms


# --------------------------------------------------------------------------- detection


def null_sigma(shapes: Mapping[str, tuple[int, ...]] | Mapping[str, np.ndarray]) -> float:
    """Analytic null std of the watermark score, ``sigma0 = sqrt(sum_l 1/d_l) / L`` (spec section 3.1).

    For a key independent of the weights (a uniform direction or a normalised Rademacher vector
    per tensor), ``E cos_l = 0`` and ``Var cos_l = 1/d_l`` exactly.

    Parameters
    ----------
    shapes : dict[str, tuple of int] or dict[str, numpy.ndarray]
        Tensor name -> shape (or a key, whose arrays' shapes are used).

    Returns
    -------
    float
        sigma0.

    Examples
    --------
    >>> from rml_fast.federated.threshold_watermark import null_sigma
    >>> round(null_sigma({"a": (100,), "b": (4, 25)}), 10)   # sqrt(2/100) / 2
    0.0707106781
    """
    if isinstance(shapes, Mapping) and shapes and all(isinstance(v, np.ndarray) for v in shapes.values()):
        shp = _check_shapes({k: np.shape(v) for k, v in shapes.items()})
    else:
        shp = _check_shapes(shapes)
    L = len(shp)
    return math.sqrt(sum(1.0 / int(np.prod(s)) for s in shp.values())) / L


def _cosines(weights: Mapping[str, np.ndarray], key: Mapping[str, np.ndarray]) -> np.ndarray:
    out = []
    for name, tau in key.items():
        theta = np.asarray(weights[name], dtype=np.float64).ravel()
        norm = float(_norm(theta))
        out.append(0.0 if norm == 0.0 else _dot(theta, tau.ravel()) / norm)
    return np.array(out)


def watermark_score(weights: Any, key: Mapping[str, np.ndarray]) -> float:
    """Watermark score ``(1/L) sum_l <theta_l, tau_l> / ||theta_l||`` on the full weights.

    Parameters
    ----------
    weights : torch.nn.Module or dict[str, numpy.ndarray]
        The model or its weights (must contain every tensor of the key, same shapes).
    key : dict[str, numpy.ndarray]
        The watermark key (unit vector per tensor).

    Returns
    -------
    float
        The mean cosine.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.threshold_watermark import watermark_score
    >>> watermark_score({"w": np.array([3.0, 4.0])}, {"w": np.array([1.0, 0.0])})
    0.6
    """
    key = _check_key(key)
    w = _weights_dict(weights)
    _match(w, key)
    return float(_cosines(w, key).mean())


def empirical_null(
    weights: Any, shapes: Mapping[str, tuple[int, ...]], *, n_keys: int = 2000, kind: str = "rademacher",
    rng: Any = None, batch: int = 256,
) -> tuple[float, float]:
    """Mean and std of the score of ``weights`` under random keys (the repo's empirical null).

    Parameters
    ----------
    weights : torch.nn.Module or dict[str, numpy.ndarray]
        The suspect model.
    shapes : dict[str, tuple of int]
        The tensors a key covers.
    n_keys : int, default=2000
        Number of random keys.
    kind : {"rademacher", "gaussian"}, default="rademacher"
        Their distribution.
    rng : numpy.random.Generator, int or None
        Randomness.
    batch : int, default=256
        Keys drawn at once.

    Returns
    -------
    (float, float)
        ``(mu0, sigma0)`` estimates.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.threshold_watermark import empirical_null, null_sigma
    >>> w = {"a": np.random.default_rng(0).normal(size=(30, 20))}
    >>> mu, sd = empirical_null(w, {"a": (30, 20)}, n_keys=4000, rng=1)
    >>> abs(sd / null_sigma({"a": (30, 20)}) - 1) < 0.05
    True
    """
    shapes = _check_shapes(shapes)
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    n_keys = int(check_scalar(n_keys, "n_keys", Interval("int", 2, None)))
    batch = int(check_scalar(batch, "batch", Interval("int", 1, None)))
    w = _weights_dict(weights)
    _match(w, {k: np.zeros(s) for k, s in shapes.items()}, kname="shapes")
    gen = check_rng(rng)
    scores = np.zeros(n_keys)
    for name in shapes:
        theta = np.asarray(w[name], dtype=np.float64).ravel()
        norm = float(_norm(theta))
        unit = theta / norm if norm > 0 else theta
        for start in range(0, n_keys, batch):
            m = min(batch, n_keys - start)
            if kind == "gaussian":
                r = gen.standard_normal((m, theta.size))
                r /= np.linalg.norm(r, axis=1, keepdims=True)
            else:
                r = np.where(gen.random((m, theta.size)) < 0.5, 1.0, -1.0) / math.sqrt(theta.size)
            scores[start:start + m] += r @ unit
    scores /= len(shapes)
    return float(scores.mean()), float(scores.std(ddof=1))


def z_score(
    weights: Any, key: Mapping[str, np.ndarray], *, null: str = "analytic", n_keys: int = 2000,
    kind: str = "rademacher", rng: Any = None,
) -> float:
    """The detector's z-score ``(score - mu0) / sigma0``; detect iff ``z >= 4`` (spec section 3.1).

    Parameters
    ----------
    weights : torch.nn.Module or dict[str, numpy.ndarray]
        The suspect model.
    key : dict[str, numpy.ndarray]
        The watermark key.
    null : {"analytic", "empirical"}, default="analytic"
        ``mu0 = 0, sigma0 = sqrt(sum_l 1/d_l)/L``, or both estimated from ``n_keys`` random keys.
    n_keys : int, default=2000
        Random keys of the empirical null.
    kind : {"rademacher", "gaussian"}, default="rademacher"
        Distribution of the empirical null's keys.
    rng : numpy.random.Generator, int or None
        Randomness of the empirical null.

    Returns
    -------
    float
        z.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.threshold_watermark import generate_key, z_score
    >>> key = generate_key({"w": (50, 40)}, seed=0)
    >>> theta = {"w": np.random.default_rng(0).normal(size=(50, 40)) * 0.02 + 0.2 * key["w"]}
    >>> z_score(theta, key) > 4
    True
    """
    if null not in ("analytic", "empirical"):
        raise ValueError(f"null must be 'analytic' or 'empirical', got {null!r}")
    key = _check_key(key)
    w = _weights_dict(weights)
    _match(w, key)
    score = float(_cosines(w, key).mean())
    if null == "analytic":
        return score / null_sigma({k: v.shape for k, v in key.items()})
    mu, sd = empirical_null(w, {k: v.shape for k, v in key.items()}, n_keys=n_keys, kind=kind, rng=rng)
    return (score - mu) / sd


# --------------------------------------------------------------------------- threshold verification


def _theta_bits(theta_norm: float, frac_bits: int, theta_frac_bits: Any) -> int:
    if theta_frac_bits == "auto":
        # |<theta^fx, tau^fx>| <= ||theta|| 2^{f_theta} * (1 + eps) 2^f must stay below 2^59 < P / 2
        e = math.frexp(max(theta_norm, 2.0**-20))[1]  # theta_norm < 2^e
        bits = min(32, 58 - frac_bits - e)
        if bits < 1:
            raise ValueError(
                f"a tensor norm of {theta_norm:.3g} is too large for exact verification in GF(2^61 - 1) "
                f"with {frac_bits} key bits"
            )
        return bits
    return int(check_scalar(theta_frac_bits, "theta_frac_bits", Interval("int", 1, 40)))


def partial_inner_products(
    weights: Any, share: KeyShare, *, theta_frac_bits: Any = "auto",
) -> dict[str, int]:
    """What coalition member j computes and reveals: ``y_{j,l} = <theta_l^fx, tau_l^[j]> mod P``.

    ``theta_l^fx = round(theta_l 2^{f_theta}) mod P`` (signed), the field inner product is exact
    (numba kernel, 64x64-bit products in 32-bit halves, Mersenne folding).

    Parameters
    ----------
    weights : torch.nn.Module or dict[str, numpy.ndarray]
        The suspect model.
    share : KeyShare
        Member j's Shamir share.
    theta_frac_bits : "auto" or int, default="auto"
        Fixed-point bits of the weights; ``"auto"`` picks per tensor the most bits (<= 32) that keep
        ``|<theta^fx, tau^fx>| < 2^59`` from the public norm ``||theta_l||``, identical for every member.

    Returns
    -------
    dict[str, int]
        Tensor name -> field element.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.threshold_watermark import ShamirField, partial_inner_products
    >>> f = ShamirField(1, 1)
    >>> share = f.share({"w": np.array([0.5, 0.5])}, rng=0)[0]
    >>> y = partial_inner_products({"w": np.array([1.0, 3.0])}, share, theta_frac_bits=4)["w"]
    >>> y == 2 * 2**24 * 2**4
    True
    """
    if not isinstance(share, KeyShare):
        raise TypeError(f"share must be a KeyShare, got {type(share).__name__}")
    fieldobj = ShamirField(share.t, share.K, share.frac_bits)
    fieldobj.check_share(share)
    w = _weights_dict(weights)
    _match(w, {k: np.zeros(v.shape) for k, v in share.arrays.items()}, kname="share")
    out = {}
    for name, arr in share.arrays.items():
        theta = np.asarray(w[name], dtype=np.float64).ravel()
        bits = _theta_bits(float(_norm(theta)), share.frac_bits, theta_frac_bits)
        out[name] = _field.dot(_field.encode(theta, bits), arr.ravel())
    return out


def threshold_verify(
    weights: Any, shares: Sequence[KeyShare] | Mapping[int, KeyShare], *,
    theta_frac_bits: Any = "auto", return_details: bool = False,
) -> float | dict[str, Any]:
    """Reconstruction-free threshold verification by a coalition of at least t members (spec section 3.1).

    Each member computes :func:`partial_inner_products`; the Lagrange combination
    ``sum_j lambda_j y_{j,l} mod P = <theta_l^fx, tau_l^fx>`` is decoded signed to
    ``<theta_l, tau_l>``, divided by the public ``||theta_l||`` to ``cos_l``, and
    ``z = mean_l cos_l / sigma0`` with the analytic null. The key is never formed.

    Parameters
    ----------
    weights : torch.nn.Module or dict[str, numpy.ndarray]
        The suspect model.
    shares : sequence of KeyShare or dict party -> KeyShare
        The coalition's shares (at least t, distinct parties, same field).
    theta_frac_bits : "auto" or int, default="auto"
        See :func:`partial_inner_products`.
    return_details : bool, default=False
        Return a dict with ``z``, ``score``, ``cosines``, ``revealed`` (the members' field
        elements) and ``parties`` instead of z.

    Returns
    -------
    float or dict
        z (equals :func:`z_score` of the shared key to ~1e-7).

    Raises
    ------
    ValueError
        Fewer than t shares, shares of another field or sharing, repeated parties, or weights that
        do not match the shares' tensors.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.threshold_watermark import (ShamirField, generate_key,
    ...     threshold_verify, z_score)
    >>> key = generate_key({"w": (20, 10), "b": (10,)}, seed=3)
    >>> theta = {k: np.random.default_rng(1).normal(size=v.shape) + 2 * v for k, v in key.items()}
    >>> shares = ShamirField(t=3, K=5).share(key, rng=0)
    >>> z = threshold_verify(theta, [shares[1], shares[3], shares[4]])
    >>> abs(z - z_score(theta, key)) < 1e-6
    True
    """
    if isinstance(shares, Mapping):
        shares = [shares[k] for k in sorted(shares)]
    if not isinstance(shares, Sequence) or not shares:
        raise ValueError("shares must be a non-empty list of KeyShare")
    first = shares[0]
    if not isinstance(first, KeyShare):
        raise TypeError(f"shares[0] must be a KeyShare, got {type(first).__name__}")
    fieldobj = ShamirField(first.t, first.K, first.frac_bits)
    shares = fieldobj._check_coalition(shares, fieldobj.t)
    w = _weights_dict(weights)
    _match(w, {k: np.zeros(v.shape) for k, v in first.arrays.items()}, kname="shares")
    names = list(first.arrays)
    # each member's partial_inner_products, computed for the whole coalition at once: the weights
    # are encoded once per tensor and streamed once per cache block against every member's share
    revealed: dict[int, dict[str, int]] = {s.party: {} for s in shares}
    lam = fieldobj.lagrange_at_zero([s.party for s in shares])
    cosines = []
    for name in names:
        theta = np.asarray(w[name], dtype=np.float64).ravel()
        norm = _norm(theta)
        bits = _theta_bits(norm, first.frac_bits, theta_frac_bits)
        ys = _field.dots(_field.encode(theta, bits), [s.arrays[name].ravel() for s in shares])
        acc = 0
        for lj, s, yj in zip(lam, shares, ys, strict=True):
            revealed[s.party][name] = yj
            acc = (acc + int(lj) * yj) % FIELD_PRIME
        inner = _field.decode_signed_int(acc) / 2.0 ** (bits + first.frac_bits)
        cosines.append(0.0 if norm == 0.0 else inner / norm)
    cos = np.array(cosines)
    score = float(cos.mean())
    z = score / null_sigma({k: v.shape for k, v in first.arrays.items()})
    if return_details:
        return {"z": z, "score": score, "cosines": cos, "revealed": revealed,
                "parties": [s.party for s in shares]}
    return z


# --------------------------------------------------------------------------- embedding (FL)


class ThresholdWatermarkClient(FedAvgClient):
    """A FedAvg client that embeds its part of the watermark after local training (spec section 3.1).

    Per round r, from the global weights theta: local training (AdamW) gives theta_k and
    ``Delta_{k,l} = theta_{k,l} - theta_l``; the per-tensor scale is

    * ``strength="spec"``: ``m_k <- beta m_k + (1 - beta) mean_l ||Delta_{k,l}||`` (m_k = 0 at
      start), ``v_k = c m_k``, ``s_{k,l} = ||Delta_{k,l}|| v_k`` -- the spec's rule, quadratic in
      the update size, so on small models with small updates it embeds almost nothing;
    * ``strength="update"`` [PROPOSED]: ``m_{k,l} <- beta m_{k,l} + (1 - beta) ||Delta_{k,l}||``,
      bias-corrected ``mhat = m / (1 - beta^(r+1))``, ``s_{k,l} = c mhat_{k,l}``: the watermark step
      is a fraction c of the tensor's typical update, in the weights' units, so the accumulated
      watermark is c times the tensor's training path length, whatever the model's scale.

    ``variant="trusted"``: the client holds the full key and adds ``s_{k,l} tau_l`` (one phase,
    ``"fit"``). ``variant="untrusted"``: it holds an additive share ``tau^(k)``; phase ``"fit"``
    uploads only ``s_{k,l}`` (``"scale/<name>"``) and keeps theta_k in its state, phase ``"embed"``
    receives ``S_l`` (``"scale_sum/<name>"``) and uploads ``theta_{k,l} + S_l tau^(k)_l``.

    Parameters
    ----------
    model_fn, X, y, client_id, seed, epochs, batch_size, lr, weight_decay, optimizer, num_threads
        As :class:`~rml_fast.federated.fedavg.FedAvgClient`.
    key : dict[str, numpy.ndarray]
        The full key (trusted) or this client's additive share (untrusted).
    variant : {"trusted", "untrusted"}, default="trusted"
        Server trust model.
    c : float, optional
        Strength constant; default 0.1 for ``strength="spec"`` (the repo's trusted K = 16 value)
        and 0.5 for ``"update"`` (on digits with K = 16: z ~ 6 after 10 rounds at an accuracy cost
        below 1 point; the watermark accumulates over rounds, so scale c ~ 1 / rounds: c = 0.25
        gives z ~ 7 after 40 rounds at no cost).
    beta : float, default=0.9
        EMA factor.
    strength : {"spec", "update"}, default="update"
        Scale rule (above).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.fedavg import make_mlp, model_to_arrays, pack_weights
    >>> from rml_fast.federated.threshold_watermark import (ThresholdWatermarkClient,
    ...     generate_key, watermark_shapes)
    >>> fn = lambda: make_mlp(4, [8], 3, seed=0)
    >>> key = generate_key(watermark_shapes(fn()), seed=1)
    >>> X = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    >>> y = np.arange(20) % 3
    >>> client = ThresholdWatermarkClient(fn, X, y, client_id=0, key=key, c=0.5)
    >>> reply = client.handle("fit", 0, pack_weights(model_to_arrays(fn())))
    >>> float(client.get_state()["wm/ema"][0]) > 0
    True
    """

    def __init__(
        self,
        model_fn: Callable[[], Any],
        X: Any,
        y: Any,
        *,
        client_id: int,
        key: Mapping[str, np.ndarray],
        variant: str = "trusted",
        c: float | None = None,
        beta: float = 0.9,
        strength: str = "update",
        seed: int = 0,
        epochs: int = 1,
        batch_size: int = 32,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        optimizer: str = "adamw",
        num_threads: int = 1,
    ) -> None:
        super().__init__(model_fn, X, y, client_id=client_id, seed=seed, epochs=epochs,
                         batch_size=batch_size, lr=lr, weight_decay=weight_decay,
                         optimizer=optimizer, num_threads=num_threads)
        if variant not in _VARIANTS:
            raise ValueError(f"variant must be one of {_VARIANTS}, got {variant!r}")
        if strength not in _STRENGTHS:
            raise ValueError(f"strength must be one of {_STRENGTHS}, got {strength!r}")
        self.key = _check_key(key)
        self.variant, self.strength = variant, strength
        if c is None:
            c = 0.1 if strength == "spec" else 0.5
        self.c = float(check_scalar(c, "c", Interval("real", 0, None)))
        self.beta = float(check_scalar(beta, "beta", Interval("real", 0, 1, closed="left")))
        n = len(self.key) if strength == "update" else 1
        self._ema = np.zeros(n)
        self._updates = 0
        self._pending: dict[str, np.ndarray] = {}

    def get_state(self) -> Message:
        """EMA state (``"wm/ema"``, ``"wm/updates"``) and, between phases, the pending theta_k.

        Returns
        -------
        dict[str, numpy.ndarray]
            The state.
        """
        state: Message = {"wm/ema": self._ema.copy(), "wm/updates": np.array(self._updates, dtype=np.int64)}
        for k, v in self._pending.items():
            state[_PENDING_PREFIX + k] = v.copy()
        return state

    def set_state(self, state: Message) -> None:
        """Restore :meth:`get_state` (an empty state means a fresh client).

        Parameters
        ----------
        state : dict[str, numpy.ndarray]
            A state from :meth:`get_state`.
        """
        check_message(state, "state")
        if "wm/ema" in state:
            ema = np.asarray(state["wm/ema"], dtype=np.float64)
            if ema.shape != self._ema.shape:
                raise ValueError(f"state 'wm/ema' has shape {ema.shape}, expected {self._ema.shape}")
            self._ema = ema.copy()
            self._updates = int(state["wm/updates"])
        n = len(_PENDING_PREFIX)
        self._pending = {k[n:]: np.array(v, copy=True) for k, v in state.items() if k.startswith(_PENDING_PREFIX)}

    def scales(self, old: Mapping[str, np.ndarray], new: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Update the EMA with ``Delta = new - old`` and return ``s_{k,l}`` per key tensor.

        Parameters
        ----------
        old, new : dict[str, numpy.ndarray]
            Global weights and the locally trained weights.

        Returns
        -------
        dict[str, float]
            Tensor name -> ``s_{k,l}``.
        """
        norms = np.array([float(_norm(np.asarray(new[k], np.float64) - np.asarray(old[k], np.float64)))
                          for k in self.key])
        if self.strength == "spec":
            self._ema = self.beta * self._ema + (1 - self.beta) * np.array([norms.mean()])
            v = self.c * float(self._ema[0])
            s = norms * v
        else:
            self._ema = self.beta * self._ema + (1 - self.beta) * norms
            corr = 1.0 - self.beta ** (self._updates + 1)
            s = self.c * self._ema / corr
        self._updates += 1
        return {k: float(v) for k, v in zip(self.key, s, strict=True)}

    def handle(self, phase: str, server_round: int, message: Message) -> Message:
        """``"fit"``: train, compute the scales, embed (trusted) or upload the scales (untrusted);
        ``"embed"`` (untrusted): add ``S_l tau^(k)_l`` to the pending theta_k and upload it.

        Parameters
        ----------
        phase : {"fit", "embed"}
            The phase.
        server_round : int
            The 0-based round.
        message : dict[str, numpy.ndarray]
            ``"param/<key>"`` (fit) or ``"scale_sum/<name>"`` (embed).

        Returns
        -------
        dict[str, numpy.ndarray]
            Weights and ``"num_examples"``, or ``"scale/<name>"`` (untrusted fit).
        """
        server_round = _check_round(server_round)
        check_message(message)
        if phase == "fit":
            old = unpack_weights(message)
            missing = [k for k in self.key if k not in old]
            if missing:
                raise ValueError(f"the broadcast model has no tensors {missing} named by the key")
            with _torch_threads(self.num_threads):
                new = self.train_local(old, server_round)
            for k, tau in self.key.items():
                if new[k].shape != tau.shape:
                    raise ValueError(f"model tensor {k!r} has shape {new[k].shape}, the key has {tau.shape}")
            s = self.scales(old, new)
            if self.variant == "trusted":
                for k, tau in self.key.items():
                    new[k] = (new[k].astype(np.float64) + s[k] * tau).astype(new[k].dtype)
                reply = pack_weights(new)
                reply["num_examples"] = np.array(len(self.y), dtype=np.int64)
                return reply
            self._pending = {k: v.copy() for k, v in new.items()}
            return {_SCALE_PREFIX + k: np.array(v) for k, v in s.items()}
        if phase == "embed":
            if self.variant != "untrusted":
                raise ValueError("phase 'embed' exists only in the untrusted-server variant")
            if not self._pending:
                raise ValueError("phase 'embed' before 'fit': no pending local model in the state")
            new = {k: v.copy() for k, v in self._pending.items()}
            for k, tau in self.key.items():
                if _SUM_PREFIX + k not in message:
                    raise ValueError(f"the broadcast has no scale sum '{_SUM_PREFIX + k}'")
                S = float(message[_SUM_PREFIX + k])
                new[k] = (new[k].astype(np.float64) + S * tau).astype(new[k].dtype)
            self._pending = {}
            reply = pack_weights(new)
            reply["num_examples"] = np.array(len(self.y), dtype=np.int64)
            return reply
        raise ValueError(f"phase must be 'fit' or 'embed', got {phase!r}")


class ThresholdWatermarkServer(FedAvgServer):
    """FedAvg server of the threshold watermark (uniform averaging; spec section 3.1).

    ``variant="trusted"``: one phase, plain FedAvg of the watermarked uploads.
    ``variant="untrusted"``: phase ``"fit"`` sums the clients' scales ``S_l = sum_k s_{k,l}`` (what
    secure aggregation would reveal), phase ``"embed"`` broadcasts ``S_l`` and averages the uploads,
    giving ``theta_l = mean_k theta_{k,l} + mean_k(s_{k,l}) tau_l``. Averaging is uniform, which that
    identity needs (IID equal splits make it FedAvg's example weighting too).

    Parameters
    ----------
    initial : torch.nn.Module or dict[str, numpy.ndarray]
        Initial global model or weights.
    variant : {"trusted", "untrusted"}, default="trusted"
        Trust model (must match the clients').
    model_fn : callable, optional
        Builds the architecture (for the accuracy metric).
    test_data : tuple (X, y), optional
        Held-out data for ``"accuracy"``.
    monitor_key : dict[str, numpy.ndarray], optional
        A key used only to report ``"z"`` after each round in experiments; a real untrusted server
        never holds it.

    Examples
    --------
    >>> from rml_fast.federated.fedavg import make_mlp
    >>> from rml_fast.federated.threshold_watermark import ThresholdWatermarkServer
    >>> ThresholdWatermarkServer(make_mlp(4, [], 2), variant="untrusted").phases
    ('fit', 'embed')
    """

    def __init__(
        self,
        initial: Any,
        *,
        variant: str = "trusted",
        model_fn: Callable[[], Any] | None = None,
        test_data: tuple[Any, Any] | None = None,
        monitor_key: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        if variant not in _VARIANTS:
            raise ValueError(f"variant must be one of {_VARIANTS}, got {variant!r}")
        super().__init__(initial, weighting="uniform", model_fn=model_fn, test_data=test_data)
        self.variant = variant
        self.phases = ("fit",) if variant == "trusted" else ("fit", "embed")
        self.monitor_key = None
        if monitor_key is not None:
            self.monitor_key = _check_key(monitor_key, "monitor_key")
            _match(self.weights, self.monitor_key, kname="monitor_key")
        self.scale_sums: dict[str, float] = {}

    def configure(self, phase: str, server_round: int) -> Message:
        """``"fit"``: the global weights; ``"embed"``: the scale sums ``"scale_sum/<name>"``.

        Parameters
        ----------
        phase : {"fit", "embed"}
            The phase.
        server_round : int
            The 0-based round.

        Returns
        -------
        dict[str, numpy.ndarray]
            The broadcast.
        """
        if phase == "fit":
            return pack_weights(self.weights)
        if phase == "embed":
            return {_SUM_PREFIX + k: np.array(v) for k, v in self.scale_sums.items()}
        raise ValueError(f"phase must be one of {self.phases}, got {phase!r}")

    def aggregate(self, phase: str, server_round: int, replies: Mapping[int, Message]) -> None:
        """``"fit"`` of the untrusted variant sums the scales; otherwise uniform FedAvg.

        Parameters
        ----------
        phase : {"fit", "embed"}
            The phase.
        server_round : int
            The 0-based round.
        replies : Mapping[int, dict[str, numpy.ndarray]]
            Client id -> reply.
        """
        if phase == "fit" and self.variant == "untrusted":
            sums: dict[str, float] = {}
            n = len(_SCALE_PREFIX)
            for cid in sorted(replies):
                for k, v in replies[cid].items():
                    if k.startswith(_SCALE_PREFIX):
                        sums[k[n:]] = sums.get(k[n:], 0.0) + float(v)
            self.scale_sums = sums
            return
        super().aggregate(phase, server_round, replies)

    def metrics(self, server_round: int) -> dict[str, float]:
        """``"accuracy"`` (with test data) and ``"z"`` (with a monitor key).

        Parameters
        ----------
        server_round : int
            The round just finished.

        Returns
        -------
        dict[str, float]
            Metric name -> value.
        """
        out = super().metrics(server_round)
        if self.monitor_key is not None:
            out["z"] = z_score(self.weights, self.monitor_key)
        return out

    def get_state(self) -> Message:
        """Global weights and the pending scale sums.

        Returns
        -------
        dict[str, numpy.ndarray]
            The state.
        """
        state = super().get_state()
        state.update({_SUM_PREFIX + k: np.array(v) for k, v in self.scale_sums.items()})
        return state

    def set_state(self, state: Message) -> None:
        """Restore :meth:`get_state`.

        Parameters
        ----------
        state : dict[str, numpy.ndarray]
            A state from :meth:`get_state`.
        """
        super().set_state(state)
        n = len(_SUM_PREFIX)
        self.scale_sums = {k[n:]: float(v) for k, v in state.items() if k.startswith(_SUM_PREFIX)}


# --------------------------------------------------------------------------- attacks


def finetune_attack(
    model: Any, X: Any, y: Any, *, fraction: float = 0.1, epochs: int = 5, lr: float = 1e-3,
    batch_size: int = 32, rng: Any = None,
) -> Any:
    """Fine-tune a copy of ``model`` on a random ``fraction`` of (X, y) with AdamW (an attacker's removal try).

    Parameters
    ----------
    model : torch.nn.Module
        The watermarked model (not modified).
    X, y : array-like
        The data the attacker may draw from.
    fraction : float in (0, 1], default=0.1
        Fraction of the data used.
    epochs : int, default=5
        Fine-tuning epochs.
    lr : float, default=1e-3
        AdamW learning rate (weight decay 0.01).
    batch_size : int, default=32
        Batch size.
    rng : numpy.random.Generator, int or None
        Randomness of the subset and batch order.

    Returns
    -------
    torch.nn.Module
        The fine-tuned copy.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.fedavg import make_mlp
    >>> from rml_fast.federated.threshold_watermark import finetune_attack
    >>> m = make_mlp(3, [], 2, seed=0)
    >>> X, y = np.eye(3, dtype=np.float32).repeat(4, 0), np.arange(12) % 2
    >>> out = finetune_attack(m, X, y, fraction=0.5, epochs=1, rng=0)
    >>> bool((out[0].weight != m[0].weight).any())
    True
    """
    import copy

    import torch

    _check_module(model)
    fraction = float(check_scalar(fraction, "fraction", Interval("real", 0, 1, closed="right")))
    epochs = int(check_scalar(epochs, "epochs", Interval("int", 1, None)))
    lr = float(check_scalar(lr, "lr", Interval("real", 0, None)))
    batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
    X = check_array(X, "X", dtypes=(np.float32, np.float64), finite=True)
    y = check_array(y, "y", dtypes=(np.int64,), ndim=1)
    if X.ndim < 1:
        raise ValueError(f"X must have one row per example, got a scalar of shape {X.shape}")
    if len(X) != len(y) or len(y) == 0:
        raise ValueError(f"X and y must have the same non-zero length, got {len(X)} and {len(y)}")
    gen = check_rng(rng)
    n = max(1, round(fraction * len(y)))
    idx = gen.choice(len(y), size=n, replace=False)
    out = copy.deepcopy(model)
    out.train()
    opt = torch.optim.AdamW(out.parameters(), lr=lr, weight_decay=0.01)
    dtype = next(out.parameters()).dtype
    Xt, yt = torch.as_tensor(X[idx], dtype=dtype), torch.as_tensor(y[idx])
    for _ in range(epochs):
        order = torch.as_tensor(gen.permutation(n))
        for i in range(0, n, batch_size):
            b = order[i:i + batch_size]
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(out(Xt[b]), yt[b]).backward()
            opt.step()
    return out


def prune_attack(model: Any, rate: float, *, shapes: Mapping[str, tuple[int, ...]] | None = None) -> Any:
    """Magnitude pruning: zero the ``rate`` fraction of smallest-magnitude entries of each tensor.

    Parameters
    ----------
    model : torch.nn.Module
        The model (not modified).
    rate : float in [0, 1)
        Fraction pruned per tensor.
    shapes : dict, optional
        Tensors to prune (default: every trainable parameter).

    Returns
    -------
    torch.nn.Module
        The pruned copy.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.federated.fedavg import make_mlp
    >>> from rml_fast.federated.threshold_watermark import prune_attack
    >>> p = prune_attack(make_mlp(10, [], 10, seed=0), 0.5)
    >>> int((p[0].weight == 0).sum())
    50
    """
    import copy

    import torch

    _check_module(model)
    rate = float(check_scalar(rate, "rate", Interval("real", 0, 1, closed="left")))
    out = copy.deepcopy(model)
    names = set(shapes) if shapes is not None else None
    with torch.no_grad():
        for name, p in out.named_parameters():
            if names is not None and name not in names:
                continue
            k = int(rate * p.numel())
            if k == 0:
                continue
            flat = p.detach().abs().flatten()
            order = torch.argsort(flat, stable=True)
            mask = torch.ones_like(flat)
            mask[order[:k]] = 0
            p.mul_(mask.view_as(p))
    return out


def noise_attack(model: Any, relative_std: float, *, rng: Any = None) -> Any:
    """Add Gaussian noise of std ``relative_std * ||theta_l|| / sqrt(d_l)`` to every parameter tensor.

    Parameters
    ----------
    model : torch.nn.Module
        The model (not modified).
    relative_std : float >= 0
        Noise norm relative to each tensor's norm.
    rng : numpy.random.Generator, int or None
        Randomness.

    Returns
    -------
    torch.nn.Module
        The noisy copy.

    Examples
    --------
    >>> from rml_fast.federated.fedavg import make_mlp
    >>> from rml_fast.federated.threshold_watermark import noise_attack
    >>> m = make_mlp(10, [], 10, seed=0)
    >>> bool((noise_attack(m, 0.0, rng=0)[0].weight == m[0].weight).all())
    True
    """
    import copy

    import torch

    _check_module(model)
    relative_std = float(check_scalar(relative_std, "relative_std", Interval("real", 0, None)))
    gen = check_rng(rng)
    out = copy.deepcopy(model)
    with torch.no_grad():
        for _, p in out.named_parameters():
            sd = relative_std * float(p.norm()) / math.sqrt(p.numel())
            p.add_(torch.as_tensor(gen.standard_normal(tuple(p.shape)) * sd, dtype=p.dtype))
    return out


def overwrite_attack(model: Any, c: float, *, seed: Any = None, kind: str = "rademacher") -> Any:
    """Embed a second, attacker-chosen key of the same kind: ``theta_l += c ||theta_l|| tau'_l``.

    Parameters
    ----------
    model : torch.nn.Module
        The model (not modified).
    c : float >= 0
        Relative strength of the attacker's watermark.
    seed : int, Generator or None
        The attacker's key seed.
    kind : {"rademacher", "gaussian"}, default="rademacher"
        The attacker's key distribution.

    Returns
    -------
    torch.nn.Module
        The re-watermarked copy.

    Examples
    --------
    >>> from rml_fast.federated.fedavg import make_mlp
    >>> from rml_fast.federated.threshold_watermark import overwrite_attack
    >>> m = make_mlp(10, [], 10, seed=0)
    >>> bool((overwrite_attack(m, 0.5, seed=1)[0].weight != m[0].weight).any())
    True
    """
    import copy

    import torch

    _check_module(model)
    c = float(check_scalar(c, "c", Interval("real", 0, None)))
    out = copy.deepcopy(model)
    key = generate_key(watermark_shapes(out), kind=kind, seed=seed, frac_bits=None)
    with torch.no_grad():
        for name, p in out.named_parameters():
            if name in key:
                p.add_(torch.as_tensor(key[name] * c * float(p.norm()), dtype=p.dtype))
    return out
