"""Borrowing tensors as DLTensors for the length of one call.

Three ways in, fastest first:
  - PyTorch tensors: a DLTensor built from data_ptr(), shape, stride(), dtype and device.
  - NumPy arrays: the same from the array's own fields (also works for read-only arrays, which
    some NumPy versions refuse to export through DLPack).
  - anything else with __dlpack__: the capsule's DLTensor, read in place. The capsule is never
    consumed or renamed, so its deleter still runs when it is collected: we only borrow, and the
    caller keeps the capsule (in `keep`) until the C call returns.
"""
import ctypes
import struct
import sys
import threading
from ctypes import c_int64, c_void_p, c_char_p, py_object

from . import _frameworks, _lib
from ._context import context
from ._lib import DLDataType, DLDevice, DLTensor, kDLCPU, kDLCUDA

_I64 = [c_int64 * n for n in range(33)]  # array types by rank, made once
_devices = {}  # (type, id) -> DLDevice
_dtypes = {}   # torch dtype or NumPy dtype -> (code, bits, lanes)

# The DLTensors of a call live in a ring of slots per thread: one buffer whose bytes are written
# with one precompiled struct format per rank (header, shape, strides), seen through DLTensor
# views made once. Building a DLTensor and its two int64 arrays as ctypes objects cost ~1 µs per
# tensor on the H200 host, a third of a tiny kiln.matmul's bridge time; a slot costs a fifth of
# that. A slot is valid until this thread has made _SLOTS more: the library reads DLTensors
# during the call and keeps none, and no call takes more than a dozen. Ranks above _SLOT_DIMS
# fall back to ctypes objects. The ring's state is one list (a single thread-local lookup).
_SLOTS, _SLOT_DIMS = 64, 8
_SLOT = 48 + 16 * _SLOT_DIMS  # DLTensor (48 bytes, layout checked by test_abi.py), shape, strides
# data, device (type, id), ndim, dtype (code, bits, lanes), shape, strides, byte_offset; then
# shape and strides themselves
_PACK = [struct.Struct(f"=QiiiBBHQQQ{2 * n}q") for n in range(_SLOT_DIMS + 1)]


class _Ring(threading.local):
    def __init__(self):
        buf = ctypes.create_string_buffer(_SLOTS * _SLOT)
        base = ctypes.addressof(buf)
        # [next slot, buffer, each slot's DLTensor view, each slot's dims address]
        self.state = [0, buf, [DLTensor.from_buffer(buf, i * _SLOT) for i in range(_SLOTS)],
                      [base + i * _SLOT + 48 for i in range(_SLOTS)]]


_ring = _Ring()


def _fill(ptr, dev_type, dev_id, dt, shape, strides):
    """A DLTensor (byte_offset 0) in this thread's ring; shape and strides in elements."""
    n = len(shape)
    if n > _SLOT_DIMS:
        arr = _I64[n]
        return DLTensor(ptr, _device(dev_type, dev_id), n, DLDataType(*dt), arr(*shape), arr(*strides), 0)
    st = _ring.state
    i = st[0]
    st[0] = (i + 1) % _SLOTS
    dims = st[3][i]
    _PACK[n].pack_into(st[1], i * _SLOT, ptr or 0, dev_type, dev_id, n, dt[0], dt[1], dt[2], dims, dims + 8 * n, 0,
                       *shape, *strides)
    return st[2][i]

_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_GetPointer.restype, _GetPointer.argtypes = c_void_p, [py_object, c_char_p]
_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_IsValid.restype, _IsValid.argtypes = ctypes.c_int, [py_object, c_char_p]


def _device(dtype, did):
    d = _devices.get((dtype, did))
    if d is None:
        d = _devices[(dtype, did)] = DLDevice(dtype, did)
    return d


# ------------------------------------------------------------------------------------------------
# Where a tensor lives and which stream to launch on
# ------------------------------------------------------------------------------------------------
_torch_stream = None


def _torch_current_stream(index):
    global _torch_stream
    if _torch_stream is None:
        import torch
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what inductor calls: no Stream object
        _torch_stream = raw if raw is not None else (lambda i: torch.cuda.current_stream(i).cuda_stream)
    return _torch_stream(index)


def device_of(x):
    """(DLPack device type, ordinal) of x."""
    if _frameworks.is_torch(x):
        if x.is_cuda:  # the common case without building a torch.device
            return (kDLCUDA, x.get_device())
        d = x.device
        if d.type == "cuda":
            return (kDLCUDA, d.index if d.index is not None else 0)
        if d.type == "cpu":
            return (kDLCPU, 0)
        raise _lib.invalid(f"kiln: a tensor on torch device {d} is not supported; expected a CPU or CUDA tensor")
    if _frameworks.is_numpy(x):
        return (kDLCPU, 0)
    f = getattr(x, "__dlpack_device__", None)
    if f is None:
        raise TypeError(f"kiln: a {type(x).__module__}.{type(x).__name__} is not a tensor kiln can read "
                        "(it has no __dlpack__/__dlpack_device__)")
    dt, did = f()
    return (int(dt), int(did))


