"""The PyTorch integration on a CUDA GPU (torch >= 2.4): every op against PyTorch, opcheck,
torch.compile(fullgraph=True), CUDA graph capture and replay, a non-default stream, gradients;
the W4A16 ops (matmul_int4, qkv_project_int4) and qkv_project_int8 against PyTorch on the
dequantized weights. Skipped without a GPU (or a build without kernels)."""
import pytest

from conftest import torch_or_skip

torch = torch_or_skip()
import kiln  # noqa: E402
import kiln.torch_ops  # noqa: E402,F401
from torch.library import opcheck  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to PyTorch", allow_module_level=True)
if kiln.device_count() == 0 or not kiln.build_has_kernels():
    pytest.skip(f"libkiln ({kiln.library_path}) sees no GPU or has no kernels", allow_module_level=True)

DEV = "cuda"
CC = torch.cuda.get_device_capability()


def rel(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def skip_if_unsupported(fn, *args, **kwargs):
    """Runs fn; an op this build cannot run on the GPU yet skips the test, saying so."""
    try:
        return fn(*args, **kwargs)
    except kiln.KilnError as e:
        if e.status == kiln.Status.UNSUPPORTED:
            pytest.skip(f"not on the GPU in this build yet: {e.message}")
        raise


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


# ------------------------------------------------------------------------------------------------
# numerics against PyTorch
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["auto", "mma_sync", "cp_async", "wgmma"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("out_dtype", [torch.float32, None])
@pytest.mark.parametrize("m,n,k", [(1, 1, 8), (7, 17, 40), (127, 255, 64), (1024, 768, 512)])
def test_matmul(algo, dtype, out_dtype, m, n, k):
    a = torch.randn(m, k, device=DEV, dtype=dtype)
    w = torch.randn(n, k, device=DEV, dtype=dtype)  # a Linear weight, used as w.T
    if algo == "wgmma" and CC != (9, 0):
        with pytest.raises(kiln.KilnError, match="WGMMA"):
            kiln.matmul(a, w.T, out_dtype=out_dtype, algo=algo)
        return
    if algo in ("cp_async", "wgmma") and (n % 8 or k % 8):  # rows not 16-byte aligned: may be refused
        try:
            c = kiln.matmul(a, w.T, out_dtype=out_dtype, algo=algo)
        except kiln.KilnError as e:
            assert e.status == kiln.Status.UNSUPPORTED and "align" in e.message
            return
    else:
        c = kiln.matmul(a, w.T, out_dtype=out_dtype, algo=algo)
    assert c.device == a.device and c.dtype == (out_dtype or dtype)
    tol = 1e-4 if out_dtype == torch.float32 else (1e-3 if dtype == torch.float16 else 6e-3)
    assert rel(c, a.double() @ w.double().T) <= tol


def test_matmul_mixed_devices_is_a_kiln_error():
    a = torch.randn(4, 8, device=DEV, dtype=torch.float16)
    with pytest.raises(kiln.KilnError, match="context is for kDLCUDA"):
        kiln.matmul(a, torch.randn(8, 3, dtype=torch.float16))


def test_matmul_gradients_against_torch():
    a = torch.randn(4, 33, 64, device=DEV, dtype=torch.float16, requires_grad=True)
    w = torch.randn(48, 64, device=DEV, dtype=torch.float16, requires_grad=True)
    g = torch.randn(4, 33, 48, device=DEV, dtype=torch.float32)
    kiln.matmul(a, w.T, out_dtype=torch.float32).backward(g)
    a64, w64 = a.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (a64 @ w64.T).backward(g.double())
    assert rel(a.grad, a64.grad) <= 1e-2 and rel(w.grad, w64.grad) <= 1e-2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hq,hkv,s,d", [(8, 8, 256, 64), (8, 2, 129, 128), (4, 2, 100, 256), (4, 1, 17, 64),
                                         (2, 1, 33, 36)])
