/*
 * bench_attention.c — `kiln-bench attention`: kiln_attention's forward, and forward + backward,
 * against PyTorch SDPA.
 *
 * The peer runs in Python (scripts/bench_sdpa.py, on the same GPU in the same session, before
 * this program) and leaves its times in a text file, one line per case:
 *   S D causal dtype fwd_us [fwdbwd_us]
 * which --peer FILE reads; rows without a peer line show kiln alone. Shapes follow the
 * FlashAttention convention: batch·S = 16384 tokens, H·D = 2048, D in {64, 128}, S from 512 to
 * 16384; FLOPs 4·B·H·S²·D for the forward, half of it when causal; forward + backward 3.5x that
 * (the backward counted as 2.5 forwards, the usual convention).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char bench_attention_usage[] =
    "usage: kiln-bench attention [options]\n"
    "  O = softmax(Q·Kᵀ/sqrt(D))·V, Q, K, V, O [B, H, S, D] compact, random inputs: the forward, and\n"
    "  forward (with LSE) + backward (FLOPs 3.5x the forward's).\n"
    "  Shapes: B·S = 16384, H·D = 2048, S in 512..16384 (--quick: 2048, 8192), D in 64, 128 (256 with --head-dim 256).\n"
    "  --dtype f16|bf16|f32|all  input and output dtype (default f16; all: f16 and bf16; f32 runs the\n"
    "                         CUDA-core kernels)\n"
    "  --causal 0|1|all       (default all)\n"
    "  --algo auto|mma_sync|wgmma|smem|all  kernel (default auto: what kiln picks; all: mma_sync, and wgmma\n"
    "                         and smem on sm_90; the backward runs the family's kernels whatever the algo)\n"
    "  --head-dim 64|128|256|all  (default all: 64 and 128; 256 runs no SMEM rows)\n"
    "  --tile-m 128|192       with --algo wgmma: opts.tile_m, the query rows per block of the sm_90a forward\n"
    "                         and the backward's dQ kernel (192 only at D = 64; D = 128 rows keep the\n"
    "                         default), for A/B runs in one call\n"
    "  --deterministic 0|1|all  opts.deterministic of the forward + backward rows (default 0; 1: the rows say\n"
    "                         \"det\"; all: both, for A/B runs of the fused backward in one call)\n"
    "  --seq S                a sequence length instead of the default list (repeatable, up to 8; B = 16384 / S\n"
    "                         rounded down, at least 1)\n"
    "  --peer FILE            peer times from scripts/bench_sdpa.py (lines: S D causal dtype fwd_us fwdbwd_us)\n" BENCH_COMMON_USAGE;

typedef struct attn_opts {
  bench_dtype dtypes[2];
  int n_dtypes;
  int causal_lo, causal_hi;
  int d_lo, d_hi; /* head dims [64, 128, 256][d_lo..d_hi] */
  int tile_m;     /* opts.tile_m for the FLASH_WGMMA rows (0: kiln's choice) */
  int det_lo, det_hi; /* opts.deterministic of the forward + backward rows */
  kiln_attention_algo algos[3];
  int n_algos; /* 0: all the device runs */
  const char *peer_path;
  int64_t seq[8]; /* --seq lengths (n_seq of them), else the default list */
  int n_seq;
  bench_common common;
} attn_opts;

typedef struct peer_time {
  int s, d, causal;
  char dtype[8];
  double us, bwd_us; /* forward, forward+backward (NaN when the file has no such column) */
} peer_time;

/* The peer's name for the table: "torch sdpa <backend>" from the file's header line. */
static char peer_label[32] = "torch sdpa flash";

static int read_peer(const char *path, peer_time *out, int cap) {
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!f) return 0;
  int n = 0;
  char line[256];
  while (n < cap && fgets(line, sizeof line, f)) {
    const char *sdpa = line[0] == '#' ? strstr(line, "SDPA ") : NULL;
    char backend[16];
    if (sdpa && sscanf(sdpa + 5, "%15s", backend) == 1)
      snprintf(peer_label, sizeof peer_label, "torch sdpa %s", backend);
    const int got = sscanf(line, "%d %d %d %7s %lf %lf", &out[n].s, &out[n].d, &out[n].causal, out[n].dtype,
                           &out[n].us, &out[n].bwd_us);
    if (got == 5) out[n].bwd_us = NAN;
    if (got >= 5) n++;
  }
  fclose(f);
  return n;
}

