"""The functional API: kiln's ops on any DLPack tensor.

Outputs are allocated by the caller's framework (torch.empty, np.empty, cupy.empty) unless given
with out=. PyTorch tensors go through kiln.torch_ops (torch.library custom ops: autograd,
torch.compile, CUDA graphs) when torch >= 2.4 is present and no out= is given.

Each op has a `_<op>_raw` form that only fills caller-given outputs; torch_ops calls those.
Python checks only what it needs to allocate; the library validates everything else, before
launching anything, with messages that name the op, the argument, what was found and expected.
"""
import ctypes
from ctypes import byref, c_size_t

from . import _dlpack, _frameworks, _lib
from ._lib import AttentionAlgo, Int4Algo, Int8Algo, MatmulAlgo, QkvAlgo

_F = _lib.fn


def _check(st):
    if st:
        _lib.raise_status(st)


_ALGOS = {  # by name; plain dicts so that torch.compile traces the lookup
    "kiln.matmul": {m.name.lower(): int(m) for m in MatmulAlgo},
    "kiln.attention": {m.name.lower(): int(m) for m in AttentionAlgo},
    "kiln.matmul_int4": {m.name.lower(): int(m) for m in Int4Algo},
    "kiln.qkv_project": {m.name.lower(): int(m) for m in QkvAlgo},
}


def _algo(op, value):
    """An algo given as the enum, its int, or its name ('auto', 'wgmma', ...)."""
    if value == "auto" or value == 0:  # every op's AUTO is 0; the common case first
        return 0
    if isinstance(value, str):
        names = _ALGOS[op]
        if value.lower() not in names:
            raise _lib.invalid(f"{op}: algo is {value!r}; expected one of {', '.join(map(repr, names))}")
        return names[value.lower()]
    return int(value)


def matmul_algo(algo):
    return _algo("kiln.matmul", algo)


def attention_algo(algo):
    return _algo("kiln.attention", algo)


def int4_algo(algo):
    return _algo("kiln.matmul_int4", algo)


def qkv_algo(algo):
    return _algo("kiln.qkv_project", algo)


def _shape(x, name):
    shape = getattr(x, "shape", None)
    if shape is None:
        raise TypeError(f"{name} is a {type(x).__module__}.{type(x).__name__}, not a tensor "
                        "(expected an object with __dlpack__ and .shape: PyTorch, NumPy, CuPy, JAX, ...)")
    return tuple(int(s) for s in shape)


def _torch_ops():
    """kiln.torch_ops, or None when torch is older than 2.4 (then PyTorch tensors take the plain
    path: no autograd)."""
    global _TORCH_OPS
    if _TORCH_OPS is False:
        try:
            from . import torch_ops as m
        except ImportError:
            m = None
        _TORCH_OPS = m
    return _TORCH_OPS


_TORCH_OPS = False  # not looked for yet


def _torch_path(x, out, *others):
    """Whether PyTorch tensors take kiln.torch_ops (custom ops with autograd). With an older torch
    they take the plain path, which records no gradient: asking for one there is an error."""
    if out is not None or not _frameworks.is_torch(x):
        return False
    if _torch_ops() is not None:
        return True
    import torch
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x,) + others):
        raise RuntimeError(f"kiln: gradients through kiln ops need torch >= 2.4 (torch.library.custom_op); "
                           f"found {torch.__version__}. Run under torch.no_grad() or detach the inputs")
    return False


def _workspace(op, like, nbytes, alloc_like=None):
    """(buffer, 256-byte aligned address) of nbytes of workspace from the caller's framework, or
    (None, None). The library wants 256-byte alignment, which CPU allocators do not promise."""
    if not nbytes:
        return None, None
    ws = alloc_like(nbytes + 255) if alloc_like else _frameworks.empty(op, like, (nbytes + 255,), "uint8")
    ptr = _dlpack.data_pointer(ws)
    return ws, ptr + (-ptr) % 256


