# Type stubs for the compiled extension rml_fast._C (csrc/). tests/test_package.py checks
# that every function here exists in the built module and vice versa.
from typing import Any

import numpy as np
import numpy.typing as npt

def build_info() -> dict[str, Any]: ...

class random:  # submodule rml_fast._C.random
    @staticmethod
    def fill_uniform(out: npt.NDArray[np.float32], seed: int, offset: int) -> None: ...
    @staticmethod
    def fill_normal(out: npt.NDArray[np.float32], seed: int, offset: int) -> None: ...

class clip:  # submodule rml_fast._C.clip
    @staticmethod
    def ghost_norm_sq(
        A: npt.NDArray[Any], D: npt.NDArray[Any], out: npt.NDArray[np.float64]
    ) -> None: ...
    @staticmethod
    def ghost_cross(
        A: npt.NDArray[Any],
        D: npt.NDArray[Any],
        A2: npt.NDArray[Any],
        D2: npt.NDArray[Any],
        out: npt.NDArray[np.float64],
    ) -> None: ...
    @staticmethod
    def scaled_outer_accumulate(
        A: npt.NDArray[Any],
        D: npt.NDArray[Any],
        w: npt.NDArray[Any],
        seq_len: int,
        out: npt.NDArray[Any],
        noise_std: float,
        seed: int,
        offset: int,
        gemm: int,
    ) -> None: ...