def test_attention_against_sdpa(dtype, causal, hq, hkv, s, d):
    """f16/bf16 with D % 8 == 0 run on tensor cores (D = 256: on sm_90 the backward's kernels split
    by role); f32 inputs and D = 36 on the CUDA-core kernels."""
    q = torch.randn(2, hq, s, d, device=DEV, dtype=dtype, requires_grad=True)
    k = torch.randn(2, hkv, s, d, device=DEV, dtype=dtype, requires_grad=True)
    v = torch.randn(2, hkv, s, d, device=DEV, dtype=dtype, requires_grad=True)
    o = skip_if_unsupported(kiln.attention, q, k, v, causal=causal)
    g = hq // hkv
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(
        q64, k64.repeat_interleave(g, dim=1), v64.repeat_interleave(g, dim=1), is_causal=causal)
    tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 2e-4}[dtype]
    assert rel(o, ref) <= tol
    dout = torch.randn_like(o)
    grads = skip_if_unsupported(torch.autograd.grad, o, (q, k, v), dout)
    ref.backward(dout.double())
    for mine, theirs in zip(grads, (q64.grad, k64.grad, v64.grad)):
        assert rel(mine, theirs) <= (1e-4 if dtype == torch.float32 else 1e-2)


def test_attention_smem():
    """algo 'smem', the sm_90a short-sequence kernel: AUTO's pick at D = 64 and short Sk (same
    bits), causal too; refused with the reason where it cannot run."""
    q, k, v = (torch.randn(2, 4, 200, 64, device=DEV, dtype=torch.float16) for _ in range(3))
    if CC != (9, 0):
        with pytest.raises(kiln.KilnError, match="algo SMEM cannot run this problem"):
            kiln.attention(q, k, v, algo="smem")
        return
    for causal in (False, True):
        assert torch.equal(kiln.attention(q, k, v, causal=causal, algo="smem"), kiln.attention(q, k, v, causal=causal))
    with pytest.raises(kiln.KilnError, match="algo SMEM: q, k and v are float32"):
        kiln.attention(q.float(), k.float(), v.float(), algo="smem")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_attention_flash_decode(dtype):
    """algo 'flash_decode', the split-KV decode kernel (sm_90): one query row per head against a
    KV cache, GQA 4:1, against float64 SDPA; AUTO's pick there (same bits); the same bits from a
    CUDA graph (a launch in clusters, captured); the backward is FLASH's; refused off sm_90."""
    q = torch.randn(3, 16, 1, 128, device=DEV, dtype=dtype, requires_grad=True)
    k = torch.randn(3, 4, 1500, 128, device=DEV, dtype=dtype, requires_grad=True)
    v = torch.randn(3, 4, 1500, 128, device=DEV, dtype=dtype, requires_grad=True)
    if CC != (9, 0):
        with pytest.raises(kiln.KilnError, match="algo FLASH_DECODE cannot run this problem"):
            kiln.attention(q, k, v, algo="flash_decode")
        return
    o = kiln.attention(q, k, v, algo="flash_decode")
    q64, k64, v64 = (x.detach().double() for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(
        q64, k64.repeat_interleave(4, dim=1), v64.repeat_interleave(4, dim=1))
    assert rel(o, ref) <= {torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    assert torch.equal(o, kiln.attention(q, k, v))
    qs, ks, vs = (x.detach().clone() for x in (q, k, v))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kiln.attention(qs, ks, vs, algo="flash_decode")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = kiln.attention(qs, ks, vs, algo="flash_decode")
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static, o)
    dout = torch.randn_like(o)
    mine = torch.autograd.grad(kiln.attention(q, k, v, algo="flash_decode"), (q, k, v), dout)
    flash = torch.autograd.grad(kiln.attention(q, k, v, algo="flash"), (q, k, v), dout)
    for a, b in zip(mine, flash):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------------------------------
# opcheck
# ------------------------------------------------------------------------------------------------
def _attention_backward_supported():
    q = torch.randn(1, 1, 16, 64, device=DEV, dtype=torch.float16)
    o, lse = kiln.torch_ops.attention(q, q, q)
    try:
        kiln.torch_ops.attention_backward(q, q, q, o, lse, torch.randn_like(o))
        return True
    except kiln.KilnError as e:
        if e.status == kiln.Status.UNSUPPORTED:
            return False
        raise


def _opcheck_cases():
    h = torch.float16
    grad = _attention_backward_supported()
    a = torch.randn(33, 64, device=DEV, dtype=h, requires_grad=True)
    b = torch.randn(48, 64, device=DEV, dtype=h, requires_grad=True).T  # a transposed view
    q, k, v = (torch.randn(1, 4, 40, 64, device=DEV, dtype=h, requires_grad=grad) for _ in range(3))
    o, lse = kiln.torch_ops.attention(q.detach(), k.detach(), v.detach())
    i8a = torch.randint(-128, 128, (16, 64), device=DEV, dtype=torch.int8)
    i8b = torch.randint(-128, 128, (64, 32), device=DEV, dtype=torch.int8)
    return {
        "matmul": (torch.ops.kiln.matmul.default, (a, b, torch.float32, 1.0, 0)),
        "matmul_f16_out": (torch.ops.kiln.matmul.default, (a, b, None, 0.5, 0)),
        "matmul_backward": (torch.ops.kiln.matmul_backward.default,
                            (a.detach(), b.detach(), torch.randn(33, 48, device=DEV), 1.0, 0, True, True)),
        "attention": (torch.ops.kiln.attention.default, (q, k, v, 0.0, True, 0, False, None)),
        "attention_backward": (torch.ops.kiln.attention_backward.default,
                               (q.detach(), k.detach(), v.detach(), o, lse, torch.randn_like(o), 0.0, False, 0,
                                False, True, True, True)),
        "matmul_int8": (torch.ops.kiln.matmul_int8.default,
                        (i8a, i8b, 0.5, None, torch.rand(32, device=DEV), None)),
        "quantize_int8": (torch.ops.kiln.quantize_int8.default, (torch.randn(64, 32, device=DEV), True)),
        **_w16_opcheck_cases(),
    }


def _w4(w):
    return (w.codes, w.scales, w.zeros, w.perm)


def _w16_opcheck_cases():
    x = torch.randn(2, 9, 128, device=DEV, dtype=torch.float16)
    wq = kiln.Int4Weight.from_float(torch.randn(128, 64), group=32).to(DEV)
    wk = kiln.Int4Weight.from_float(torch.randn(128, 16), group=64, symmetric=False).to(DEV)
    wv = act_order(kiln.Int4Weight.from_float(torch.randn(128, 24), group=128))
    w8 = [kiln.Int8Weight.from_float(torch.randn(128, n), per_column=n != 16).to(DEV) for n in (64, 16, 24)]
    return {
        "matmul_int4": (torch.ops.kiln.matmul_int4.default, (x, *_w4(wq), None, 0)),
        "matmul_int4_act_order_f32": (torch.ops.kiln.matmul_int4.default, (x[0], *_w4(wv), torch.float32, 0)),
        "qkv_project_int4": (torch.ops.kiln.qkv_project_int4.default, (x, *_w4(wq), *_w4(wk), *_w4(wv), None, 0)),
        "qkv_project_int8": (torch.ops.kiln.qkv_project_int8.default,
                             (x, *(w.q for w in w8), *(w.scales for w in w8), torch.float32, 0)),
    }


@pytest.mark.parametrize("name", ["matmul", "matmul_f16_out", "matmul_backward", "attention",
                                  "attention_backward", "matmul_int8", "quantize_int8", "matmul_int4",
                                  "matmul_int4_act_order_f32", "qkv_project_int4", "qkv_project_int8"])
def test_opcheck(name):
    op, args = _opcheck_cases()[name]
    skip_if_unsupported(op, *args)  # the op itself first: skip what this build cannot run on a GPU
    opcheck(op, args)


# ------------------------------------------------------------------------------------------------
# a small attention block: torch.compile, CUDA graphs, streams
# ------------------------------------------------------------------------------------------------
H, D = 4, 64


def block(x, wqkv, wo):
    s = x.shape[0]
    qkv = kiln.matmul(x, wqkv.T)                             # [S, 3·H·D]
    q, k, v = qkv.view(s, 3, H, D).permute(1, 2, 0, 3)       # 3 x [H, S, D]: strided views, no copy
    o = kiln.attention(q, k, v, causal=True)                 # [H, S, D]
    return kiln.matmul(o.transpose(0, 1).reshape(s, H * D), wo.T, out_dtype=torch.float32)


def block_inputs(s=96):
    x = torch.randn(s, H * D, device=DEV, dtype=torch.float16)
    wqkv = torch.randn(3 * H * D, H * D, device=DEV, dtype=torch.float16) / 16
    wo = torch.randn(H * D, H * D, device=DEV, dtype=torch.float16) / 16
    return x, wqkv, wo


def block_reference(x, wqkv, wo):
    s = x.shape[0]
    qkv = x.double() @ wqkv.double().T
    q, k, v = qkv.view(s, 3, H, D).permute(1, 2, 0, 3)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return o.transpose(0, 1).reshape(s, H * D) @ wo.double().T


def test_block_eager():
    args = block_inputs()
    assert rel(block(*args), block_reference(*args)) <= 5e-3


def test_compile_fullgraph():
    args = block_inputs()
    eager = block(*args)
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)  # raises on any graph break
    out = compiled(*args)
    torch.testing.assert_close(out, eager, rtol=1e-3, atol=1e-3)
    out2 = compiled(*block_inputs(s=50))  # another length: recompiles or runs dynamic, still no break
    assert out2.shape == (50, H * D)