# ------------------------------------------------------------------------------------------------
# matmul
# ------------------------------------------------------------------------------------------------
def matmul_shape(op, a_shape, b_shape):
    """C's shape for A [M,K] or [batch,M,K] and B [K,N] or [batch,K,N] (a batch of 1 broadcasts)."""
    if len(a_shape) not in (2, 3) or len(b_shape) not in (2, 3):
        bad, s = ("a", a_shape) if len(a_shape) not in (2, 3) else ("b", b_shape)
        want = "[M, K] or [batch, M, K]" if bad == "a" else "[K, N] or [batch, K, N]"
        raise _lib.invalid(f"{op}: {bad} has shape {list(s)}; expected {want}")
    m, n = a_shape[-2], b_shape[-1]
    if len(a_shape) == 2 and len(b_shape) == 2:
        return (m, n)
    ba = a_shape[0] if len(a_shape) == 3 else 1
    bb = b_shape[0] if len(b_shape) == 3 else 1
    return (ba if bb == 1 else bb, m, n)


def _matmul_raw(a, b, c, alpha=1.0, algo=0, stream=None):
    ctx, s = _dlpack.placement(a, stream)
    keep = []
    opts = _lib.kiln_matmul_opts(algo, alpha, 0)
    ta, tb = _dlpack.tensor(a, "kiln.matmul: a", s, keep), _dlpack.tensor(b, "kiln.matmul: b", s, keep)
    tc = _dlpack.tensor(c, "kiln.matmul: out", s, keep, out=True)
    # the workspace of stream-K (WGMMA's partial last wave), where the library would split
    # (a query that fails leaves it out: kiln_matmul then reports the error under its own name)
    nbytes = c_size_t()
    ws = None
    if _F.matmul_workspace_size(ctx, ta, tb, tc, opts, byref(nbytes)) == 0 and nbytes.value:
        ws, ptr = _workspace("kiln.matmul", a, nbytes.value)  # noqa: F841 (kept alive past the call)
        opts.workspace, opts.workspace_bytes = ptr, nbytes.value
    _check(_F.matmul(ctx, ta, tb, tc, opts, s))
    return c


def matmul(a, b, out_dtype=None, alpha=1.0, algo="auto", *, out=None, stream=None):
    """C = alpha · A·B. A [M,K] or [batch,M,K], B [K,N] or [batch,K,N] (f16 or bf16, any
    row/column-major views, e.g. a Linear weight W.T); C in out_dtype (default: A's dtype:
    float32, float16 or bfloat16). algo: 'auto', 'mma_sync', 'cp_async', 'wgmma'."""
    algo = matmul_algo(algo)
    if _torch_path(a, out, b):
        return _TORCH_OPS.matmul(a, b, out_dtype, alpha, algo)
    if out is None:
        shape = matmul_shape("kiln.matmul", _shape(a, "kiln.matmul: a"), _shape(b, "kiln.matmul: b"))
        out = _frameworks.empty("kiln.matmul", a, shape, a.dtype if out_dtype is None else out_dtype)
    return _matmul_raw(a, b, out, float(alpha), algo, stream)


def _matmul_backward_raw(a, b, dc, da, db, alpha=1.0, algo=0, stream=None, alloc_like=None):
    """dA and dB into da, db (either may be None). alloc_like(nbytes) allocates the workspace."""
    ctx, s = _dlpack.placement(a, stream)
    keep = []
    op = "kiln.matmul_backward"
    ta, tb = _dlpack.tensor(a, f"{op}: a", s, keep), _dlpack.tensor(b, f"{op}: b", s, keep)
    tdc = _dlpack.tensor(dc, f"{op}: dc", s, keep)
    tda = _dlpack.tensor(da, f"{op}: da", s, keep, out=True)
    tdb = _dlpack.tensor(db, f"{op}: db", s, keep, out=True)
    nbytes = c_size_t()
    _check(_F.matmul_backward_workspace_size(ctx, ta, tb, tdc, tda, tdb, byref(nbytes)))
    ws, ptr = _workspace(op, a, nbytes.value, alloc_like)
    opts = _lib.kiln_matmul_opts(algo, alpha, 0)
    _check(_F.matmul_backward(ctx, ta, tb, tdc, tda, tdb, ptr, nbytes.value, opts, s))
    return da, db


