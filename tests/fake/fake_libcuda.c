/*
 * fake_libcuda.c — a stand-in for libcuda.so.1 that lets host tests drive kiln's driver paths on a
 * machine without a GPU (selected by KILN_LIBCUDA=path/to/this.so).
 *
 * It answers every entry point kiln resolves (KILN_CUDA_FUNCTIONS in src/runtime/cuda_driver.h)
 * and impersonates one working sm_90 device (two in mode twodev): device memory is host memory
 * (aligned_alloc, so copies and memsets really move bytes; from 4 GiB up only reserved address
 * space, FAKE_VIRTUAL_BYTES), kernel libraries, streams and events
 * are handles it tracks, and a launch checks its arguments and does nothing. It is strict where a
 * real driver is: calls that need a current context fail with CUDA_ERROR_INVALID_CONTEXT without
 * one, an unknown or destroyed stream, library or function is CUDA_ERROR_INVALID_HANDLE (so is a
 * stream of another device's context), an ordinal past the devices is CUDA_ERROR_INVALID_DEVICE.
 *
 * FAKE_CUDA_MODE picks the fault:
 *   old        cuDriverGetVersion reports 11.8 (too old for cuLibraryLoadData)
 *   missing    cuGetProcAddress knows no cuLibraryLoadData (an old driver's symbol table)
 *   nodevice   cuInit fails with CUDA_ERROR_NO_DEVICE (a driver without GPUs)
 *   healthy    no fault: the one device works (the control for the modes below)
 *   oom        the device has 1 MiB of memory: a larger cuMemAlloc is CUDA_ERROR_OUT_OF_MEMORY
 *   noimage    cuLibraryLoadData fails with CUDA_ERROR_NO_BINARY_FOR_GPU while two libraries are
 *              loaded: the first two images load, the third fails, so a partial load must be undone
 *   badordinal no fault of its own (one device, ordinal 0); the test asks for ordinal 3
 *   launchfail cuLaunchKernel fails with CUDA_ERROR_INVALID_HANDLE (what a destroyed stream gives)
 *   loadfail   cuLibraryLoadData fails with CUDA_ERROR_OUT_OF_MEMORY for the second image
 *   nokernel   cuLibraryGetKernel finds no kiln_attn_fwd_wgmma_f16_d64 (CUDA_ERROR_NOT_FOUND)
 *   nofunction cuKernelGetFunction has no code for the 7th kernel (CUDA_ERROR_NO_BINARY_FOR_GPU)
 *   oldgpu     no fault of its own; the test sets FAKE_CUDA_CC=75, a GPU below kiln's sm_80
 *   twodev     no fault: two such devices, each with its primary context (launches counted per
 *              device)
 *
 * The tests read the fake's bookkeeping through the exported fake_cuda_* functions below
 * (dlopen of the same path with RTLD_NOLOAD, then dlsym).
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE under -std=c17 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kiln_abi.h" /* the kernels' argument structs, for check_launch_args */

typedef int CUresult;

#define EXPORT __attribute__((visibility("default")))

enum {
  OK = 0,
  E_INVALID_VALUE = 1,
  E_OUT_OF_MEMORY = 2,
  E_NOT_INITIALIZED = 3,
  E_NO_DEVICE = 100,
  E_INVALID_DEVICE = 101,
  E_INVALID_CONTEXT = 201,
  E_NO_BINARY_FOR_GPU = 209,
  E_INVALID_HANDLE = 400,
  E_NOT_FOUND = 500,
  E_UNKNOWN = 999,
};

