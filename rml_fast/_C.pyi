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
        A: npt.NDArray[Any], D: npt.NDArray[Any], out: npt.NDArray[np.float64], gemm: int = 0
    ) -> None: ...
    @staticmethod
    def ghost_cross(
        A: npt.NDArray[Any],
        D: npt.NDArray[Any],
        A2: npt.NDArray[Any],
        D2: npt.NDArray[Any],
        out: npt.NDArray[np.float64],
        gemm: int = 0,
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

class sgg:  # submodule rml_fast._C.sgg (stubs added on the dpc4 branch when merging sgg)
    GAMMA_ATTEMPTS: int
    @staticmethod
    def counters_per_row(dim: int) -> int: ...
    @staticmethod
    def sample(
        out: npt.NDArray[Any],
        n: int,
        dim: int,
        sigma: float,
        k: float,
        p: float,
        seed: int,
        offset: int,
    ) -> None: ...
    @staticmethod
    def log_radius(
        out: npt.NDArray[np.float64], dim: int, k: float, p: float, seed: int, offset: int
    ) -> None: ...
    @staticmethod
    def loss_cdf(
        out: npt.NDArray[np.float64],
        losses: npt.NDArray[np.float64],
        edges: npt.NDArray[np.float64],
        r_nodes: npt.NDArray[np.float64],
        r_weights: npt.NDArray[np.float64],
        gl_t: npt.NDArray[np.float64],
        gl_w: npt.NDArray[np.float64],
        h_table: npt.NDArray[np.float64],
        dh_table: npt.NDArray[np.float64],
        dim: int,
        sigma: float,
        k: float,
        p: float,
        sensitivity: float,
        log_norm: float,
    ) -> None: ...
    @staticmethod
    def pld_delta_for_eps(
        out: npt.NDArray[np.float64],
        eps: npt.NDArray[np.float64],
        pmf: npt.NDArray[np.float64],
        lower: int,
        h: float,
        inf_mass: float,
    ) -> None: ...