def test_cuda_graph_replay_is_bit_identical():
    x, wqkv, wo = block_inputs()
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (contexts are made on first use) outside the capture
        for _ in range(3):
            block(static_x, wqkv, wo)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = block(static_x, wqkv, wo)
    for _ in range(3):
        fresh = torch.randn_like(x)
        static_x.copy_(fresh)
        graph.replay()
        eager = block(fresh, wqkv, wo)
        torch.cuda.synchronize()
        assert torch.equal(static_out, eager)


def test_work_runs_on_the_current_stream():
    # inputs are produced on a non-default stream after a long sleep; had kiln launched anywhere
    # else, it would read them before they exist
    a = torch.randn(512, 512, device=DEV, dtype=torch.float16)
    b = torch.randn(512, 512, device=DEV, dtype=torch.float16)
    ref = a.double() @ b.double()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)
        a2 = a * 1
        c = kiln.matmul(a2, b, out_dtype=torch.float32)
        assert not s.query()  # still sleeping: the product is queued behind it, on s
    s.synchronize()
    assert rel(c, ref) <= 1e-4


def test_quantized_weights_move_to_the_gpu():
    w = torch.randn(128, 64)
    W4 = kiln.Int4Weight.from_float(w, group=64).to(DEV)
    assert W4.codes.is_cuda and W4.scales.is_cuda and W4.zeros.is_cuda and W4.perm is None
    W8 = kiln.Int8Weight.from_float(w).to(DEV)
    x = torch.randint(-128, 128, (4, 128), device=DEV, dtype=torch.int8)
    y = skip_if_unsupported(kiln.matmul_int8, x, W8)
    ref = (x.double() @ W8.q.double()) * W8.scales.double()
    assert rel(y, ref) <= 1e-6


