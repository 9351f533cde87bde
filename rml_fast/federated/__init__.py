"""Federated learning: (t, K)-threshold watermarking and SoHip memory sharing.

Every method is a :class:`~rml_fast.federated.protocol.FederatedServer` plus a client factory; the
same pair runs in process (:func:`run_federated`) and on Flower (:mod:`rml_fast.federated.flower`,
the ``federated`` extra).
"""

from __future__ import annotations

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
