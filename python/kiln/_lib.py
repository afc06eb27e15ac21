"""libkiln: finding and loading it, and ctypes declarations that mirror include/kiln.h.

Every Structure below must match kiln.h bit for bit; tests/test_abi.py compiles a small C
program against the header and compares sizes and offsets.
"""
import ctypes
import enum
import glob
import os
from ctypes import (POINTER, Structure, byref, c_char, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t,
                    c_uint8, c_uint16, c_uint32, c_uint64, c_void_p)

# ------------------------------------------------------------------------------------------------
# DLPack 1.x, as kiln.h declares it (C enums are int-sized on every ABI kiln targets).
# ------------------------------------------------------------------------------------------------
kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged = 1, 2, 3, 13
kDLInt, kDLUInt, kDLFloat, kDLOpaqueHandle, kDLBfloat, kDLComplex, kDLBool = 0, 1, 2, 3, 4, 5, 6
DLPACK_FLAG_BITMASK_READ_ONLY = 1 << 0
DLPACK_FLAG_BITMASK_IS_COPIED = 1 << 1


class DLDevice(Structure):
    _fields_ = [("device_type", c_int), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),  # in elements; NULL = compact row-major
        ("byte_offset", c_uint64),
    ]


class DLManagedTensor(Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, POINTER(DLManagedTensor))),
]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, POINTER(DLManagedTensorVersioned))),
    ("flags", c_uint64),
    ("dl_tensor", DLTensor),
]

# ------------------------------------------------------------------------------------------------
# kiln types
# ------------------------------------------------------------------------------------------------


class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    UNSUPPORTED = 2
    NO_DRIVER = 3
    DRIVER_TOO_OLD = 4
    NO_DEVICE = 5
    NO_KERNEL_IMAGE = 6
    OUT_OF_MEMORY = 7
    CUDA = 8
    WORKSPACE = 9
    INTERNAL = 10


class MatmulAlgo(enum.IntEnum):
    AUTO = 0
    MMA_SYNC = 1
    CP_ASYNC = 2
    WGMMA = 3


class Int8Algo(enum.IntEnum):
    AUTO = 0
    MMA_SYNC = 1
    WGMMA = 2


class Int4Algo(enum.IntEnum):
    AUTO = 0
    DECODE = 1
    PREFILL = 2


class QkvAlgo(enum.IntEnum):
    AUTO = 0
    DECODE = 1
    PREFILL = 2


class AttentionAlgo(enum.IntEnum):
    AUTO = 0
    SMEM = 1
    FLASH = 2
    FLASH_MMA_SYNC = 3
    FLASH_WGMMA = 4
    FLASH_DECODE = 5


class QFormat(enum.IntEnum):
    REFERENCE = 1
    GPTQ_V1 = 2
    GPTQ_V2 = 3
    AWQ = 4


class kiln_device_info(Structure):
    _fields_ = [
        ("name", c_char * 256),
        ("ordinal", c_int),
        ("cc_major", c_int),
        ("cc_minor", c_int),
        ("sm_count", c_int),
        ("smem_per_block_optin", c_size_t),
        ("l2_bytes", c_size_t),
        ("total_memory", c_size_t),
        ("driver_version", c_int),
        ("has_kernels", c_int),
    ]


class kiln_matmul_opts(Structure):
    _fields_ = [("algo", c_int), ("alpha", c_float), ("tile_n", c_int), ("stream_k", c_int),
                ("workspace", c_void_p), ("workspace_bytes", c_size_t)]


class kiln_matmul_int8_opts(Structure):
    _fields_ = [
        ("algo", c_int),
        ("scale", c_float),
        ("row_scale", POINTER(DLTensor)),
        ("col_scale", POINTER(DLTensor)),
    ]


class kiln_qweight(Structure):
    _fields_ = [
        ("k", c_int64),
        ("n", c_int64),
        ("group", c_int64),
        ("codes", c_void_p),   # uint32 [k / 8, n]
        ("scales", c_void_p),  # f16 bits [k / group, n]
        ("zeros", c_void_p),   # uint8 [k / group, n]
        ("perm", c_void_p),    # int32 [k] or NULL
        ("device", DLDevice),
    ]


