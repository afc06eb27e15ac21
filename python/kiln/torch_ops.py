"""kiln's ops as PyTorch custom operators: torch.ops.kiln.* (torch >= 2.4).

Registered with torch.library.custom_op, register_fake and register_autograd, so they work under
autograd, torch.compile (no graph break) and CUDA graph capture:
  - every output is allocated with torch.empty / Tensor.new_empty (the caching allocator, graph pools);
  - work is enqueued on the current stream of the tensors' device; no op synchronizes the host;
  - matmul and attention have gradients (kiln matmul_backward / attention_backward); the
    quantized ops (matmul_int8, quantize_int8, matmul_int4, qkv_project_int4, qkv_project_int8)
    are forward-only and say so when a gradient is asked for.

Quantized weights enter the ops as their tensors: matmul_int4 takes an Int4Weight's codes,
scales, zeros and perm (the kiln_qweight is rebuilt from them, and checked, on each call that
goes through the dispatcher; the eager fast path uses the weight's cached one).

The functions below (matmul, attention, ...) are what kiln.matmul etc. call for PyTorch tensors.
In plain eager code with no gradient to record they call the library directly, skipping the
dispatcher's per-call cost; otherwise they call torch.ops.kiln.*.

The first call on a device creates kiln's context for it (loading its kernels): make one eager
call before capturing a CUDA graph.
"""
import re
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _frameworks, _lib
from . import ops as _ops
from . import weights as _weights

_found = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
if _found < (2, 4):
    raise ImportError(f"kiln.torch_ops needs torch >= 2.4 (torch.library.custom_op); found {torch.__version__}")

_custom_op = torch.library.custom_op
_frameworks.torch_tensor_type()  # cached now, so that kiln.matmul & co. trace without looking it up


def _workspace(device):
    return lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device=device)


def _new(x, shape, dtype=None):
    """An uninitialized tensor on x's device, of x's dtype when dtype is None. x.new_empty skips
    building a torch.device: ~1-1.7 µs less per call than torch.empty(..., device=x.device) on the
    H200 host (python/bench_overhead.py --breakdown)."""
    return x.new_empty(shape) if dtype is None or dtype == x.dtype else x.new_empty(shape, dtype=dtype)


def _torch_dtype(dtype):
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, _frameworks.dtype_name(dtype))


def _matrix(t):
    """A gradient the kernels read as is (row- or column-major), else a compact copy (e.g. the
    all-zero-stride gradient of a .sum())."""
    if t.is_contiguous() or t.transpose(-1, -2).is_contiguous():
        return t
    return t.contiguous()


# ------------------------------------------------------------------------------------------------
# The eager fast path: only for plain tensors, no gradient to record, no tracing, no modes.
# ------------------------------------------------------------------------------------------------
try:
    _compiling = torch.compiler.is_compiling
    _dispatch_modes = torch._C._len_torch_dispatch_stack
    _function_mode = torch._C._is_torch_function_mode_enabled
    _functorch = torch._C._are_functorch_transforms_active
except AttributeError:  # a torch without these: always go through the dispatcher
    _compiling = None
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _eager(*tensors):
    if _compiling is None or _compiling():
        return False
    if _dispatch_modes() or _function_mode() or _functorch():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or (grad and t.requires_grad)):
            return False
    return True


def _forward_only(name):
    def backward(ctx, *grads):
        raise RuntimeError(f"{name} is forward-only: kiln's quantized ops have no gradient. Use it on tensors "
                           "that do not require grad (e.g. under torch.no_grad()), or use kiln.matmul "
                           "(f16/bf16) where a gradient is needed.")
    return backward


# ------------------------------------------------------------------------------------------------
# matmul
# ------------------------------------------------------------------------------------------------
def _matmul_impl(a: Tensor, b: Tensor, out_dtype: Optional[torch.dtype] = None, alpha: float = 1.0,
                 algo: int = 0) -> Tensor:
    shape = _ops.matmul_shape("kiln.matmul", a.shape, b.shape)  # torch.Size is a tuple
    return _ops._matmul_raw(a, b, _new(a, shape, out_dtype), alpha, algo)


