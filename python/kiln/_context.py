"""One kiln_context per device, created on first use and kept for the life of the process.

Contexts are never destroyed: at exit, work may still be in flight on a framework's stream, and
destroying a context unloads the kernels that work runs.
"""
import threading
from ctypes import byref, c_void_p

from . import _lib
from ._lib import kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged

_contexts = {}
_lock = threading.Lock()


def context(device_type, ordinal=0):
    """The kiln_context handle (an int) for a DLPack device; host-visible memory uses the CPU's."""
    key = (device_type, ordinal)
    ctx = _contexts.get(key)
    if ctx is not None:
        return ctx
    if device_type in (kDLCPU, kDLCUDAHost):
        key_c = (kDLCPU, 0)
    elif device_type in (kDLCUDA, kDLCUDAManaged):
        key_c = (kDLCUDA, ordinal)
    else:
        raise _lib.invalid(f"kiln: tensors on DLPack device type {device_type} are not supported; "
                           "expected a CPU or CUDA tensor")
    with _lock:
        ctx = _contexts.get(key_c)
        if ctx is None:
            handle = c_void_p()
            st = _lib.fn.context_create(key_c[0], key_c[1], byref(handle))
            if st:
                _lib.raise_status(st)
            ctx = handle.value
            _contexts[key_c] = ctx
        _contexts[key] = ctx
    return ctx


def device_info(device="cpu"):
    """A dict of kiln_device_info for 'cpu', 'cuda', 'cuda:N' or an int CUDA ordinal."""
    if isinstance(device, int):
        dt, ordinal = kDLCUDA, device
    else:
        s = str(device)
        dt = kDLCPU if s == "cpu" else kDLCUDA
        ordinal = int(s.split(":")[1]) if ":" in s else 0
        if dt == kDLCUDA and not s.startswith("cuda"):
            raise _lib.invalid(f"kiln.device_info: device is {device!r}; expected 'cpu', 'cuda' or 'cuda:N'")
    info = _lib.kiln_device_info()
    st = _lib.fn.context_info(context(dt, ordinal), byref(info))
    if st:
        _lib.raise_status(st)
    out = {name: getattr(info, name) for name, _ in info._fields_}
    out["name"] = info.name.decode("utf-8", "replace")
    return out