def matmul_backward(a, b, dc, alpha=1.0, algo="auto", need_da=True, need_db=True, *, da=None, db=None,
                    stream=None):
    """Gradients of C = alpha·A·B: returns (dA, dB), each None when not asked for. dA has A's
    shape and dtype, dB B's (summed over the batch when B was broadcast)."""
    algo = matmul_algo(algo)
    if da is None and db is None and _torch_path(a, None):
        return _TORCH_OPS.matmul_backward(a, b, dc, alpha, algo, need_da, need_db)
    op = "kiln.matmul_backward"
    if da is None and need_da:
        da = _frameworks.empty(op, a, _shape(a, f"{op}: a"), a.dtype)
    if db is None and need_db:
        db = _frameworks.empty(op, b, _shape(b, f"{op}: b"), b.dtype)
    return _matmul_backward_raw(a, b, dc, da, db, float(alpha), algo, stream)


# ------------------------------------------------------------------------------------------------
# attention
# ------------------------------------------------------------------------------------------------
def _attention_opts(scale, causal, algo, deterministic):
    s = 0.0 if scale is None else float(scale)  # 0: the library's 1/sqrt(D)
    return _lib.kiln_attention_opts(algo, s, int(bool(causal)), int(bool(deterministic)))


def attention_shapes(op, q_shape, v_shape):
    """(O's shape, LSE's shape) for Q [..., Sq, D] and V [..., Sk, Dv]."""
    if len(q_shape) not in (2, 3, 4):
        raise _lib.invalid(f"{op}: q has shape {list(q_shape)}; expected [B, H, S, D], [H, S, D] or [S, D]")
    if len(v_shape) < 1:
        raise _lib.invalid(f"{op}: v has shape {list(v_shape)}; expected [B, H, S, Dv], [H, S, Dv] or [S, Dv]")
    return tuple(q_shape[:-1]) + (v_shape[-1],), tuple(q_shape[:-1])


def _attention_raw(q, k, v, o, lse=None, scale=None, causal=False, algo=0, deterministic=False, stream=None):
    ctx, s = _dlpack.placement(q, stream)
    keep = []
    op = "kiln.attention"
    opts = _attention_opts(scale, causal, algo, deterministic)
    _check(_F.attention(ctx, _dlpack.tensor(q, f"{op}: q", s, keep), _dlpack.tensor(k, f"{op}: k", s, keep),
                        _dlpack.tensor(v, f"{op}: v", s, keep), _dlpack.tensor(o, f"{op}: out", s, keep, out=True),
                        _dlpack.tensor(lse, f"{op}: lse", s, keep, out=True), opts, s))
    return o, lse


def attention(q, k, v, scale=None, causal=False, return_lse=False, algo="auto", out_dtype=None,
              deterministic=False, *, out=None, lse=None, stream=None):
    """O = softmax(scale · Q·Kᵀ + mask) · V. Q [B, Hq, Sq, D], K [B, Hkv, Sk, D], V [B, Hkv, Sk, Dv]
    (rank 3: B = 1; rank 2: B = H = 1; Hq % Hkv == 0). scale None: 1/sqrt(D). causal: aligned to
    the bottom right. O in out_dtype (default Q's dtype, or float32). With return_lse, returns
    (O, LSE) with LSE f32 [B, Hq, Sq]. algo: 'auto', 'smem', 'flash', 'flash_mma_sync', 'flash_wgmma',
    'flash_decode' (few query rows per K/V head: split-KV, GQA heads packed; sm_90)."""
    algo = attention_algo(algo)
    if _torch_path(q, out if out is not None else lse, k, v):
        o, l = _TORCH_OPS.attention(q, k, v, scale, causal, algo, out_dtype, deterministic, need_lse=return_lse)
        return (o, l) if return_lse else o
    op = "kiln.attention"
    o_shape, lse_shape = attention_shapes(op, _shape(q, f"{op}: q"), _shape(v, f"{op}: v"))
    if out is None:
        out = _frameworks.empty(op, q, o_shape, q.dtype if out_dtype is None else out_dtype)
    if lse is None and return_lse:
        lse = _frameworks.empty(op, q, lse_shape, "float32")
    _attention_raw(q, k, v, out, lse, scale, causal, algo, deterministic, stream)
    return (out, lse) if return_lse else out


