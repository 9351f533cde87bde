# Type stubs for the compiled extension rml_fast._C (csrc/). tests/test_package.py checks
# that every function here exists in the built module and vice versa.
from typing import Any

import numpy as np
import numpy.typing as npt

def build_info() -> dict[str, Any]: ...
def set_thread_limit(n: int) -> None: ...
def thread_limit() -> int: ...
def max_threads() -> int: ...
def parallel_width() -> int: ...

class random:  # submodule rml_fast._C.random
    @staticmethod
    def fill_uniform(out: npt.NDArray[np.float32], seed: int, offset: int) -> None: ...
    @staticmethod
    def fill_normal(out: npt.NDArray[np.float32], seed: int, offset: int) -> None: ...

class sgg:  # submodule rml_fast._C.sgg
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
    @staticmethod
    def pld_epsilon_for_delta(
        out: npt.NDArray[np.float64],
        delta: npt.NDArray[np.float64],
        pmf: npt.NDArray[np.float64],
        lower: int,
        h: float,
        inf_mass: float,
    ) -> None: ...
    @staticmethod
    def fft_good_size(n: int) -> int: ...
    @staticmethod
    def fft_rfft(
        out_re: npt.NDArray[np.float64],
        out_im: npt.NDArray[np.float64],
        x: npt.NDArray[np.float64],
        n: int,
    ) -> None: ...
    @staticmethod
    def fft_irfft(
        out: npt.NDArray[np.float64],
        in_re: npt.NDArray[np.float64],
        in_im: npt.NDArray[np.float64],
    ) -> None: ...
    @staticmethod
    def pld_convolve(
        out: npt.NDArray[np.float64], a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]
    ) -> None: ...
    @staticmethod
    def pld_self_convolve(
        out: npt.NDArray[np.float64], pmf: npt.NDArray[np.float64], n: int, shift: int
    ) -> None: ...

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

class lasso:  # submodule rml_fast._C.lasso
    @staticmethod
    def path(
        X: npt.NDArray[np.floating[Any]],
        Y: npt.NDArray[np.floating[Any]],
        lambdas: npt.NDArray[np.float64],
        col_norm2: npt.NDArray[np.float64],
        warm_start: npt.NDArray[np.float64] | None = None,
        tol: float = 1e-6,
        max_epochs: int = 10000,
        ws_start: int = 40,
        anderson_k: int = 5,
        screening: bool = True,
        working_set: bool = True,
        n_threads: int = 0,
        reuse_corr: bool = True,
    ) -> tuple[
        npt.NDArray[np.int64],
        npt.NDArray[np.float64],
        npt.NDArray[np.int64],
        npt.NDArray[np.float64],
        npt.NDArray[np.int64],
        npt.NDArray[np.float64],
    ]: ...
    @staticmethod
    def col_norm2(
        X: npt.NDArray[np.floating[Any]], n_threads: int = 0
    ) -> tuple[npt.NDArray[np.float64], bool]: ...
    @staticmethod
    def bookkeeping_isa() -> str: ...
    @staticmethod
    def gram_path(
        G: npt.NDArray[np.float64],
        Xy: npt.NDArray[np.float64],
        yy: npt.NDArray[np.float64],
        n: npt.NDArray[np.float64],
        lambdas: npt.NDArray[np.float64],
        warm_start: npt.NDArray[np.float64] | None = None,
        tol: float = 1e-6,
        max_epochs: int = 10000,
        anderson_k: int = 5,
        n_threads: int = 1,
        polish: bool = True,
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]: ...

class gravitree:  # submodule rml_fast._C.gravitree
    class Search:
        @property
        def complete(self) -> bool: ...
        @property
        def keyboard_interrupt(self) -> bool: ...
        @property
        def n_trees(self) -> int: ...
        @property
        def optimal_objective(self) -> float: ...
        @property
        def stats(self) -> dict[str, Any]: ...
        @property
        def theta(self) -> float: ...
        def count_without(self, feature: int) -> int: ...
        def get(self, i: int) -> dict[str, Any]: ...
        def record_counts(self) -> list[int]: ...
        def record_objectives(self) -> npt.NDArray[np.float64]: ...

    @staticmethod
    def fit(
        x: npt.NDArray[Any],
        pos: npt.NDArray[Any],
        tot: npt.NDArray[Any],
        total_weight: float,
        integral: bool,
        lambda_: float,
        depth: int,
        branch: int,
        loss: int,
        tau: float,
        cost: float,
        falling: bool,
        bound_mode: int,
        bound_value: float,
        time_limit: float,
        prune: bool,
        ignore_trivial: bool = False,
        max_leaves: int = -1,
        memory_limit_mb: float = 0.0,
        n_threads: int = 1,
        monitor: object = None,
    ) -> gravitree.Search: ...

