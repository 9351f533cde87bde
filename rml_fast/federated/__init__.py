"""Federated learning: (t, K)-threshold watermarking and SoHip memory sharing.

Every method is a :class:`~rml_fast.federated.protocol.FederatedServer` plus a client factory; the
same pair runs in process (:func:`run_federated`) and on Flower (:mod:`rml_fast.federated.flower`,
the ``federated`` extra). The protocol and the in-process runner are imported eagerly; the methods
(which import torch) and the Flower adapter (which imports flwr when called) load on first use of
one of their names.
"""

from __future__ import annotations

import importlib
from typing import Any

from rml_fast.federated.protocol import FederatedClient, FederatedServer, Message, check_message
from rml_fast.federated.simulation import FederatedHistory, run_federated

__all__ = [
    "FederatedClient",
    "FederatedHistory",
    "FederatedServer",
    "Message",
    "check_message",
    "run_federated",
]

#: public name -> submodule, for the names loaded on first use
_LAZY = {
    **dict.fromkeys(
        ["FedAvgClient", "FedAvgServer", "fedavg_aggregate", "iid_partition", "make_mlp",
         "model_to_arrays", "arrays_to_model", "evaluate_accuracy"],
        "fedavg",
    ),
    **dict.fromkeys(
        ["KeyShare", "ShamirField", "ThresholdWatermarkClient", "ThresholdWatermarkServer",
         "additive_shares", "empirical_null", "generate_key", "null_sigma", "threshold_verify",
         "trustless_keygen", "watermark_score", "z_score", "finetune_attack", "prune_attack",
         "noise_attack", "overwrite_attack"],
        "threshold_watermark",
    ),
    **dict.fromkeys(
        ["SoHipAgent", "SoHipClient", "SoHipServer", "aggregate_memories", "label_skew_split"],
        "sohip",
    ),
    **dict.fromkeys(["FedProtoClient", "FedProtoServer", "LocalClient", "LocalServer"], "baselines"),
    **dict.fromkeys(
        ["run_flower_simulation", "server_app", "client_app", "run_server", "to_array_record",
         "from_array_record"],
        "flower",
    ),
}
__all__ += sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"rml_fast.federated.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'rml_fast.federated' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
