"""kiln.matmul_int8, kiln.quantize_int8 and kiln.Int8Weight on NumPy (CPU)."""
import pytest

np = pytest.importorskip("numpy")
import kiln  # noqa: E402


def i8(rng, *shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def reference(a, b, scale=1.0, row=None, col=None):
    """(float)sum, then · scale, · row[i], · col[j], each in f32, in that order (kiln.h)."""
    v = np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.float32)
    v = v * np.float32(scale)
    if row is not None:
        v = v * row.astype(np.float32)[:, None]
    if col is not None:
        v = v * col.astype(np.float32)[None, :]
    return v


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 17, 33), (64, 9, 300)])
def test_matmul_int8_exact(rng, m, n, k):
    a, b = i8(rng, m, k), i8(rng, k, n)
    row = rng.uniform(0.5, 2, m).astype(np.float32)
    col = rng.uniform(0.5, 2, n).astype(np.float32)
    c = kiln.matmul_int8(a, b)
    assert c.dtype == np.float32 and np.array_equal(c, reference(a, b))
    c = kiln.matmul_int8(a, b, scale=0.01, row_scale=row, col_scale=col)
    np.testing.assert_array_max_ulp(c, reference(a, b, 0.01, row, col), maxulp=1)


def test_matmul_int8_views_uint8_and_f16_out(rng):
    a, w = i8(rng, 5, 40), i8(rng, 12, 40)  # w: a Linear weight [N, K], passed as w.T
    ref = reference(a, w.T)
    assert np.array_equal(kiln.matmul_int8(a, w.T), ref)
    assert np.array_equal(kiln.matmul_int8(a.view(np.uint8), w.T.view(np.uint8)), ref)
    c = kiln.matmul_int8(a, w.T, scale=1 / 64, out_dtype="float16")  # rounded once, from the f32 value
    assert c.dtype == np.float16 and np.array_equal(c, reference(a, w.T, 1 / 64).astype(np.float16))


def test_matmul_int8_errors(rng):
    a, b = i8(rng, 4, 8), i8(rng, 9, 3)
    out = np.full((4, 3), 5.0, np.float32)
    with pytest.raises(kiln.KilnError) as e:
        kiln.matmul_int8(a, b, out=out)
    assert e.value.status == kiln.Status.INVALID_ARGUMENT and "kiln_matmul_int8" in e.value.message
    assert (out == 5.0).all()
    with pytest.raises(kiln.KilnError, match="col_scale"):
        kiln.matmul_int8(a, i8(rng, 8, 3), col_scale=np.ones(4, np.float32))


def quantize_reference(w, per_column):
    amax = np.abs(w).max(axis=0) if per_column else np.abs(w).max(keepdims=True)
    scale = (amax / np.float32(127)).astype(np.float32)
    scale = np.where(scale == 0, np.float32(1), scale)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale


@pytest.mark.parametrize("per_column", [True, False])
def test_quantize_int8(rng, per_column):
    w = rng.standard_normal((33, 17)).astype(np.float32)
    w[:, 3] = 0  # an all-zero column: scale 1
    q, scales = kiln.quantize_int8(w, per_column=per_column)
    ref_q, ref_s = quantize_reference(w, per_column)
    assert q.dtype == np.int8 and scales.shape == ((17,) if per_column else (1,))
    assert np.array_equal(q, ref_q) and np.array_equal(scales, ref_s.reshape(-1))


def test_quantize_int8_rejects_nan(rng):
    w = rng.standard_normal((8, 4)).astype(np.float32)
    w[2, 1] = np.nan
    with pytest.raises(kiln.KilnError, match="kiln_quantize_int8"):
        kiln.quantize_int8(w)


@pytest.mark.parametrize("per_column", [True, False])
def test_int8_weight(rng, per_column):
    w = rng.standard_normal((64, 24)).astype(np.float32)
    W = kiln.Int8Weight.from_float(w, per_column=per_column)
    assert W.shape == (64, 24) and "Int8Weight" in repr(W)
    deq = W.dequantize()
    step = (W.scales if per_column else W.scale) / 2
    assert (np.abs(deq - w) <= step * (1 + 1e-6)).all()
    a = i8(rng, 5, 64)
    c = kiln.matmul_int8(a, W)
    if per_column:
        want = reference(a, W.q, col=W.scales)
    else:
        want = reference(a, W.q, scale=W.scale)
    np.testing.assert_array_max_ulp(c, want, maxulp=1)