def _attention_backward_raw(q, k, v, o, lse, do, dq, dk, dv, scale=None, causal=False, algo=0,
                            deterministic=False, stream=None, alloc_like=None):
    ctx, s = _dlpack.placement(q, stream)
    keep = []
    op = "kiln.attention_backward"
    t = [_dlpack.tensor(x, f"{op}: {n}", s, keep) for x, n in ((q, "q"), (k, "k"), (v, "v"), (o, "o"),
                                                                 (lse, "lse"), (do, "dout"))]
    t += [_dlpack.tensor(x, f"{op}: {n}", s, keep, out=True) for x, n in ((dq, "dq"), (dk, "dk"), (dv, "dv"))]
    opts = _attention_opts(scale, causal, algo, deterministic)
    nbytes = c_size_t()
    _check(_F.attention_backward_workspace_size(ctx, *t, opts, byref(nbytes)))
    ws, ptr = _workspace(op, q, nbytes.value, alloc_like)
    _check(_F.attention_backward(ctx, *t, ptr, nbytes.value, opts, s))
    return dq, dk, dv


def attention_backward(q, k, v, o, lse, dout, scale=None, causal=False, algo="auto", deterministic=False,
                       need_dq=True, need_dk=True, need_dv=True, *, dq=None, dk=None, dv=None, stream=None):
    """Gradients of kiln.attention from its inputs, O, LSE and dO: returns (dQ, dK, dV), each None
    when not asked for, with the shapes and dtypes of Q, K, V (same scale/causal/algo as the
    forward)."""
    algo = attention_algo(algo)
    if dq is None and dk is None and dv is None and _torch_path(q, None):
        return _TORCH_OPS.attention_backward(q, k, v, o, lse, dout, scale, causal, algo, deterministic,
                                             need_dq, need_dk, need_dv)
    op = "kiln.attention_backward"
    if dq is None and need_dq:
        dq = _frameworks.empty(op, q, _shape(q, f"{op}: q"), q.dtype)
    if dk is None and need_dk:
        dk = _frameworks.empty(op, k, _shape(k, f"{op}: k"), k.dtype)
    if dv is None and need_dv:
        dv = _frameworks.empty(op, v, _shape(v, f"{op}: v"), v.dtype)
    return _attention_backward_raw(q, k, v, o, lse, dout, dq, dk, dv, scale, causal, algo, deterministic, stream)


# ------------------------------------------------------------------------------------------------
# int8
# ------------------------------------------------------------------------------------------------
def _matmul_int8_raw(a, b, c, scale=1.0, row_scale=None, col_scale=None, stream=None):
    ctx, s = _dlpack.placement(a, stream)
    keep = []
    op = "kiln.matmul_int8"
    opts = _lib.kiln_matmul_int8_opts(int(Int8Algo.AUTO), float(scale))
    rs = _dlpack.tensor(row_scale, f"{op}: row_scale", s, keep)
    cs = _dlpack.tensor(col_scale, f"{op}: col_scale", s, keep)
    if rs is not None:
        opts.row_scale = ctypes.pointer(rs)
    if cs is not None:
        opts.col_scale = ctypes.pointer(cs)
    _check(_F.matmul_int8(ctx, _dlpack.tensor(a, f"{op}: a", s, keep), _dlpack.tensor(b, f"{op}: b", s, keep),
                          _dlpack.tensor(c, f"{op}: out", s, keep, out=True), opts, s))
    return c


def matmul_int8(a, b, scale=1.0, row_scale=None, col_scale=None, out_dtype="float32", *, out=None, stream=None):
    """W8A8: C = (A·B in exact int32) · scale · row_scale[i] · col_scale[j]. A [M,K] (or
    [batch,M,K]) int8, B [K,N] int8 or a kiln.Int8Weight (whose scales are applied); C in
    out_dtype (float32, float16 or bfloat16)."""
    if isinstance(b, Int8Weight):
        if b.per_column:
            if col_scale is not None:
                raise _lib.invalid("kiln.matmul_int8: col_scale is given but b is a per-column Int8Weight, "
                                   "which supplies its own; pass one or the other")
            col_scale = b.scales
        else:
            scale = float(scale) * b.scale
        b = b.q
    if _torch_path(a, out, b, row_scale, col_scale):
        return _TORCH_OPS.matmul_int8(a, b, scale, row_scale, col_scale, out_dtype)
    if out is None:
        shape = matmul_shape("kiln.matmul_int8", _shape(a, "kiln.matmul_int8: a"), _shape(b, "kiln.matmul_int8: b"))
        out = _frameworks.empty("kiln.matmul_int8", a, shape, "float32" if out_dtype is None else out_dtype)
    return _matmul_int8_raw(a, b, out, scale, row_scale, col_scale, stream)


