"""Watermarking: DistSeal latent-space watermarks, augmentations (attacks) and detection metrics.

``rml_fast.watermark.distseal`` (the watermarker and its distillation), ``.augment`` (the
augmentation layer) and ``.metrics`` (bit accuracy, exact binomial detection, PSNR, SSIM); the
names below are loaded lazily, so ``import rml_fast.watermark`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LatentEmbedder": "distseal",
    "LatentWatermarker": "distseal",
    "PixelExtractor": "distseal",
    "StraightThroughQuantizer": "distseal",
    "TinyLatentDDPM": "distseal",
    "cosine_scaling": "distseal",
    "distill_decoder": "distseal",
    "distill_generator": "distseal",
    "random_message": "distseal",
    "watermark_latent_dataset": "distseal",
    "Augmenter": "augment",
    "binomial_pvalue": "metrics",
    "bit_accuracy": "metrics",
    "capacity": "metrics",
    "detection_threshold": "metrics",
    "psnr": "metrics",
    "ssim": "metrics",
    "tpr_at_fpr": "metrics",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        mod = importlib.import_module(f"rml_fast.watermark.{_EXPORTS[name]}")
        return getattr(mod, name)
    raise AttributeError(f"module 'rml_fast.watermark' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
