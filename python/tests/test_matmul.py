"""kiln.matmul / matmul_backward on NumPy (CPU) against a float64 reference."""
import pytest

np = pytest.importorskip("numpy")
import kiln  # noqa: E402
from conftest import rel_err, tol_for  # noqa: E402


def f16(rng, *shape):
    return rng.standard_normal(shape).astype(np.float16)


def ref_mm(a, b, alpha=1.0):
    return alpha * np.matmul(a.astype(np.float64), b.astype(np.float64))


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 17, 33), (33, 7, 17), (127, 65, 40)])
@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
def test_matmul_shapes(rng, m, n, k, out_dtype):
    a, b = f16(rng, m, k), f16(rng, k, n)
    c = kiln.matmul(a, b, out_dtype=out_dtype)
    assert c.shape == (m, n) and c.dtype == np.dtype(out_dtype)
    assert rel_err(c, ref_mm(a, b)) <= tol_for(out_dtype)


def test_matmul_default_dtype_is_inputs(rng):
    c = kiln.matmul(f16(rng, 4, 8), f16(rng, 8, 3))
    assert c.dtype == np.float16


def test_matmul_transposed_views_and_slices(rng):
    # B as the transposed view of a Linear-style weight [N, K]; A a column slice of a wider array
    w = f16(rng, 24, 40)
    wide = f16(rng, 9, 64)
    a = wide[:, 5:45]
    c = kiln.matmul(a, w.T, out_dtype="float32")
    assert rel_err(c, ref_mm(a, w.T)) <= 1e-4
    at = f16(rng, 40, 9).T  # column-major A
    c = kiln.matmul(at, w.T, out_dtype="float32")
    assert rel_err(c, ref_mm(at, w.T)) <= 1e-4


def test_matmul_batched_broadcast_alpha(rng):
    a, b = f16(rng, 3, 5, 16), f16(rng, 16, 7)
    c = kiln.matmul(a, b, out_dtype="float32", alpha=0.5)
    assert c.shape == (3, 5, 7)
    assert rel_err(c, ref_mm(a, b, 0.5)) <= 1e-4
    c = kiln.matmul(f16(rng, 1, 5, 16), f16(rng, 4, 16, 7), out_dtype="float32")
    assert c.shape == (4, 5, 7)


def test_matmul_out_given(rng):
    a, b = f16(rng, 6, 8), f16(rng, 8, 5)
    out = np.full((6, 5), np.nan, dtype=np.float32)
    r = kiln.matmul(a, b, out=out)
    assert r is out and np.isfinite(out).all()
    assert rel_err(out, ref_mm(a, b)) <= 1e-4
    wide = np.full((6, 9), np.nan, dtype=np.float32)  # an output with leading dimension 9
    kiln.matmul(a, b, out=wide[:, 2:7])
    assert rel_err(wide[:, 2:7], ref_mm(a, b)) <= 1e-4
    assert np.isnan(wide[:, :2]).all() and np.isnan(wide[:, 7:]).all()


def test_matmul_algo_by_name_and_enum(rng):
    a, b = f16(rng, 4, 8), f16(rng, 8, 3)
    kiln.matmul(a, b, algo="auto")
    kiln.matmul(a, b, algo=kiln.MatmulAlgo.AUTO)
    with pytest.raises(kiln.KilnError) as e:
        kiln.matmul(a, b, algo="wgmma")  # a GPU algorithm on a CPU tensor
    assert e.value.status == kiln.Status.UNSUPPORTED
    assert "kiln_matmul" in str(e.value) and "WGMMA" in str(e.value)
    with pytest.raises(kiln.KilnError, match="algo is 'fastest'"):
        kiln.matmul(a, b, algo="fastest")


def test_matmul_shape_mismatch_before_anything_is_written(rng):
    a, b = f16(rng, 128, 32), f16(rng, 24, 64)
    out = np.full((128, 64), 7.0, dtype=np.float32)
    with pytest.raises(kiln.KilnError) as e:
        kiln.matmul(a, b, out=out)
    assert e.value.status == kiln.Status.INVALID_ARGUMENT
    assert e.value.message == ("kiln_matmul: b has shape [24, 64] but a has K = 32 (shape [128, 32]); "
                               "inner dimensions must match")
    assert (out == 7.0).all()


def test_matmul_dtype_errors(rng):
    a = rng.standard_normal((4, 8)).astype(np.float32)
    with pytest.raises(kiln.KilnError, match="a has dtype float32; expected float16 or bfloat16"):
        kiln.matmul(a, a.T.copy())
    with pytest.raises(kiln.KilnError, match="kiln.matmul: a has shape \\[8\\]"):
        kiln.matmul(a[0], a)


def test_matmul_read_only_output_rejected(rng):
    a, b = f16(rng, 4, 8), f16(rng, 8, 3)
    out = np.zeros((4, 3), np.float32)
    out.flags.writeable = False
    with pytest.raises(kiln.KilnError, match="out is a read-only NumPy array"):
        kiln.matmul(a, b, out=out)


def test_matmul_read_only_inputs_accepted(rng):
    a, b = f16(rng, 4, 8), f16(rng, 8, 3)
    a.flags.writeable = False
    b.flags.writeable = False
    assert rel_err(kiln.matmul(a, b, out_dtype="float32"), ref_mm(a, b)) <= 1e-4


@pytest.mark.parametrize("batched", [False, True])
def test_matmul_backward(rng, batched):
    if batched:
        a, b, dc = f16(rng, 3, 9, 17), f16(rng, 17, 5), rng.standard_normal((3, 9, 5)).astype(np.float32)
    else:
        a, b, dc = f16(rng, 9, 17), f16(rng, 17, 5), f16(rng, 9, 5)
    da, db = kiln.matmul_backward(a, b, dc, alpha=2.0)
    a64, b64, dc64 = (x.astype(np.float64) for x in (a, b, dc))
    ref_da = 2.0 * dc64 @ b64.T
    ref_db = 2.0 * np.einsum("bmk,bmn->kn", a64, dc64) if batched else 2.0 * a64.T @ dc64
    assert da.shape == a.shape and da.dtype == a.dtype and db.shape == b.shape
    assert rel_err(da, ref_da) <= 1e-2 and rel_err(db, ref_db) <= 1e-2


def test_matmul_backward_one_gradient(rng):
    a, b, dc = f16(rng, 4, 8), f16(rng, 8, 3), f16(rng, 4, 3)
    da, db = kiln.matmul_backward(a, b, dc, need_db=False)
    assert db is None and da.shape == a.shape
    da, db = kiln.matmul_backward(a, b, dc, need_da=False)
    assert da is None and db.shape == b.shape
    with pytest.raises(kiln.KilnError, match="da and db are both NULL"):
        kiln.matmul_backward(a, b, dc, need_da=False, need_db=False)
