"""kiln.matmul_int4, kiln.qkv_project_int4 and kiln.qkv_project_int8 on NumPy (CPU), against a
float64 reference built from the weights' own dequantize() (SPEC §5), and their error paths."""

import pytest

np = pytest.importorskip("numpy")
import kiln  # noqa: E402
from kiln import _lib  # noqa: E402
from conftest import rel_err  # noqa: E402

TOL = {"float32": 1e-4, "float16": 2e-3}  # SPEC §5: W·A16 against the dequantized float64 product


def x16(rng, *shape):
    return rng.standard_normal(shape).astype(np.float16)


def int4_weight(rng, k, n, group, symmetric=True, act_order=False):
    W = kiln.Int4Weight.from_float(rng.standard_normal((k, n)).astype(np.float32), group=group, symmetric=symmetric)
    if act_order:
        W.perm = rng.permutation(k).astype(np.int32)
    return W


def ref_int4(x, W):
    """Σ_i x[.., perm[i]] · w[i, :] in float64, w from W.dequantize() (stored row order)."""
    x = np.asarray(x, np.float64)
    if W.perm is not None:
        x = x[..., W.perm]
    return x @ W.dequantize().astype(np.float64)


def check(y, ref, dtype):
    """SPEC §5: relative Frobenius error, plus a max-abs check scaled to the data. The CPU path sums
    in double and rounds once, so it is also held to about one rounding of the output dtype."""
    assert y.dtype == np.dtype(dtype) and y.shape == ref.shape
    assert rel_err(y, ref) <= TOL[dtype]
    assert np.abs(y.astype(np.float64) - ref).max() <= TOL[dtype] * np.abs(ref).max()
    unit = 2.0 ** -11 if dtype == "float16" else 2.0 ** -23
    assert (np.abs(y.astype(np.float64) - ref) <= unit * np.abs(ref) + 1e-9 * np.abs(ref).max()).all()


# ------------------------------------------------------------------------------------------------
# matmul_int4
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
@pytest.mark.parametrize("m,k,n,group,symmetric", [
    (1, 64, 8, 32, True), (7, 128, 24, 64, False), (33, 256, 40, 128, True), (16, 96, 17, 96, False),
    (5, 512, 8, 512, True)])
def test_matmul_int4(rng, out_dtype, m, k, n, group, symmetric):
    W = int4_weight(rng, k, n, group, symmetric)
    x = x16(rng, m, k)
    y = kiln.matmul_int4(x, W, out_dtype=out_dtype)
    check(y, ref_int4(x, W), out_dtype)


def test_matmul_int4_default_dtype_views_and_batch(rng):
    W = int4_weight(rng, 128, 24, 32)
    x = x16(rng, 9, 128)
    y = kiln.matmul_int4(x, W)
    assert y.dtype == np.float16  # x's dtype
    check(y, ref_int4(x, W), "float16")
    xt = np.ascontiguousarray(x.T).T  # column-major x: read through its strides
    assert np.array_equal(kiln.matmul_int4(xt, W), y)
    xb = x16(rng, 2, 3, 128)  # leading dimensions flatten into M
    yb = kiln.matmul_int4(xb, W, out_dtype="float32")
    assert yb.shape == (2, 3, 24)
    check(yb, ref_int4(xb, W), "float32")
    out = np.full((2, 3, 24), np.nan, np.float32)
    assert kiln.matmul_int4(xb, W, out=out) is out and np.array_equal(out, yb)


def test_matmul_int4_act_order(rng):
    k, n, group = 256, 16, 64
    W = int4_weight(rng, k, n, group, symmetric=False, act_order=True)
    x = x16(rng, 6, k)
    y = kiln.matmul_int4(x, W, out_dtype="float32")
    check(y, ref_int4(x, W), "float32")
    plain = kiln.matmul_int4(x[:, W.perm], kiln.Int4Weight(W.codes, W.scales, W.zeros), out_dtype="float32")
    assert np.array_equal(y, plain)  # gathering through perm == permuting x first


