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

class circuits:  # submodule rml_fast._C.circuits
    @staticmethod
    def masked_mix(
        delta: npt.NDArray[np.floating[Any]],
        mask: npt.NDArray[np.uint8],
        base: npt.NDArray[np.floating[Any]],
        out: npt.NDArray[np.floating[Any]],
    ) -> None: ...