def _quantize_int8_raw(w, q, scales, per_column=True, stream=None):
    ctx, s = _dlpack.placement(w, stream)
    keep = []
    op = "kiln.quantize_int8"
    _check(_F.quantize_int8(ctx, _dlpack.tensor(w, f"{op}: w", s, keep),
                            _dlpack.tensor(q, f"{op}: q", s, keep, out=True),
                            _dlpack.tensor(scales, f"{op}: scales", s, keep, out=True), int(bool(per_column)), s))
    return q, scales


def quantize_int8(w, per_column=True, *, q=None, scales=None, stream=None):
    """Symmetric int8 quantization of a float weight w [K, N]: returns (q int8 [K, N], scales f32
    [N] per column or [1]) with w ≈ q · scale, computed where w is (CPU or GPU, the same bits)."""
    if q is None and scales is None and _torch_path(w, None):
        return _TORCH_OPS.quantize_int8(w, per_column)
    shape = _shape(w, "kiln.quantize_int8: w")
    if len(shape) != 2:
        raise _lib.invalid(f"kiln.quantize_int8: w has shape {list(shape)}; expected [K, N]")
    if q is None:
        q = _frameworks.empty("kiln.quantize_int8", w, shape, "int8")
    if scales is None:
        scales = _frameworks.empty("kiln.quantize_int8", w, (shape[1] if per_column else 1,), "float32")
    return _quantize_int8_raw(w, q, scales, per_column, stream)


# ------------------------------------------------------------------------------------------------
# W4A16 / W8A16: matmul_int4, qkv_project_int4, qkv_project_int8 (forward-only)
# ------------------------------------------------------------------------------------------------
def w16_shape(op, x_shape, n):
    """The output's shape for X [..., M, K] and a weight [K, n]: X's leading dimensions, then n."""
    if len(x_shape) < 2:
        raise _lib.invalid(f"{op}: x has shape {list(x_shape)}; expected [M, K] (or [..., M, K], whose leading "
                           "dimensions are flattened into M)")
    return tuple(x_shape[:-1]) + (n,)


def _rows(t, op, name, out):
    """t [..., C] as the [rows, C] matrix the library takes: t itself when it has rank 2 (any
    strides), else t.reshape(-1, C). An input may be copied by that; an output must come back as
    a view (results written to a copy would be lost)."""
    if t is None or len(t.shape) <= 2:  # rank 2 as is; a wrong rank is the library's to report
        return t
    r = t.reshape(-1, int(t.shape[-1]))
    if out:
        same = (r.data_ptr() == t.data_ptr()) if _frameworks.is_torch(t) else \
            (_dlpack.data_pointer(r) == _dlpack.data_pointer(t))
        if not same:
            raise _lib.invalid(f"{op}: {name} has shape {list(t.shape)} and strides that cannot be viewed as "
                               f"[rows, {int(t.shape[-1])}]; pass a contiguous output (or a rank-2 view)")
    return r


def _int4_weight(op, name, w):
    if not isinstance(w, Int4Weight):
        raise TypeError(f"{op}: {name} is a {type(w).__module__}.{type(w).__name__}; expected a kiln.Int4Weight "
                        "(Int4Weight.from_float, .from_gptq, .from_awq or .from_reference)")
    return w


def _int8_weight(op, name, w):
    if not isinstance(w, Int8Weight):
        raise TypeError(f"{op}: {name} is a {type(w).__module__}.{type(w).__name__}; expected a kiln.Int8Weight "
                        "(int8 q [K, N] and float32 scales [N] or [1]: Int8Weight.from_float)")
    return w