class kiln_matmul_int4_opts(Structure):
    _fields_ = [("algo", c_int), ("workspace", c_void_p), ("workspace_bytes", c_size_t)]


class kiln_qkv_opts(Structure):
    _fields_ = [("algo", c_int), ("workspace", c_void_p), ("workspace_bytes", c_size_t)]


class kiln_attention_opts(Structure):
    _fields_ = [("algo", c_int), ("scale", c_float), ("causal", c_int), ("deterministic", c_int), ("tile_m", c_int)]


# ------------------------------------------------------------------------------------------------
# Finding the library: KILN_LIBRARY, next to the package, the build tree, the system.
# ------------------------------------------------------------------------------------------------
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_DIR = os.path.dirname(os.path.dirname(_PKG_DIR))
_NAME = "libkiln.so"


def _sanitized_build(build_dir):
    """An ASan/fuzz build's library aborts the process when dlopen'ed without its runtime."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8", errors="replace") as f:
            cache = f.read()
    except OSError:
        return False
    return "KILN_SANITIZE:BOOL=ON" in cache or "KILN_FUZZ:BOOL=ON" in cache


def candidates():
    """Where libkiln is looked for, in order (KILN_LIBRARY alone when it is set)."""
    env = os.environ.get("KILN_LIBRARY")
    if env:
        return [env]
    found = [os.path.join(_PKG_DIR, _NAME), os.path.join(_REPO_DIR, "build", _NAME)]
    builds = [p for p in glob.glob(os.path.join(_REPO_DIR, "build-*", _NAME))
              if not _sanitized_build(os.path.dirname(p))]
    found += sorted(builds, key=os.path.getmtime, reverse=True)  # the newest build first
    return found


def _load():
    tried = []
    paths = candidates()
    for path in paths:
        if not os.path.exists(path):
            tried.append(f"{path} (absent)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({e})")
    if os.environ.get("KILN_LIBRARY"):
        raise ImportError(f"kiln: KILN_LIBRARY={os.environ['KILN_LIBRARY']} could not be loaded: {tried[0]}")
    try:  # an installed system library
        return ctypes.CDLL("libkiln.so.0"), "libkiln.so.0"
    except OSError:
        tried.append("libkiln.so.0 on the system library path (absent)")
    raise ImportError("kiln: libkiln.so not found; build it (make, or cmake -S . -B build && cmake --build build) "
                      "or set KILN_LIBRARY to its path. Tried: " + "; ".join(tried))


lib, path = _load()

# ------------------------------------------------------------------------------------------------
# Prototypes. Tensors and option structs are passed as the ctypes objects themselves (ctypes
# passes their addresses to the POINTER arguments) or None; the GIL is released during calls.
# ------------------------------------------------------------------------------------------------
_T = POINTER(DLTensor)
_S = c_void_p  # CUstream
_CTX = c_void_p
_st = c_int
_QW = POINTER(kiln_qweight)

_PROTOTYPES = {
    "kiln_status_string": (c_char_p, [c_int]),
    "kiln_last_error": (c_char_p, []),
    "kiln_clear_error": (None, []),
    "kiln_version": (None, [POINTER(c_int)] * 3),
    "kiln_device_count": (_st, [POINTER(c_int)]),
    "kiln_build_has_kernels": (c_int, []),
    "kiln_context_create": (_st, [c_int, c_int, POINTER(c_void_p)]),
    "kiln_context_destroy": (None, [_CTX]),
    "kiln_context_info": (_st, [_CTX, POINTER(kiln_device_info)]),
    "kiln_matmul_opts_default": (kiln_matmul_opts, []),
    "kiln_matmul": (_st, [_CTX, _T, _T, _T, POINTER(kiln_matmul_opts), _S]),
    "kiln_matmul_workspace_size": (_st, [_CTX, _T, _T, _T, POINTER(kiln_matmul_opts), POINTER(c_size_t)]),
    "kiln_matmul_backward_workspace_size": (_st, [_CTX, _T, _T, _T, _T, _T, POINTER(c_size_t)]),
    "kiln_matmul_backward": (_st, [_CTX, _T, _T, _T, _T, _T, c_void_p, c_size_t, POINTER(kiln_matmul_opts), _S]),
    "kiln_matmul_int8_opts_default": (kiln_matmul_int8_opts, []),
    "kiln_matmul_int8": (_st, [_CTX, _T, _T, _T, POINTER(kiln_matmul_int8_opts), _S]),
    "kiln_quantize_int8": (_st, [_CTX, _T, _T, _T, c_int, _S]),
    "kiln_qweight_bytes": (_st, [c_int64, c_int64, c_int64] + [POINTER(c_size_t)] * 4),
    "kiln_qweight_import": (_st, [_CTX, c_int, _T, _T, _T, _T, POINTER(kiln_qweight), _S]),
    "kiln_qweight_quantize": (_st, [_CTX, _T, c_int, POINTER(kiln_qweight), _S]),
    "kiln_qweight_dequantize": (_st, [_CTX, POINTER(kiln_qweight), _T, _S]),
    "kiln_matmul_int4_opts_default": (kiln_matmul_int4_opts, []),
    "kiln_matmul_int4_workspace_size": (_st, [_CTX, _T, _QW, _T, POINTER(c_size_t)]),
    "kiln_matmul_int4": (_st, [_CTX, _T, _QW, _T, POINTER(kiln_matmul_int4_opts), _S]),
    "kiln_qkv_opts_default": (kiln_qkv_opts, []),
    "kiln_qkv_project_int8_workspace_size": (_st, [_CTX, _T, _T, _T, _T, _T, _T, _T, _T, _T, _T, POINTER(c_size_t)]),
    "kiln_qkv_project_int8": (_st, [_CTX, _T, _T, _T, _T, _T, _T, _T, _T, _T, _T, POINTER(kiln_qkv_opts), _S]),
    "kiln_qkv_project_int4_workspace_size": (_st, [_CTX, _T, _QW, _QW, _QW, _T, _T, _T, POINTER(c_size_t)]),
    "kiln_qkv_project_int4": (_st, [_CTX, _T, _QW, _QW, _QW, _T, _T, _T, POINTER(kiln_qkv_opts), _S]),
    "kiln_attention_opts_default": (kiln_attention_opts, []),
    "kiln_attention": (_st, [_CTX, _T, _T, _T, _T, _T, POINTER(kiln_attention_opts), _S]),
    "kiln_attention_backward_workspace_size": (
        _st, [_CTX, _T, _T, _T, _T, _T, _T, _T, _T, _T, POINTER(kiln_attention_opts), POINTER(c_size_t)]),
    "kiln_attention_backward": (
        _st, [_CTX, _T, _T, _T, _T, _T, _T, _T, _T, _T, c_void_p, c_size_t, POINTER(kiln_attention_opts), _S]),
}


class _Functions:
    """The C functions as attributes; a symbol this libkiln lacks is simply absent (hasattr)."""


fn = _Functions()
for _name, (_res, _args) in _PROTOTYPES.items():
    try:
        _f = getattr(lib, _name)
    except AttributeError:
        continue  # an older library: ops.py only offers what exists
    _f.restype, _f.argtypes = _res, _args
    setattr(fn, _name[len("kiln_"):], _f)


def has(symbol):
    """Whether the loaded libkiln exports `symbol` (e.g. 'kiln_matmul_int4')."""
    return hasattr(lib, symbol)


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------
class KilnError(Exception):
    """A kiln call failed. `status` is a kiln.Status; str(e) is the library's message."""

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        self.message = message
        super().__init__(message)

    def __str__(self):
        name = self.status.name if isinstance(self.status, Status) else str(self.status)
        return f"KILN_ERROR_{name}: {self.message}" if name != "OK" else self.message


def raise_status(status):
    """Raises the KilnError of a failed call (call right after it, on the same thread)."""
    message = fn.last_error().decode("utf-8", "replace")
    raise KilnError(status, message)


def invalid(message):
    """A Python-side argument error, raised like the library's own."""
    return KilnError(Status.INVALID_ARGUMENT, message)


def version():
    major, minor, patch = c_int(), c_int(), c_int()
    fn.version(byref(major), byref(minor), byref(patch))
    return (major.value, minor.value, patch.value)