typedef struct attn_call {
  bench_env *env;
  int64_t shape[4], lse_shape[3];
  DLTensor q, k, v, o, lse, dout, dq, dk, dv;
  void *ws;
  size_t ws_bytes;
  kiln_attention_opts opts;
  kiln_status st;
} attn_call;

static int attn_call_fn(void *user, int iter) {
  (void)iter; /* inputs are 3 x 64 MiB, beyond L2 by themselves: no rotation needed */
  attn_call *c = user;
  c->st = kiln_attention(c->env->ctx, &c->q, &c->k, &c->v, &c->o, NULL, &c->opts, c->env->stream);
  return c->st != KILN_OK;
}

/* forward with LSE, then the backward: what a training step runs */
static int attn_fwdbwd_fn(void *user, int iter) {
  (void)iter;
  attn_call *c = user;
  c->st = kiln_attention(c->env->ctx, &c->q, &c->k, &c->v, &c->o, &c->lse, &c->opts, c->env->stream);
  if (c->st == KILN_OK)
    c->st = kiln_attention_backward(c->env->ctx, &c->q, &c->k, &c->v, &c->o, &c->lse, &c->dout, &c->dq, &c->dk,
                                    &c->dv, c->ws, c->ws_bytes, &c->opts, c->env->stream);
  return c->st != KILN_OK;
}

static const peer_time *find_peer(const peer_time *peers, int n_peers, int64_t S, int64_t D, int causal,
                                  bench_dtype dt) {
  for (int i = 0; i < n_peers; i++)
    if (peers[i].s == S && peers[i].d == D && peers[i].causal == causal && !strcmp(peers[i].dtype, bench_dtype_name(dt)))
      return &peers[i];
  return NULL;
}

/* One timed row: fn over c, peer time us (NaN: none). Returns -1 when the device failed. */
static int time_row(bench_env *env, bench_fn fn, attn_call *c, const char *op, const char *shape, bench_dtype dt,
                    const char *algo, double flops, double peer_us) {
  bench_row row;
  bench_row_init(&row, op, shape, bench_dtype_name(dt), algo, BENCH_TFLOPS, flops);
  if (!isnan(peer_us)) {
    snprintf(row.peer, sizeof row.peer, "%s", peer_label);
    row.peer_t.median_us = row.peer_t.min_us = row.peer_t.p90_us = peer_us;
  }
  if (bench_time(env, env->stream, fn, c, bench_default_reps(env), &row.kiln)) {
    if (c->st == KILN_OK) return -1;
    snprintf(row.note, sizeof row.note, "error: %s", kiln_last_error());
    env->failures++;
  }
  bench_report(env, &row);
  return 0;
}

static const char *algo_label(kiln_attention_algo a) {
  return a == KILN_ATTENTION_FLASH_MMA_SYNC ? "flash mma_sync"
         : a == KILN_ATTENTION_FLASH_WGMMA  ? "flash wgmma"
         : a == KILN_ATTENTION_SMEM         ? "smem"
                                            : "auto";
}

