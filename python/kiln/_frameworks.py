"""The frameworks kiln knows by name: telling their tensors apart without importing them, dtype
names, and allocating outputs with the caller's framework (never with libkiln)."""
import sys

from . import _lib

# dtype name -> DLPack (code, bits)
DL_CODES = {
    "float16": (_lib.kDLFloat, 16), "bfloat16": (_lib.kDLBfloat, 16), "float32": (_lib.kDLFloat, 32),
    "float64": (_lib.kDLFloat, 64), "int8": (_lib.kDLInt, 8), "uint8": (_lib.kDLUInt, 8),
    "int16": (_lib.kDLInt, 16), "uint16": (_lib.kDLUInt, 16), "int32": (_lib.kDLInt, 32),
    "uint32": (_lib.kDLUInt, 32), "int64": (_lib.kDLInt, 64), "uint64": (_lib.kDLUInt, 64),
    "bool": (_lib.kDLBool, 8),
}
_TYPES = {}  # framework name -> its tensor type, once the framework has been imported by the caller


def _type(name, module, attr):
    t = _TYPES.get(name)
    if t is None:
        mod = sys.modules.get(module)
        if mod is None:
            return ()  # isinstance(x, ()) is False: the framework is not even loaded
        t = _TYPES[name] = getattr(mod, attr)
    return t


def torch_tensor_type():
    return _type("torch", "torch", "Tensor")


_torch_tensor = None  # torch.Tensor once torch is loaded: is_torch runs several times per op call


def is_torch(x):
    t = _torch_tensor
    if t is None:
        t = _type("torch", "torch", "Tensor")
        if t == ():
            return False
        globals()["_torch_tensor"] = t
    return isinstance(x, t)


def is_numpy(x):
    return isinstance(x, _type("numpy", "numpy", "ndarray"))


def is_cupy(x):
    return isinstance(x, _type("cupy", "cupy", "ndarray"))


def dtype_name(dtype):
    """'float16', 'bfloat16', ... from a str, torch.dtype, NumPy dtype or scalar type, or a tensor's."""
    if isinstance(dtype, str):
        name = dtype
    elif hasattr(dtype, "kind") and isinstance(getattr(dtype, "name", None), str):
        name = dtype.name  # a NumPy (or ml_dtypes) dtype
    else:  # a NumPy scalar type (np.float16) or a torch.dtype ('torch.float16')
        name = (getattr(dtype, "__name__", None) or str(dtype)).rsplit(".", 1)[-1]
    aliases = {"half": "float16", "float": "float32", "double": "float64", "bf16": "bfloat16", "f16": "float16",
               "f32": "float32", "bool_": "bool"}
    name = aliases.get(name, name)
    if name not in DL_CODES:
        raise _lib.invalid(f"kiln: dtype {dtype!r} is not one kiln knows; expected one of {', '.join(DL_CODES)}")
    return name


def empty(op, like, shape, dtype):
    """An uninitialized output of `like`'s framework and device (caller's allocator)."""
    name = dtype_name(dtype)
    shape = tuple(int(s) for s in shape)
    if is_torch(like):
        import torch
        return torch.empty(shape, dtype=getattr(torch, name), device=like.device)
    if is_numpy(like) or is_cupy(like):
        xp = sys.modules["numpy" if is_numpy(like) else "cupy"]
        if name == "bfloat16":
            try:
                import ml_dtypes
            except ImportError:
                raise _lib.invalid(f"{op}: NumPy has no bfloat16 dtype; install ml_dtypes, or use float16 "
                                   "or float32") from None
            dt = ml_dtypes.bfloat16
        else:
            dt = xp.dtype(name)
        if is_cupy(like):
            with like.device:
                return xp.empty(shape, dtype=dt)
        return xp.empty(shape, dtype=dt)
    raise TypeError(f"{op}: cannot allocate an output like a {type(like).__module__}.{type(like).__name__}; "
                    "pass out= (a writable tensor of that framework)")