def test_matmul_int4_gptq_act_order(rng):
    from test_int4 import pack_k, pack_n
    k, n, group = 128, 16, 32
    q = rng.integers(0, 16, size=(k, n))
    zero = rng.integers(1, 16, size=(k // group, n))
    s = rng.uniform(0.01, 0.1, size=(k // group, n)).astype(np.float16)
    g_idx = rng.permutation(np.repeat(np.arange(k // group), group)).astype(np.int32)
    W = kiln.Int4Weight.from_gptq(pack_k(q).view(np.int32), pack_n(zero - 1).view(np.int32), s, g_idx=g_idx)
    assert W.perm is not None
    x = x16(rng, 3, k)
    y = kiln.matmul_int4(x, W, out_dtype="float32")
    # the GPTQ formula on the original row order: w[k, n] = s[g_idx[k], n] · (q[k, n] − zero[g_idx[k], n])
    w = s.astype(np.float64)[g_idx] * (q - zero[g_idx])
    check(y, x.astype(np.float64) @ w, "float32")


def test_int4_weight_struct_follows_its_buffers(rng):
    W = int4_weight(rng, 64, 8, 32)
    x = x16(rng, 2, 64)
    y0 = kiln.matmul_int4(x, W, out_dtype="float32")
    W.perm = np.arange(64, dtype=np.int32)[::-1].copy()  # assigning a buffer rebuilds the struct
    y1 = kiln.matmul_int4(x, W, out_dtype="float32")
    check(y1, ref_int4(x, W), "float32")
    assert not np.array_equal(y0, y1)
    assert W.device == "cpu" and W.shape == (64, 8)
    import copy
    import pickle
    for clone in (copy.deepcopy(W), pickle.loads(pickle.dumps(W))):  # new buffers, so a new struct
        assert clone.codes.ctypes.data != W.codes.ctypes.data
        assert np.array_equal(kiln.matmul_int4(x, clone, out_dtype="float32"), y1)


# ------------------------------------------------------------------------------------------------
# qkv_project_int4 / int8
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
@pytest.mark.parametrize("m", [1, 7, 40])
def test_qkv_project_int4(rng, out_dtype, m):
    k = 128
    wq = int4_weight(rng, k, 64, 32)
    wk = int4_weight(rng, k, 16, 64, symmetric=False, act_order=True)
    wv = int4_weight(rng, k, 24, k)
    x = x16(rng, m, k)
    q, kk, v = kiln.qkv_project_int4(x, wq, wk, wv, out_dtype=out_dtype)
    for out, w in zip((q, kk, v), (wq, wk, wv)):
        check(out, ref_int4(x, w), out_dtype)
        assert np.array_equal(out, kiln.matmul_int4(x, w, out_dtype=out_dtype))  # the same bits (kiln.h)


def test_qkv_project_int4_into_one_buffer_and_batch(rng):
    k, nq, nkv = 64, 32, 8
    ws = [int4_weight(rng, k, n, 32) for n in (nq, nkv, nkv)]
    x = x16(rng, 2, 5, k)
    q, kk, v = kiln.qkv_project_int4(x, *ws)
    assert q.shape == (2, 5, nq) and kk.shape == (2, 5, nkv) and q.dtype == np.float16
    buf = np.full((10, nq + 2 * nkv), np.nan, np.float16)  # disjoint column slices of one buffer
    outs = (buf[:, :nq], buf[:, nq:nq + nkv], buf[:, nq + nkv:])
    got = kiln.qkv_project_int4(x.reshape(10, k), *ws, out=outs)
    assert all(g is o for g, o in zip(got, outs))
    assert np.array_equal(buf, np.concatenate([t.reshape(10, -1) for t in (q, kk, v)], axis=1))


@pytest.mark.parametrize("per_column", [True, False])
@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
def test_qkv_project_int8(rng, per_column, out_dtype):
    k = 96
    ws = [kiln.Int8Weight.from_float(rng.standard_normal((k, n)).astype(np.float32), per_column=per_column)
          for n in (48, 16, 16)]
    x = x16(rng, 11, k)
    outs = kiln.qkv_project_int8(x, *ws, out_dtype=out_dtype)
    for out, w in zip(outs, ws):
        ref = (x.astype(np.float64) @ w.q.astype(np.float64)) * w.scales.astype(np.float64)
        check(out, ref, out_dtype)
    assert kiln.qkv_project_int8(x, *ws)[0].dtype == np.float16


def test_qkv_project_int8_linear_weight_view(rng):
    k = 64
    w_nk = rng.standard_normal((32, k)).astype(np.float32)  # a Linear weight [N, K]
    W = kiln.Int8Weight.from_float(w_nk.T)
    W_t = kiln.Int8Weight(np.ascontiguousarray(W.q.T).T, W.scales, True)  # int8 q as a column-major view
    x = x16(rng, 4, k)
    assert np.array_equal(kiln.qkv_project_int8(x, W, W, W)[0], kiln.qkv_project_int8(x, W_t, W_t, W_t)[0])


# ------------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------------
def test_w16_argument_errors(rng):
    W = int4_weight(rng, 64, 8, 32)
    x = x16(rng, 3, 64)
    with pytest.raises(TypeError, match="expected a kiln.Int4Weight"):
        kiln.matmul_int4(x, W.dequantize())
    with pytest.raises(TypeError, match="wk is a .*; expected a kiln.Int4Weight"):
        kiln.qkv_project_int4(x, W, None, W)
    with pytest.raises(TypeError, match="expected a kiln.Int8Weight"):
        kiln.qkv_project_int8(x, W, W, W)
    with pytest.raises(kiln.KilnError, match="x has dtype int8; expected float16 or bfloat16") as e:
        kiln.matmul_int4(x.astype(np.int8), W)
    assert e.value.status == kiln.Status.INVALID_ARGUMENT and "kiln_matmul_int4" in e.value.message
    with pytest.raises(kiln.KilnError, match=r"w->k = 64 but x has K = 32"):
        kiln.matmul_int4(x16(rng, 3, 32), W)
    with pytest.raises(kiln.KilnError, match=r"wv->k = 128 but x has K = 64"):
        kiln.qkv_project_int4(x, W, W, int4_weight(rng, 128, 8, 32))
    with pytest.raises(kiln.KilnError, match=r"x has shape \[64\]; expected \[M, K\]"):
        kiln.matmul_int4(x[0], W)
    with pytest.raises(kiln.KilnError, match="algo is 'fast'; expected one of 'auto', 'decode', 'prefill'"):
        kiln.matmul_int4(x, W, algo="fast")
    with pytest.raises(kiln.KilnError, match="needs a CUDA device") as e:
        kiln.matmul_int4(x, W, algo="decode")
    assert e.value.status == kiln.Status.UNSUPPORTED
    with pytest.raises(kiln.KilnError, match="KILN_QKV_PREFILL needs a CUDA device"):
        kiln.qkv_project_int4(x, W, W, W, algo="prefill")
    buf = np.empty((3, 8), np.float16)
    with pytest.raises(kiln.KilnError, match="k overlaps q"):
        kiln.qkv_project_int4(x, W, W, W, out=(buf, buf, np.empty((3, 8), np.float16)))
    with pytest.raises(kiln.KilnError, match="expected a tuple"):
        kiln.qkv_project_int4(x, W, W, W, out=buf)
    out = np.empty((3, 3, 8), np.float32)[:, :2]  # rank 3, rows not evenly spaced: no [6, 8] view
    with pytest.raises(kiln.KilnError, match="cannot be viewed"):
        kiln.matmul_int4(x16(rng, 3, 2, 64), W, out=out)


def test_w16_wrong_device_is_the_library_message(rng):
    """A weight whose kiln_qweight says GPU memory, used with CPU tensors: the C check's message."""
    W = int4_weight(rng, 64, 8, 32)
    W._struct().device = _lib.DLDevice(_lib.kDLCUDA, 0)  # as a weight moved to cuda:0 would say
    x = x16(rng, 2, 64)
    with pytest.raises(kiln.KilnError) as e:
        kiln.matmul_int4(x, W)
    assert e.value.status == kiln.Status.INVALID_ARGUMENT
    assert e.value.message.startswith("kiln_matmul_int4: w->device is kDLCUDA:0 but the context is the CPU's")
    ok = int4_weight(rng, 64, 8, 32)
    with pytest.raises(kiln.KilnError, match="kiln_qkv_project_int4: wk->device is kDLCUDA:0 but the context is"):
        kiln.qkv_project_int4(x, ok, W, ok)


def test_int4_weight_buffers_are_checked(rng):
    W = int4_weight(rng, 64, 16, 32)
    x = x16(rng, 2, 64)
    bad = [
        (dict(scales=W.scales.astype(np.float32)), r"scales has DLPack dtype \(code 2, bits 32\); expected float16"),
        (dict(codes=np.asfortranarray(W.codes)), "codes is not compact row-major"),
        (dict(zeros=W.zeros[:1]), r"zeros has shape \[1, 16\]; expected \[2, 16\]"),
        (dict(perm=np.arange(64, dtype=np.int64)), "perm has DLPack dtype"),
        (dict(scales=np.ones((3, 16), np.float16)), r"scales has shape \[3, 16\]; expected \[K/group, N\]"),
    ]
    for change, message in bad:
        parts = dict(codes=W.codes, scales=W.scales, zeros=W.zeros, perm=W.perm)
        parts.update(change)
        with pytest.raises(kiln.KilnError, match=message):
            kiln.matmul_int4(x, kiln.Int4Weight(**parts))
    with pytest.raises(kiln.KilnError, match="moving them needs PyTorch tensors"):
        W.to("cuda")


def test_qkv_project_int8_errors(rng):
    W = kiln.Int8Weight.from_float(rng.standard_normal((32, 8)).astype(np.float32))
    x = x16(rng, 2, 32)
    bad = kiln.Int8Weight(W.q, np.ones(3, np.float32), True)
    with pytest.raises(kiln.KilnError, match=r"k_scale has shape \[3\]; expected \[1\] .* or \[8\]"):
        kiln.qkv_project_int8(x, W, bad, W)
    with pytest.raises(kiln.KilnError, match="wv has dtype float32; expected int8"):
        kiln.qkv_project_int8(x, W, W, kiln.Int8Weight(W.q.astype(np.float32), W.scales, True))


def test_prototypes_declared():
    for name in ("kiln_matmul_int4", "kiln_qkv_project_int4", "kiln_qkv_project_int8"):
        assert kiln._lib.has(name)
        assert getattr(kiln._lib.fn, name[len("kiln_"):]).argtypes is not None
    d = kiln._lib.fn.matmul_int4_opts_default()
    assert d.algo == kiln.Int4Algo.AUTO and kiln._lib.fn.qkv_opts_default().algo == kiln.QkvAlgo.AUTO
    for o in (d, kiln._lib.fn.qkv_opts_default()):  # no workspace by default (layouts: test_abi.py)
        assert o.workspace is None and o.workspace_bytes == 0
