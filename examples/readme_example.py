import numpy as np

import kiln


def rel_error(out, ref):
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


rng = np.random.default_rng(0)
x = rng.standard_normal((16, 512)).astype(np.float16)        # activations [M, K]
w = rng.standard_normal((256, 512)).astype(np.float16)       # a Linear weight [N, K]

# f16 x f16 -> f32, fp32 accumulation; w.T is a transposed view, consumed without a copy
y = kiln.matmul(x, w.T, out_dtype="float32")
print("matmul      relative error", rel_error(y, x.astype(np.float64) @ w.T.astype(np.float64)))

# W4A16: quantize to INT4 (groups of 128 rows), multiply, compare with the dequantized weight
w4 = kiln.Int4Weight.from_float(w.T, group=128)
y4 = kiln.matmul_int4(x, w4, out_dtype="float32")
print("matmul_int4 relative error", rel_error(y4, x.astype(np.float64) @ w4.dequantize().astype(np.float64)))

# causal attention, grouped-query: 8 query heads share 2 key/value heads; [B, H, S, D]
q = rng.standard_normal((1, 8, 128, 64)).astype(np.float16)
k = rng.standard_normal((1, 2, 128, 64)).astype(np.float16)
v = rng.standard_normal((1, 2, 128, 64)).astype(np.float16)
o = kiln.attention(q, k, v, causal=True)
kr, vr = (np.repeat(t.astype(np.float64), 4, axis=1) for t in (k, v))  # the reference: heads repeated
s = q.astype(np.float64) @ kr.transpose(0, 1, 3, 2) / np.sqrt(64)
s[..., np.triu(np.ones((128, 128), dtype=bool), 1)] = -np.inf          # query i sees keys 0..i
p = np.exp(s - s.max(axis=-1, keepdims=True))
print("attention   relative error", rel_error(o, p / p.sum(axis=-1, keepdims=True) @ vr))

# bad input raises kiln.KilnError with the library's message; nothing is written
try:
    kiln.matmul(x, w)
except kiln.KilnError as e:
    print("KilnError:", e)
