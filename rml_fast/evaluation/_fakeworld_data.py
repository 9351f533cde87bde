"""FakeWorld-mini: a deterministic offline stand-in for the FakeWorld data (spec §3.7).

Real media are scikit-learn's 8x8 digits scaled to [0, 1]. "Synthetic" media are made by three
documented manipulations, each keeping the digit's class (so media authenticity and content
veracity stay independent axes):

* ``pca_resynthesis``: the digit projected on the first 12 principal components of all digits
  and reconstructed (a stand-in for an autoencoder / generator), plus N(0, 0.03^2) noise,
  clipped to [0, 1] and rounded to the 1/16 grid of the real digits;
* ``class_blend``: the pixel average of the digit and another digit of the same class, rounded
  to the 1/16 grid;
* ``patch_splice``: a 3x3 patch at a random position replaced by the same patch of another
  digit of the same class (evidence: that box).

Each instance has a caption ``"this is a {k}"`` (modality ``text``) and an image; ``streaming``
instances also carry a 4-frame video (the digit translated by at most one pixel per frame).
Content labels: ``veracious`` (caption, image and video agree), ``factual_error`` (the caption
names another digit), ``cross_modal_inconsistent`` (streaming only: from frame t0 on the video
shows another digit than the image and caption). Gold rationales and evidence are templated.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

MANIPULATIONS = ("pca_resynthesis", "class_blend", "patch_splice")
_DESCRIBE = {
    "pca_resynthesis": "resynthesised by a low-rank generator, smooth strokes without fine detail",
    "class_blend": "a blend of two different handwritten digits, soft double strokes",
    "patch_splice": "a spliced patch pasted from another digit",
}


@cache
def _digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = d.data.astype(np.float64) / 16.0
    mean = x.mean(axis=0)
    _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
    return x.reshape(-1, 8, 8), d.target.astype(np.int64), mean, vt[:12]


def _grid(img: np.ndarray) -> np.ndarray:
    return np.round(np.clip(img, 0.0, 1.0) * 16.0) / 16.0


def _same_class(rng: np.random.Generator, y: np.ndarray, k: int, avoid: int) -> int:
    pool = np.flatnonzero(y == k)
    j = int(pool[rng.integers(pool.size)])
    return j if j != avoid else int(pool[(np.searchsorted(pool, j) + 1) % pool.size])


def _manipulate(
    rng: np.random.Generator, src: int, how: str
) -> tuple[np.ndarray, tuple[int, int, int, int] | None]:
    x, y, mean, comps = _digits()
    img = x[src]
    if how == "pca_resynthesis":
        flat = img.ravel() - mean
        rec = mean + (flat @ comps.T) @ comps + rng.normal(0.0, 0.03, 64)
        return _grid(rec.reshape(8, 8)), None
    other = x[_same_class(rng, y, int(y[src]), src)]
    if how == "class_blend":
        return _grid(0.5 * (img + other)), None
    r, c = (int(v) for v in rng.integers(0, 6, size=2))
    out = img.copy()
    out[r : r + 3, c : c + 3] = other[r : r + 3, c : c + 3]
    return out, (r, c, r + 3, c + 3)


def _video(rng: np.random.Generator, frame: np.ndarray, n_frames: int) -> np.ndarray:
    frames = []
    for _ in range(n_frames):
        dr, dc = (int(v) for v in rng.integers(-1, 2, size=2))
        frames.append(np.roll(np.roll(frame, dr, axis=0), dc, axis=1))
    return np.stack(frames)


def make_instances(
    n: int, rng: np.random.Generator, p_synthetic: float, p_streaming: float, n_frames: int
) -> list[dict[str, Any]]:
    """The fields of ``n`` FakeWorld-mini instances (see the module docstring)."""
    x, y, _, _ = _digits()
    out = []
    for i in range(n):
        src = int(rng.integers(y.size))
        k = int(y[src])
        scenario = "streaming" if rng.random() < p_streaming else "web"
        if scenario == "web":
            content = "veracious" if rng.random() < 0.5 else "factual_error"
        else:
            content = str(rng.choice(["veracious", "factual_error", "cross_modal_inconsistent"],
                                     p=[0.4, 0.3, 0.3]))
        caption_digit = k if content != "factual_error" else int((k + rng.integers(1, 10)) % 10)
        media: dict[str, Any] = {"text": f"this is a {caption_digit}"}
        labels: dict[str, int] = {}
        evidence: list[dict[str, Any]] = []
        why: list[str] = []
        img_syn = rng.random() < p_synthetic
        if img_syn:
            how = MANIPULATIONS[int(rng.integers(len(MANIPULATIONS)))]
            img, box = _manipulate(rng, src, how)
            why.append(f"the image is synthetic: {_DESCRIBE[how]}")
            evidence.append({"modality": "image", **({"box": box} if box else {})})
        else:
            img = x[src].copy()
            why.append("the image is an authentic handwritten digit")
        media["image"], labels["image"] = img, int(img_syn)
        if scenario == "streaming":
            vid_syn = rng.random() < p_synthetic
            base = (_manipulate(rng, src, "pca_resynthesis")[0] if vid_syn
                    else x[_same_class(rng, y, k, src)])
            frames = _video(rng, base, n_frames)
            if content == "cross_modal_inconsistent":
                other_k = int((k + rng.integers(1, 10)) % 10)
                other = x[_same_class(rng, y, other_k, -1)]
                if vid_syn:
                    other = _manipulate(rng, _same_class(rng, y, other_k, -1), "pca_resynthesis")[0]
                t0 = int(rng.integers(0, n_frames - 1))
                frames[t0:] = _video(rng, other, n_frames - t0)
                why.append(f"the video switches to a {other_k} from frame {t0} while the image "
                           f"and caption show a {k}")
                evidence.append({"modality": "video", "segment": (t0, n_frames)})
            media["video"], labels["video"] = frames, int(vid_syn)
            why.append("the video is synthetic: " + _DESCRIBE["pca_resynthesis"] if vid_syn
                       else "the video is authentic footage")
            if vid_syn:
                evidence.append({"modality": "video"})
        if content == "factual_error":
            why.append(f"the caption claims a {caption_digit} but the image shows a {k}")
            evidence.append({"modality": "text"})
        elif content == "veracious":
            why.append(f"the caption correctly says {k}")
        out.append({"id": f"fwm-{i:05d}", "scenario": scenario, "media": media,
                    "media_labels": labels, "content_label": content,
                    "rationale": "; ".join(why), "evidence": tuple(evidence)})
    return out
