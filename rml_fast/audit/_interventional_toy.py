"""Intervention generators and the 2-D object-scene toy with a known ground truth.

A generator is any callable ``generator(x, keep, seed) -> batch`` with ``keep`` a boolean
``(B, n_players)`` array (True = object kept); it returns ``B`` intervened inputs, one per row of
``keep``. The classes here are the ones the tests, docs and benchmarks use:

* :class:`ObjectScene` / :func:`make_object_scene` -- a 2-D image made of a smooth background
  and ``n`` disc-shaped objects placed on a grid (non-overlapping), rendered for any subset;
* :class:`OracleSceneGenerator` -- the exact intervention (re-render without the objects);
* :class:`InpaintingGenerator` -- a classical stand-in for a generative model: removed object
  pixels are filled with the mean of a ring around the object plus seeded noise;
* :class:`ToyRiskModel` -- a risk function of the objects present with planted main effects and
  pairwise interactions (the ground truth);
* :class:`FeatureGroupGenerator` -- tabular "removal": the features of a removed group are
  replaced by a baseline row or by a background row drawn per coalition (seeded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from rml_fast._validation import Interval, check_array, check_rng, check_scalar


@dataclass(frozen=True)
class ObjectScene:
    """A 2-D scene: a background image and ``n`` disc objects on a grid.

    Attributes
    ----------
    background : ndarray of shape (H, W), float64
    masks : ndarray of shape (n, H, W), bool
        Pixel support of each object (pairwise disjoint).
    amplitudes : ndarray of shape (n,), float64
        Intensity added inside each object's disc.
    centers : ndarray of shape (n, 2), float64
        (row, column) of each object's centre, in pixels.

    Examples
    --------
    >>> scene = make_object_scene(4, size=16, rng=0)
    >>> scene.render(np.array([[True, False, True, False]])).shape
    (1, 16, 16)
    """

    background: np.ndarray
    masks: np.ndarray
    amplitudes: np.ndarray
    centers: np.ndarray

    def __post_init__(self) -> None:
        bg = check_array(self.background, "background", ndim=2)
        masks = check_array(self.masks, "masks", dtypes=(np.bool_,), ndim=3)
        n = masks.shape[0]
        if n < 1 or masks.shape[1:] != bg.shape:
            raise ValueError(f"masks must have shape (n >= 1, {bg.shape[0]}, {bg.shape[1]}) "
                             f"like the background, got {masks.shape}")
        amps = check_array(self.amplitudes, "amplitudes", ndim=1)
        if amps.shape != (n,):
            raise ValueError(f"amplitudes must have shape ({n},), got {amps.shape}")
        centers = check_array(self.centers, "centers", ndim=2)
        if centers.shape != (n, 2):
            raise ValueError(f"centers must have shape ({n}, 2), got {centers.shape}")
        for name, arr in (("background", bg), ("masks", masks), ("amplitudes", amps),
                          ("centers", centers)):
            object.__setattr__(self, name, arr)

    @property
    def n_objects(self) -> int:
        """Number of objects ``n``.

        Examples
        --------
        >>> make_object_scene(3, size=12, rng=0).n_objects
        3
        """
        return int(self.masks.shape[0])

    @property
    def image(self) -> np.ndarray:
        """The full scene (every object present), shape (H, W).

        Examples
        --------
        >>> make_object_scene(2, size=12, rng=0).image.shape
        (12, 12)
        """
        return self.render(np.ones((1, self.n_objects), dtype=bool))[0]

    def render(self, keep: np.ndarray) -> np.ndarray:
        """Images with exactly the objects of each coalition: ``(B, n)`` bool -> ``(B, H, W)``.

        ``img_b = background + sum_{i kept in row b} amplitude_i * mask_i``.

        Examples
        --------
        >>> scene = make_object_scene(2, size=12, rng=0)
        >>> bool(np.allclose(scene.render(np.zeros((1, 2), bool))[0], scene.background))
        True
        """
        keep = _check_keep(keep, self.n_objects)
        stamps = self.masks.reshape(self.n_objects, -1) * self.amplitudes[:, None]
        flat = self.background.reshape(1, -1) + keep.astype(np.float64) @ stamps
        return flat.reshape(keep.shape[0], *self.background.shape)

    def insert(self, x: np.ndarray, obj: int, center: tuple[float, float]) -> np.ndarray:
        """Paste object ``obj`` (same radius and amplitude) centred at ``center`` into ``x``.

        Returns a new (H, W) image ``x + amplitude_obj * disc(center)``; ``x`` is not modified.

        Examples
        --------
        >>> scene = make_object_scene(2, size=16, rng=0)
        >>> out = scene.insert(scene.background, 0, (8.0, 8.0))
        >>> bool(out[8, 8] > scene.background[8, 8])
        True
        """
        x = check_array(x, "x", ndim=2)
        if x.shape != self.background.shape:
            raise ValueError(f"x must have the scene's shape {self.background.shape}, got "
                             f"{x.shape}")
        obj = check_scalar(obj, "obj", Interval("int", 0, self.n_objects - 1))
        try:
            c = check_array(center, "center", ndim=1)
        except TypeError as exc:
            raise TypeError(f"center must be a (row, column) pair of reals, got {center!r}") from exc
        if c.shape != (2,):
            raise ValueError(f"center must be a (row, column) pair, got shape {c.shape}")
        center = (float(c[0]), float(c[1]))
        radius = np.sqrt(self.masks[obj].sum() / np.pi)
        rows, cols = np.indices(self.background.shape)
        disc = (rows - center[0]) ** 2 + (cols - center[1]) ** 2 <= radius**2 + 1e-9
        return np.asarray(x, dtype=np.float64) + self.amplitudes[obj] * disc


def _check_keep(keep: np.ndarray, n: int) -> np.ndarray:
    """A coalition matrix: bool-convertible real array of shape (B, n) -> bool array."""
    k = np.asarray(keep)
    if k.dtype.kind not in "biuf":
        raise TypeError(f"keep must be a boolean array of shape (B, {n}), got dtype {k.dtype}")
    if k.ndim != 2 or k.shape[1] != n:
        raise ValueError(f"keep must be a boolean array of shape (B, {n}), got shape {k.shape}")
    return k.astype(bool)


def make_object_scene(n_objects: int = 6, *, size: int = 32, radius: float = 2.5,
                      amplitude: float | tuple[float, float] = (0.8, 1.2),
                      background_scale: float = 0.1, rng=None) -> ObjectScene:
    """Place ``n_objects`` discs on the cells of a square grid over a smooth random background.

    Parameters
    ----------
    n_objects : int, default=6
        Number of objects (players).
    size : int, default=32
        Image side in pixels.
    radius : float, default=2.5
        Disc radius in pixels; must fit in a grid cell (objects never overlap).
    amplitude : float or (low, high), default=(0.8, 1.2)
        Fixed amplitude, or uniform range of the objects' amplitudes.
    background_scale : float, default=0.1
        Standard deviation of the smooth (box-blurred) Gaussian background texture.
    rng : numpy Generator, int or None

    Returns
    -------
    ObjectScene

    Examples
    --------
    >>> scene = make_object_scene(6, size=32, rng=0)
    >>> scene.masks.shape, int(scene.masks.sum(axis=0).max())
    ((6, 32, 32), 1)
    """
    n = check_scalar(n_objects, "n_objects", Interval("int", 1, 62))
    size = check_scalar(size, "size", Interval("int", 4, None))
    radius = check_scalar(radius, "radius", Interval("real", 0.5, None))
    gen = check_rng(rng)
    side = int(np.ceil(np.sqrt(n)))
    cell = size / side
    if 2 * radius + 1 > cell:
        raise ValueError(f"radius must fit a grid cell of {cell:.1f} px for {n} objects on a "
                         f"{size}x{size} image, got radius={radius}")
    noise = gen.standard_normal((size + 4, size + 4))
    k = np.ones(5) / 5.0
    smooth = np.apply_along_axis(lambda r: np.convolve(r, k, "valid"), 1, noise)
    smooth = np.apply_along_axis(lambda c: np.convolve(c, k, "valid"), 0, smooth)
    # C order (apply_along_axis over axis 0 leaves a Fortran-ordered array): same values
    background = np.ascontiguousarray(background_scale * smooth / max(smooth.std(), 1e-12))
    cells = gen.permutation(side * side)[:n]
    centers = np.stack([(cells // side + 0.5) * cell, (cells % side + 0.5) * cell], 1) - 0.5
    rows, cols = np.indices((size, size))
    masks = ((rows[None] - centers[:, :1, None]) ** 2 + (cols[None] - centers[:, 1:, None]) ** 2
             <= radius**2 + 1e-9)
    if np.isscalar(amplitude):
        amps = np.full(n, float(cast(float, amplitude)))
    else:
        lo, hi = cast("tuple[float, float]", amplitude)
        amps = gen.uniform(lo, hi, n)
    return ObjectScene(background, masks, amps, centers)


class OracleSceneGenerator:
    """Exact interventions on an :class:`ObjectScene`: re-render with the kept objects only.

    ``generator(x, keep, seed)`` ignores ``x`` and ``seed`` (deterministic).

    Examples
    --------
    >>> scene = make_object_scene(3, size=12, rng=0)
    >>> OracleSceneGenerator(scene)(scene.image, np.ones((2, 3), bool), 0).shape
    (2, 12, 12)
    """

    def __init__(self, scene: ObjectScene) -> None:
        self.scene = scene
        self.n_players = scene.n_objects

    def __call__(self, x: np.ndarray, keep: np.ndarray, seed: int) -> np.ndarray:
        """Render the scene for each coalition row of ``keep`` ``(B, n)``; returns ``(B, H, W)``.

        Examples
        --------
        >>> scene = make_object_scene(2, size=12, rng=0)
        >>> OracleSceneGenerator(scene)(scene.image, np.zeros((1, 2), bool), 0).shape
        (1, 12, 12)
        """
        return self.scene.render(keep)


class InpaintingGenerator:
    """Remove objects by filling their pixels with a ring mean plus seeded Gaussian noise.

    For a removed object ``i``, every pixel of ``masks[i]`` becomes ``mean(x[ring_i]) +
    noise * N(0, 1)``, where ``ring_i`` is the set of pixels within ``ring`` px of the object's
    support that belong to no object. A classical, seedable stand-in for the paper's diffusion
    bridge (any learned generator plugs in through the same call signature).

    Parameters
    ----------
    masks : ndarray of shape (n, H, W), bool
        Object supports.
    noise : float, default=0.0
        Standard deviation of the fill noise (0 = deterministic).
    ring : int, default=2
        Width in pixels of the ring used for the fill value.

    Examples
    --------
    >>> scene = make_object_scene(3, size=12, rng=0)
    >>> gen = InpaintingGenerator(scene.masks, noise=0.01)
    >>> gen(scene.image, np.array([[False, True, True]]), seed=1).shape
    (1, 12, 12)
    """

    def __init__(self, masks: np.ndarray, *, noise: float = 0.0, ring: int = 2) -> None:
        self.masks = check_array(masks, "masks", dtypes=(np.bool_,), ndim=3)
        if self.masks.shape[0] == 0:
            raise ValueError(f"masks must hold at least one object, got shape {self.masks.shape}")
        self.noise = check_scalar(noise, "noise", Interval("real", 0.0, None))
        self.ring = check_scalar(ring, "ring", Interval("int", 1, None))
        self.n_players = int(self.masks.shape[0])
        union = self.masks.any(axis=0)
        rings = []
        for m in self.masks:
            grown = m.copy()
            for _ in range(self.ring):
                g = grown.copy()
                g[1:] |= grown[:-1]
                g[:-1] |= grown[1:]
                g[:, 1:] |= grown[:, :-1]
                g[:, :-1] |= grown[:, 1:]
                grown = g
            r = grown & ~union
            rings.append(r if r.any() else ~union)
        self._rings = np.stack(rings)

    def __call__(self, x: np.ndarray, keep: np.ndarray, seed: int) -> np.ndarray:
        """Intervened images ``(B, H, W)`` for the coalition rows of ``keep`` ``(B, n)``.

        Examples
        --------
        >>> scene = make_object_scene(2, size=12, rng=0)
        >>> out = InpaintingGenerator(scene.masks)(scene.image, np.ones((1, 2), bool), 0)
        >>> bool(np.allclose(out[0], scene.image))
        True
        """
        x = np.asarray(x, dtype=np.float64)
        keep = np.asarray(keep, dtype=bool)
        out = np.repeat(x[None], keep.shape[0], axis=0)
        gen = np.random.default_rng(seed)
        for i, m in enumerate(self.masks):
            rows = np.flatnonzero(~keep[:, i])
            fill = np.full(int(m.sum()), x[self._rings[i]].mean())
            if self.noise > 0:  # one noise pattern per (seed, object): v(S) depends on S, seed only
                fill = fill + self.noise * gen.standard_normal(fill.shape)
            vals = np.broadcast_to(fill, (rows.size, fill.size))
            sub = out[rows]
            sub[:, m] = vals
            out[rows] = sub
        return out


class ToyRiskModel:
    """Risk of a scene with planted main effects and pairwise interactions (the ground truth).

    ``f(img) = bias + sum_i w_i m_i + sum_{i<j} G_ij m_i m_j`` with the presence score
    ``m_i = mean_{p in mask_i}(img_p - background_p) / amplitude_i`` (1 when object ``i`` is
    rendered, 0 when it is exactly removed). Under :class:`OracleSceneGenerator` the game is
    ``v(S) = bias + sum_{i in S} w_i + sum_{i<j in S} G_ij``: Moebius dividends ``w`` and
    ``G``, Shapley values ``w_i + 1/2 sum_j G_ij``, Shapley interactions ``G``.

    Parameters
    ----------
    scene : ObjectScene
    main_effects : array-like of shape (n,)
    interactions : array-like of shape (n, n), optional
        Symmetric; only the upper triangle is used. Default: none.
    bias : float, default=0.0

    Examples
    --------
    >>> scene = make_object_scene(2, size=12, amplitude=1.0, rng=0)
    >>> f = ToyRiskModel(scene, [1.0, 2.0], [[0, 0.5], [0.5, 0]])
    >>> f(scene.render(np.array([[True, True], [True, False]]))).round(6)
    array([3.5, 1. ])
    """

    def __init__(self, scene: ObjectScene, main_effects, interactions=None,
                 bias: float = 0.0) -> None:
        n = scene.n_objects
        self.scene = scene
        self.main_effects = check_array(main_effects, "main_effects", ndim=1).astype(np.float64)
        if self.main_effects.shape != (n,):
            raise ValueError(f"main_effects must have shape ({n},), got "
                             f"{self.main_effects.shape}")
        g = np.zeros((n, n)) if interactions is None else check_array(
            interactions, "interactions", ndim=2).astype(np.float64)
        if g.shape != (n, n):
            raise ValueError(f"interactions must have shape ({n}, {n}), got {g.shape}")
        self.interactions = np.triu(g, 1)
        self.bias = float(bias)
        flat = scene.masks.reshape(n, -1).astype(np.float64)
        self._readout = flat / (flat.sum(1, keepdims=True) * scene.amplitudes[:, None])

    def presence(self, images: np.ndarray) -> np.ndarray:
        """Presence scores ``m`` of shape (B, n) for images of shape (B, H, W).

        Examples
        --------
        >>> scene = make_object_scene(2, size=12, rng=0)
        >>> ToyRiskModel(scene, [1.0, 1.0]).presence(scene.image[None]).round(6)
        array([[1., 1.]])
        """
        imgs = check_array(images, "images", ndim=3, finite=False)
        if imgs.shape[1:] != self.scene.background.shape:
            raise ValueError(f"images must have shape (B, {self.scene.background.shape[0]}, "
                             f"{self.scene.background.shape[1]}), got {imgs.shape}")
        imgs = imgs.astype(np.float64, copy=False).reshape(imgs.shape[0], self._readout.shape[1])
        return (imgs - self.scene.background.reshape(1, -1)) @ self._readout.T

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """Risk scores of shape (B,) for images of shape (B, H, W).

        Examples
        --------
        >>> scene = make_object_scene(2, size=12, rng=0)
        >>> float(ToyRiskModel(scene, [1.0, 1.0], bias=0.5)(scene.image[None])[0])
        2.5
        """
        m = self.presence(images)
        return self.bias + m @ self.main_effects + np.einsum("bi,ij,bj->b", m,
                                                             self.interactions, m)


class FeatureGroupGenerator:
    """Tabular removal: features of removed groups replaced by a baseline or a background draw.

    Parameters
    ----------
    groups : list of lists of int
        Feature indices of each player (disjoint).
    background : ndarray of shape (m, d)
        Reference rows.
    mode : {"baseline", "marginal"}, default="baseline"
        "baseline": removed features take the background column means (deterministic);
        "marginal": ``seed`` picks one background row (the same for every coalition, so an
        intervened row depends only on its coalition and the seed) and the removed features take
        its values; averaging over ``R`` seeds gives the interventional (marginal) game with
        ``R`` background draws.

    Examples
    --------
    >>> bg = np.array([[0.0, 0.0, 0.0], [2.0, 2.0, 2.0]])
    >>> gen = FeatureGroupGenerator([[0], [1, 2]], bg)
    >>> gen(np.array([5.0, 6.0, 7.0]), np.array([[True, False]]), 0)
    array([[5., 1., 1.]])
    """

    def __init__(self, groups, background, *, mode: str = "baseline") -> None:
        self.background = check_array(background, "background", ndim=2)
        d = self.background.shape[1]
        if mode not in ("baseline", "marginal"):
            raise ValueError(f"mode must be 'baseline' or 'marginal', got {mode!r}")
        self.mode = mode
        seen: set[int] = set()
        self.groups = []
        for g in groups:
            idx = [int(j) for j in g]
            if not idx or any(j < 0 or j >= d or j in seen for j in idx):
                raise ValueError(f"groups must be non-empty, disjoint lists of feature indices "
                                 f"in [0, {d}), got {list(g)!r}")
            seen.update(idx)
            self.groups.append(idx)
        self.n_players = len(self.groups)
        self._owner = np.full(d, -1)
        for p, g in enumerate(self.groups):
            self._owner[g] = p
        self._base = self.background.mean(axis=0)

    def __call__(self, x: np.ndarray, keep: np.ndarray, seed: int) -> np.ndarray:
        """Intervened rows ``(B, d)`` for a row ``x`` ``(d,)`` and coalitions ``keep`` ``(B, n)``.

        Features outside every group are always kept.

        Examples
        --------
        >>> gen = FeatureGroupGenerator([[0], [1]], np.zeros((3, 2)), mode="marginal")
        >>> gen(np.ones(2), np.array([[True, False], [False, True]]), seed=0)
        array([[1., 0.],
               [0., 1.]])
        """
        x = np.asarray(x, dtype=np.float64)
        keep = np.asarray(keep, dtype=bool)
        feat_keep = np.ones((keep.shape[0], x.shape[0]), dtype=bool)
        grouped = self._owner >= 0
        feat_keep[:, grouped] = keep[:, self._owner[grouped]]
        if self.mode == "baseline":
            fill = np.broadcast_to(self._base, feat_keep.shape)
        else:
            row = np.random.default_rng(seed).integers(0, self.background.shape[0])
            fill = np.broadcast_to(self.background[row], feat_keep.shape)
        return np.where(feat_keep, x[None, :], fill)


def _lung_background(size: int, gen: np.random.Generator,
                     count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Body + dark lung ellipse + 3x3-box-smoothed noise; (size, size) or (count, size, size)."""
    rows, cols = np.indices((size, size))
    c = (size - 1) / 2
    lung = ((rows - c) / (0.42 * size)) ** 2 + ((cols - c) / (0.32 * size)) ** 2 <= 1.0
    shape = (1 if count is None else count, size, size)
    noise = np.pad(gen.standard_normal(shape), ((0, 0), (1, 1), (1, 1)))
    smooth = sum(noise[:, i:i + size, j:j + size] for i in range(3) for j in range(3)) / 9.0
    bg = 0.6 - 0.4 * lung + 0.05 * smooth
    return (bg[0] if count is None else bg), lung