class nudft:  # submodule rml_fast._C.nudft
    @staticmethod
    def type1(
        x: npt.NDArray[np.floating[Any]],
        v: npt.NDArray[np.floating[Any]],
        K: list[int],
        dxi: list[float],
        sign: int,
        out_re: npt.NDArray[np.floating[Any]],
        out_im: npt.NDArray[np.floating[Any]],
        dens_re: npt.NDArray[np.floating[Any]] | None = None,
        dens_im: npt.NDArray[np.floating[Any]] | None = None,
    ) -> None: ...
    @staticmethod
    def type2(
        x: npt.NDArray[np.floating[Any]],
        re: npt.NDArray[np.floating[Any]],
        im: npt.NDArray[np.floating[Any]],
        w: npt.NDArray[np.floating[Any]],
        K: list[int],
        dxi: list[float],
        sign: int,
        y: npt.NDArray[np.floating[Any]],
    ) -> None: ...
    @staticmethod
    def spread(
        x: npt.NDArray[np.floating[Any]],
        v: npt.NDArray[np.floating[Any]],
        nf: list[int],
        dxi: list[float],
        w: int,
        beta: float,
        ones: bool,
        g: npt.NDArray[np.floating[Any]],
        poly: npt.NDArray[np.float64] | None = None,
    ) -> None: ...
    @staticmethod
    def interp(
        x: npt.NDArray[np.floating[Any]],
        g: npt.NDArray[np.floating[Any]],
        nf: list[int],
        dxi: list[float],
        w: int,
        beta: float,
        y: npt.NDArray[np.floating[Any]],
        poly: npt.NDArray[np.float64] | None = None,
    ) -> None: ...
    @staticmethod
    def nufft1_1d(
        x: npt.NDArray[np.floating[Any]],
        v: npt.NDArray[np.floating[Any]],
        nf: list[int],
        dxi: list[float],
        w: int,
        beta: float,
        poly: npt.NDArray[np.float64] | None,
        K: int,
        scale: npt.NDArray[np.float64],
        sign_im: int,
        re: npt.NDArray[np.floating[Any]],
        im: npt.NDArray[np.floating[Any]],
        dens_re: npt.NDArray[np.floating[Any]] | None = None,
        dens_im: npt.NDArray[np.floating[Any]] | None = None,
    ) -> None: ...
    @staticmethod
    def nufft2_1d(
        x: npt.NDArray[np.floating[Any]],
        re: npt.NDArray[np.floating[Any]],
        im: npt.NDArray[np.floating[Any]],
        nf: list[int],
        dxi: list[float],
        w: int,
        beta: float,
        poly: npt.NDArray[np.float64] | None,
        K: int,
        scale: npt.NDArray[np.float64],
        sign_im: int,
        y: npt.NDArray[np.floating[Any]],
    ) -> None: ...
    @staticmethod
    def row_fft(
        re: npt.NDArray[np.floating[Any]],
        im: npt.NDArray[np.floating[Any]],
        sign: int,
    ) -> None: ...
    @staticmethod
    def modes_out(
        S: npt.NDArray[np.complexfloating[Any, Any]],
        K: list[int],
        scale: npt.NDArray[np.float64],
        sign_im: int,
        re: npt.NDArray[np.floating[Any]],
        im: npt.NDArray[np.floating[Any]],
        dens_re: npt.NDArray[np.floating[Any]] | None = None,
        dens_im: npt.NDArray[np.floating[Any]] | None = None,
    ) -> None: ...
    @staticmethod
    def modes_in(
        re: npt.NDArray[np.floating[Any]],
        im: npt.NDArray[np.floating[Any]],
        K: list[int],
        scale: npt.NDArray[np.float64],
        sign_im: int,
        X: npt.NDArray[np.complexfloating[Any, Any]],
    ) -> None: ...

class circuits:  # submodule rml_fast._C.circuits
    @staticmethod
    def masked_mix(
        delta: npt.NDArray[np.floating[Any]],
        mask: npt.NDArray[np.uint8],
        base: npt.NDArray[np.floating[Any]],
        out: npt.NDArray[np.floating[Any]],
        source_first: bool = False,
        ln_w: npt.NDArray[np.floating[Any]] | None = None,
        ln_b: npt.NDArray[np.floating[Any]] | None = None,
        eps: float = 1e-5,
        need: npt.NDArray[np.uint8] | None = None,
        n_threads: int = 0,
    ) -> None: ...