_matmul_op = _custom_op("kiln::matmul", mutates_args=())(_matmul_impl)


@_matmul_op.register_fake
def _(a, b, out_dtype=None, alpha=1.0, algo=0):
    shape = _ops.matmul_shape("kiln.matmul", tuple(a.shape), tuple(b.shape))
    return a.new_empty(shape, dtype=a.dtype if out_dtype is None else out_dtype)


def _matmul_backward_impl(a: Tensor, b: Tensor, dc: Tensor, alpha: float = 1.0, algo: int = 0,
                          need_da: bool = True, need_db: bool = True) -> Tuple[Tensor, Tensor]:
    # a gradient not asked for comes back as an empty tensor (the schema has no optional outputs)
    da = _new(a, a.shape) if need_da else a.new_empty(0)
    db = _new(b, b.shape) if need_db else b.new_empty(0)
    _ops._matmul_backward_raw(a, b, dc, da if need_da else None, db if need_db else None, alpha, algo,
                              alloc_like=_workspace(a.device))
    return da, db


_matmul_backward_op = _custom_op("kiln::matmul_backward", mutates_args=())(_matmul_backward_impl)


@_matmul_backward_op.register_fake
def _(a, b, dc, alpha=1.0, algo=0, need_da=True, need_db=True):
    return (a.new_empty(a.shape) if need_da else a.new_empty(0), b.new_empty(b.shape) if need_db else b.new_empty(0))


def _matmul_setup(ctx, inputs, output):
    a, b, _, alpha, algo = inputs
    ctx.save_for_backward(a, b)
    ctx.alpha, ctx.algo = alpha, algo


def _matmul_grad(ctx, dc):
    a, b = ctx.saved_tensors
    need_da, need_db = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if not (need_da or need_db):
        return None, None, None, None, None
    da, db = torch.ops.kiln.matmul_backward(a, b, _matrix(dc), ctx.alpha, ctx.algo, need_da, need_db)
    return (da if need_da else None), (db if need_db else None), None, None, None


_matmul_op.register_autograd(_matmul_grad, setup_context=_matmul_setup)


def matmul(a, b, out_dtype=None, alpha=1.0, algo=0):
    """kiln.matmul for PyTorch tensors (differentiable in a and b)."""
    out_dtype, algo = _torch_dtype(out_dtype), _ops.matmul_algo(algo)
    if _eager(a, b):
        return _matmul_impl(a, b, out_dtype, float(alpha), algo)
    return torch.ops.kiln.matmul(a, b, out_dtype, float(alpha), algo)


def matmul_backward(a, b, dc, alpha=1.0, algo=0, need_da=True, need_db=True):
    """(dA, dB) of C = alpha·A·B; an entry not asked for is None."""
    algo = _ops.matmul_algo(algo)
    if _eager(a, b, dc):
        da, db = _matmul_backward_impl(a, b, dc, float(alpha), algo, need_da, need_db)
    else:
        da, db = torch.ops.kiln.matmul_backward(a, b, dc, float(alpha), algo, need_da, need_db)
    return (da if need_da else None), (db if need_db else None)


# ------------------------------------------------------------------------------------------------
# attention
# ------------------------------------------------------------------------------------------------
def _attention_impl(q: Tensor, k: Tensor, v: Tensor, scale: float = 0.0, causal: bool = False, algo: int = 0,
                    deterministic: bool = False, out_dtype: Optional[torch.dtype] = None) -> Tuple[Tensor, Tensor]:
    o_shape, lse_shape = _ops.attention_shapes("kiln.attention", tuple(q.shape), tuple(v.shape))
    o = _new(q, o_shape, out_dtype)
    lse = _new(q, lse_shape, torch.float32)
    _ops._attention_raw(q, k, v, o, lse, scale, causal, algo, deterministic)
    return o, lse


