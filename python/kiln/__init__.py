"""kiln: GPU ops for LLM work (tensor-core matmul, int8/int4, attention) on any DLPack tensor.

    import kiln
    c = kiln.matmul(a, b)                 # PyTorch, NumPy (CPU), CuPy, ... tensors in and out
    o = kiln.attention(q, k, v, causal=True)
    w4 = kiln.Int4Weight.from_float(linear.weight.T, group=64).to("cuda")
    y = kiln.matmul_int4(x, w4)           # W4A16; kiln.qkv_project_int4(x, wq, wk, wv) -> q, k, v

PyTorch tensors go through torch.library custom ops (torch.ops.kiln.*) with autograd and
torch.compile support when torch >= 2.4; see kiln.torch_ops.
"""
import sys
from ctypes import byref, c_int

from . import _lib
from ._context import device_info
from ._lib import AttentionAlgo, Int4Algo, KilnError, MatmulAlgo, QFormat, QkvAlgo, Status
from .ops import (attention, attention_backward, matmul, matmul_backward, matmul_int4, matmul_int8,
                  qkv_project_int4, qkv_project_int8, quantize_int8)
from .weights import Int4Weight, Int8Weight

__all__ = [
    "KilnError", "Status", "MatmulAlgo", "AttentionAlgo", "Int4Algo", "QkvAlgo", "QFormat",
    "matmul", "matmul_backward", "attention", "attention_backward", "matmul_int8", "quantize_int8",
    "matmul_int4", "qkv_project_int4", "qkv_project_int8",
    "Int8Weight", "Int4Weight", "version", "library_path", "device_count", "build_has_kernels", "device_info",
]

library_path = _lib.path  # the libkiln that was loaded


def version():
    """(major, minor, patch) of the loaded libkiln."""
    return _lib.version()


def device_count():
    """CUDA devices visible to libkiln (0 without a driver)."""
    n = c_int(0)
    _lib.fn.device_count(byref(n))  # NO_DRIVER leaves 0: not an error here
    return n.value


def build_has_kernels():
    """Whether this libkiln embeds GPU kernels (False for a CPU-only build)."""
    return bool(_lib.fn.build_has_kernels())


__version__ = "%d.%d.%d" % version()

if "torch" in sys.modules:  # register torch.ops.kiln.* now, so that tracing never imports anything
    from .ops import _torch_ops
    _torch_ops()
    del _torch_ops