def toy_lung_scene(*, size: int = 32, malignant: bool = True, artifact: bool = True,
                   rng=None) -> ObjectScene:
    """One toy "lung" scene whose objects are a nodule (player 0) and an artifact (player 1).

    The lung is a dark ellipse on a brighter body with smooth noise; the nodule is a disc inside
    the lung (radius 3.5 px if ``malignant`` else 1.5 px, amplitude 0.5); the artifact is a
    bright 3x3 square (amplitude 0.8, an "electrode") at the lung's edge. Same generative
    model as :func:`make_toy_lung_dataset`.

    Parameters
    ----------
    size : int, default=32
    malignant : bool, default=True
    artifact : bool, default=True
        Include the artifact object (else the scene has one object).
    rng : numpy Generator, int or None

    Returns
    -------
    ObjectScene

    Examples
    --------
    >>> toy_lung_scene(rng=0).masks.shape
    (2, 32, 32)
    """
    size = check_scalar(size, "size", Interval("int", 16, None))
    gen = check_rng(rng)
    bg, lung = _lung_background(size, gen)
    masks, amps, centers = _lung_objects(size, lung, malignant, artifact, gen)
    return ObjectScene(bg, masks, amps, centers)


def _lung_objects(size: int, lung: np.ndarray, malignant: bool, artifact: bool,
                  gen: np.random.Generator):
    rows, cols = np.indices((size, size))
    c = (size - 1) / 2
    radius = 3.5 if malignant else 1.5
    ang = gen.uniform(0, 2 * np.pi)
    rad = gen.uniform(0.0, 0.45)
    center = np.array([c + rad * 0.42 * size * np.sin(ang), c + rad * 0.32 * size * np.cos(ang)])
    nod = (rows - center[0]) ** 2 + (cols - center[1]) ** 2 <= radius**2
    masks, amps, centers = [nod], [0.5], [center]
    if artifact:
        side = gen.choice([-1, 1])
        r0 = int(np.rint(c + gen.uniform(-0.2, 0.2) * size))
        c0 = int(np.rint(c + side * 0.36 * size))
        sq = np.zeros((size, size), dtype=bool)
        sq[r0 - 1:r0 + 2, c0 - 1:c0 + 2] = True
        sq &= ~nod
        masks.append(sq)
        amps.append(0.8)
        centers.append(np.array([r0, c0], dtype=np.float64))
    return np.stack(masks), np.array(amps), np.stack(centers)


