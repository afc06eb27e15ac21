"""Tensor exchange: the generic __dlpack__ path (legacy and versioned capsules, borrowed and not
consumed), NumPy's own path, and the errors of both."""
import ctypes

import pytest

np = pytest.importorskip("numpy")
import kiln  # noqa: E402
from kiln import _lib  # noqa: E402
from conftest import rel_err  # noqa: E402

_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_IsValid.restype, _IsValid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_New = ctypes.pythonapi.PyCapsule_New
_New.restype, _New.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Legacy:
    """Only the DLPack protocol of a NumPy array (a pre-1.0 producer: no max_version)."""

    def __init__(self, a):
        self.a, self.shape, self.dtype, self.capsules = a, a.shape, a.dtype, []

    def __dlpack__(self, stream=None):
        cap = self.a.__dlpack__(stream=stream)
        self.capsules.append(cap)
        return cap

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


_NAME = ctypes.create_string_buffer(b"dltensor_versioned")  # PyCapsule keeps the pointer: must outlive it


class Versioned:
    """A DLPack 1.x producer written with ctypes, over a NumPy array's memory."""

    def __init__(self, a, flags=0, major=1):
        self.a, self.shape, self.dtype = a, a.shape, a.dtype
        code, bits = {"float16": (2, 16), "float32": (2, 32)}[a.dtype.name]
        self.shape_arr = (ctypes.c_int64 * a.ndim)(*a.shape)
        self.strides_arr = (ctypes.c_int64 * a.ndim)(*[s // a.itemsize for s in a.strides])
        m = _lib.DLManagedTensorVersioned()
        m.version = _lib.DLPackVersion(major, 0)
        m.flags = flags
        m.dl_tensor = _lib.DLTensor(a.ctypes.data, _lib.DLDevice(_lib.kDLCPU, 0), a.ndim,
                                    _lib.DLDataType(code, bits, 1), self.shape_arr, self.strides_arr, 0)
        self.managed, self.kwargs = m, []

    def __dlpack__(self, stream=None, max_version=None):
        self.kwargs.append((stream, max_version))
        return _New(ctypes.addressof(self.managed), _NAME, None)

    def __dlpack_device__(self):
        return (_lib.kDLCPU, 0)


def test_legacy_capsule_path_is_borrowed(rng):
    a = rng.standard_normal((6, 8)).astype(np.float16)
    b = rng.standard_normal((8, 5)).astype(np.float16)
    out = np.zeros((6, 5), np.float32)
    wa, wb, wo = Legacy(a), Legacy(b), Legacy(out)
    r = kiln.matmul(wa, wb, out=wo)
    assert r is wo
    assert rel_err(out, a.astype(np.float64) @ b.astype(np.float64)) <= 1e-4
    for w in (wa, wb, wo):  # each exported once, never consumed nor renamed
        assert len(w.capsules) == 1 and _IsValid(w.capsules[0], b"dltensor") == 1


def test_versioned_capsule_path(rng):
    a = rng.standard_normal((6, 8)).astype(np.float16)
    b = rng.standard_normal((8, 5)).astype(np.float16)
    out = np.zeros((6, 5), np.float32)
    va, vo = Versioned(a), Versioned(out)
    kiln.matmul(va, Versioned(b), out=vo)
    assert va.kwargs == [(None, (1, 0))]  # CPU: stream None; max_version asked for
    assert rel_err(out, a.astype(np.float64) @ b.astype(np.float64)) <= 1e-4


def test_versioned_capsule_flags(rng):
    a = rng.standard_normal((4, 8)).astype(np.float16)
    b = rng.standard_normal((8, 3)).astype(np.float16)
    out = np.zeros((4, 3), np.float32)
    # a read-only input is fine
    kiln.matmul(Versioned(a, flags=_lib.DLPACK_FLAG_BITMASK_READ_ONLY), b, out=out)
    with pytest.raises(kiln.KilnError, match="kiln.matmul: out is read-only"):
        kiln.matmul(a, b, out=Versioned(out, flags=_lib.DLPACK_FLAG_BITMASK_READ_ONLY))
    with pytest.raises(kiln.KilnError, match="IS_COPIED"):
        kiln.matmul(a, b, out=Versioned(out, flags=_lib.DLPACK_FLAG_BITMASK_IS_COPIED))
    with pytest.raises(kiln.KilnError, match="DLPack 2.0 tensor"):
        kiln.matmul(Versioned(a, major=2), b, out=out)


def test_numpy_errors(rng):
    a = rng.standard_normal((4, 8)).astype(np.float16)
    b = rng.standard_normal((8, 3)).astype(np.float16)
    with pytest.raises(kiln.KilnError, match="byte order"):
        kiln.matmul(a.astype(">f2"), b)
    odd = np.lib.stride_tricks.as_strided(np.zeros(64, np.float16), shape=(4, 8), strides=(9, 2))
    with pytest.raises(kiln.KilnError, match="byte strides \\(9, 2\\)"):
        kiln.matmul(odd, b)
    with pytest.raises(TypeError, match="kiln.matmul: a is a builtins.list, not a tensor"):
        kiln.matmul([[1.0]], b)
    with pytest.raises(kiln.KilnError, match="kiln_matmul: a has dtype complex64|complex64"):
        kiln.matmul(a.astype(np.complex64), b)


def test_output_of_an_unknown_framework_needs_out(rng):
    a = Legacy(rng.standard_normal((4, 8)).astype(np.float16))
    b = rng.standard_normal((8, 3)).astype(np.float16)
    with pytest.raises(TypeError, match="pass out="):
        kiln.matmul(a, b)


def _described(t):
    """(data, device, ndim, dtype, shape, strides, byte_offset) of a DLTensor, as Python values."""
    n = t.ndim
    return (t.data or 0, (t.device.device_type, t.device.device_id), n, (t.dtype.code, t.dtype.bits, t.dtype.lanes),
            tuple(t.shape[i] for i in range(n)), tuple(t.strides[i] for i in range(n)), t.byte_offset)


def _expected(a):
    item = a.itemsize
    return (a.ctypes.data, (_lib.kDLCPU, 0), a.ndim, {2: (_lib.kDLFloat, 16, 1), 4: (_lib.kDLFloat, 32, 1)}[item],
            a.shape, tuple(s // item for s in a.strides), 0)


def test_dltensor_slots_describe_the_array_until_the_ring_wraps():
    # The bridge's DLTensors live in a per-thread ring of slots (kiln/_dlpack.py): each describes
    # its array exactly, ranks 0-8 in the ring and higher ranks as ctypes objects, and a slot keeps
    # its description until _SLOTS more have been made on the thread.
    from kiln import _dlpack
    arrays = [np.zeros((3, 5), np.float16)[:, 1:4], np.zeros(7, np.float32), np.zeros((), np.float16),
              np.zeros((2,) * 8, np.float32).transpose(7, 0, 1, 2, 3, 4, 5, 6), np.zeros((1,) * 9, np.float16)]
    refs = [_dlpack.tensor(a, "a") for a in arrays]
    for a, r in zip(arrays, refs):
        assert _described(r) == _expected(a)
    # refs[0]'s slot was followed by 3 more (the rank-9 array took none): it holds for _SLOTS - 4
    # more, and the next one reuses it
    for _ in range(_dlpack._SLOTS - 4):
        _dlpack.tensor(arrays[1], "a")
    assert _described(refs[0]) == _expected(arrays[0])
    _dlpack.tensor(arrays[1], "a")
    assert _described(refs[0]) == _expected(arrays[1])


def test_dltensor_slots_are_per_thread():
    import threading
    from kiln import _dlpack
    a, b = np.zeros((4, 4), np.float16), np.zeros((2, 3), np.float32)
    ra = _dlpack.tensor(a, "a")
    seen = []

    def other():
        for _ in range(2 * _dlpack._SLOTS):
            r = _dlpack.tensor(b, "b")
        seen.append(_described(r))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [_expected(b)] and _described(ra) == _expected(a)