def test_attention_scale():
    q = torch.randn(1, 2, 64, 64, device=DEV, dtype=torch.float16)
    o = kiln.attention(q, q, q, scale=0.05)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), q.double(), q.double(), scale=0.05)
    assert rel(o, ref) <= 2e-3



# ------------------------------------------------------------------------------------------------
# W4A16 and W8A16: matmul_int4, qkv_project_int4, qkv_project_int8
# ------------------------------------------------------------------------------------------------
def act_order(w, seed=0):
    """w with a random act-order permutation, on the GPU: y = Σ_i x[:, perm[i]] · w[i, :]."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(w.k, generator=g).to(torch.int32)
    return kiln.Int4Weight(w.codes, w.scales, w.zeros, perm, w.k, w.n, w.group).to(DEV)


def int4_reference(x, w, prefill=False):
    """float64 Σ_i x[.., perm[i]] · w[i, :] with w from the weight's own dequantize(); PREFILL
    multiplies that weight rounded to x's dtype (kiln.h), so its reference does too."""
    xd = x.double()
    if w.perm is not None:
        xd = xd[..., w.perm.long()]
    wd = w.dequantize()
    return xd @ (wd.to(x.dtype) if prefill else wd).double()


def w16_tol(out_dtype):
    return {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 6e-3}[out_dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
@pytest.mark.parametrize("m", [1, 7, 16, 33, 300])
@pytest.mark.parametrize("k,n,group,symmetric,perm", [
    (128, 64, 32, True, False), (512, 200, 128, False, False), (256, 40, 256, True, False),
    (384, 96, 64, False, True)])
def test_matmul_int4(dtype, out_dtype, m, k, n, group, symmetric, perm):
    w = kiln.Int4Weight.from_float(torch.randn(n, k).T, group=group, symmetric=symmetric)  # a Linear weight
    w = act_order(w) if perm else w.to(DEV)
    assert w.codes.is_cuda and w._struct().device.device_type == 2  # kDLCUDA: the struct names the GPU buffers
    x = torch.randn(m, k, device=DEV, dtype=dtype)
    y = kiln.matmul_int4(x, w, out_dtype=out_dtype)
    assert y.device == x.device and y.dtype == (out_dtype or dtype) and y.shape == (m, n)
    ref = int4_reference(x, w, prefill=m >= 128)  # AUTO takes PREFILL from M = 128
    tol = w16_tol(out_dtype or dtype)
    assert rel(y, ref) <= tol
    assert (y.double() - ref).abs().max().item() <= 10 * tol * ref.abs().max().item()


def test_matmul_int4_large_and_batched():
    w = kiln.Int4Weight.from_float(torch.randn(4096, 4096, device=DEV, dtype=torch.float16), group=128)
    assert w.codes.is_cuda  # quantized on the host, moved back to x's device
    x = torch.randn(2, 40, 4096, device=DEV, dtype=torch.float16)
    y = kiln.matmul_int4(x, w, out_dtype=torch.float32)
    assert y.shape == (2, 40, 4096)
    assert rel(y, int4_reference(x, w)) <= 1e-4
    xt = torch.randn(4096, 17, device=DEV, dtype=torch.float16).T  # a column-major x
    assert rel(kiln.matmul_int4(xt, w), int4_reference(xt, w)) <= 2e-3


def test_matmul_int4_algos():
    w = kiln.Int4Weight.from_float(torch.randn(256, 64), group=64).to(DEV)
    x = torch.randn(5, 256, device=DEV, dtype=torch.float16)
    auto = kiln.matmul_int4(x, w, out_dtype=torch.float32)
    assert torch.equal(kiln.matmul_int4(x, w, out_dtype=torch.float32, algo="decode"), auto)  # AUTO runs DECODE
    y = kiln.matmul_int4(x, w, out_dtype=torch.float32, algo="prefill")  # the bridge passes a workspace
    assert rel(y, int4_reference(x, w, prefill=True)) <= 1e-4
    x = torch.randn(200, 256, device=DEV, dtype=torch.bfloat16)
    auto = kiln.matmul_int4(x, w, out_dtype=torch.float32)  # M >= 128: AUTO takes PREFILL
    assert torch.equal(kiln.matmul_int4(x, w, out_dtype=torch.float32, algo="prefill"), auto)
    assert rel(auto, int4_reference(x, w, prefill=True)) <= 1e-4
    assert rel(kiln.matmul_int4(x, w, out_dtype=torch.float32, algo="decode"), int4_reference(x, w)) <= 1e-4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 16, 257])