static int run_case(bench_env *env, int64_t S, int64_t D, int causal, bench_dtype dt, const peer_time *peers,
                    int n_peers, const kiln_attention_algo *algos, int n_algos, int tile_m, int det_lo, int det_hi) {
  const int64_t B = S < 16384 ? 16384 / S : 1, H = 2048 / D, count = B * H * S * D;
  const size_t bytes = (size_t)count * bench_dtype_size(dt);
  CUdeviceptr buf[8] = {0}, lse = 0, ws = 0; /* q k v o dout dq dk dv */
  int rc = 0;
  for (int i = 0; i < 8 && !rc; i++) rc = bench_alloc(env, bytes, &buf[i]);
  if (!rc) rc = bench_alloc(env, (size_t)(B * H * S) * 4, &lse);
  for (int i = 0; i < 5 && !rc; i++) rc = i == 3 ? 0 : bench_fill_random(env, buf[i], (size_t)count, dt, 11 + (uint64_t)i);
  if (rc) goto done;
  attn_call c = {.env = env, .shape = {B, H, S, D}, .lse_shape = {B, H, S}};
  DLDevice dev = {kDLCUDA, env->info.ordinal};
  DLTensor *t[8] = {&c.q, &c.k, &c.v, &c.o, &c.dout, &c.dq, &c.dk, &c.dv};
  for (int i = 0; i < 8; i++) *t[i] = (DLTensor){(void *)(uintptr_t)buf[i], dev, 4, bench_dtype_dl(dt), c.shape, NULL, 0};
  c.lse = (DLTensor){(void *)(uintptr_t)lse, dev, 3, (DLDataType){kDLFloat, 32, 1}, c.lse_shape, NULL, 0};
  c.opts = kiln_attention_opts_default();
  c.opts.causal = causal; /* deterministic 0, tile_m 0: the largest workspace any row below takes */
  if (kiln_attention_backward_workspace_size(env->ctx, &c.q, &c.k, &c.v, &c.o, &c.lse, &c.dout, &c.dq, &c.dk, &c.dv,
                                             &c.opts, &c.ws_bytes) != KILN_OK) {
    fprintf(stderr, "kiln-bench attention: %s\n", kiln_last_error());
    rc = -1;
    goto done;
  }
  if (c.ws_bytes && (rc = bench_alloc(env, c.ws_bytes, &ws))) goto done;
  c.ws = (void *)(uintptr_t)ws;

  char shape_s[48], algo_s[32];
  snprintf(shape_s, sizeof shape_s, "B%lldH%lldS%lldD%lld", (long long)B, (long long)H, (long long)S, (long long)D);
  /* forward 4·B·H·S²·D, half when causal; backward 2.5x the forward */
  const double flops = 4.0 * (double)B * (double)H * (double)S * (double)S * (double)D / (causal ? 2.0 : 1.0);
  const peer_time *pt = find_peer(peers, n_peers, S, D, causal, dt);
  for (int a = 0; a < n_algos && !rc; a++) {
    if (D > 128 && algos[a] == KILN_ATTENTION_SMEM) continue; /* it takes head dims up to 128 */
    c.opts.algo = algos[a];
    c.opts.tile_m = algos[a] == KILN_ATTENTION_FLASH_WGMMA && (tile_m != 192 || D == 64) ? tile_m : 0;
    char tile_s[16] = "";
    if (c.opts.tile_m) snprintf(tile_s, sizeof tile_s, " m%d", c.opts.tile_m);
    snprintf(algo_s, sizeof algo_s, "%s%s%s", algo_label(algos[a]), causal ? " causal" : "", tile_s);
    if ((rc = time_row(env, attn_call_fn, &c, "attention", shape_s, dt, algo_s, flops, pt ? pt->us : NAN))) break;
    for (int det = det_lo; det <= det_hi && !rc; det++) {
      char bwd_s[40];
      snprintf(bwd_s, sizeof bwd_s, "%s%s", algo_s, det ? " det" : "");
      c.opts.deterministic = det;
      rc = time_row(env, attn_fwdbwd_fn, &c, "attention fwd+bwd", shape_s, dt, bwd_s, 3.5 * flops,
                    pt ? pt->bwd_us : NAN);
    }
    c.opts.deterministic = 0;
  }
done:
  for (int i = 0; i < 8; i++) bench_free(env, buf[i]);
  bench_free(env, lse), bench_free(env, ws);
  return rc;
}

