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