def test_qkv_project_int4(dtype, m):
    k = 512
    wq = kiln.Int4Weight.from_float(torch.randn(512, k).T, group=64).to(DEV)
    wk = act_order(kiln.Int4Weight.from_float(torch.randn(k, 128), group=128, symmetric=False))
    wv = kiln.Int4Weight.from_float(torch.randn(k, 128), group=32).to(DEV)
    x = torch.randn(m, k, device=DEV, dtype=dtype)
    outs = kiln.qkv_project_int4(x, wq, wk, wv)
    for out, w in zip(outs, (wq, wk, wv)):
        assert out.dtype == dtype and out.shape == (m, w.n)
        assert rel(out, int4_reference(x, w, prefill=m >= 256)) <= w16_tol(dtype)  # AUTO: PREFILL from M = 256
        single = kiln.matmul_int4(x, w)  # agrees; not always bit for bit (kiln.h)
        assert rel(out, single) <= w16_tol(dtype)
    # into disjoint column slices of one f32 buffer
    buf = torch.full((m, 768), float("nan"), device=DEV, dtype=torch.float32)
    views = (buf[:, :512], buf[:, 512:640], buf[:, 640:])
    kiln.qkv_project_int4(x, wq, wk, wv, out=views)
    for view, w in zip(views, (wq, wk, wv)):
        assert rel(view, int4_reference(x, w, prefill=m >= 256)) <= 1e-4
    if m >= 256:  # explicit algos: PREFILL as AUTO, DECODE on the exact weights
        q, _, _ = kiln.qkv_project_int4(x, wq, wk, wv, algo="prefill")
        assert torch.equal(q, outs[0])
        q, _, _ = kiln.qkv_project_int4(x, wq, wk, wv, out_dtype=torch.float32, algo="decode")
        assert rel(q, int4_reference(x, wq)) <= 1e-4


