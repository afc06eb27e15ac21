"""Shared helpers. The package is imported from python/ (no install needed); libkiln is found as
kiln finds it (KILN_LIBRARY, next to the package, or the build tree)."""
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

try:
    import numpy as np
except ImportError:  # each NumPy test module skips itself (importorskip); torch-only tests still run
    np = None


def torch_or_skip(min_version=(2, 4)):
    """torch, or a skip of the calling module saying why (absent, or older than custom_op needs)."""
    try:
        import torch
    except ImportError:
        pytest.skip("PyTorch is not installed", allow_module_level=True)
    found = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
    if found < min_version:
        pytest.skip(f"PyTorch {torch.__version__} is older than {'.'.join(map(str, min_version))}",
                    allow_module_level=True)
    return torch


def rel_err(out, ref):
    """‖out − ref‖ / ‖ref‖ in float64 (SPEC §5)."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300))


def tol_for(dtype):
    """Matmul tolerances of tests/test_matmul_host.c by output dtype."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    return {"float32": 1e-4, "float16": 1e-3, "bfloat16": 6e-3}[name]


@pytest.fixture
def rng():
    if np is None:
        pytest.skip("NumPy is not installed")
    return np.random.default_rng(1234)