static const struct {
  CUresult code;
  const char *name, *text;
} errors[] = {
    {OK, "CUDA_SUCCESS", "no error"},
    {E_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {E_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {E_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {E_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {E_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {E_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {E_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {E_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {E_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {E_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const char *mode(void) {
  const char *m = getenv("FAKE_CUDA_MODE");
  return m ? m : "";
}
static int is_mode(const char *m) { return strcmp(mode(), m) == 0; }
/* The device: an H200 (sm_90, 132 SMs), or what FAKE_CUDA_CC (80, 86, 89 or 90) and
 * FAKE_CUDA_SMS say (e.g. an A100's 80 and 108, or a 16-SM MIG slice, where kiln's choices that
 * count tiles against SMs flip at small sizes). Read when kiln asks, i.e. at context creation. */
static int env_int(const char *name, int fallback) {
  const char *s = getenv(name);
  const int n = s ? atoi(s) : 0;
  return n > 0 ? n : fallback;
}
static int sm_count(void) { return env_int("FAKE_CUDA_SMS", 132); }
static int compute_capability(void) {
  const int cc = env_int("FAKE_CUDA_CC", 90);
  return cc == 75 || cc == 80 || cc == 86 || cc == 89 ? cc : 90; /* 75: a Turing GPU, below kiln's sm_80 */
}
/* the largest dynamic shared memory a block may opt in to: 227 KiB on sm_90, 163 on sm_80, 99 on
 * sm_86 and sm_89 */
static int smem_optin(void) {
  const int cc = compute_capability();
  return cc == 90 ? 232448 : cc == 80 ? 166912 : 101376;
}

/* ---- the device ---------------------------------------------------------------------------- */
#define FAKE_NAME "Fake H200 (tests/fake/fake_libcuda.c)"
#define FAKE_TOTAL_MEMORY (143771ull << 20) /* what an H200 reports */
#define FAKE_OOM_MEMORY (1ull << 20)        /* the device of mode oom */

#define FAKE_MAX_DEVICES 2
static int device_count(void) { return is_mode("nodevice") ? 0 : is_mode("twodev") ? 2 : 1; }
static size_t memory_limit(void) { return is_mode("oom") ? FAKE_OOM_MEMORY : FAKE_TOTAL_MEMORY; }

/* Everything below is guarded by one lock (kiln may call from several threads). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized, primary_retains, library_loads, live_libraries, live_streams, live_events, tensor_maps,
    clustered_launches;
static int retains[FAKE_MAX_DEVICES], launches[FAKE_MAX_DEVICES]; /* per device */

/* Device allocations: a list of (pointer, size). */
typedef struct allocation {
  struct allocation *next;
  uintptr_t ptr;
  size_t bytes;
  int id;      /* 1, 2, ... in the order of allocation: the same in every run of a program */
  int virtual; /* address space only (FAKE_VIRTUAL_BYTES): copies and memsets are checked, not done */
} allocation;
/* An allocation this large reserves address space without memory (mmap PROT_NONE, MAP_NORESERVE),
 * so that a test can hand kiln tensors of GPU sizes (the fuzz harness's 64 GiB arena) on a
 * machine with less memory: nothing runs on the fake, so only copies and memsets would touch
 * them, and into such an allocation those are range-checked and skipped. */
#define FAKE_VIRTUAL_BYTES ((size_t)1 << 32)
static allocation *allocations;
static int live_allocations, allocations_made;
static size_t live_bytes;

/* Libraries, streams and events are handles from a counter (never reused, so a destroyed one
 * stays invalid); live ones are kept in small tables. */
#define FAKE_MAX_HANDLES 256
static uintptr_t libraries[FAKE_MAX_HANDLES], streams[FAKE_MAX_HANDLES], events[FAKE_MAX_HANDLES];
/* A launch may use the dynamic shared memory its kernel was allowed (cuFuncSetAttribute; 48 KiB
 * by default), as on the driver: so each context's launches are held to its own device's limit. */
static int library_smem[FAKE_MAX_HANDLES];
/* The image's name where kiln embedded a fuzz build's placeholder ("kiln placeholder image:
 * NAME", CMakeLists.txt), else empty: check_launch_args knows some images' kernel arguments. */
static char library_image[FAKE_MAX_HANDLES][48];
static int stream_device[FAKE_MAX_HANDLES]; /* the device of streams[i]'s context */
static uintptr_t next_handle = 0x10000;

static int handle_add(uintptr_t *table, uintptr_t h) {
  for (int i = 0; i < FAKE_MAX_HANDLES; i++)
    if (!table[i]) return table[i] = h, 1;
  return 0;
}
static int handle_find(const uintptr_t *table, uintptr_t h) {
  if (!h) return -1;
  for (int i = 0; i < FAKE_MAX_HANDLES; i++)
    if (table[i] == h) return i;
  return -1;
}
/* A new handle into *out, counted in *live; and its release (INVALID_HANDLE when not live). */
static CUresult handle_new(uintptr_t *table, int *live, void **out) {
  uintptr_t h = next_handle += 16;
  if (!handle_add(table, h)) return E_OUT_OF_MEMORY;
  ++*live;
  *out = (void *)h;
  return OK;
}
static CUresult handle_release(uintptr_t *table, int *live, void *handle) {
  int i = handle_find(table, (uintptr_t)handle);
  if (i < 0) return E_INVALID_HANDLE;
  table[i] = 0;
  --*live;
  return OK;
}

/* Each device's primary context (the only contexts kiln uses), and each thread's context stack. */
static struct {
  int ordinal;
} primary_contexts[FAKE_MAX_DEVICES] = {{0}, {1}};
static _Thread_local void *ctx_stack[16];
static _Thread_local int ctx_depth;

/* The ordinal of a primary context, or -1 for anything else. */
static int context_device(const void *ctx) {
  for (int d = 0; d < device_count(); d++)
    if (ctx == &primary_contexts[d]) return d;
  return -1;
}
/* The device of the calling thread's current context (need_context() passed). */
static int current_device(void) { return context_device(ctx_stack[ctx_depth - 1]); }
static CUresult need_context(void) {
  if (!initialized) return E_NOT_INITIALIZED;
  const int d = ctx_depth ? context_device(ctx_stack[ctx_depth - 1]) : -1;
  if (d < 0) return E_INVALID_CONTEXT;
  return retains[d] > 0 ? OK : E_INVALID_CONTEXT; /* a released primary context is inactive */
}
static CUresult need_device(int dev) {
  if (!initialized) return E_NOT_INITIALIZED;
  return dev >= 0 && dev < device_count() ? OK : E_INVALID_DEVICE;
}
/* A stream argument: NULL (the legacy default stream) or a live stream. Caller holds the lock. */
static CUresult check_stream(void *stream) {
  return !stream || handle_find(streams, (uintptr_t)stream) >= 0 ? OK : E_INVALID_HANDLE;
}
/* A stream argument for work in the current context: also not another device's stream. */
static CUresult check_stream_here(void *stream) {
  const int i = handle_find(streams, (uintptr_t)stream);
  if (stream && (i < 0 || stream_device[i] != current_device())) return E_INVALID_HANDLE;
  return OK;
}
/* [p, p + n) inside one live allocation, or host memory we cannot check (unified addressing:
 * kiln passes host pointers to cuMemcpyAsync). Caller holds the lock. */
static const allocation *find_allocation(uintptr_t p) {
  for (const allocation *a = allocations; a; a = a->next)
    if (p >= a->ptr && p < a->ptr + a->bytes) return a;
  return NULL;
}
static CUresult check_range(uint64_t p, size_t bytes);
/* The buffers a test declared its own (fake_cuda_declare): while any are declared, whatever a
 * kernel or TMA descriptor addresses must lie inside one of them, not merely inside an
 * allocation (the fuzz harness declares each tensor's exact bytes, so an operand one stride too
 * long is caught anywhere in its arena, not only at the arena's end). */
#define FAKE_MAX_DECLARED 256
static struct {
  uintptr_t lo, hi;
} declared[FAKE_MAX_DECLARED];
static int declared_count;
/* Buffers that overlap count as one (the union of their bytes): a fused QKV call's outputs may be
 * interleaved column slices of one buffer, which kiln then writes as that one matrix. Buffers
 * that merely touch stay apart, so an operand one row too long is still caught at a neighbour. */
static CUresult check_declared(uint64_t p, size_t bytes) {
  if (!declared_count || !bytes) return check_range(p, bytes);
  uint64_t reach = p; /* [p, reach) lies in one chain of overlapping buffers */
  for (int grew = 1; grew && reach - p < bytes;) {
    grew = 0;
    for (int i = 0; i < declared_count; i++)
      if ((reach == p ? declared[i].lo <= p : declared[i].lo < reach) && declared[i].hi > reach)
        reach = declared[i].hi, grew = 1;
  }
  return reach - p >= bytes ? OK : E_INVALID_VALUE;
}

/* FAKE_CUDA_TRACE: "1" prints each refused TMA descriptor with its reason to stderr; "all" also
 * every descriptor made and every launch, with addresses as offsets into their allocation, so two
 * runs of one program can be compared (a host refactor that must not change what kiln sends). */
static int trace_level(void) {
  const char *t = getenv("FAKE_CUDA_TRACE");
  return !t ? 0 : strcmp(t, "all") ? 1 : 2;
}
static void trace_address(const char *what, uintptr_t p) {
  const allocation *a = find_allocation(p);
  if (a)
    fprintf(stderr, "%s allocation %d + %llu", what, a->id, (unsigned long long)(p - a->ptr));
  else
    fprintf(stderr, "%s host memory", what);
}

#define LOCKED(expr)              \
  do {                            \
    pthread_mutex_lock(&lock);    \
    CUresult r_ = (expr);         \
    pthread_mutex_unlock(&lock);  \
    return r_;                    \
  } while (0)

/* ---- entry points ---------------------------------------------------------------------------- */
static CUresult fake_init(unsigned flags) {
  if (flags) return E_INVALID_VALUE;
  if (is_mode("nodevice")) return E_NO_DEVICE;
  pthread_mutex_lock(&lock);
  initialized = 1;
  pthread_mutex_unlock(&lock);
  return OK;
}
static CUresult fake_driver_version(int *v) {
  if (!v) return E_INVALID_VALUE;
  *v = is_mode("old") ? 11080 : 13000;
  return OK;
}
static CUresult fake_error_name(CUresult r, const char **s) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].code == r) return *s = errors[i].name, OK;
  *s = NULL; /* what the real driver does for a code it does not know */
  return E_INVALID_VALUE;
}
static CUresult fake_error_string(CUresult r, const char **s) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].code == r) return *s = errors[i].text, OK;
  *s = NULL;
  return E_INVALID_VALUE;
}
static CUresult fake_device_count(int *n) {
  if (!n) return E_INVALID_VALUE;
  *n = device_count();
  return initialized || is_mode("nodevice") ? OK : E_NOT_INITIALIZED;
}
static CUresult fake_device_get(int *dev, int ordinal) {
  CUresult r = need_device(ordinal);
  if (r == OK) *dev = ordinal;
  return r;
}
static CUresult fake_device_name(char *name, int len, int dev) {
  CUresult r = need_device(dev);
  if (r != OK) return r;
  if (!name || len <= 0) return E_INVALID_VALUE;
  strncpy(name, FAKE_NAME, (size_t)len - 1);
  name[len - 1] = '\0';
  return OK;
}
static CUresult fake_device_attribute(int *value, int attrib, int dev) {
  CUresult r = need_device(dev);
  if (r != OK) return r;
  switch (attrib) {
  case 16: *value = sm_count(); break;                /* MULTIPROCESSOR_COUNT */
  case 38: *value = 50 << 20; break;                  /* L2_CACHE_SIZE */
  case 41: *value = 1; break;                         /* UNIFIED_ADDRESSING */
  case 75: *value = compute_capability() / 10; break; /* COMPUTE_CAPABILITY_MAJOR */
  case 76: *value = compute_capability() % 10; break; /* COMPUTE_CAPABILITY_MINOR */
  case 97: *value = smem_optin(); break;              /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
  default: return E_INVALID_VALUE; /* kiln asks for nothing else; a new query shows up here */
  }
  return OK;
}
static CUresult fake_device_total_mem(size_t *bytes, int dev) {
  CUresult r = need_device(dev);
  if (r == OK) *bytes = memory_limit();
  return r;
}
static CUresult primary_retain(void **pctx, int dev) {
  CUresult r = need_device(dev);
  if (r != OK) return r;
  primary_retains++, retains[dev]++;
  *pctx = &primary_contexts[dev];
  return OK;
}
static CUresult fake_primary_retain(void **pctx, int dev) { LOCKED(primary_retain(pctx, dev)); }
static CUresult primary_release(int dev) {
  CUresult r = need_device(dev);
  if (r != OK) return r;
  if (retains[dev] <= 0) return E_INVALID_CONTEXT; /* released more often than retained */
  primary_retains--, retains[dev]--;
  return OK;
}
static CUresult fake_primary_release(int dev) { LOCKED(primary_release(dev)); }
static CUresult fake_ctx_get_current(void **pctx) {
  if (!initialized) return E_NOT_INITIALIZED;
  *pctx = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
  return OK;
}
static CUresult fake_ctx_push(void *ctx) {
  if (!initialized) return E_NOT_INITIALIZED;
  if (context_device(ctx) < 0) return E_INVALID_CONTEXT;
  if (ctx_depth == (int)(sizeof ctx_stack / sizeof ctx_stack[0])) return E_UNKNOWN;
  ctx_stack[ctx_depth++] = ctx;
  return OK;
}
static CUresult fake_ctx_pop(void **pctx) {
  if (!initialized) return E_NOT_INITIALIZED;
  if (ctx_depth == 0) return E_INVALID_CONTEXT;
  void *top = ctx_stack[--ctx_depth];
  if (pctx) *pctx = top;
  return OK;
}
static CUresult fake_ctx_synchronize(void) { LOCKED(need_context()); }

/* nokernel: one name (the sm_90a attention forward's first kernel) is not in its image, as with
 * an image from another build; nofunction: the 7th function asked for has no code for the
 * device (counted from the first image a context creation loads, so each attempt fails alike). */
#define FAKE_MISSING_KERNEL "kiln_attn_fwd_wgmma_f16_d64"
static int functions_asked;
static CUresult library_load(void **lib, const void *code) {
  if (!initialized) return E_NOT_INITIALIZED;
  if (!lib || !code) return E_INVALID_VALUE;
  /* noimage: with two images loaded, the next has no code for this device (so each context
   * creation loads two, fails on the third, and must unload the two) */
  if (is_mode("noimage") && live_libraries >= 2) return E_NO_BINARY_FOR_GPU;
  if (is_mode("loadfail") && live_libraries >= 1) return E_OUT_OF_MEMORY; /* the second image */
  if (!live_libraries) functions_asked = 0;
  CUresult r = handle_new(libraries, &live_libraries, lib);
  if (r != OK) return r;
  const int i = handle_find(libraries, (uintptr_t)*lib);
  library_loads++, library_smem[i] = 48 << 10;
  static const char tag[] = "kiln placeholder image: ";
  library_image[i][0] = '\0';
  if (!memcmp(code, tag, sizeof tag - 1))
    snprintf(library_image[i], sizeof library_image[i], "%s", (const char *)code + sizeof tag - 1);
  return OK;
}
static CUresult fake_library_load_data(void **lib, const void *code, int *jo, void **jv, unsigned njo, int *lo,
                                       void **lv, unsigned nlo) {
  (void)jo, (void)jv, (void)lo, (void)lv;
  if (njo || nlo) return E_INVALID_VALUE; /* kiln passes no options */
  LOCKED(library_load(lib, code));
}
static CUresult fake_library_unload(void *lib) { LOCKED(handle_release(libraries, &live_libraries, lib)); }
/* A kernel and its function are the library's handle itself: a launch through a function of an
 * unloaded library is then CUDA_ERROR_INVALID_HANDLE. */
static CUresult library_get_kernel(void **kernel, void *lib, const char *name) {
  if (handle_find(libraries, (uintptr_t)lib) < 0) return E_INVALID_HANDLE;
  if (!kernel || !name || !*name) return E_INVALID_VALUE;
  if (is_mode("nokernel") && !strcmp(name, FAKE_MISSING_KERNEL)) return E_NOT_FOUND;
  *kernel = lib;
  return OK;
}
static CUresult fake_library_get_kernel(void **kernel, void *lib, const char *name) {
  LOCKED(library_get_kernel(kernel, lib, name));
}
static CUresult kernel_get_function(void **fn, void *kernel) {
  CUresult r = need_context();
  if (r != OK) return r;
  if (handle_find(libraries, (uintptr_t)kernel) < 0) return E_INVALID_HANDLE;
  if (is_mode("nofunction") && ++functions_asked == 7) return E_NO_BINARY_FOR_GPU;
  *fn = kernel;
  return OK;
}
static CUresult fake_kernel_get_function(void **fn, void *kernel) { LOCKED(kernel_get_function(fn, kernel)); }
static CUresult func_get_attribute(int *value, int attrib, void *fn) {
  if (handle_find(libraries, (uintptr_t)fn) < 0) return E_INVALID_HANDLE;
  switch (attrib) {
  case 1: *value = 0; break;  /* SHARED_SIZE_BYTES (static) */
  case 3: *value = 0; break;  /* LOCAL_SIZE_BYTES */
  case 4: *value = 64; break; /* NUM_REGS */
  default: return E_INVALID_VALUE;
  }
  return OK;
}
static CUresult fake_func_get_attribute(int *value, int attrib, void *fn) {
  LOCKED(func_get_attribute(value, attrib, fn));
}
static CUresult func_set_attribute(void *fn, int attrib, int value) {
  const int i = handle_find(libraries, (uintptr_t)fn);
  if (i < 0) return E_INVALID_HANDLE;
  if (attrib != 8 /* MAX_DYNAMIC_SHARED_SIZE_BYTES */ || value < 0 || value > smem_optin()) return E_INVALID_VALUE;
  library_smem[i] = value;
  return OK;
}
static CUresult fake_func_set_attribute(void *fn, int attrib, int value) {
  LOCKED(func_set_attribute(fn, attrib, value));
}
/* Bytes from an operand's first element to one past its last: dims extents n[] at element
 * strides st[], elements of `elem` bytes (0 when it has no element; saturating). */
static uint64_t extent(int dims, const int64_t *n, const int64_t *st, int64_t elem) {
  uint64_t last = 0, term;
  for (int i = 0; i < dims; i++) {
    if (n[i] <= 0) return 0;
    if (st[i] < 0 || __builtin_mul_overflow((uint64_t)(n[i] - 1), (uint64_t)st[i], &term) ||
        __builtin_add_overflow(last, term, &last))
      return UINT64_MAX >> 1;
  }
  return (last + 1) * (uint64_t)elem;
}
/* [batch][rows][cols] at strides (bs, rs, cs) */
static uint64_t matrix_bytes(int64_t batch, int64_t bs, int64_t rows, int64_t rs, int64_t cols, int64_t cs,
                             int64_t elem) {
  const int64_t n[3] = {batch, rows, cols}, st[3] = {bs, rs, cs};
  return extent(3, n, st, elem);
}
static int dtype_bytes(int32_t dt) { return dt == KILN_DT_F32 ? 4 : 2; }

/* kiln's native int4 weight of kiln.h: codes u32 [k / 8][n], scales f16 and zeros u8
 * [k / group][n], perm i32 [k]; a NULL part is not read (the int8 problems of w4_prefill_sm90) */
static const char *check_int4_weight(const uint32_t *codes, const uint16_t *scales, const uint8_t *zeros,
                                     const int32_t *perm, int64_t k, int64_t n, int64_t group) {
  const int64_t groups = group > 0 ? k / group : 0;
  /* a misaligned element load faults on a GPU */
  if ((uintptr_t)codes % 4) return "codes (misaligned)";
  if ((uintptr_t)scales % 2) return "scales (misaligned)";
  if ((uintptr_t)perm % 4) return "perm (misaligned)";
  if (codes && check_declared((uintptr_t)codes, matrix_bytes(1, 0, k / 8, n, n, 1, 4))) return "codes";
  if (scales && check_declared((uintptr_t)scales, matrix_bytes(1, 0, groups, n, n, 1, 2))) return "scales";
  if (zeros && check_declared((uintptr_t)zeros, matrix_bytes(1, 0, groups, n, n, 1, 1))) return "zeros";
  if (perm && check_declared((uintptr_t)perm, matrix_bytes(1, 0, 1, 0, k, 1, 4))) return "perm";
  return NULL;
}
/* A W·A16 product's x [m][k] and y [m][n] */
static const char *check_x_y(const void *x, int64_t x_rs, int64_t x_cs, int32_t x_dtype, const void *y, int64_t y_rs,
                             int64_t y_cs, int32_t y_dtype, int64_t m, int64_t k, int64_t n) {
  if (x && check_declared((uintptr_t)x, matrix_bytes(1, 0, m, x_rs, k, x_cs, dtype_bytes(x_dtype)))) return "x";
  if (y && check_declared((uintptr_t)y, matrix_bytes(1, 0, m, y_rs, n, y_cs, dtype_bytes(y_dtype)))) return "y";
  return NULL;
}
static const char *check_int4_args(const kiln_int4_args *a) {
  const char *bad = check_x_y(a->x, a->x_rs, a->x_cs, a->x_dtype, a->y, a->y_rs, a->y_cs, a->y_dtype, a->m, a->k, a->n);
  return bad ? bad : check_int4_weight(a->codes, a->scales, a->zeros, a->perm, a->k, a->n, a->group);
}
/* n f32 scales scale_stride apart (stride 0: one scale) */
static const char *check_scales(const float *scale, int64_t n, int64_t stride) {
  return scale && check_declared((uintptr_t)scale, matrix_bytes(1, 0, stride ? n : 1, stride, 1, 0, 4)) ? "scale"
                                                                                                         : NULL;
}
/* An int8 weight [k][n] and its scales */
static const char *check_int8_weight(const kiln_qkv_proj *p, int64_t k) {
  if (p->w && check_declared((uintptr_t)p->w, matrix_bytes(1, 0, k, p->w_rs, p->n, p->w_cs, 1))) return "w";
  return check_scales(p->scale, p->n, p->scale_stride);
}
/* A fused QKV call: x and each non-empty projection's weight and output ("k.scales": the key
 * projection's scales; the kernel has not run, so the lock keeps `where` ours until printed) */
static const char *check_qkv_args(const kiln_qkv_args *q) {
  static char where[32];
  for (int i = 0; i < 3; i++) {
    const kiln_qkv_proj *p = &q->proj[i];
    if (p->n <= 0) continue;
    const char *bad = check_x_y(q->x, q->x_rs, q->x_cs, q->x_dtype, p->y, p->y_rs, p->y_cs, q->y_dtype, q->m, q->k, p->n);
    if (!bad) bad = check_int4_weight(p->codes, p->scales, p->zeros, p->perm, q->k, p->n, p->group);
    if (!bad) bad = check_int8_weight(p, q->k);
    if (bad && !strcmp(bad, "x")) return bad;
    if (bad) return snprintf(where, sizeof where, "%c.%s", "qkv"[i], bad), where;
  }
  return NULL;
}
/* The dequantized copy's [k][n] of 16-bit elements, rows ld apart */
static const char *check_workspace(void *const *ws, int64_t k, int64_t n, const int64_t *ld) {
  return check_declared((uintptr_t)*ws, matrix_bytes(1, 0, k, *ld, n, 1, 2)) ? "ws" : NULL;
}

/* What a kernel of an image whose arguments the fake knows reads and writes, against the
 * buffers its pointers fall in (check_declared): the fuzz build's guard that no shape kiln
 * accepts makes a kernel (which never runs here) address memory outside its buffers. NULL when
 * every operand fits, else the first that does not. */
/* A WGMMA walk's stream-K workspace over a grid of gx blocks: the flags (2 a block), and the
 * partials (2 x 64 x tile_n values of 4 bytes a block) */
static const char *check_stream_k(const kiln_stream_k *sk, unsigned gx) {
  if (sk->items <= 0) return NULL;
  if (check_declared((uintptr_t)sk->flags, (uint64_t)gx * 2 * 8)) return "stream-K flags";
  if (check_declared((uintptr_t)sk->partials, (uint64_t)gx * 128 * (uint64_t)sk->tile_n * 4)) return "stream-K partials";
  return NULL;
}

static const char *check_launch_args(const char *image, void **params, unsigned gx) {
  if (!params || !params[0]) return NULL;
  const void *args = params[0];
  if (!strcmp(image, "gemm_sm80") || !strcmp(image, "gemm_sm90")) {
    const kiln_gemm_args *g = args;
    if (!strcmp(image, "gemm_sm90") && check_stream_k(&g->sk, gx)) return check_stream_k(&g->sk, gx);
    if (check_declared((uintptr_t)g->a, matrix_bytes(g->batch, g->a_bs, g->m, g->a_rs, g->k, g->a_cs, 2))) return "A";
    if (check_declared((uintptr_t)g->b, matrix_bytes(g->batch, g->b_bs, g->k, g->b_rs, g->n, g->b_cs, 2))) return "B";
    if (check_declared((uintptr_t)g->c,
                       matrix_bytes(g->batch, g->c_bs, g->m, g->c_rs, g->n, 1, dtype_bytes(g->c_dtype))))
      return "C";
  } else if (!strcmp(image, "gemm_int8_sm80") || !strcmp(image, "gemm_int8_sm90")) {
    const kiln_int8_args *g = args;
    if (check_declared((uintptr_t)g->a, matrix_bytes(g->batch, g->a_bs, g->m, g->a_rs, g->k, g->a_cs, 1))) return "A";
    if (check_declared((uintptr_t)g->b, matrix_bytes(g->batch, g->b_bs, g->k, g->b_rs, g->n, g->b_cs, 1))) return "B";
    if (check_declared((uintptr_t)g->c,
                    matrix_bytes(g->batch, g->c_bs, g->m, g->c_rs, g->n, g->c_cs, dtype_bytes(g->c_dtype))))
      return "C";
    if (g->row_scale && check_declared((uintptr_t)g->row_scale, matrix_bytes(1, 0, g->m, g->row_scale_stride, 1, 0, 4)))
      return "row_scale";
    if (g->col_scale && check_declared((uintptr_t)g->col_scale, matrix_bytes(1, 0, g->n, g->col_scale_stride, 1, 0, 4)))
      return "col_scale";
  } else if (!strncmp(image, "attention", 9)) { /* every attention image: kiln_attn_args */
    const kiln_attn_args *t = args;
    const struct {
      const void *p;
      int64_t heads, rows, cols;
      const int64_t *st; /* bs, hs, ss, ds */
      int32_t dtype;
      const char *name;
    } ops[8] = {
        {t->q, t->hq, t->sq, t->d, &t->q_bs, t->in_dtype, "q"},
        {t->k, t->hkv, t->sk, t->d, &t->k_bs, t->in_dtype, "k"},
        {t->v, t->hkv, t->sk, t->dv_dim, &t->v_bs, t->in_dtype, "v"},
        {t->o, t->hq, t->sq, t->dv_dim, &t->o_bs, t->o_dtype, "o"},
        {t->dout, t->hq, t->sq, t->dv_dim, &t->do_bs, t->do_dtype, "dout"},
        {t->dq, t->hq, t->sq, t->d, &t->dq_bs, t->dq_dtype, "dq"},
        {t->dk, t->hkv, t->sk, t->d, &t->dk_bs, t->dk_dtype, "dk"},
        {t->dv, t->hkv, t->sk, t->dv_dim, &t->dv_bs, t->dv_dtype, "dv"},
    };
    for (int i = 0; i < 8; i++) {
      const int64_t n[4] = {t->batch, ops[i].heads, ops[i].rows, ops[i].cols};
      if (ops[i].p && check_declared((uintptr_t)ops[i].p, extent(4, n, ops[i].st, dtype_bytes(ops[i].dtype))))
        return ops[i].name;
    }
    const int64_t rows = (int64_t)t->batch * t->hq * t->sq;
    if (t->lse && check_declared((uintptr_t)t->lse, matrix_bytes(t->batch, t->lse_bs, t->hq, t->lse_hs, t->sq, 1, 4)))
      return "lse";
    if (t->delta && check_declared((uintptr_t)t->delta, (uint64_t)rows * 4)) return "delta";
    if (t->do_copy && check_declared((uintptr_t)t->do_copy, (uint64_t)rows * t->dv_dim * dtype_bytes(t->in_dtype)))
      return "do_copy";
  } else if (!strcmp(image, "wa16_decode_sm80")) {
    return check_qkv_args(args);
  } else if (!strcmp(image, "wa16_decode_sm90")) {
    return check_qkv_args(&((const kiln_wa16_tma_args *)args)->a);
  } else if (!strcmp(image, "w4_prefill_sm90")) {
    const kiln_w4_wgmma_args *w = args;
    for (int i = 0; i < w->count && i < KILN_W4_WG_PROBLEMS; i++) {
      const char *bad = check_int4_args(&w->a[i]);
      if (!bad) bad = check_scales(w->scale[i], w->a[i].n, w->scale_stride[i]);
      if (bad) return bad;
    }
  } else if (!strcmp(image, "w4_dequant")) { /* (kiln_int4_args, ws, cols, ld): x and y unused */
    const kiln_int4_args *a = args;
    const char *bad = check_int4_weight(a->codes, a->scales, a->zeros, a->perm, a->k, a->n, a->group);
    return bad ? bad : check_workspace(params[1], a->k, a->n, params[3]);
  } else if (!strcmp(image, "w8_dequant")) { /* (kiln_qkv_proj, k, ws, ld) */
    const int64_t k = *(const int32_t *)params[1];
    const char *bad = check_int8_weight(args, k);
    return bad ? bad : check_workspace(params[2], k, ((const kiln_qkv_proj *)args)->n, params[3]);
  } else if (!strcmp(image, "qweight")) { /* every kernel: kiln_qweight_args; format 0: src is a float [k][n] */
    const kiln_qweight_args *q = args;
    const char *bad = check_int4_weight(q->codes, q->scales, q->zeros, q->perm, q->k, q->n, q->group);
    if (bad) return bad;
    const int64_t groups = q->group > 0 ? q->k / q->group : 0;
    uint64_t src_bytes;
    if (q->format == KILN_QF_REFERENCE) src_bytes = (uint64_t)(q->k / 8) * (uint64_t)q->n * 4; /* one dense buffer */
    else if (q->format == KILN_QF_AWQ) src_bytes = matrix_bytes(1, 0, q->k, q->src_rs, q->n / 8, q->src_cs, 4);
    else if (q->format) src_bytes = matrix_bytes(1, 0, q->k / 8, q->src_rs, q->n, q->src_cs, 4);
    else src_bytes = matrix_bytes(1, 0, q->k, q->src_rs, q->n, q->src_cs, dtype_bytes(q->dtype));
    if (check_declared((uintptr_t)q->src, src_bytes)) return "src";
    if (q->qzeros && check_declared((uintptr_t)q->qzeros, matrix_bytes(1, 0, groups, q->qzeros_rs, q->n / 8, q->qzeros_cs, 4)))
      return "qzeros";
    if (q->src_scales &&
        check_declared((uintptr_t)q->src_scales, matrix_bytes(1, 0, groups, q->src_scales_rs, q->n, q->src_scales_cs, 2)))
      return "src_scales";
    if (q->g_idx && check_declared((uintptr_t)q->g_idx, matrix_bytes(1, 0, q->k, q->g_idx_s, 1, 0, 4))) return "g_idx";
    if (q->g_idx && !q->perm) return "perm (NULL beside a g_idx)";
  } else if (!strcmp(image, "int8_quantize")) {
    const kiln_int8_quant_args *q = args;
    if (check_declared((uintptr_t)q->w, matrix_bytes(1, 0, q->k, q->w_rs, q->n, q->w_cs, dtype_bytes(q->w_dtype))))
      return "w";
    if (check_declared((uintptr_t)q->q, matrix_bytes(1, 0, q->k, q->q_rs, q->n, q->q_cs, 1))) return "q";
    if (check_scales(q->scales, q->n, q->phase == KILN_Q8_COLUMNS ? q->scales_stride : 0)) return "scales";
  } else if (!strcmp(image, "cast")) {
    const kiln_cast_args *c = args;
    if (c->count && check_declared((uintptr_t)c->src, extent(4, c->shape, c->src_strides, dtype_bytes(c->src_dtype))))
      return "src";
    if (c->count && check_declared((uintptr_t)c->dst, extent(4, c->shape, c->dst_strides, dtype_bytes(c->dst_dtype))))
      return "dst";
  }
  return NULL;
}

static CUresult launch(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, void *stream, void **params, void **extra) {
  CUresult r = need_context();
  if (r != OK) return r;
  if (is_mode("launchfail")) return E_INVALID_HANDLE;
  if (handle_find(libraries, (uintptr_t)fn) < 0) return E_INVALID_HANDLE;
  if ((r = check_stream_here(stream)) != OK) return r;
  if (!gx || !gy || !gz || gx > 0x7FFFFFFFu || gy > 65535 || gz > 65535 || !bx || !by || !bz ||
      (uint64_t)bx * by * bz > 1024 || (int64_t)smem > library_smem[handle_find(libraries, (uintptr_t)fn)] ||
      (!params && !extra))
    return E_INVALID_VALUE;
  const int lib = handle_find(libraries, (uintptr_t)fn);
  const char *outside = library_image[lib][0] ? check_launch_args(library_image[lib], params, gx) : NULL;
  if (trace_level() == 2 || (outside && trace_level()))
    fprintf(stderr, "fake_libcuda: launch of library %llu%s%s: grid %u x %u x %u, block %u x %u x %u, %u bytes of "
            "shared memory%s%s\n", (unsigned long long)(uintptr_t)fn, library_image[lib][0] ? " " : "",
            library_image[lib], gx, gy, gz, bx, by, bz, smem, outside ? "; refused: reaches past its buffer: " : "",
            outside ? outside : "");
  if (outside) return E_INVALID_VALUE;
  launches[current_device()]++;
  return OK; /* the kernel "ran" */
}
static CUresult fake_launch(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned smem, void *stream, void **params, void **extra) {
  LOCKED(launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra));
}
/* cuLaunchKernelEx's configuration and its attributes (kiln sends programmatic stream
 * serialization, id 6, value 0 or 1, or a cluster's dimensions, id 4: x of 1..8 (the portable
 * cluster size of a real sm_90; FAKE_CUDA_MAX_CLUSTER lowers it) that divides the grid's x,
 * y = z = 1) */
typedef struct {
  unsigned gx, gy, gz, bx, by, bz, smem;
  void *stream;
  const struct {
    int id;
    char pad[4];
    int value[16];
  } *attrs;
  unsigned n_attrs;
} launch_config;
static CUresult launch_ex(const launch_config *c, void *fn, void **params, void **extra) {
  if (!c || (c->n_attrs && !c->attrs)) return E_INVALID_VALUE;
  for (unsigned i = 0; i < c->n_attrs; i++) {
    const int *v = c->attrs[i].value;
    if (c->attrs[i].id == 4) {
      if (v[0] < 1 || v[0] > env_int("FAKE_CUDA_MAX_CLUSTER", 8) || v[1] != 1 || v[2] != 1 || c->gx % (unsigned)v[0])
        return E_INVALID_VALUE;
      clustered_launches++;
    } else if (c->attrs[i].id != 6 || (v[0] != 0 && v[0] != 1))
      return E_INVALID_VALUE;
  }
  return launch(fn, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->smem, c->stream, params, extra);
}
static CUresult fake_launch_ex(const launch_config *c, void *fn, void **params, void **extra) {
  LOCKED(launch_ex(c, fn, params, extra));
}

static CUresult mem_alloc(uint64_t *ptr, size_t bytes) {
  CUresult r = need_context();
  if (r != OK) return r;
  if (!ptr || !bytes) return E_INVALID_VALUE;
  if (bytes > memory_limit() - live_bytes) return E_OUT_OF_MEMORY;
  size_t rounded = (bytes + 255) & ~(size_t)255; /* cuMemAlloc is 256-byte aligned */
  allocation *a = malloc(sizeof *a);
  const int virtual = bytes >= FAKE_VIRTUAL_BYTES;
  void *p = !a || rounded < bytes ? NULL
            : virtual ? mmap(NULL, rounded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                      : aligned_alloc(256, rounded);
  if (!p || p == MAP_FAILED) {
    free(a);
    return E_OUT_OF_MEMORY;
  }
  *a = (allocation){allocations, (uintptr_t)p, bytes, ++allocations_made, virtual};
  allocations = a;
  live_allocations++;
  live_bytes += bytes;
  *ptr = (uint64_t)(uintptr_t)p;
  return OK;
}
static CUresult fake_mem_alloc(uint64_t *ptr, size_t bytes) { LOCKED(mem_alloc(ptr, bytes)); }
static CUresult mem_free(uint64_t ptr) {
  CUresult r = need_context();
  if (r != OK) return r;
  for (allocation **pa = &allocations; *pa; pa = &(*pa)->next) {
    allocation *a = *pa;
    if (a->ptr == (uintptr_t)ptr) {
      *pa = a->next;
      live_allocations--;
      live_bytes -= a->bytes;
      if (a->virtual)
        munmap((void *)a->ptr, (a->bytes + 255) & ~(size_t)255);
      else
        free((void *)a->ptr);
      free(a);
      return OK;
    }
  }
  return E_INVALID_VALUE; /* not an allocation's base, or freed twice */
}
static CUresult fake_mem_free(uint64_t ptr) { LOCKED(mem_free(ptr)); }
static CUresult mem_get_info(size_t *free_bytes, size_t *total_bytes) {
  CUresult r = need_context();
  if (r != OK) return r;
  *free_bytes = memory_limit() - live_bytes;
  *total_bytes = memory_limit();
  return OK;
}
static CUresult fake_mem_get_info(size_t *free_bytes, size_t *total_bytes) {
  LOCKED(mem_get_info(free_bytes, total_bytes));
}
/* A device range must lie inside one allocation; other addresses are taken as host memory. */
static CUresult check_range(uint64_t p, size_t bytes) {
  const allocation *a = find_allocation((uintptr_t)p);
  return !a || bytes <= a->ptr + a->bytes - (uintptr_t)p ? OK : E_INVALID_VALUE;
}
static int is_virtual(uint64_t p) {
  const allocation *a = find_allocation((uintptr_t)p);
  return a && a->virtual;
}
static CUresult memcpy_async(uint64_t dst, uint64_t src, size_t bytes, void *stream) {
  CUresult r = need_context();
  if (r == OK) r = check_stream_here(stream);
  if (r == OK) r = check_range(dst, bytes);
  if (r == OK) r = check_range(src, bytes);
  if (r == OK && bytes && !is_virtual(dst) && !is_virtual(src))
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
  return r;
}
static CUresult fake_memcpy_async(uint64_t dst, uint64_t src, size_t bytes, void *stream) {
  LOCKED(memcpy_async(dst, src, bytes, stream));
}
static CUresult memset_async(uint64_t dst, uint32_t value, size_t n, size_t width, void *stream) {
  CUresult r = need_context();
  if (r == OK) r = check_stream_here(stream);
  if (r == OK && (dst % width || !find_allocation((uintptr_t)dst))) r = E_INVALID_VALUE;
  if (r == OK) r = check_range(dst, n * width);
  if (r != OK || is_virtual(dst)) return r;
  unsigned char *p = (unsigned char *)(uintptr_t)dst;
  for (size_t i = 0; i < n; i++) memcpy(p + i * width, &value, width); /* little-endian: the low bytes */
  return OK;
}
static CUresult fake_memset_d8(uint64_t dst, unsigned char v, size_t n, void *stream) {
  LOCKED(memset_async(dst, v, n, 1, stream));
}
static CUresult fake_memset_d16(uint64_t dst, unsigned short v, size_t n, void *stream) {
  LOCKED(memset_async(dst, v, n, 2, stream));
}
static CUresult fake_memset_d32(uint64_t dst, unsigned int v, size_t n, void *stream) {
  LOCKED(memset_async(dst, v, n, 4, stream));
}

static CUresult stream_create(void **stream, unsigned flags) {
  CUresult r = need_context();
  if (r != OK) return r;
  if (!stream || flags > 1) return E_INVALID_VALUE;
  if ((r = handle_new(streams, &live_streams, stream)) == OK)
    stream_device[handle_find(streams, (uintptr_t)*stream)] = current_device();
  return r;
}
static CUresult fake_stream_create(void **stream, unsigned flags) { LOCKED(stream_create(stream, flags)); }
static CUresult fake_stream_destroy(void *stream) { LOCKED(handle_release(streams, &live_streams, stream)); }
static CUresult stream_synchronize(void *stream) {
  CUresult r = stream ? OK : need_context(); /* the legacy stream is the current context's */
  return r == OK ? check_stream(stream) : r;
}
static CUresult fake_stream_synchronize(void *stream) { LOCKED(stream_synchronize(stream)); }

static CUresult event_create(void **event, unsigned flags) {
  CUresult r = need_context();
  if (r != OK) return r;
  if (!event || flags > 15) return E_INVALID_VALUE;
  return handle_new(events, &live_events, event);
}
static CUresult fake_event_create(void **event, unsigned flags) { LOCKED(event_create(event, flags)); }
static CUresult event_check(void *event) { return handle_find(events, (uintptr_t)event) >= 0 ? OK : E_INVALID_HANDLE; }
static CUresult event_record(void *event, void *stream) {
  CUresult r = event_check(event);
  return r == OK ? check_stream(stream) : r;
}
static CUresult fake_event_record(void *event, void *stream) { LOCKED(event_record(event, stream)); }
static CUresult fake_event_synchronize(void *event) { LOCKED(event_check(event)); }
static CUresult event_elapsed(float *ms, void *start, void *end) {
  CUresult r = event_check(start);
  if (r == OK) r = event_check(end);
  if (r == OK) *ms = 0.001f;
  return r;
}
static CUresult fake_event_elapsed(float *ms, void *start, void *end) { LOCKED(event_elapsed(ms, start, end)); }
static CUresult fake_event_destroy(void *event) { LOCKED(handle_release(events, &live_events, event)); }

static CUresult occupancy_clusters(int *clusters, void *fn, const launch_config *config) {
  CUresult r = need_context();
  if (r != OK) return r;
  if (handle_find(libraries, (uintptr_t)fn) < 0) return E_INVALID_HANDLE;
  if (!clusters || !config || (config->n_attrs && !config->attrs)) return E_INVALID_VALUE;
  int size = 2; /* the pair kernels carry theirs */
  for (unsigned i = 0; i < config->n_attrs; i++)
    if (config->attrs[i].id == 4) size = config->attrs[i].value[0];
  if (size < 1 || size > 8) return E_INVALID_VALUE; /* beyond 8 the kernel must allow non-portable sizes */
  /* FAKE_CUDA_MAX_CLUSTER: the largest cluster a GPC of the fake device holds (default 8) */
  *clusters = size > env_int("FAKE_CUDA_MAX_CLUSTER", 8) ? 0 : sm_count() / size;
  return OK;
}
static CUresult fake_occupancy_clusters(int *clusters, void *fn, const launch_config *config) {
  LOCKED(occupancy_clusters(clusters, fn, config));
}
/* Bytes of an element of CUtensorMapDataType `dtype` (UINT8 .. TFLOAT32_FTZ), 0 for anything else. */
static uint64_t tensor_map_elem(int dtype) {
  static const uint8_t bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  return dtype >= 0 && dtype < (int)sizeof bytes ? bytes[dtype] : 0;
}
/* The driver's documented requirements of cuTensorMapEncodeTiled (interleave NONE, which is all
 * kiln uses), and one more that only kiln's contract makes checkable: a map over device memory
 * must address nothing past the end of its allocation (TMA clips a box at the map's extents, so a
 * map inside the buffer keeps every copy inside it; a map past it reads or writes memory the
 * kernel does not own). FAKE_CUDA_TRACE prints refusals with their reason (trace_level). */
static CUresult tensor_map_encode(void *map, int dtype, uint32_t rank, void *address, const uint64_t *dims,
                                  const uint64_t *strides, const uint32_t *box, const uint32_t *element_strides,
                                  int interleave, int swizzle) {
  const char *why = NULL;
  const uint64_t elem = tensor_map_elem(dtype);
  uint64_t span = 0, term;
  if (!map || (uintptr_t)map % 64 || !elem || rank < 1 || rank > 5 || !address || !dims || (rank > 1 && !strides) ||
      !box || !element_strides || interleave != 0 || swizzle < 0 || swizzle > 3)
    why = "an argument out of range";
  else if ((uintptr_t)address % 16)
    why = "the address is not 16-byte aligned";
  for (uint32_t i = 0; !why && i + 1 < rank; i++) /* TMA strides: non-zero multiples of 16 bytes below 2^40 */
    if (strides[i] % 16 || strides[i] == 0 || strides[i] >= (1ull << 40)) why = "a stride";
  for (uint32_t i = 0; !why && i < rank; i++)
    if (box[i] == 0 || box[i] > 256 || dims[i] == 0 || dims[i] > (1ull << 32) || element_strides[i] == 0 ||
        element_strides[i] > 8)
      why = "a dimension, box or element stride";
  /* the inner box row: whole 16-byte units, and within the swizzle span (32, 64, 128 bytes) */
  if (!why && ((box[0] * elem) % 16 || (swizzle && box[0] * elem > (16ull << swizzle))))
    why = "the inner box row's bytes";
  if (!why) {
    span = dims[0] * elem; /* bytes from address to the last one addressed, saturating */
    for (uint32_t i = 1; i < rank; i++)
      if (__builtin_mul_overflow(dims[i] - 1, strides[i - 1], &term) || __builtin_add_overflow(span, term, &span))
        span = UINT64_MAX >> 1;
    if (check_declared((uint64_t)(uintptr_t)address, span) != OK) why = "it reaches past the end of its buffer";
  }
  if (trace_level() == 2 || (why && trace_level())) {
    fprintf(stderr, "fake_libcuda: cuTensorMapEncodeTiled %s%s (dtype %d, rank %u, swizzle %d, span %llu,",
            why ? "refused: " : "", why ? why : "made", dtype, rank, swizzle, (unsigned long long)span);
    trace_address(" at", (uintptr_t)address);
    for (uint32_t i = 0; dims && box && i < rank && i < 5; i++)
      fprintf(stderr, "; dim %llu box %u stride %llu", (unsigned long long)dims[i], box[i],
              (unsigned long long)(i && strides ? strides[i - 1] : elem));
    fprintf(stderr, ")\n");
  }
  if (why) return E_INVALID_VALUE;
  memset(map, 0, 128);
  memcpy(map, &address, sizeof address);
  tensor_maps++;
  return OK;
}
static CUresult fake_tensor_map_encode(void *map, int dtype, uint32_t rank, void *address, const uint64_t *dims,
                                       const uint64_t *strides, const uint32_t *box, const uint32_t *element_strides,
                                       int interleave, int swizzle, int l2, int oob) {
  (void)l2, (void)oob;
  LOCKED(tensor_map_encode(map, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle));
}

/* ---- cuGetProcAddress ---------------------------------------------------------------------- */
static const struct {
  const char *name;
  void *fn;
} entry_points[] = {
    {"cuInit", (void *)fake_init},
    {"cuDriverGetVersion", (void *)fake_driver_version},
    {"cuGetErrorName", (void *)fake_error_name},
    {"cuGetErrorString", (void *)fake_error_string},
    {"cuDeviceGetCount", (void *)fake_device_count},
    {"cuDeviceGet", (void *)fake_device_get},
    {"cuDeviceGetName", (void *)fake_device_name},
    {"cuDeviceGetAttribute", (void *)fake_device_attribute},
    {"cuDeviceTotalMem", (void *)fake_device_total_mem},
    {"cuDevicePrimaryCtxRetain", (void *)fake_primary_retain},
    {"cuDevicePrimaryCtxRelease", (void *)fake_primary_release},
    {"cuCtxGetCurrent", (void *)fake_ctx_get_current},
    {"cuCtxPushCurrent", (void *)fake_ctx_push},
    {"cuCtxPopCurrent", (void *)fake_ctx_pop},
    {"cuCtxSynchronize", (void *)fake_ctx_synchronize},
    {"cuLibraryLoadData", (void *)fake_library_load_data},
    {"cuLibraryUnload", (void *)fake_library_unload},
    {"cuLibraryGetKernel", (void *)fake_library_get_kernel},
    {"cuKernelGetFunction", (void *)fake_kernel_get_function},
    {"cuFuncGetAttribute", (void *)fake_func_get_attribute},
    {"cuFuncSetAttribute", (void *)fake_func_set_attribute},
    {"cuLaunchKernel", (void *)fake_launch},
    {"cuMemAlloc", (void *)fake_mem_alloc},
    {"cuMemFree", (void *)fake_mem_free},
    {"cuMemGetInfo", (void *)fake_mem_get_info},
    {"cuMemcpyAsync", (void *)fake_memcpy_async},
    {"cuMemsetD8Async", (void *)fake_memset_d8},
    {"cuMemsetD16Async", (void *)fake_memset_d16},
    {"cuMemsetD32Async", (void *)fake_memset_d32},
    {"cuStreamCreate", (void *)fake_stream_create},
    {"cuStreamDestroy", (void *)fake_stream_destroy},
    {"cuStreamSynchronize", (void *)fake_stream_synchronize},
    {"cuEventCreate", (void *)fake_event_create},
    {"cuEventRecord", (void *)fake_event_record},
    {"cuEventSynchronize", (void *)fake_event_synchronize},
    {"cuEventElapsedTime", (void *)fake_event_elapsed},
    {"cuEventDestroy", (void *)fake_event_destroy},
    {"cuLaunchKernelEx", (void *)fake_launch_ex},
    {"cuOccupancyMaxActiveClusters", (void *)fake_occupancy_clusters},
    {"cuTensorMapEncodeTiled", (void *)fake_tensor_map_encode},
};

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
  (void)version, (void)flags;
  *pfn = NULL;
  if (status) *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
  if (is_mode("missing") && strcmp(symbol, "cuLibraryLoadData") == 0) return E_NOT_FOUND;
  for (size_t i = 0; i < sizeof entry_points / sizeof entry_points[0]; i++)
    if (!strcmp(symbol, entry_points[i].name)) {
      *pfn = entry_points[i].fn;
      if (status) *status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
      return OK;
    }
  return E_NOT_FOUND; /* an entry point kiln added without teaching the fake: the load fails, naming it */
}

/* ---- the fake's bookkeeping, for the tests -------------------------------------------------- */
static int read_counter(const int *c) {
  pthread_mutex_lock(&lock);
  int v = *c;
  pthread_mutex_unlock(&lock);
  return v;
}
/* Device allocations not yet freed. */
EXPORT int fake_cuda_live_allocations(void) { return read_counter(&live_allocations); }
/* Declares [p, p + bytes) one of the test's buffers (check_declared); bytes 0 forgets them all. */
EXPORT int fake_cuda_declare(const void *p, size_t bytes) {
  pthread_mutex_lock(&lock);
  int ok = 1;
  if (!bytes)
    declared_count = 0;
  else if (declared_count < FAKE_MAX_DECLARED)
    declared[declared_count].lo = (uintptr_t)p, declared[declared_count++].hi = (uintptr_t)p + bytes;
  else
    ok = 0;
  pthread_mutex_unlock(&lock);
  return ok;
}
/* Libraries loaded and not unloaded; successful loads in all. */
EXPORT int fake_cuda_live_libraries(void) { return read_counter(&live_libraries); }
EXPORT int fake_cuda_library_loads(void) { return read_counter(&library_loads); }
/* Retains of the primary context not yet released. */
EXPORT int fake_cuda_primary_retains(void) { return read_counter(&primary_retains); }
/* Streams and events created and not destroyed. */
EXPORT int fake_cuda_live_streams(void) { return read_counter(&live_streams); }
EXPORT int fake_cuda_live_events(void) { return read_counter(&live_events); }
/* TMA descriptors encoded (which tells a test the path a call took). */
EXPORT int fake_cuda_tensor_maps(void) { return read_counter(&tensor_maps); }
/* Launches in clusters whose size kiln chose (cuLaunchKernelEx's cluster attribute). */
EXPORT int fake_cuda_clustered_launches(void) { return read_counter(&clustered_launches); }
/* Kernel launches on device 0 and on device 1. */
EXPORT int fake_cuda_launches_0(void) { return read_counter(&launches[0]); }
EXPORT int fake_cuda_launches_1(void) { return read_counter(&launches[1]); }
/* Contexts pushed on the calling thread and not popped. */
EXPORT int fake_cuda_context_depth(void) { return ctx_depth; }