int bench_attention_main(int argc, char **argv) {
  attn_opts o = {.dtypes = {BENCH_F16}, .n_dtypes = 1, .causal_lo = 0, .causal_hi = 1, .d_lo = 0, .d_hi = 1,
                 .algos = {KILN_ATTENTION_AUTO}, .n_algos = 1};
  bench_common_init(&o.common);
  for (int i = 1; i < argc; i++) {
    int c = bench_parse_common(argc, argv, &i, &o.common, bench_attention_usage);
    if (c == BENCH_HELP) return 0;
    if (c < 0) return 2;
    if (c > 0) continue;
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    i++;
    if (!strcmp(a, "--dtype") && v && !strcmp(v, "all")) {
      o.dtypes[0] = BENCH_F16, o.dtypes[1] = BENCH_BF16, o.n_dtypes = 2;
    } else if (!strcmp(a, "--dtype") && v && !bench_dtype_parse(v, &o.dtypes[0]) &&
               o.dtypes[0] != BENCH_I8) {
      o.n_dtypes = 1;
    } else if (!strcmp(a, "--causal") && v && (!strcmp(v, "0") || !strcmp(v, "1") || !strcmp(v, "all"))) {
      o.causal_lo = !strcmp(v, "1");
      o.causal_hi = strcmp(v, "0") ? 1 : 0;
    } else if (!strcmp(a, "--algo") && v &&
               (!strcmp(v, "auto") || !strcmp(v, "mma_sync") || !strcmp(v, "wgmma") || !strcmp(v, "smem") ||
                !strcmp(v, "all"))) {
      o.n_algos = strcmp(v, "all") ? 1 : 0;
      o.algos[0] = !strcmp(v, "mma_sync") ? KILN_ATTENTION_FLASH_MMA_SYNC
                   : !strcmp(v, "wgmma")  ? KILN_ATTENTION_FLASH_WGMMA
                   : !strcmp(v, "smem")   ? KILN_ATTENTION_SMEM
                                          : KILN_ATTENTION_AUTO;
    } else if (!strcmp(a, "--head-dim") && v &&
               (!strcmp(v, "64") || !strcmp(v, "128") || !strcmp(v, "256") || !strcmp(v, "all"))) {
      o.d_lo = !strcmp(v, "128") ? 1 : !strcmp(v, "256") ? 2 : 0;
      o.d_hi = !strcmp(v, "64") ? 0 : !strcmp(v, "256") ? 2 : 1;
    } else if (!strcmp(a, "--tile-m") && v && (!strcmp(v, "128") || !strcmp(v, "192"))) {
      o.tile_m = atoi(v);
    } else if (!strcmp(a, "--deterministic") && v && (!strcmp(v, "0") || !strcmp(v, "1") || !strcmp(v, "all"))) {
      o.det_lo = !strcmp(v, "1");
      o.det_hi = strcmp(v, "0") ? 1 : 0;
    } else if (!strcmp(a, "--seq") && v && o.n_seq < 8 && atoll(v) >= 1 && atoll(v) <= (1 << 20)) {
      o.seq[o.n_seq++] = atoll(v);
    } else if (!strcmp(a, "--peer") && v) {
      o.peer_path = v;
    } else {
      fprintf(stderr, "kiln-bench attention: bad option or value \"%s %s\" (see kiln-bench attention --help)\n", a,
              v ? v : "");
      return 2;
    }
  }
  peer_time peers[256];
  const int n_peers = read_peer(o.peer_path, peers, 256);
  if (o.peer_path && !n_peers) printf("note: no peer times read from %s\n", o.peer_path);

  bench_env env;
  if (bench_env_open(&env, &o.common, 1)) {
    bench_env_close(&env);
    return 1;
  }
  static const int64_t full[] = {512, 1024, 2048, 4096, 8192, 16384}, quick[] = {2048, 8192};
  const int64_t *ss = o.n_seq ? o.seq : o.common.quick ? quick : full;
  const int n_s = o.n_seq ? o.n_seq : o.common.quick ? 2 : 6;
  const kiln_attention_algo all[3] = {KILN_ATTENTION_FLASH_MMA_SYNC, KILN_ATTENTION_FLASH_WGMMA, KILN_ATTENTION_SMEM};
  const kiln_attention_algo *algos = o.n_algos ? o.algos : all;
  const int n_algos = o.n_algos ? o.n_algos : env.info.cc_major == 9 && env.info.cc_minor == 0 ? 3 : 1;
  bench_table_header(BENCH_TFLOPS);
  int dead = 0;
  for (int di = o.d_lo; di <= o.d_hi && !dead; di++)
    for (int ci = o.causal_lo; ci <= o.causal_hi && !dead; ci++)
      for (int t = 0; t < o.n_dtypes && !dead; t++)
        for (int si = 0; si < n_s && !dead; si++)
          dead = run_case(&env, ss[si], 64 << di, ci, o.dtypes[t], peers, n_peers, algos, n_algos, o.tile_m, o.det_lo,
                          o.det_hi) < 0;
  if (dead) fprintf(stderr, "kiln-bench attention: stopping: the device reported an error (see above)\n");
  return bench_env_close(&env);
}