def _matmul_int4_raw(x, qw, y, algo=0, stream=None):
    """y = x·W for a kiln_qweight struct qw; x [..., K] and y [..., N] (leading dims flattened)."""
    op = "kiln.matmul_int4"
    ctx, s = _dlpack.placement(x, stream)
    keep = []
    xm, ym = _rows(x, op, "x", False), _rows(y, op, "out", True)  # locals: alive until the call returns
    tx, ty = _dlpack.tensor(xm, f"{op}: x", s, keep), _dlpack.tensor(ym, f"{op}: out", s, keep, out=True)
    opts = _lib.kiln_matmul_int4_opts(algo)
    ws = _w16_prefill_workspace(op, x, algo, 128, opts, _F.matmul_int4_workspace_size, ctx, tx, byref(qw), ty)  # noqa
    _check(_F.matmul_int4(ctx, tx, byref(qw), ty, opts, s))
    return y


def _w16_prefill_workspace(op, x, algo, from_m, opts, size_fn, ctx, *args):
    """PREFILL's workspace (the largest weight in x's dtype) into opts, for PREFILL and for AUTO
    from from_m rows of x (AUTO's rule in the library: matmul_int4 128, qkv_project_int4 256);
    DECODE and the CPU need none (the size query says 0). Returns the buffer, which must outlive
    the call."""
    rows = 1
    for d in tuple(x.shape)[:-1]:
        rows *= int(d)
    if algo != 2 and not (algo == 0 and rows >= from_m):  # 2: PREFILL, 0: AUTO (same in Int4Algo and QkvAlgo)
        return None
    nbytes = c_size_t(0)
    _check(size_fn(ctx, *args, byref(nbytes)))
    ws, ptr = _workspace(op, x, nbytes.value)
    if ws is not None:
        opts.workspace, opts.workspace_bytes = ptr, nbytes.value
    return ws


def matmul_int4(x, w, out_dtype=None, algo="auto", *, out=None, stream=None):
    """W4A16: Y = X·W. X [M, K] (or [..., M, K]) float16 or bfloat16, any row/column-major
    view; W a kiln.Int4Weight [K, N] on X's device (act-order weights gather X through W.perm);
    Y [..., N] in out_dtype (default X's dtype; float32, float16 or bfloat16). algo: 'auto',
    'decode', 'prefill' (the last two GPU only). Forward-only."""
    op = "kiln.matmul_int4"
    w = _int4_weight(op, "w", w)
    algo = int4_algo(algo)
    if _torch_path(x, out):
        return _TORCH_OPS.matmul_int4(x, w, out_dtype, algo)
    if out is None:
        out = _frameworks.empty(op, x, w16_shape(op, _shape(x, f"{op}: x"), w.n),
                                x.dtype if out_dtype is None else out_dtype)
    return _matmul_int4_raw(x, w._struct(), out, algo, stream)


def _qkv_outputs(op, x, ns, out_dtype, out):
    if out is not None:
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            raise _lib.invalid(f"{op}: out is a {type(out).__name__}; expected a tuple (q, k, v) of three tensors")
        return tuple(out)
    shape = _shape(x, f"{op}: x")
    dtype = x.dtype if out_dtype is None else out_dtype
    return tuple(_frameworks.empty(op, x, w16_shape(op, shape, n), dtype) for n in ns)


def _qkv_tensors(op, x, outs, s, keep):
    """DLTensors of x and the three outputs (as matrices); the matrices go into keep."""
    xm = _rows(x, op, "x", False)
    ys = [_rows(t, op, n, True) for t, n in zip(outs, "qkv")]
    keep += [xm] + ys
    return (_dlpack.tensor(xm, f"{op}: x", s, keep),
            [_dlpack.tensor(t, f"{op}: {n}", s, keep, out=True) for t, n in zip(ys, "qkv")])


def _qkv_project_int4_raw(x, wq, wk, wv, q, k, v, algo=0, stream=None):
    """q, k, v = x·Wq, x·Wk, x·Wv for kiln_qweight structs wq, wk, wv."""
    op = "kiln.qkv_project_int4"
    ctx, s = _dlpack.placement(x, stream)
    keep = []
    tx, ty = _qkv_tensors(op, x, (q, k, v), s, keep)
    opts = _lib.kiln_qkv_opts(algo)
    ws = _w16_prefill_workspace(op, x, algo, 256, opts, _F.qkv_project_int4_workspace_size,  # noqa: F841
                                 ctx, tx, byref(wq), byref(wk), byref(wv), *ty)
    _check(_F.qkv_project_int4(ctx, tx, byref(wq), byref(wk), byref(wv), *ty, opts, s))
    return q, k, v


