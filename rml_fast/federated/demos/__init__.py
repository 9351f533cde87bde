"""Runnable federated experiments (``rml-fast demo federated NAME``)."""

from __future__ import annotations
