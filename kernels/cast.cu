/*
 * cast.cu — elementwise dtype conversion (f32, f16, bf16) over a strided rank <= 4 index space.
 *
 * The first kernel of kiln and the one ops reuse to convert an operand into workspace (e.g. an
 * f32 gradient into f16 before a matmul). It is memory-bound and rarely hot, so it favours
 * generality (any strides) over vector width: one element per thread, grid-stride loop.
 */
#include "common.cuh"

extern "C" __global__ void kiln_cast(const kiln_cast_args args) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < args.count; i += stride) {
    /* Unravel the linear index over shape[0..3] (row-major), then apply each side's strides. */
    int64_t rem = i, so = 0, dof = 0;
#pragma unroll
    for (int d = 3; d >= 0; d--) {
      const int64_t idx = rem % args.shape[d];
      rem /= args.shape[d];
      so += idx * args.src_strides[d];
      dof += idx * args.dst_strides[d];
    }
    kiln_store_from_f32(args.dst, dof, args.dst_dtype, kiln_load_as_f32(args.src, so, args.src_dtype));
  }
}
