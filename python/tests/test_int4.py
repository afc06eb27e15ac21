"""kiln.Int4Weight on NumPy (CPU): the quantizer, every importer, dequantize."""
import pytest

np = pytest.importorskip("numpy")
import kiln  # noqa: E402

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def pack_k(codes):
    """[K, N] nibbles -> [K/8, N] words, nibble j of word r = row 8r + j (GPTQ qweight)."""
    k, n = codes.shape
    c = codes.astype(np.uint32).reshape(k // 8, 8, n)
    return sum(c[:, j, :] << np.uint32(4 * j) for j in range(8)).astype(np.uint32)


def pack_n(vals, order=range(8)):
    """[R, N] nibbles -> [R, N/8] words, nibble i of word c = column 8c + order[i]."""
    r, n = vals.shape
    v = vals.astype(np.uint32).reshape(r, n // 8, 8)
    return sum(v[:, :, o] << np.uint32(4 * i) for i, o in enumerate(order)).astype(np.uint32)


def f16_scales(rng, g, n):
    return rng.uniform(0.01, 0.1, size=(g, n)).astype(np.float16)


def dequant_ref(q, z, s, g_of_row):
    """f32(scale) · (q − z) for each stored row, whose group is g_of_row."""
    return s.astype(np.float32)[g_of_row] * (q.astype(np.float32) - z.astype(np.float32)[g_of_row])


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("k,n,group", [(128, 16, 128), (256, 8, 64), (64, 24, 32), (96, 8, 96)])
def test_gptq(rng, version, k, n, group):
    q = rng.integers(0, 16, size=(k, n))
    zero = rng.integers(1 if version == 1 else 0, 16, size=(k // group, n))
    s = f16_scales(rng, k // group, n)
    qweight = pack_k(q).view(np.int32)
    qzeros = pack_n(zero - 1 if version == 1 else zero).view(np.int32)
    W = kiln.Int4Weight.from_gptq(qweight, qzeros, s, version=version)
    assert (W.k, W.n, W.group) == (k, n, group) and W.perm is None
    assert W.codes.shape == (k // 8, n) and W.scales.dtype == np.float16 and W.zeros.dtype == np.uint8
    want = dequant_ref(q, zero, s, np.arange(k) // group)
    assert np.array_equal(W.dequantize(), want)  # exact: the source format's formula bit for bit


def test_gptq_act_order(rng):
    k, n, group = 256, 16, 64
    q = rng.integers(0, 16, size=(k, n))
    zero = rng.integers(1, 16, size=(k // group, n))
    s = f16_scales(rng, k // group, n)
    g_idx = rng.permutation(np.repeat(np.arange(k // group), group)).astype(np.int32)
    W = kiln.Int4Weight.from_gptq(pack_k(q).view(np.int32), pack_n(zero - 1).view(np.int32), s, g_idx=g_idx)
    perm = np.argsort(g_idx, kind="stable")
    assert W.perm is not None and np.array_equal(W.perm, perm) and "act-order" in repr(W)
    assert np.array_equal(W.dequantize(), dequant_ref(q[perm], zero, s, g_idx[perm]))


def test_gptq_trivial_g_idx_has_no_perm(rng):
    k, n, group = 128, 8, 32
    q, zero, s = rng.integers(0, 16, (k, n)), rng.integers(1, 16, (k // group, n)), f16_scales(rng, k // group, n)
    g_idx = (np.arange(k) // group).astype(np.int32)
    W = kiln.Int4Weight.from_gptq(pack_k(q).view(np.int32), pack_n(zero - 1).view(np.int32), s, g_idx=g_idx)
    assert W.perm is None
    assert np.array_equal(W.dequantize(), dequant_ref(q, zero, s, np.arange(k) // group))


def test_awq(rng):
    k, n, group = 128, 32, 64
    q = rng.integers(0, 16, size=(k, n))
    zero = rng.integers(0, 16, size=(k // group, n))
    s = f16_scales(rng, k // group, n)
    W = kiln.Int4Weight.from_awq(pack_n(q, AWQ_ORDER).view(np.int32), pack_n(zero, AWQ_ORDER).view(np.int32), s)
    assert (W.k, W.n, W.group) == (k, n, group)
    assert np.array_equal(W.dequantize(), dequant_ref(q, zero, s, np.arange(k) // group))


def test_reference_format(rng):
    k, n = 256, 8
    signed = rng.integers(-8, 8, size=(k, n))
    s = f16_scales(rng, k // 128, n)
    words = pack_k(signed & 0xF)           # [K/8, N], word (r, n)
    qweight = np.ascontiguousarray(words.T)  # the reference's bytes: N-major, i.e. row-major [N, K/8]
    W = kiln.Int4Weight.from_reference(qweight, s)
    want = s.astype(np.float32)[np.arange(k) // 128] * signed.astype(np.float32)
    assert np.array_equal(W.dequantize(), want)
    W2 = kiln.Int4Weight.from_reference(qweight.T, s)  # the same buffer labelled [K/8, N]
    assert np.array_equal(W2.dequantize(), want)


def quantize_reference(w, group, symmetric):
    k, n = w.shape
    wg = w.reshape(k // group, group, n)
    if symmetric:
        scale = (np.abs(wg).max(axis=1) / np.float32(7)).astype(np.float32)
        zero = np.full(scale.shape, 8)
    else:
        lo = np.minimum(wg.min(axis=1), 0)
        hi = np.maximum(wg.max(axis=1), 0)
        scale = ((hi - lo) / np.float32(15)).astype(np.float32)
    s16 = np.where(scale == 0, np.float16(1), scale.astype(np.float16))
    sf = s16.astype(np.float32)
    if not symmetric:
        zero = np.clip(np.rint(-lo / sf), 0, 15)
    q = np.clip(np.rint(wg / sf[:, None, :]) + zero[:, None, :], 0, 15)
    deq = sf[:, None, :] * (q - zero[:, None, :]).astype(np.float32)
    return deq.reshape(k, n).astype(np.float32), s16, zero


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("group", [32, 64, 128, 256])
def test_from_float(rng, symmetric, group):
    w = rng.standard_normal((256, 40)).astype(np.float32)
    W = kiln.Int4Weight.from_float(w, group=group, symmetric=symmetric)
    want, s16, zero = quantize_reference(w, group, symmetric)
    assert np.array_equal(W.scales, s16) and np.array_equal(W.zeros, zero.astype(np.uint8))
    assert np.array_equal(W.dequantize(), want)
    if not symmetric:  # within half a step (symmetric codes −8..7 clip +max by up to one step)
        assert (np.abs(W.dequantize() - w) <= s16.astype(np.float32).repeat(group, axis=0) * 0.5 + 1e-6).all()
    d16 = W.dequantize("float16")
    assert d16.dtype == np.float16 and np.array_equal(d16, want.astype(np.float16))


def test_from_float_transposed_view_and_f16(rng):
    w_nk = rng.standard_normal((24, 128)).astype(np.float16)  # a Linear weight [N, K]
    W = kiln.Int4Weight.from_float(w_nk.T, group=64)
    want, _, _ = quantize_reference(np.ascontiguousarray(w_nk.T).astype(np.float32), 64, True)
    assert W.shape == (128, 24) and np.array_equal(W.dequantize(), want)


def test_int4_errors(rng):
    w = rng.standard_normal((96, 8)).astype(np.float32)
    with pytest.raises(kiln.KilnError) as e:
        kiln.Int4Weight.from_float(w, group=48)
    assert e.value.status == kiln.Status.INVALID_ARGUMENT
    assert "group = 48; expected 32, 64, 128 or k" in e.value.message
    with pytest.raises(kiln.KilnError, match="k = 12 is not a multiple of 8"):
        kiln.Int4Weight.from_float(rng.standard_normal((12, 8)).astype(np.float32), group=12)
    q = pack_k(rng.integers(0, 16, (128, 12))).view(np.int32)
    with pytest.raises(kiln.KilnError, match="n = 12 is not a multiple of 8"):
        kiln.Int4Weight.from_gptq(q, np.zeros((1, 2), np.int32), f16_scales(rng, 1, 12))
    with pytest.raises(kiln.KilnError, match="version is 3"):
        kiln.Int4Weight.from_gptq(q, np.zeros((1, 2), np.int32), f16_scales(rng, 1, 12), version=3)
    bad = rng.standard_normal((64, 8)).astype(np.float32)
    bad[5, 5] = np.inf
    with pytest.raises(kiln.KilnError, match="weights must be finite"):
        kiln.Int4Weight.from_float(bad, group=32)