def qkv_project_int4(x, wq, wk, wv, out_dtype=None, algo="auto", *, out=None, stream=None):
    """Fused W4A16 Q, K, V projections of one activation, read once: returns (x·Wq, x·Wk, x·Wv).
    X [M, K] (or [..., M, K]) float16 or bfloat16; wq, wk, wv kiln.Int4Weights [K, Nq], [K, Nk],
    [K, Nv] (each its own group size; Nk may differ from Nq: grouped-query attention), on X's
    device. Outputs [..., N*] in out_dtype (default X's dtype); each is kiln.matmul_int4(x, w*)
    (bit for bit on the CPU; within SPEC §5 on a GPU). out=(q, k, v) may be disjoint column slices
    of one buffer. algo: 'auto', 'decode', 'prefill' (GPU only; AUTO takes PREFILL from 256 rows,
    with a workspace the bridge allocates). Forward-only."""
    op = "kiln.qkv_project_int4"
    ws = [_int4_weight(op, n, w) for n, w in (("wq", wq), ("wk", wk), ("wv", wv))]
    algo = qkv_algo(algo)
    if _torch_path(x, out):
        return _TORCH_OPS.qkv_project_int4(x, wq, wk, wv, out_dtype, algo)
    q, k, v = _qkv_outputs(op, x, [w.n for w in ws], out_dtype, out)
    return _qkv_project_int4_raw(x, *(w._struct() for w in ws), q, k, v, algo, stream)


def _qkv_project_int8_raw(x, wq, wk, wv, q_scale, k_scale, v_scale, q, k, v, algo=0, stream=None):
    """q, k, v = (x·wq)·q_scale, ... for int8 weights [K, N*] and f32 scales [1] or [N*]."""
    op = "kiln.qkv_project_int8"
    ctx, s = _dlpack.placement(x, stream)
    keep = []
    tx, ty = _qkv_tensors(op, x, (q, k, v), s, keep)
    tw = [_dlpack.tensor(t, f"{op}: {n}", s, keep) for t, n in ((wq, "wq"), (wk, "wk"), (wv, "wv"))]
    ts = [_dlpack.tensor(t, f"{op}: {n}", s, keep)
          for t, n in ((q_scale, "q_scale"), (k_scale, "k_scale"), (v_scale, "v_scale"))]
    opts = _lib.kiln_qkv_opts(algo)
    ws = _w16_prefill_workspace(op, x, algo, 256, opts, _F.qkv_project_int8_workspace_size,  # noqa: F841
                                 ctx, tx, *tw, *ts, *ty)
    _check(_F.qkv_project_int8(ctx, tx, *tw, *ts, *ty, opts, s))
    return q, k, v


def qkv_project_int8(x, wq, wk, wv, out_dtype=None, algo="auto", *, out=None, stream=None):
    """Fused W8A16 Q, K, V projections: returns ((x·wq.q)·wq.scales, ...). X [M, K] (or
    [..., M, K]) float16 or bfloat16; wq, wk, wv kiln.Int8Weights (int8 q [K, N*], float32
    scales [N*] or [1]) on X's device. Outputs [..., N*] in out_dtype (default X's dtype).
    On a GPU: one DECODE launch for the three (sm_80+); from 256 rows AUTO takes PREFILL (the
    weights times their scales in x's dtype, then kiln.matmul; a workspace the bridge allocates).
    Forward-only."""
    op = "kiln.qkv_project_int8"
    ws = [_int8_weight(op, n, w) for n, w in (("wq", wq), ("wk", wk), ("wv", wv))]
    algo = qkv_algo(algo)
    if _torch_path(x, out):
        return _TORCH_OPS.qkv_project_int8(x, wq, wk, wv, out_dtype, algo)
    q, k, v = _qkv_outputs(op, x, [_shape(w.q, f"{op}: {n}.q")[-1] for n, w in zip(("wq", "wk", "wv"), ws)],
                           out_dtype, out)
    return _qkv_project_int8_raw(x, *(w.q for w in ws), *(w.scales for w in ws), q, k, v, algo, stream)


from .weights import Int4Weight, Int8Weight  # noqa: E402  (weights imports this module: last)