def test_qkv_project_int8():
    k = 256
    ws = [kiln.Int8Weight.from_float(torch.randn(k, n), per_column=pc).to(DEV) for n, pc in ((256, True),
                                                                                          (64, False), (64, True))]
    x = torch.randn(33, k, device=DEV, dtype=torch.float16)
    outs = skip_if_unsupported(kiln.qkv_project_int8, x, *ws)
    for out, w in zip(outs, ws):
        ref = (x.double() @ w.q.double()) * w.scales.double()
        assert out.dtype == torch.float16 and rel(out, ref) <= 2e-3
    # from 256 rows AUTO takes PREFILL: w · scale rounded to x's dtype, then kiln.matmul
    x = torch.randn(300, k, device=DEV, dtype=torch.bfloat16)
    for algo in ("auto", "prefill"):
        outs = kiln.qkv_project_int8(x, *ws, out_dtype=torch.float32, algo=algo)
        for out, w in zip(outs, ws):
            wr = (w.q.float() * w.scales.float()).to(torch.bfloat16).double()
            assert rel(out, x.double() @ wr) <= 1e-4


def test_w16_device_mismatch_is_the_library_message():
    w_cpu = kiln.Int4Weight.from_float(torch.randn(64, 16), group=32)
    x = torch.randn(4, 64, device=DEV, dtype=torch.float16)
    with pytest.raises(kiln.KilnError, match=r"kiln_matmul_int4: w->device is kDLCPU:0 but the context is for "
                                             r"kDLCUDA:0") as e:
        kiln.matmul_int4(x, w_cpu)
    assert e.value.status == kiln.Status.INVALID_ARGUMENT
    with pytest.raises(kiln.KilnError, match=r"w->device is kDLCPU:0 but the context is for kDLCUDA:0"):
        kiln.matmul_int4(x.requires_grad_(), w_cpu)  # through the dispatcher: the same check
    w_gpu = w_cpu.cuda()
    with pytest.raises(kiln.KilnError, match=r"wv->device is kDLCUDA:0 but the context is the CPU's"):
        kiln.qkv_project_int4(x.detach().cpu(), w_cpu, w_cpu, w_gpu)
    assert torch.equal(w_gpu.dequantize().cpu(), w_cpu.dequantize())


def test_w16_gradient_request_is_a_clear_error():
    w = kiln.Int4Weight.from_float(torch.randn(64, 16), group=32).to(DEV)
    x = torch.randn(4, 64, device=DEV, dtype=torch.float16, requires_grad=True)
    y = kiln.matmul_int4(x, w)
    assert y.requires_grad
    with pytest.raises(RuntimeError, match="kiln::matmul_int4 is forward-only"):
        y.float().sum().backward()
    q, k, v = kiln.qkv_project_int4(x, w, w, w)
    with pytest.raises(RuntimeError, match="kiln::qkv_project_int4 is forward-only"):
        (q.float().sum() + v.float().sum()).backward()
    with torch.no_grad():
        assert not kiln.matmul_int4(x, w).requires_grad


def test_matmul_int4_runs_on_the_current_stream():
    w = kiln.Int4Weight.from_float(torch.randn(1024, 1024), group=128).to(DEV)
    x = torch.randn(64, 1024, device=DEV, dtype=torch.float16)
    ref = int4_reference(x, w)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)
        x2 = x * 1
        y = kiln.matmul_int4(x2, w, out_dtype=torch.float32)
        assert not s.query()
    s.synchronize()
    assert rel(y, ref) <= 1e-4


# an INT4 attention block: fused QKV (GQA), attention, INT4 output projection
HQ, HKV, DH = 8, 2, 64


def int4_block(x, wq, wk, wv, wo):
    s = x.shape[0]
    q, k, v = kiln.qkv_project_int4(x, wq, wk, wv)              # [S, HQ·D], [S, HKV·D], [S, HKV·D]
    q = q.view(s, HQ, DH).transpose(0, 1)                        # [H, S, D] views
    k, v = (t.view(s, HKV, DH).transpose(0, 1) for t in (k, v))
    o = kiln.attention(q, k, v, causal=True)                     # [HQ, S, D]
    return kiln.matmul_int4(o.transpose(0, 1).reshape(s, HQ * DH), wo, out_dtype=torch.float32)


def int4_block_inputs(s=96):
    hidden = HQ * DH
    ws = [kiln.Int4Weight.from_float(torch.randn(hidden, n) / 16, group=64).to(DEV)
          for n in (HQ * DH, HKV * DH, HKV * DH, hidden)]
    return (torch.randn(s, hidden, device=DEV, dtype=torch.float16), *ws)


