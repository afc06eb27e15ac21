"""Quantized weights. Each class owns its buffers, allocated by the framework of the tensor it was
made from (torch.empty / np.empty), and hands libkiln only pointers to them.

The quantizers, importers and dequantizer run where the given tensors are (libkiln's GPU kernels
for GPU tensors, on the framework's current stream, with the CPU's results bit for bit).
.to(device) / .cuda() move an existing weight's buffers (PyTorch)."""
import ctypes
import sys
from ctypes import byref, c_size_t

from . import _dlpack, _frameworks, _lib, ops
from ._lib import QFormat, kDLCPU, kDLFloat, kDLInt, kDLUInt

_F = _lib.fn


def _check(st):
    if st:
        _lib.raise_status(st)


def _float(x):
    """A one-element host tensor as a Python float (NumPy or torch on the CPU)."""
    return float(x.reshape(-1)[0])


def _move(op, t, how, *args):
    """t.to(device) / t.cuda(device) for a PyTorch buffer; None stays None."""
    if t is None:
        return None
    if not _frameworks.is_torch(t):
        raise _lib.invalid(f"{op}: the weight's buffers are {type(t).__module__}.{type(t).__name__}s; moving "
                           "them needs PyTorch tensors (make the weight from a torch tensor)")
    return getattr(t, how)(*args)


def _device_of(t):
    """The framework's device of a buffer: a torch.device for PyTorch, else 'cpu' or 'cuda:N'."""
    if _frameworks.is_torch(t):
        return t.device
    dt, did = _dlpack.device_of(t)
    return "cpu" if dt == kDLCPU else f"cuda:{did}"


class Int8Weight:
    """A symmetric int8 weight of logical shape [K, N]: w ≈ q · scales (per column, f32 [N]) or
    q · scale (one f32 for the tensor). Pass it as b to kiln.matmul_int8 (W8A8), or as wq, wk, wv
    to kiln.qkv_project_int8 (W8A16)."""

    def __init__(self, q, scales, per_column, scale=None):
        self.q, self.scales, self.per_column = q, scales, bool(per_column)
        self.scale = 1.0 if per_column else (float(scale) if scale is not None else _float(scales))

    @classmethod
    def from_float(cls, w, per_column=True):
        """Quantizes a float weight w [K, N] (f32/f16/bf16, any strides: pass a Linear weight
        [N, K] as W.T). Quantized where w is (on a GPU by kiln's kernels, bit for bit the CPU's;
        there, weights are not checked for NaN or infinity)."""
        q, scales = ops.quantize_int8(w, per_column)
        return cls(q, scales, per_column)

    @property
    def shape(self):
        return tuple(int(s) for s in self.q.shape)

    def dequantize(self):
        """w ≈ q · scale as float32 [K, N], in the buffers' framework."""
        if _frameworks.is_torch(self.q):
            import torch
            return self.q.to(torch.float32) * (self.scales if self.per_column else self.scale)
        return self.q.astype("float32") * (self.scales if self.per_column else self.scale)

    @property
    def device(self):
        """Where the buffers are (a torch.device for PyTorch buffers, else 'cpu' or 'cuda:N')."""
        return _device_of(self.q)

    def to(self, device):
        """A copy with its buffers moved to device (PyTorch: 'cuda', 'cuda:1', a torch.device)."""
        op = "kiln.Int8Weight.to"
        return Int8Weight(_move(op, self.q, "to", device), _move(op, self.scales, "to", device), self.per_column,
                          self.scale)

    def cuda(self, device=None):
        """A copy with its buffers on the (current, or given) CUDA device (PyTorch)."""
        op = "kiln.Int8Weight.cuda"
        return Int8Weight(_move(op, self.q, "cuda", device), _move(op, self.scales, "cuda", device),
                          self.per_column, self.scale)

    def __repr__(self):
        k, n = self.shape
        kind = "per-column" if self.per_column else f"per-tensor (scale {self.scale:g})"
        return f"kiln.Int8Weight(k={k}, n={n}, {kind})"


# The native buffers of a kiln_qweight: name, accepted DLPack (code, bits), in words.
_QBUFFERS = (
    ("codes", ((kDLInt, 32), (kDLUInt, 32)), "int32 or uint32"),
    ("scales", ((kDLFloat, 16),), "float16"),
    ("zeros", ((kDLUInt, 8),), "uint8"),
    ("perm", ((kDLInt, 32),), "int32"),
)


