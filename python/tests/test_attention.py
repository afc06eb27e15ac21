"""kiln.attention / attention_backward on NumPy (CPU) against a float64 reference."""
import math

import pytest

np = pytest.importorskip("numpy")
import kiln  # noqa: E402
from conftest import rel_err  # noqa: E402


def reference(q, k, v, scale=None, causal=False):
    """(O, LSE, P) in float64 for [B, H, S, D] inputs (GQA: query head h reads kv head h // group)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    group = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * q @ np.swapaxes(k, -1, -2)
    sq, sk = q.shape[-2], k.shape[-2]
    if causal:
        allowed = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
        s = np.where(allowed, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m_safe)
    z = e.sum(axis=-1, keepdims=True)
    p = np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)
    lse = np.where(z[..., 0] > 0, np.log(np.where(z[..., 0] > 0, z[..., 0], 1.0)) + m_safe[..., 0], -np.inf)
    return p @ v, lse, p, scale


def reference_backward(q, k, v, do, scale=None, causal=False):
    _, _, p, scale = reference(q, k, v, scale, causal)
    hq, hkv = q.shape[-3], k.shape[-3]
    group = hq // hkv
    q64, do64 = q.astype(np.float64), do.astype(np.float64)
    k64 = np.repeat(k.astype(np.float64), group, axis=-3)
    v64 = np.repeat(v.astype(np.float64), group, axis=-3)
    dv = np.swapaxes(p, -1, -2) @ do64
    dp = do64 @ np.swapaxes(v64, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    dq = scale * ds @ k64
    dk = scale * np.swapaxes(ds, -1, -2) @ q64

    def fold(x):  # sum the query heads of each kv group
        return x.reshape(x.shape[:-3] + (hkv, group) + x.shape[-2:]).sum(axis=-3)
    return dq, fold(dk), fold(dv)


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-4), (np.float16, 2e-3)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,hq,hkv,sq,sk,d", [(1, 1, 1, 1, 1, 8), (2, 4, 2, 7, 17, 16), (1, 4, 1, 33, 33, 64),
                                              (1, 2, 2, 17, 7, 32)])
def test_attention(rng, dtype, tol, causal, b, hq, hkv, sq, sk, d):
    q, k, v = rand(rng, (b, hq, sq, d), dtype), rand(rng, (b, hkv, sk, d), dtype), rand(rng, (b, hkv, sk, d), dtype)
    o, lse = kiln.attention(q, k, v, causal=causal, return_lse=True)
    ref_o, ref_lse, _, _ = reference(q, k, v, causal=causal)
    assert o.shape == ref_o.shape and o.dtype == dtype and lse.dtype == np.float32
    assert rel_err(o, ref_o) <= tol
    finite = np.isfinite(ref_lse)
    assert (np.isneginf(lse) == ~finite).all()  # rows that attend no key (Sq > Sk, causal): -inf, O = 0
    assert np.allclose(lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-5)
    assert np.isfinite(o).all()


def test_attention_rank2_and_rank3_scale_and_f32_output(rng):
    q, k, v = rand(rng, (9, 16), np.float16), rand(rng, (12, 16), np.float16), rand(rng, (12, 24), np.float16)
    o = kiln.attention(q, k, v, scale=0.3, out_dtype="float32")
    assert o.shape == (9, 24) and o.dtype == np.float32
    assert rel_err(o, reference(q[None], k[None], v[None], scale=0.3)[0][0]) <= 2e-3
    q3, k3 = rand(rng, (3, 5, 8), np.float32), rand(rng, (3, 6, 8), np.float32)
    o, lse = kiln.attention(q3, k3, k3, return_lse=True)
    assert o.shape == (3, 5, 8) and lse.shape == (3, 5)


def test_attention_strided_heads(rng):
    # a [B, S, H, D] buffer passed as its [B, H, S, D] view, without a copy
    buf = rand(rng, (2, 11, 4, 16), np.float32)
    q = buf.transpose(0, 2, 1, 3)
    o = kiln.attention(q, q, q)
    assert rel_err(o, reference(q, q, q)[0]) <= 2e-4


def test_attention_errors(rng):
    q, k = rand(rng, (1, 4, 8, 16), np.float32), rand(rng, (1, 3, 8, 16), np.float32)
    with pytest.raises(kiln.KilnError) as e:
        kiln.attention(q, k, k)
    assert e.value.status == kiln.Status.INVALID_ARGUMENT and "kiln_attention" in e.value.message
    with pytest.raises(kiln.KilnError, match="algo FLASH needs a CUDA device"):
        kiln.attention(q, q, q, algo="flash")
    with pytest.raises(kiln.KilnError, match="algo FLASH_DECODE needs a CUDA device"):
        kiln.attention(q, q, q, algo="flash_decode")
    with pytest.raises(kiln.KilnError, match="expected one of .*'flash_decode'"):
        kiln.attention(q, q, q, algo="decode")
    with pytest.raises(kiln.KilnError, match="opts->scale is -1"):
        kiln.attention(q, q, q, scale=-1.0)
    with pytest.raises(kiln.KilnError, match="kiln.attention: q has shape \\[16\\]"):
        kiln.attention(q[0, 0, 0], q, q)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float16, 1e-2)])
def test_attention_backward(rng, causal, dtype, tol):
    q, k, v = rand(rng, (2, 4, 9, 16), dtype), rand(rng, (2, 2, 13, 16), dtype), rand(rng, (2, 2, 13, 16), dtype)
    do = rand(rng, (2, 4, 9, 16), dtype)
    o, lse = kiln.attention(q, k, v, causal=causal, return_lse=True)
    dq, dk, dv = kiln.attention_backward(q, k, v, o, lse, do, causal=causal)
    ref = reference_backward(q, k, v, do, causal=causal)
    for got, want, x in zip((dq, dk, dv), ref, (q, k, v)):
        assert got.shape == x.shape and got.dtype == x.dtype
        assert rel_err(got, want) <= tol
    dq2, dk2, dv2 = kiln.attention_backward(q, k, v, o, lse, do, causal=causal, need_dq=False, need_dk=False)
    assert dq2 is None and dk2 is None and np.array_equal(dv2, dv)


def test_reference_backward_matches_finite_differences(rng):
    # the oracle itself, against central differences of sum(O · dO)
    q, k, v, do = (rand(rng, s, np.float64) for s in ((1, 2, 3, 4), (1, 1, 5, 4), (1, 1, 5, 4), (1, 2, 3, 4)))
    dq, dk, dv = reference_backward(q, k, v, do, causal=True)
    eps = 1e-6
    for x, g in ((q, dq), (k, dk), (v, dv)):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            old = x[idx]
            x[idx] = old + eps
            up = (reference(q, k, v, causal=True)[0] * do).sum()
            x[idx] = old - eps
            down = (reference(q, k, v, causal=True)[0] * do).sum()
            x[idx] = old
            num[idx] = (up - down) / (2 * eps)
        assert np.allclose(num, g, atol=1e-6)
