/*
 * test_matrix.h — strided (batched) host matrices for the host tests: row- or column-major with
 * a leading dimension, a batch stride and elements before the view. Included by the tests that
 * build matrix operands (test_matmul_host.c, test_int8_host.c) after test_util.h.
 */
#ifndef KILN_TEST_MATRIX_H
#define KILN_TEST_MATRIX_H

#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Strided host matrices                                                                       */
/* ------------------------------------------------------------------------------------------ */
enum { ROW = 0, COL = 1 };

/* A (batched) matrix in a host buffer: row- or column-major with a leading dimension, a batch
 * stride, elements before the view (byte_offset). Never copy one: t.shape points inside. */
typedef struct tmat {
  DLDataType dt;
  size_t elem;
  int ndim;
  int64_t batch, rows, cols;
  int64_t bs, rs, cs; /* element strides of the view */
  int64_t off;        /* elements before the view */
  int64_t total;      /* elements in buf */
  void *buf;
  int64_t shape[3], strides[3];
  DLTensor t;
} tmat;

/* ndim 2 ([rows, cols], batch must be 1) or 3 ([batch, rows, cols]). ld_pad / bs_pad: extra
 * elements past the inner size / past one matrix; off: elements before the view. */
static inline void tm_init(tmat *m, DLDataType dt, int ndim, int64_t batch, int64_t rows, int64_t cols, int layout,
                    int64_t ld_pad, int64_t bs_pad, int64_t off) {
  memset(m, 0, sizeof *m);
  m->dt = dt;
  m->elem = dt.bits / 8;
  m->ndim = ndim;
  m->batch = batch;
  m->rows = rows;
  m->cols = cols;
  const int64_t ld = (layout == COL ? rows : cols) + ld_pad;
  m->rs = layout == COL ? 1 : ld;
  m->cs = layout == COL ? ld : 1;
  const int64_t one = layout == COL ? (cols - 1) * ld + rows : (rows - 1) * ld + cols;
  m->bs = one + bs_pad;
  m->off = off;
  m->total = off + (batch - 1) * m->bs + one;
  m->buf = malloc((size_t)m->total * m->elem);
  assert_non_null(m->buf);
  if (ndim == 3) {
    m->shape[0] = batch, m->shape[1] = rows, m->shape[2] = cols;
    m->strides[0] = m->bs, m->strides[1] = m->rs, m->strides[2] = m->cs;
  } else {
    assert_int_equal(batch, 1);
    m->shape[0] = rows, m->shape[1] = cols;
    m->strides[0] = m->rs, m->strides[1] = m->cs;
  }
  m->t.data = m->buf;
  m->t.device = (DLDevice){kDLCPU, 0};
  m->t.ndim = ndim;
  m->t.dtype = dt;
  m->t.shape = m->shape;
  m->t.strides = m->strides;
  m->t.byte_offset = (uint64_t)off * m->elem;
}
/* Compact row-major 2-D/3-D shortcuts. */
static inline void tm_compact(tmat *m, DLDataType dt, int ndim, int64_t batch, int64_t rows, int64_t cols) {
  tm_init(m, dt, ndim, batch, rows, cols, ROW, 0, 0, 0);
}
static inline void tm_free(tmat *m) {
  free(m->buf);
  m->buf = NULL;
}
static inline void tm_fill(tmat *m) { test_fill(m->buf, m->dt, m->total); }
static inline void tm_poison(tmat *m) { test_poison(m->buf, m->dt, m->total); }
static inline int64_t tm_index(const tmat *m, int64_t b, int64_t i, int64_t j) {
  if (m->batch == 1) b = 0; /* a broadcast operand */
  return m->off + b * m->bs + i * m->rs + j * m->cs;
}
static inline double tm_get(const tmat *m, int64_t b, int64_t i, int64_t j) {
  return test_load(m->buf, m->dt, tm_index(m, b, i, j));
}

#endif /* KILN_TEST_MATRIX_H */