def _compact(d):
    """Whether a DLTensor is compact row-major (strides NULL, or those of its shape)."""
    if not d.strides:
        return True
    want = 1
    for i in reversed(range(d.ndim)):
        if d.shape[i] != 1 and d.strides[i] != want:
            return False
        want *= d.shape[i]
    return True


def qweight_struct(op, codes, scales, zeros, perm=None, k=None, n=None, group=None):
    """The kiln_qweight over native buffers, after checking what the library cannot see behind its
    pointers: each buffer's dtype and shape, compact row-major, all on one device (which the
    struct's device field then names). k, n and group default to what the shapes say: codes
    [K/8, N], scales [K/group, N]."""
    cs, ss = ops._shape(codes, f"{op}: codes"), ops._shape(scales, f"{op}: scales")
    if k is None or n is None:
        if len(cs) != 2:
            raise _lib.invalid(f"{op}: codes has shape {list(cs)}; expected [K/8, N]")
        k, n = cs[0] * 8, cs[1]
    if group is None:
        if len(ss) != 2 or ss[0] < 1 or k % ss[0]:
            raise _lib.invalid(f"{op}: scales has shape {list(ss)}; expected [K/group, N] with K = {k}")
        group = k // ss[0]
    st = _F.qweight_bytes(k, n, group, None, None, None, None)  # k, n, group: the library's rules
    if st:
        why = _F.last_error().decode("utf-8", "replace").split(": ", 1)[-1]
        raise _lib.KilnError(st, f"{op}: not a valid weight: {why}")
    want = {"codes": (k // 8, n), "scales": (k // group, n), "zeros": (k // group, n), "perm": (k,)}
    ptrs, device = [], None
    for (name, dtypes, what), t in zip(_QBUFFERS, (codes, scales, zeros, perm)):
        if t is None:
            if name != "perm":
                raise _lib.invalid(f"{op}: {name} is None; a kiln_qweight needs codes, scales and zeros")
            ptrs.append(None)
            continue
        keep = []
        d = _dlpack.tensor(t, f"{op}: {name}", None, keep)
        shape = tuple(d.shape[i] for i in range(d.ndim))
        if shape != want[name]:
            raise _lib.invalid(f"{op}: {name} has shape {list(shape)}; expected {list(want[name])} "
                               f"(k = {k}, n = {n}, group = {group})")
        if (d.dtype.code, d.dtype.bits) not in dtypes or d.dtype.lanes != 1:
            raise _lib.invalid(f"{op}: {name} has DLPack dtype (code {d.dtype.code}, bits {d.dtype.bits}); "
                               f"expected {what}")
        if not _compact(d):
            raise _lib.invalid(f"{op}: {name} is not compact row-major (strides "
                               f"{[d.strides[i] for i in range(d.ndim)]}); pass a contiguous copy")
        dev = (int(d.device.device_type), int(d.device.device_id))
        if device is None:
            device = dev
        elif dev != device:
            raise _lib.invalid(f"{op}: {name} is on DLPack device {dev} but codes is on {device}; a weight's "
                               "buffers must share one device (move the weight with .to(device))")
        ptrs.append((d.data or 0) + d.byte_offset)
    return _lib.kiln_qweight(k, n, group, *ptrs, _lib.DLDevice(*device))


class Int4Weight:
    """A 4-bit weight of logical shape [K, N] (y = x·W) in kiln's native layout:
    w[k, n] = scales[k / group, n] · (q[k, n] − zeros[k / group, n]).

    Buffers (compact, row-major, on one device): codes [K/8, N] (uint32 words; int32 for PyTorch,
    the same bits), scales f16 [K/group, N], zeros uint8 [K/group, N], perm int32 [K] or None.
    perm is set for act-order (GPTQ g_idx) weights, whose rows are stored sorted by group:
    kiln.matmul_int4 gathers x through it, x'[:, i] = x[:, perm[i]].

    Quantizing, importing and dequantizing run where the tensors are: from_* given GPU tensors
    builds the weight on that GPU with kiln's kernels. .to(device) / .cuda() move a weight
    (PyTorch); pass it to kiln.matmul_int4 / kiln.qkv_project_int4 with x on the same device."""

    _BUFFERS = ("codes", "scales", "zeros", "perm")

    def __init__(self, codes, scales, zeros, perm=None, k=None, n=None, group=None):
        cs, ss = ops._shape(codes, "kiln.Int4Weight: codes"), ops._shape(scales, "kiln.Int4Weight: scales")
        self.codes, self.scales, self.zeros, self.perm = codes, scales, zeros, perm
        self.k = int(k) if k is not None else (cs[0] * 8 if len(cs) == 2 else 0)
        self.n = int(n) if n is not None else (cs[1] if len(cs) == 2 else 0)
        if group is None:  # 0: not derivable from scales' shape (the struct's check says why)
            group = self.k // ss[0] if len(ss) == 2 and ss[0] and self.k % ss[0] == 0 else 0
        self.group = int(group)
        self._qw = None

    def __setattr__(self, name, value):
        if name in Int4Weight._BUFFERS or name in ("k", "n", "group"):
            self.__dict__["_qw"] = None  # the struct points at the old buffers: rebuild it on next use
        object.__setattr__(self, name, value)

    def __getstate__(self):  # copy.deepcopy, pickle, torch.save: the buffers, never the raw pointers
        state = dict(self.__dict__)
        state["_qw"] = None
        return state

    # -- allocation and the C struct ------------------------------------------------------------
    @classmethod
    def _empty(cls, op, like, k, n, group, with_perm):
        cb, sb, zb, pb = c_size_t(), c_size_t(), c_size_t(), c_size_t()
        _check(_F.qweight_bytes(k, n, group, byref(cb), byref(sb), byref(zb), byref(pb)))  # checks k, n, group
        words = "int32" if _frameworks.is_torch(like) else "uint32"
        codes = _frameworks.empty(op, like, (k // 8, n), words)
        scales = _frameworks.empty(op, like, (k // group, n), "float16")
        zeros = _frameworks.empty(op, like, (k // group, n), "uint8")
        perm = _frameworks.empty(op, like, (k,), "int32") if with_perm else None
        return cls(codes, scales, zeros, perm, k, n, group)

    def _struct(self):
        """The kiln_qweight pointing at this weight's buffers (checked and made once; its device
        is the buffers')."""
        qw = self._qw
        if qw is None:
            qw = qweight_struct("kiln.Int4Weight", self.codes, self.scales, self.zeros, self.perm, self.k, self.n,
                                self.group or None)
            self.__dict__["_qw"] = qw
        return qw

    def _drop_identity_perm(self):
        """An importer writes the identity when there is no act-order; kiln need not apply it. On
        a GPU (PyTorch, CuPy) the comparison waits for the import: a one-time cost of loading."""
        if self.perm is None:
            return
        if _dlpack.device_of(self.perm)[0] == kDLCPU:
            arr = (ctypes.c_int32 * self.k).from_address(_dlpack.data_pointer(self.perm))
            identity = list(arr) == list(range(self.k))
        elif _frameworks.is_torch(self.perm):
            import torch
            identity = torch.equal(self.perm, torch.arange(self.k, dtype=torch.int32, device=self.perm.device))
        elif _frameworks.is_cupy(self.perm):
            cp = sys.modules["cupy"]
            identity = bool((self.perm == cp.arange(self.k, dtype=cp.int32)).all())
        else:
            return
        if identity:
            self.perm = None

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def from_float(cls, w, group=128, symmetric=True):
        """Round-to-nearest quantization of a float weight w [K, N] (f32/f16/bf16; pass a Linear
        weight [N, K] as W.T), per group of `group` rows (32, 64, 128 or K); symmetric: codes
        −8..7 (zero 8), else codes 0..15 with zero points. Runs on w's device (bit for bit the
        same weight on a GPU as on the CPU); there, weights are not checked for NaN or infinity."""
        shape = tuple(int(s) for s in w.shape)
        if len(shape) != 2:
            raise _lib.invalid(f"kiln.Int4Weight.from_float: w has shape {list(shape)}; expected [K, N]")
        k, n = shape
        self = cls._empty("kiln.Int4Weight.from_float", w, k, n, int(group), False)
        ctx, s = _dlpack.placement(w)
        _check(_F.qweight_quantize(ctx, _dlpack.tensor(w, "kiln.Int4Weight.from_float: w", s, []),
                                   int(bool(symmetric)), byref(self._struct()), s))
        return self

    @classmethod
    def _import(cls, op, fmt, qweight, qzeros, scales, g_idx, k, n):
        ns = tuple(int(s) for s in scales.shape)
        if len(ns) != 2 or ns[0] < 1 or k % ns[0]:
            raise _lib.invalid(f"{op}: scales has shape {list(ns)}; expected [K/group, N] with K = {k}")
        self = cls._empty(op, qweight, k, n, k // ns[0], g_idx is not None)
        ctx, s = _dlpack.placement(qweight)
        keep = []
        _check(_F.qweight_import(ctx, int(fmt), _dlpack.tensor(qweight, f"{op}: qweight", s, keep),
                                 _dlpack.tensor(qzeros, f"{op}: qzeros", s, keep),
                                 _dlpack.tensor(scales, f"{op}: scales", s, keep),
                                 _dlpack.tensor(g_idx, f"{op}: g_idx", s, keep), byref(self._struct()), s))
        self._drop_identity_perm()
        return self

    @classmethod
    def from_gptq(cls, qweight, qzeros, scales, g_idx=None, version=1):
        """From GPTQ tensors: qweight int32 [K/8, N], qzeros int32 [K/G, N/8], scales f16 [K/G, N],
        g_idx int32 [K] or None. version 1 stores zero − 1 (AutoGPTQ's default), 2 the zero."""
        op = "kiln.Int4Weight.from_gptq"
        if version not in (1, 2):
            raise _lib.invalid(f"{op}: version is {version!r}; expected 1 (zeros stored minus 1) or 2")
        qs = tuple(int(s) for s in qweight.shape)
        if len(qs) != 2:
            raise _lib.invalid(f"{op}: qweight has shape {list(qs)}; expected [K/8, N]")
        fmt = QFormat.GPTQ_V1 if version == 1 else QFormat.GPTQ_V2
        return cls._import(op, fmt, qweight, qzeros, scales, g_idx, qs[0] * 8, qs[1])

    @classmethod
    def from_awq(cls, qweight, qzeros, scales):
        """From AWQ (GEMM) tensors: qweight int32 [K, N/8] (nibbles interleaved 0,2,4,6,1,3,5,7),
        qzeros int32 [K/G, N/8], scales f16 [K/G, N]."""
        op = "kiln.Int4Weight.from_awq"
        qs = tuple(int(s) for s in qweight.shape)
        if len(qs) != 2:
            raise _lib.invalid(f"{op}: qweight has shape {list(qs)}; expected [K, N/8]")
        return cls._import(op, QFormat.AWQ, qweight, qzeros, scales, None, qs[0], qs[1] * 8)

    @classmethod
    def from_reference(cls, qweight, scales):
        """From the reference system's layout: signed codes, qweight u32 [K/8, N] stored N-major
        (or its row-major [N, K/8]), scales f16 [K/128, N]."""
        op = "kiln.Int4Weight.from_reference"
        ns = tuple(int(s) for s in scales.shape)
        if len(ns) != 2:
            raise _lib.invalid(f"{op}: scales has shape {list(ns)}; expected [K/128, N]")
        return cls._import(op, QFormat.REFERENCE, qweight, None, scales, None, ns[0] * 128, ns[1])

    # -- use ------------------------------------------------------------------------------------
    @property
    def shape(self):
        return (self.k, self.n)

    @property
    def device(self):
        """Where the buffers are (a torch.device for PyTorch buffers, else 'cpu' or 'cuda:N')."""
        return _device_of(self.codes)

    def dequantize(self, dtype="float32", *, out=None):
        """w [K, N] in dtype (float32, float16, bfloat16), in the native row order (permuted by
        perm when set), on the weight's device, computed there; for references, tests and
        debugging."""
        if out is None:
            out = _frameworks.empty("kiln.Int4Weight.dequantize", self.codes, (self.k, self.n), dtype)
        ctx, s = _dlpack.placement(self.codes)
        _check(_F.qweight_dequantize(ctx, byref(self._struct()),
                                     _dlpack.tensor(out, "kiln.Int4Weight.dequantize: out", s, [], out=True), s))
        return out

    def _map(self, op, how, *args):
        return Int4Weight(*(_move(op, getattr(self, b), how, *args) for b in Int4Weight._BUFFERS), self.k, self.n,
                          self.group)

    def to(self, device):
        """A copy with its buffers moved to device (PyTorch: 'cuda', 'cuda:1', a torch.device)."""
        return self._map("kiln.Int4Weight.to", "to", device)

    def cuda(self, device=None):
        """A copy with its buffers on the (current, or given) CUDA device (PyTorch)."""
        return self._map("kiln.Int4Weight.cuda", "cuda", device)

    def cpu(self):
        """A copy with its buffers in host memory (PyTorch)."""
        return self._map("kiln.Int4Weight.cpu", "cpu")

    def __repr__(self):
        return (f"kiln.Int4Weight(k={self.k}, n={self.n}, group={self.group}"
                f"{', act-order' if self.perm is not None else ''})")