_attention_op = _custom_op("kiln::attention", mutates_args=())(_attention_impl)


@_attention_op.register_fake
def _(q, k, v, scale=0.0, causal=False, algo=0, deterministic=False, out_dtype=None):
    o_shape, lse_shape = _ops.attention_shapes("kiln.attention", tuple(q.shape), tuple(v.shape))
    return (q.new_empty(o_shape, dtype=q.dtype if out_dtype is None else out_dtype),
            q.new_empty(lse_shape, dtype=torch.float32))


def _attention_backward_impl(q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, dout: Tensor,
                             scale: float = 0.0, causal: bool = False, algo: int = 0, deterministic: bool = False,
                             need_dq: bool = True, need_dk: bool = True,
                             need_dv: bool = True) -> Tuple[Tensor, Tensor, Tensor]:
    grads = [_new(x, x.shape) if need else x.new_empty(0)
             for x, need in ((q, need_dq), (k, need_dk), (v, need_dv))]
    dq, dk, dv = grads
    _ops._attention_backward_raw(q, k, v, o, lse, dout, dq if need_dq else None, dk if need_dk else None,
                                 dv if need_dv else None, scale, causal, algo, deterministic,
                                 alloc_like=_workspace(q.device))
    return dq, dk, dv


_attention_backward_op = _custom_op("kiln::attention_backward", mutates_args=())(_attention_backward_impl)


@_attention_backward_op.register_fake
def _(q, k, v, o, lse, dout, scale=0.0, causal=False, algo=0, deterministic=False, need_dq=True, need_dk=True,
      need_dv=True):
    return tuple(x.new_empty(x.shape) if need else x.new_empty(0)
                 for x, need in ((q, need_dq), (k, need_dk), (v, need_dv)))


def _attention_setup(ctx, inputs, output):
    q, k, v, scale, causal, algo, deterministic, _ = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.mark_non_differentiable(lse)  # an output for the backward, not a value to differentiate
    ctx.args = (scale, causal, algo, deterministic)


def _attention_grad(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    need = tuple(ctx.needs_input_grad[:3])
    if not any(need):
        return (None,) * 8
    if do.stride(-1) != 1:  # GPU kernels need a contiguous head dimension
        do = do.contiguous()
    dq, dk, dv = torch.ops.kiln.attention_backward(q, k, v, o, lse, do, *ctx.args, *need)
    return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None,
            None, None, None, None, None)


_attention_op.register_autograd(_attention_grad, setup_context=_attention_setup)


def attention(q, k, v, scale=None, causal=False, algo=0, out_dtype=None, deterministic=False, need_lse=True):
    """(O, LSE) of kiln.attention for PyTorch tensors (O differentiable in q, k, v). LSE is None
    when not need_lse and nothing records a gradient (eager: the kernel then skips writing it)."""
    scale = 0.0 if scale is None else float(scale)
    algo, out_dtype = _ops.attention_algo(algo), _torch_dtype(out_dtype)
    if _eager(q, k, v):
        if not need_lse:
            o_shape, _ = _ops.attention_shapes("kiln.attention", q.shape, v.shape)
            o = _new(q, o_shape, out_dtype)
            _ops._attention_raw(q, k, v, o, None, scale, bool(causal), algo, bool(deterministic))
            return o, None
        return _attention_impl(q, k, v, scale, bool(causal), algo, bool(deterministic), out_dtype)
    return torch.ops.kiln.attention(q, k, v, scale, bool(causal), algo, bool(deterministic), out_dtype)


