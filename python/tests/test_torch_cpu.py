"""The PyTorch integration on CPU tensors (torch >= 2.4): custom ops, opcheck, autograd against
PyTorch's own ops, torch.compile without graph breaks, weights from torch tensors."""
import math

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()
import kiln  # noqa: E402
import kiln.torch_ops as kt  # noqa: E402
from torch.library import opcheck  # noqa: E402


def rel(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def ref_attention(q, k, v, scale=None, causal=False):
    """float64 attention with bottom-right causal alignment and GQA."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)
    s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        sq, sk = q.shape[-2], k.shape[-2]
        mask = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + (sk - sq)
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def test_ops_registered():
    for name in ("matmul", "matmul_backward", "attention", "attention_backward", "matmul_int8", "quantize_int8",
                 "matmul_int4", "qkv_project_int4", "qkv_project_int8"):
        assert hasattr(torch.ops.kiln, name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul(dtype):
    a, b = torch.randn(17, 33, dtype=dtype), torch.randn(40, 33, dtype=dtype)  # b: a Linear weight [N, K]
    c = kiln.matmul(a, b.T, out_dtype=torch.float32)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32 and c.shape == (17, 40)
    assert rel(c, a.double() @ b.double().T) <= 1e-4
    c16 = kiln.matmul(a, b.T)
    assert c16.dtype == dtype and rel(c16, a.double() @ b.double().T) <= (1e-3 if dtype == torch.float16 else 6e-3)


def test_fast_path_and_op_path_agree():
    a, b = torch.randn(9, 16, dtype=torch.float16), torch.randn(16, 5, dtype=torch.float16)
    assert torch.equal(kiln.matmul(a, b), torch.ops.kiln.matmul(a, b))
    with torch.no_grad():
        assert torch.equal(kiln.matmul(a, b), kt.matmul(a, b))


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_matmul_autograd(out_dtype):
    a = torch.randn(3, 7, 12, dtype=torch.float16, requires_grad=True)
    w = torch.randn(9, 12, dtype=torch.float16, requires_grad=True)
    c = kiln.matmul(a, w.T, out_dtype=out_dtype, alpha=0.5)
    assert c.requires_grad
    g = torch.randn_like(c)
    c.backward(g)
    ad, wd = a.detach().double(), w.detach().double()
    ref_da = 0.5 * g.double() @ wd
    ref_dw = 0.5 * torch.einsum("bmk,bmn->nk", ad, g.double())
    assert a.grad.dtype == a.dtype and w.grad.shape == w.shape
    assert rel(a.grad, ref_da) <= 1e-2 and rel(w.grad, ref_dw) <= 1e-2
    # a .sum() gives an all-zero-stride gradient: copied to a layout the kernels read
    a.grad = None
    kiln.matmul(a, w.T, out_dtype=torch.float32).sum().backward()
    assert rel(a.grad, torch.ones(3, 7, 9, dtype=torch.float64) @ wd) <= 1e-2


@pytest.mark.parametrize("causal", [False, True])
def test_attention_against_sdpa(causal):
    q = torch.randn(2, 4, 16, 32, requires_grad=True)
    k = torch.randn(2, 4, 16, 32, requires_grad=True)
    v = torch.randn(2, 4, 16, 32, requires_grad=True)
    o = kiln.attention(q, k, v, causal=causal)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)  # Sq == Sk: same mask
    assert rel(o, ref) <= 2e-4
    g = torch.randn_like(o)
    mine = torch.autograd.grad(o, (q, k, v), g)
    theirs = torch.autograd.grad(ref, (q, k, v), g)
    for x, y in zip(mine, theirs):
        assert rel(x, y) <= 1e-4


def test_attention_gqa_lse_and_partial_grads():
    q = torch.randn(1, 4, 7, 16, requires_grad=True)
    k = torch.randn(1, 2, 13, 16)
    v = torch.randn(1, 2, 13, 16, requires_grad=True)
    o, lse = kiln.attention(q, k, v, causal=True, return_lse=True)
    assert not lse.requires_grad and lse.shape == (1, 4, 7) and lse.dtype == torch.float32
    assert rel(o, ref_attention(q, k, v, causal=True)) <= 2e-4
    o.sum().backward()
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref_attention(qd, kd, vd, causal=True).sum().backward()
    assert rel(q.grad, qd.grad) <= 1e-4 and rel(v.grad, vd.grad) <= 1e-4 and k.grad is None


def test_quantized_ops_are_forward_only():
    a, b = torch.randint(-128, 128, (4, 8), dtype=torch.int8), torch.randint(-128, 128, (8, 3), dtype=torch.int8)
    cs = torch.rand(3, requires_grad=True)
    c = kiln.matmul_int8(a, b, col_scale=cs)
    ref = (a.long() @ b.long()).float() * cs.detach()
    assert torch.allclose(c.detach(), ref, rtol=1e-6, atol=0)
    with pytest.raises(RuntimeError, match="kiln::matmul_int8 is forward-only"):
        c.sum().backward()


def test_kiln_error_through_the_dispatcher():
    a, b = torch.randn(8, 32, dtype=torch.float16), torch.randn(24, 64, dtype=torch.float16)
    with pytest.raises(kiln.KilnError, match="inner dimensions must match"):
        torch.ops.kiln.matmul(a, b)
    with pytest.raises(kiln.KilnError, match="inner dimensions must match"):
        kiln.matmul(a.requires_grad_(), b)


def test_weights_from_torch_tensors():
    np = pytest.importorskip("numpy")
    w = torch.randn(128, 24)
    W = kiln.Int4Weight.from_float(w, group=64)
    assert isinstance(W.codes, torch.Tensor) and W.codes.dtype == torch.int32
    Wn = kiln.Int4Weight.from_float(w.numpy(), group=64)
    assert np.array_equal(W.dequantize().numpy(), Wn.dequantize())
    W8 = kiln.Int8Weight.from_float(w)
    x = torch.randint(-128, 128, (5, 128), dtype=torch.int8)
    y = kiln.matmul_int8(x, W8)
    assert torch.allclose(y, (x.long() @ W8.q.long()).float() * W8.scales, rtol=1e-6, atol=0)


def test_compile_fullgraph_no_graph_break():
    def block(x, wqkv, wo):
        qkv = kiln.matmul(x, wqkv.T)                      # [S, 3·H·D]
        s = x.shape[0]
        q, k, v = qkv.view(s, 3, 2, 16).permute(1, 2, 0, 3)  # 3 x [H, S, D], strided views
        o = kiln.attention(q, k, v, causal=True)
        return kiln.matmul(o.transpose(0, 1).reshape(s, 32), wo.T, out_dtype=torch.float32)
    x = torch.randn(10, 32, dtype=torch.float16)
    wqkv, wo = torch.randn(96, 32, dtype=torch.float16), torch.randn(32, 32, dtype=torch.float16)
    eager = block(x, wqkv, wo)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")(x, wqkv, wo)
    assert torch.equal(eager, compiled)


def _w4(w):
    return (w.codes, w.scales, w.zeros, w.perm)


def _int4(k, n, group, symmetric=True, act_order=False):
    w = kiln.Int4Weight.from_float(torch.randn(k, n), group=group, symmetric=symmetric)
    if act_order:
        w.perm = torch.randperm(k).to(torch.int32)
    return w


def int4_reference(x, w):
    xd = x.double()
    if w.perm is not None:
        xd = xd[..., w.perm.long()]
    return xd @ w.dequantize().double()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
def test_matmul_int4(dtype, out_dtype):
    w = _int4(128, 40, 32, symmetric=False, act_order=True)
    x = torch.randn(2, 7, 128, dtype=dtype)
    y = kiln.matmul_int4(x, w, out_dtype=out_dtype)
    assert y.dtype == (out_dtype or dtype) and y.shape == (2, 7, 40)
    assert rel(y, int4_reference(x, w)) <= {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 6e-3}[y.dtype]
    assert torch.equal(y, torch.ops.kiln.matmul_int4(x, *_w4(w), out_dtype, 0))  # fast path == the op


def test_qkv_project_int4_and_int8():
    x = torch.randn(9, 64, dtype=torch.float16)
    ws = [_int4(64, 32, 32), _int4(64, 8, 64, act_order=True), _int4(64, 8, 64, symmetric=False)]
    outs = kiln.qkv_project_int4(x, *ws)
    for out, w in zip(outs, ws):
        assert out.dtype == torch.float16 and rel(out, int4_reference(x, w)) <= 2e-3
        assert torch.equal(out, kiln.matmul_int4(x, w))
    assert all(torch.equal(a, b) for a, b in zip(outs, torch.ops.kiln.qkv_project_int4(
        x, *_w4(ws[0]), *_w4(ws[1]), *_w4(ws[2]), None, 0)))
    w8 = [kiln.Int8Weight.from_float(torch.randn(64, n), per_column=n != 8) for n in (32, 8, 16)]
    outs = kiln.qkv_project_int8(x, *w8, out_dtype=torch.float32)
    for out, w in zip(outs, w8):
        assert rel(out, (x.double() @ w.q.double()) * w.scales.double()) <= 1e-6


def test_w16_ops_are_forward_only():
    w = _int4(64, 16, 32)
    x = torch.randn(3, 64, dtype=torch.float16, requires_grad=True)
    y = kiln.matmul_int4(x, w)
    assert y.requires_grad
    with pytest.raises(RuntimeError, match="kiln::matmul_int4 is forward-only"):
        y.float().sum().backward()
    with pytest.raises(RuntimeError, match="kiln::qkv_project_int4 is forward-only"):
        kiln.qkv_project_int4(x, w, w, w)[1].float().sum().backward()
    w8 = kiln.Int8Weight.from_float(torch.randn(64, 16))
    with pytest.raises(RuntimeError, match="kiln::qkv_project_int8 is forward-only"):
        kiln.qkv_project_int8(x, w8, w8, w8)[0].float().sum().backward()
    with torch.no_grad():
        assert not kiln.matmul_int4(x, w).requires_grad


def test_w16_weight_errors():
    np = pytest.importorskip("numpy")
    x = torch.randn(3, 64, dtype=torch.float16)
    wn = kiln.Int4Weight.from_float(np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32), group=32)
    with pytest.raises(kiln.KilnError, match="w.codes is a numpy.ndarray; make the weight from PyTorch tensors"):
        kiln.matmul_int4(x, wn)
    with pytest.raises(TypeError, match="expected a kiln.Int4Weight"):
        kiln.matmul_int4(x, torch.randn(64, 16))
    w = _int4(64, 16, 32)
    with pytest.raises(kiln.KilnError, match="w->k = 64 but x has K = 32"):
        kiln.matmul_int4(torch.randn(3, 32, dtype=torch.float16).requires_grad_(), w)  # through the dispatcher
    bad = kiln.Int4Weight(w.codes, w.scales.float(), w.zeros)
    with pytest.raises(kiln.KilnError, match="scales has DLPack dtype"):
        kiln.matmul_int4(x, bad)
    with pytest.raises(kiln.KilnError, match="scales has DLPack dtype"):
        torch.ops.kiln.matmul_int4(x, *_w4(bad), None, 0)


def test_compile_int4_block_no_graph_break():
    def block(x, wq, wk, wv):
        s = x.shape[0]
        q, k, v = kiln.qkv_project_int4(x, wq, wk, wv)
        q = q.view(s, 4, 16).transpose(0, 1)
        k, v = (t.view(s, 2, 16).transpose(0, 1) for t in (k, v))
        return kiln.attention(q, k, v, causal=True)
    x = torch.randn(10, 64, dtype=torch.float16)
    ws = [_int4(64, 64, 32), _int4(64, 32, 64, act_order=True), _int4(64, 32, 32)]
    eager = block(x, *ws)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")(x, *ws)
    assert torch.equal(eager, compiled)


def _samples():
    h = torch.float16
    a, b = torch.randn(5, 12, dtype=h, requires_grad=True), torch.randn(12, 7, dtype=h, requires_grad=True)
    q, k, v = (torch.randn(1, 2, 6, 16, requires_grad=True) for _ in range(3))
    o, lse = kt.attention(q.detach(), k.detach(), v.detach())
    i8a, i8b = torch.randint(-128, 128, (4, 8), dtype=torch.int8), torch.randint(-128, 128, (8, 3), dtype=torch.int8)
    return [
        (torch.ops.kiln.matmul.default, (a, b, None, 1.0, 0)),
        (torch.ops.kiln.matmul.default, (a, b, torch.float32, 0.5, 0)),
        (torch.ops.kiln.matmul_backward.default, (a.detach(), b.detach(), torch.randn(5, 7), 1.0, 0, True, True)),
        (torch.ops.kiln.matmul_backward.default, (a.detach(), b.detach(), torch.randn(5, 7), 1.0, 0, False, True)),
        (torch.ops.kiln.attention.default, (q, k, v, 0.0, True, 0, False, None)),
        (torch.ops.kiln.attention_backward.default,
         (q.detach(), k.detach(), v.detach(), o, lse, torch.randn_like(o), 0.0, False, 0, False, True, True, True)),
        (torch.ops.kiln.matmul_int8.default, (i8a, i8b, 0.5, torch.rand(4), torch.rand(3), None)),
        (torch.ops.kiln.quantize_int8.default, (torch.randn(8, 3), True)),
        *_w16_samples(),
    ]


def _w16_samples():
    x = torch.randn(2, 5, 64, dtype=torch.float16)
    wq, wk, wv = _int4(64, 32, 32), _int4(64, 8, 64, symmetric=False, act_order=True), _int4(64, 16, 64)
    w8 = [kiln.Int8Weight.from_float(torch.randn(64, n), per_column=n != 8) for n in (32, 8, 16)]
    return [
        (torch.ops.kiln.matmul_int4.default, (x, *_w4(wq), None, 0)),
        (torch.ops.kiln.matmul_int4.default, (x[0], *_w4(wk), torch.float32, 0)),
        (torch.ops.kiln.qkv_project_int4.default, (x, *_w4(wq), *_w4(wk), *_w4(wv), None, 0)),
        (torch.ops.kiln.qkv_project_int8.default, (x, *(w.q for w in w8), *(w.scales for w in w8), torch.float32, 0)),
    ]


@pytest.mark.parametrize("i", range(12))
def test_opcheck(i):
    op, args = _samples()[i]
    opcheck(op, args)
