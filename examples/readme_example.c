#include <stdio.h>
#include <string.h>

#include <kiln.h>

#define CHECK(call)                                                                        \
  do {                                                                                     \
    kiln_status st = (call);                                                               \
    if (st != KILN_OK) {                                                                   \
      fprintf(stderr, "%s: %s\n", kiln_status_string(st), kiln_last_error());              \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

/* C = A·B on the CPU, or on GPU 0 with the argument "cuda": A [2, 3] f16, B [3, 2] f16, C f32. */
int main(int argc, char **argv) {
  const int gpu = argc > 1 && strcmp(argv[1], "cuda") == 0;
  kiln_context *ctx;
  CHECK(kiln_context_create(gpu ? kDLCUDA : kDLCPU, 0, &ctx));
  CUstream stream; /* NULL on the CPU, where ops run synchronously */
  CHECK(kiln_stream_create(ctx, &stream));

  /* host data: f16 bits from kiln's conversion helpers */
  const float a_val[6] = {1, 2, 3, 4, 5, 6}, b_val[6] = {1, 0, 0, 1, 1, 1};
  uint16_t a_host[6], b_host[6];
  float c_host[4];
  for (int i = 0; i < 6; i++) a_host[i] = kiln_f32_to_f16(a_val[i]), b_host[i] = kiln_f32_to_f16(b_val[i]);

  /* DLPack tensors: shape, no strides (compact row-major), data on the host */
  int64_t sa[2] = {2, 3}, sb[2] = {3, 2}, sc[2] = {2, 2};
  const DLDataType f16 = {kDLFloat, 16, 1}, f32 = {kDLFloat, 32, 1};
  DLTensor ha = {.data = a_host, .device = {kDLCPU, 0}, .ndim = 2, .dtype = f16, .shape = sa};
  DLTensor hb = {.data = b_host, .device = {kDLCPU, 0}, .ndim = 2, .dtype = f16, .shape = sb};
  DLTensor hc = {.data = c_host, .device = {kDLCPU, 0}, .ndim = 2, .dtype = f32, .shape = sc};

  /* tensors on the context's device (kiln_tensor_empty: for C programs without a framework) */
  DLManagedTensorVersioned *a, *b, *c;
  CHECK(kiln_tensor_empty(ctx, 2, sa, f16, &a));
  CHECK(kiln_tensor_empty(ctx, 2, sb, f16, &b));
  CHECK(kiln_tensor_empty(ctx, 2, sc, f32, &c));
  CHECK(kiln_tensor_copy(ctx, &ha, &a->dl_tensor, stream));
  CHECK(kiln_tensor_copy(ctx, &hb, &b->dl_tensor, stream));

  /* the op only enqueues work on the stream; opts NULL = algo AUTO, alpha 1 */
  CHECK(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, NULL, stream));
  CHECK(kiln_tensor_copy(ctx, &c->dl_tensor, &hc, stream));
  CHECK(kiln_stream_synchronize(ctx, stream));
  printf("C = [[%g, %g], [%g, %g]]\n", c_host[0], c_host[1], c_host[2], c_host[3]); /* [[4, 5], [10, 11]] */

  /* errors: a status, and a message naming the op, the argument, what was found and the fix */
  kiln_status st = kiln_matmul(ctx, &b->dl_tensor, &b->dl_tensor, &c->dl_tensor, NULL, stream);
  printf("%s: %s\n", kiln_status_string(st), kiln_last_error());

  kiln_tensor_free(a), kiln_tensor_free(b), kiln_tensor_free(c);
  CHECK(kiln_stream_destroy(ctx, stream));
  kiln_context_destroy(ctx);
  return c_host[0] == 4 && c_host[1] == 5 && c_host[2] == 10 && c_host[3] == 11 ? 0 : 1;
}
