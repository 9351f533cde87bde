"""The shipped lynx series: length, endpoints and summary values of the published series."""

from __future__ import annotations

import numpy as np

from rml_fast.datasets import load_lynx


def test_lynx_matches_published_series() -> None:
    years, counts = load_lynx()
    assert years.shape == counts.shape == (114,)
    np.testing.assert_array_equal(years, np.arange(1821, 1935))
    # Brockwell & Davis series G / R's datasets::lynx: first and last values, extremes, mean.
    assert counts[:5].tolist() == [269, 321, 585, 871, 1475]
    assert counts[-3:].tolist() == [1590, 2657, 3396]
    assert (years[counts.argmax()], counts.max()) == (1904, 6991)
    assert (years[counts.argmin()], counts.min()) == (1889, 39)
    assert round(float(counts.mean()), 3) == 1538.018