def int4_block_reference(x, wq, wk, wv, wo):
    s = x.shape[0]
    q, k, v = (int4_reference(x, w) for w in (wq, wk, wv))
    q = q.view(s, HQ, DH).transpose(0, 1)
    k, v = (t.view(s, HKV, DH).transpose(0, 1).repeat_interleave(HQ // HKV, dim=0) for t in (k, v))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return int4_reference(o.transpose(0, 1).reshape(s, HQ * DH), wo)


def test_int4_block_eager():
    args = int4_block_inputs()
    assert rel(int4_block(*args), int4_block_reference(*args)) <= 5e-3


def test_int4_block_cuda_graph_replay_is_bit_identical():
    x, *ws = int4_block_inputs()
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            int4_block(static_x, *ws)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = int4_block(static_x, *ws)
    for _ in range(3):
        fresh = torch.randn_like(x)
        static_x.copy_(fresh)
        graph.replay()
        eager = int4_block(fresh, *ws)
        torch.cuda.synchronize()
        assert torch.equal(static_out, eager)


def test_int4_block_compile_fullgraph():
    args = int4_block_inputs()
    eager = int4_block(*args)
    torch._dynamo.reset()
    compiled = torch.compile(int4_block, fullgraph=True)  # Int4Weights as arguments; raises on a graph break
    torch.testing.assert_close(compiled(*args), eager, rtol=1e-3, atol=1e-3)


def _int4_buffers_equal(gpu, cpu):
    for name in ("codes", "scales", "zeros", "perm"):
        a, b = getattr(gpu, name), getattr(cpu, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.is_cuda and torch.equal(a.cpu(), b), name


def test_int8_weights_quantized_on_the_gpu_match_the_cpu():
    w = torch.randn(300, 72)
    for per_column in (True, False):
        cpu, gpu = kiln.Int8Weight.from_float(w, per_column), kiln.Int8Weight.from_float(w.to(DEV), per_column)
        assert gpu.q.is_cuda and torch.equal(gpu.q.cpu(), cpu.q) and torch.equal(gpu.scales.cpu(), cpu.scales)
        assert gpu.scale == cpu.scale


def test_int4_weights_built_on_the_gpu_match_the_cpu():
    """from_float / from_gptq / from_awq / from_reference given GPU tensors run libkiln's GPU
    kernels (no host copy) and give the CPU's buffers bit for bit; dequantize runs there too."""
    k, n, g = 512, 64, 64
    w = torch.randn(k, n)
    for sym in (True, False):
        cpu = kiln.Int4Weight.from_float(w, group=g, symmetric=sym)
        gpu = kiln.Int4Weight.from_float(w.to(DEV), group=g, symmetric=sym)
        _int4_buffers_equal(gpu, cpu)
        assert torch.equal(gpu.dequantize("float16").cpu(), cpu.dequantize("float16"))
    words = lambda *shape: torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32)  # noqa: E731
    qweight, qzeros, scales = words(k // 8, n), words(k // g, n // 8), torch.randn(k // g, n).half()
    act = (torch.arange(k) // g)[torch.randperm(k)].int()
    for version in (1, 2):
        cpu = kiln.Int4Weight.from_gptq(qweight, qzeros, scales, act, version=version)
        gpu = kiln.Int4Weight.from_gptq(qweight.to(DEV), qzeros.to(DEV), scales.to(DEV), act.to(DEV), version=version)
        _int4_buffers_equal(gpu, cpu)
    trivial = (torch.arange(k) // g).int().to(DEV)  # the identity perm the GPU writes is dropped again
    assert kiln.Int4Weight.from_gptq(qweight.to(DEV), qzeros.to(DEV), scales.to(DEV), trivial).perm is None
    awq = words(k, n // 8)
    _int4_buffers_equal(kiln.Int4Weight.from_awq(awq.to(DEV), qzeros.to(DEV), scales.to(DEV)),
                        kiln.Int4Weight.from_awq(awq, qzeros, scales))
    ref, ref_scales = words(n, k // 8), torch.randn(k // 128, n).half()
    _int4_buffers_equal(kiln.Int4Weight.from_reference(ref.to(DEV), ref_scales.to(DEV)),
                        kiln.Int4Weight.from_reference(ref, ref_scales))