def make_toy_lung_dataset(n_samples: int = 1000, *, size: int = 32,
                          spurious_artifact_corr: float = 0.8, rng=None) -> dict:
    """Toy "lung" images whose label comes from the nodule only, with a spurious artifact.

    Label ``y ~ Bernoulli(1/2)``; the nodule is malignant-sized iff ``y = 1``; the artifact is
    present with probability ``(1 + c)/2`` when ``y = 1`` and ``(1 - c)/2`` when ``y = 0``,
    ``c = spurious_artifact_corr`` (``c = 0``: independent of the label). A model trained on it
    may learn the artifact as a shortcut; S(H)NAP's artifact main effect exposes it.

    Parameters
    ----------
    n_samples : int, default=1000
    size : int, default=32
    spurious_artifact_corr : float in [0, 1], default=0.8
    rng : numpy Generator, int or None

    Returns
    -------
    dict
        ``images`` (n, size, size) float64, ``labels`` (n,) int64, ``artifact`` (n,) bool.

    Examples
    --------
    >>> data = make_toy_lung_dataset(20, rng=0)
    >>> data["images"].shape, data["labels"].shape
    ((20, 32, 32), (20,))
    """
    n = check_scalar(n_samples, "n_samples", Interval("int", 1, None))
    size = check_scalar(size, "size", Interval("int", 16, None))
    corr = check_scalar(spurious_artifact_corr, "spurious_artifact_corr",
                        Interval("real", 0.0, 1.0))
    gen = check_rng(rng)
    labels = gen.integers(0, 2, n)
    art = gen.random(n) < np.where(labels == 1, (1 + corr) / 2, (1 - corr) / 2)
    images, lung = _lung_background(size, gen, n)
    for k in range(n):
        masks, amps, _ = _lung_objects(size, lung, bool(labels[k]), bool(art[k]), gen)
        images[k] += np.tensordot(amps, masks.astype(np.float64), axes=1)
    return {"images": images, "labels": labels.astype(np.int64), "artifact": art}