def placement(x, stream=None):
    """(kiln_context, CUstream or None) for an op whose first tensor is x.

    The stream is the framework's current one (PyTorch, CuPy), else the legacy default stream;
    an explicit `stream` (an int CUstream handle) wins."""
    if stream is None and _frameworks.is_torch(x) and x.is_cuda:  # the common case, first
        i = x.get_device()
        return context(kDLCUDA, i), _torch_current_stream(i) or None
    dev = device_of(x)
    ctx = context(*dev)
    if stream is not None or dev[0] != kDLCUDA:
        return ctx, (stream or None) if dev[0] == kDLCUDA else None
    if _frameworks.is_torch(x):
        return ctx, _torch_current_stream(dev[1]) or None
    if _frameworks.is_cupy(x):
        return ctx, sys.modules["cupy"].cuda.get_current_stream().ptr or None
    return ctx, None


# ------------------------------------------------------------------------------------------------
# DLTensors
# ------------------------------------------------------------------------------------------------
def _torch_dtype(t):
    d = _dtypes.get(t)
    if d is None:
        name = str(t).rsplit(".", 1)[-1]
        code = _frameworks.DL_CODES.get(name)
        if code is None:
            raise _lib.invalid(f"kiln: torch dtype {t} has no kiln equivalent")
        d = _dtypes[t] = (code[0], code[1], 1)
    return d


def _from_torch(t):
    dt = _dtypes.get(t.dtype) or _torch_dtype(t.dtype)
    if t.is_cuda:
        return _fill(t.data_ptr(), kDLCUDA, t.get_device(), dt, t.shape, t.stride())
    dev = device_of(t)
    return _fill(t.data_ptr(), dev[0], dev[1], dt, t.shape, t.stride())


def _numpy_dtype(dt):
    d = _dtypes.get(dt)
    if d is None:
        if not dt.isnative:
            raise _lib.invalid(f"kiln: a NumPy array of byte order {dt.str!r} is not supported; "
                               "use the native byte order (arr.astype(arr.dtype.newbyteorder('=')))")
        code = _frameworks.DL_CODES.get(dt.name)
        if code is None:
            raise _lib.invalid(f"kiln: NumPy dtype {dt} has no kiln equivalent")
        d = _dtypes[dt] = (code[0], code[1], 1)
    return d


def _from_numpy(a, name, out):
    if out and not a.flags.writeable:
        raise _lib.invalid(f"{name} is a read-only NumPy array; outputs must be writable")
    item = a.itemsize
    strides = a.strides
    if any(s % item for s in strides):
        raise _lib.invalid(f"{name} has byte strides {strides}, not multiples of its element size {item}; "
                           "pass a copy (np.ascontiguousarray)")
    return _fill(a.ctypes.data, kDLCPU, 0, _numpy_dtype(a.dtype), a.shape, [s // item for s in strides])


def _from_capsule(x, name, out, stream, keep):
    dev = device_of(x)
    # DLPack's stream argument: None on the CPU; on CUDA the stream we launch on (1 = legacy default)
    s = None if dev[0] != kDLCUDA else (stream or 1)
    try:
        cap = x.__dlpack__(stream=s, max_version=(1, 0))
    except TypeError:  # a producer older than DLPack 1.0
        cap = x.__dlpack__(stream=s)
    keep.append(cap)
    keep.append(x)
    if _IsValid(cap, b"dltensor_versioned"):
        m = _lib.DLManagedTensorVersioned.from_address(_GetPointer(cap, b"dltensor_versioned"))
        if m.version.major != 1:
            raise _lib.invalid(f"{name}: the producer gave a DLPack {m.version.major}.{m.version.minor} tensor; "
                               "kiln reads DLPack 1.x")
        if out and m.flags & _lib.DLPACK_FLAG_BITMASK_READ_ONLY:
            raise _lib.invalid(f"{name} is read-only (DLPack flag READ_ONLY); outputs must be writable")
        if out and m.flags & _lib.DLPACK_FLAG_BITMASK_IS_COPIED:
            raise _lib.invalid(f"{name} was exported as a copy (DLPack flag IS_COPIED); results written there "
                               "would be lost: pass a tensor the producer can export without copying")
        return m.dl_tensor
    if _IsValid(cap, b"dltensor"):
        return DLTensor.from_address(_GetPointer(cap, b"dltensor"))
    raise _lib.invalid(f"{name}: __dlpack__ returned {cap!r}, not an unconsumed 'dltensor' or "
                       "'dltensor_versioned' capsule")


def tensor(x, name, stream=None, keep=None, out=False):
    """The DLTensor of x (None for None), valid while x (and `keep`) are alive. Pass it as is to
    a C function taking a DLTensor pointer: ctypes then passes its address, ~3x faster than
    byref() with POINTER argtypes (0.4 against 1.2 µs per 6-argument call, measured).

    `name` ('kiln.matmul: b') prefixes Python-side errors; `out` asks for a writable tensor."""
    if x is None:
        return None
    if _frameworks.is_torch(x):
        t = _from_torch(x)
    elif _frameworks.is_numpy(x):
        t = _from_numpy(x, name, out)
    else:
        if not hasattr(x, "__dlpack__"):
            raise TypeError(f"{name} is a {type(x).__module__}.{type(x).__name__}, not a tensor "
                            "(expected an object with __dlpack__: PyTorch, NumPy, CuPy, JAX, ...)")
        t = _from_capsule(x, name, out, stream, keep if keep is not None else [])
    return t


def data_pointer(x):
    """The address of x's first element (for workspace buffers)."""
    t = tensor(x, "workspace", keep=[])
    return (t.data or 0) + t.byte_offset