def attention_backward(q, k, v, o, lse, dout, scale=None, causal=False, algo=0, deterministic=False,
                       need_dq=True, need_dk=True, need_dv=True):
    """(dQ, dK, dV); an entry not asked for is None."""
    scale = 0.0 if scale is None else float(scale)
    args = (q, k, v, o, lse, dout, scale, bool(causal), _ops.attention_algo(algo), bool(deterministic),
            bool(need_dq), bool(need_dk), bool(need_dv))
    if _eager(q, k, v, o, lse, dout):
        grads = _attention_backward_impl(*args)
    else:
        grads = torch.ops.kiln.attention_backward(*args)
    return tuple(g if need else None for g, need in zip(grads, (need_dq, need_dk, need_dv)))


# ------------------------------------------------------------------------------------------------
# int8 (forward-only)
# ------------------------------------------------------------------------------------------------
def _matmul_int8_impl(a: Tensor, b: Tensor, scale: float = 1.0, row_scale: Optional[Tensor] = None,
                      col_scale: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    shape = _ops.matmul_shape("kiln.matmul_int8", tuple(a.shape), tuple(b.shape))
    c = torch.empty(shape, dtype=torch.float32 if out_dtype is None else out_dtype, device=a.device)
    return _ops._matmul_int8_raw(a, b, c, scale, row_scale, col_scale)


_matmul_int8_op = _custom_op("kiln::matmul_int8", mutates_args=())(_matmul_int8_impl)


@_matmul_int8_op.register_fake
def _(a, b, scale=1.0, row_scale=None, col_scale=None, out_dtype=None):
    shape = _ops.matmul_shape("kiln.matmul_int8", tuple(a.shape), tuple(b.shape))
    return a.new_empty(shape, dtype=torch.float32 if out_dtype is None else out_dtype)


_matmul_int8_op.register_autograd(_forward_only("kiln::matmul_int8"))


def _quantize_int8_impl(w: Tensor, per_column: bool = True) -> Tuple[Tensor, Tensor]:
    if w.dim() != 2:
        raise _lib.invalid(f"kiln.quantize_int8: w has shape {list(w.shape)}; expected [K, N]")
    q = torch.empty(w.shape, dtype=torch.int8, device=w.device)
    scales = torch.empty((w.shape[1] if per_column else 1,), dtype=torch.float32, device=w.device)
    _ops._quantize_int8_raw(w, q, scales, per_column)
    return q, scales


_quantize_int8_op = _custom_op("kiln::quantize_int8", mutates_args=())(_quantize_int8_impl)


@_quantize_int8_op.register_fake
def _(w, per_column=True):
    if w.dim() != 2:
        raise _lib.invalid(f"kiln.quantize_int8: w has shape {list(w.shape)}; expected [K, N]")
    return (w.new_empty(w.shape, dtype=torch.int8),
            w.new_empty((w.shape[1] if per_column else 1,), dtype=torch.float32))


_quantize_int8_op.register_autograd(_forward_only("kiln::quantize_int8"))


def matmul_int8(a, b, scale=1.0, row_scale=None, col_scale=None, out_dtype=None):
    out_dtype = _torch_dtype(out_dtype)
    if _eager(a, b, row_scale, col_scale):
        return _matmul_int8_impl(a, b, float(scale), row_scale, col_scale, out_dtype)
    return torch.ops.kiln.matmul_int8(a, b, float(scale), row_scale, col_scale, out_dtype)


def quantize_int8(w, per_column=True):
    if _eager(w):
        return _quantize_int8_impl(w, bool(per_column))
    return torch.ops.kiln.quantize_int8(w, bool(per_column))


# ------------------------------------------------------------------------------------------------
# W4A16 / W8A16 (forward-only)
# ------------------------------------------------------------------------------------------------
def _torch_weight(op, name, w, buffers):
    """A weight whose buffers are PyTorch tensors (what the custom ops take)."""
    for b in buffers:
        t = getattr(w, b)
        if t is not None and not isinstance(t, torch.Tensor):
            raise _lib.invalid(f"{op}: x is a PyTorch tensor but {name}.{b} is a {type(t).__module__}."
                               f"{type(t).__name__}; make the weight from PyTorch tensors (e.g. "
                               "Int4Weight.from_float(torch_tensor))")
    return w


_INT4 = ("codes", "scales", "zeros", "perm")
_INT8 = ("q", "scales")


def _w16_empty(op, x, n, out_dtype):
    return torch.empty(_ops.w16_shape(op, tuple(x.shape), n), dtype=x.dtype if out_dtype is None else out_dtype,
                       device=x.device)


def _w16_fake(op, x, n, out_dtype):
    return x.new_empty(_ops.w16_shape(op, tuple(x.shape), n), dtype=x.dtype if out_dtype is None else out_dtype)


def _qweight(op, codes, scales, zeros, perm):
    return _weights.qweight_struct(op, codes, scales, zeros, perm)


def _matmul_int4_impl(x: Tensor, codes: Tensor, scales: Tensor, zeros: Tensor, perm: Optional[Tensor] = None,
                      out_dtype: Optional[torch.dtype] = None, algo: int = 0) -> Tensor:
    op = "kiln.matmul_int4"
    y = _w16_empty(op, x, codes.shape[1], out_dtype)
    return _ops._matmul_int4_raw(x, _qweight(f"{op}: w", codes, scales, zeros, perm), y, algo)


_matmul_int4_op = _custom_op("kiln::matmul_int4", mutates_args=())(_matmul_int4_impl)


@_matmul_int4_op.register_fake
def _(x, codes, scales, zeros, perm=None, out_dtype=None, algo=0):
    return _w16_fake("kiln.matmul_int4", x, codes.shape[1], out_dtype)


_matmul_int4_op.register_autograd(_forward_only("kiln::matmul_int4"))


def matmul_int4(x, w, out_dtype=None, algo=0):
    """kiln.matmul_int4 for PyTorch tensors (w: a kiln.Int4Weight). Forward-only."""
    out_dtype, algo = _torch_dtype(out_dtype), _ops.int4_algo(algo)
    if _eager(x, w.codes):
        y = _w16_empty("kiln.matmul_int4", x, w.n, out_dtype)
        return _ops._matmul_int4_raw(x, w._struct(), y, algo)
    _torch_weight("kiln.matmul_int4", "w", w, _INT4)
    return torch.ops.kiln.matmul_int4(x, w.codes, w.scales, w.zeros, w.perm, out_dtype, algo)


def _qkv_project_int4_impl(x: Tensor, q_codes: Tensor, q_scales: Tensor, q_zeros: Tensor, q_perm: Optional[Tensor],
                           k_codes: Tensor, k_scales: Tensor, k_zeros: Tensor, k_perm: Optional[Tensor],
                           v_codes: Tensor, v_scales: Tensor, v_zeros: Tensor, v_perm: Optional[Tensor],
                           out_dtype: Optional[torch.dtype] = None, algo: int = 0) -> Tuple[Tensor, Tensor, Tensor]:
    op = "kiln.qkv_project_int4"
    ws = [_qweight(f"{op}: {n}", *b) for n, b in (("wq", (q_codes, q_scales, q_zeros, q_perm)),
                                                  ("wk", (k_codes, k_scales, k_zeros, k_perm)),
                                                  ("wv", (v_codes, v_scales, v_zeros, v_perm)))]
    outs = [_w16_empty(op, x, c.shape[1], out_dtype) for c in (q_codes, k_codes, v_codes)]
    return _ops._qkv_project_int4_raw(x, *ws, *outs, algo)


_qkv_project_int4_op = _custom_op("kiln::qkv_project_int4", mutates_args=())(_qkv_project_int4_impl)


@_qkv_project_int4_op.register_fake
def _(x, q_codes, q_scales, q_zeros, q_perm, k_codes, k_scales, k_zeros, k_perm, v_codes, v_scales, v_zeros, v_perm,
      out_dtype=None, algo=0):
    return tuple(_w16_fake("kiln.qkv_project_int4", x, c.shape[1], out_dtype) for c in (q_codes, k_codes, v_codes))


_qkv_project_int4_op.register_autograd(_forward_only("kiln::qkv_project_int4"))


def qkv_project_int4(x, wq, wk, wv, out_dtype=None, algo=0):
    """(q, k, v) of kiln.qkv_project_int4 for PyTorch tensors (kiln.Int4Weights). Forward-only."""
    op = "kiln.qkv_project_int4"
    out_dtype, algo = _torch_dtype(out_dtype), _ops.qkv_algo(algo)
    if _eager(x, wq.codes, wk.codes, wv.codes):
        outs = [_w16_empty(op, x, w.n, out_dtype) for w in (wq, wk, wv)]
        return _ops._qkv_project_int4_raw(x, wq._struct(), wk._struct(), wv._struct(), *outs, algo)
    args = []
    for name, w in (("wq", wq), ("wk", wk), ("wv", wv)):
        _torch_weight(op, name, w, _INT4)
        args += [w.codes, w.scales, w.zeros, w.perm]
    return torch.ops.kiln.qkv_project_int4(x, *args, out_dtype, algo)


def _qkv_project_int8_impl(x: Tensor, wq: Tensor, wk: Tensor, wv: Tensor, q_scale: Tensor, k_scale: Tensor,
                           v_scale: Tensor, out_dtype: Optional[torch.dtype] = None,
                           algo: int = 0) -> Tuple[Tensor, Tensor, Tensor]:
    op = "kiln.qkv_project_int8"
    outs = [_w16_empty(op, x, w.shape[-1], out_dtype) for w in (wq, wk, wv)]
    return _ops._qkv_project_int8_raw(x, wq, wk, wv, q_scale, k_scale, v_scale, *outs, algo)


_qkv_project_int8_op = _custom_op("kiln::qkv_project_int8", mutates_args=())(_qkv_project_int8_impl)


@_qkv_project_int8_op.register_fake
def _(x, wq, wk, wv, q_scale, k_scale, v_scale, out_dtype=None, algo=0):
    return tuple(_w16_fake("kiln.qkv_project_int8", x, w.shape[-1], out_dtype) for w in (wq, wk, wv))


_qkv_project_int8_op.register_autograd(_forward_only("kiln::qkv_project_int8"))


def qkv_project_int8(x, wq, wk, wv, out_dtype=None, algo=0):
    """(q, k, v) of kiln.qkv_project_int8 for PyTorch tensors (kiln.Int8Weights). Forward-only."""
    op = "kiln.qkv_project_int8"
    out_dtype, algo = _torch_dtype(out_dtype), _ops.qkv_algo(algo)
    ws = (wq, wk, wv)
    if _eager(x, wq.q, wk.q, wv.q, wq.scales, wk.scales, wv.scales):
        return _qkv_project_int8_impl(x, *(w.q for w in ws), *(w.scales for w in ws), out_dtype, algo)
    for name, w in zip(("wq", "wk", "wv"), ws):
        _torch_weight(op, name, w, _INT8)
    return torch.ops.kiln.qkv_project_int8(x, *(w.q for w in ws), *(w.scales for w in ws), out_dtype, algo)


# The ops, for torch.library.opcheck and for code that calls them directly.
OPS = {
    "matmul": _matmul_op,
    "matmul_backward": _matmul_backward_op,
    "attention": _attention_op,
    "attention_backward": _attention_backward_op,
    "matmul_int8": _matmul_int8_op,
    "quantize_int8": _quantize_int8_op,
    "matmul_int4": _matmul_int4_op,
    "qkv_project_int4": _qkv_project_int4_op,
    "qkv_project_int8": _qkv_project_int8_op,
}
