/* `hetgen tune`'s measurements, compiled once per candidate cache-block setting with
   -DHG_SGEMM_MC/KC/NC=... (hg_kernels.h takes them over its defaults) and linked with the very
   runtime/hg_gemm.c the generated projects use, with the same -march=native.

   hg_tune_gemm: seconds of each of `repeats` products C[m x n] = A[m x k] B[k x n], after one
   warm-up run, with the operand that a generated kernel packs at generate time given as panels
   (conv-like: A, the weights; matmul-like: B) and the other read through strides and packed block by
   block at run time, as an activation is.
   hg_tune_fma: float32 FMAs of a loop of independent vector FMA chains (the core's peak).
   hg_tune_copy: seconds of each of `repeats` copies of `bytes` bytes (memory bandwidth). */
#define _POSIX_C_SOURCE 199309L
#include <stdlib.h>
#include <time.h>

#include "hg_kernels.h"

int hg_tune_gemm(size_t m, size_t n, size_t k, int a_packed, int repeats, double *seconds);
double hg_tune_fma(long iterations);
int hg_tune_copy(size_t bytes, int repeats, double *seconds);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

static void fill(float *x, size_t count, unsigned seed)
{
    for (size_t i = 0; i < count; ++i) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
    }
}

int hg_tune_gemm(size_t m, size_t n, size_t k, int a_packed, int repeats, double *seconds)
{
    const size_t rows = round_up(m, HG_SGEMM_PANEL_M), cols = round_up(n, HG_SGEMM_PANEL_N);
    float *a = malloc(sizeof(float) * rows * k), *b = malloc(sizeof(float) * k * cols);
    float *c = malloc(sizeof(float) * m * n), *work = aligned_alloc(64, round_up(HG_SGEMM_PACK_BYTES(m, n, k), 64));
    if (!a || !b || !c || !work) {
        free(a), free(b), free(c), free(work);
        return -1;
    }
    fill(a, rows * k, 1u); /* as panels the padding rows are not zero; they only add to rows past m */
    fill(b, k * cols, 2u);
    hg_sgemm_operands ops = {0};
    if (a_packed) {
        ops.a_panels = a; /* panel[t][p][i]: ceil(m / PANEL_M) panels spanning all of k */
        ops.b = b, ops.b_rs = (ptrdiff_t)n, ops.b_cs = 1;
    } else {
        ops.a = a, ops.a_rs = (ptrdiff_t)k, ops.a_cs = 1;
        ops.b_panels = b; /* panel[t][p][j]: ceil(n / PANEL_N) panels spanning all of k */
    }
    hg_sgemm_ex(m, n, k, &ops, c, n, 0, NULL, NULL, work);
    for (int r = 0; r < repeats; ++r) {
        const double start = now();
        hg_sgemm_ex(m, n, k, &ops, c, n, 0, NULL, NULL, work);
        seconds[r] = now() - start;
    }
    volatile float keep = c[m * n - 1];
    (void)keep;
    free(a), free(b), free(c), free(work);
    return 0;
}

/* 12 independent chains of vector FMAs (enough to cover the FMA latency on two pipes), in the
   widest vector the compiler targets. */
#if defined(__AVX512F__)
#define HG_PEAK_BYTES 64
#elif defined(__AVX__)
#define HG_PEAK_BYTES 32
#else
#define HG_PEAK_BYTES 16
#endif
typedef float hg_vec __attribute__((vector_size(HG_PEAK_BYTES)));
#define LANES (HG_PEAK_BYTES / 4)

double hg_tune_fma(long iterations)
{
    hg_vec b = {0}, c = {0};
    for (int i = 0; i < LANES; ++i) {
        b[i] = 0.999999f;
        c[i] = 1e-7f;
    }
    hg_vec a0 = b, a1 = b * 2, a2 = b * 3, a3 = b * 4, a4 = b * 5, a5 = b * 6;
    hg_vec a6 = b * 7, a7 = b * 8, a8 = b * 9, a9 = b * 10, a10 = b * 11, a11 = b * 12;
    for (long n = 0; n < iterations; ++n) {
        a0 = a0 * b + c; a1 = a1 * b + c; a2 = a2 * b + c; a3 = a3 * b + c;
        a4 = a4 * b + c; a5 = a5 * b + c; a6 = a6 * b + c; a7 = a7 * b + c;
        a8 = a8 * b + c; a9 = a9 * b + c; a10 = a10 * b + c; a11 = a11 * b + c;
#if defined(__x86_64__)
        __asm__ volatile("" : "+v"(b)); /* b unknown each iteration: the loop cannot be folded */
#elif defined(__aarch64__)
        __asm__ volatile("" : "+w"(b));
#endif
    }
    hg_vec sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    volatile float keep = sum[0];
    (void)keep;
    return 2.0 * 12.0 * LANES * (double)iterations;
}

int hg_tune_copy(size_t bytes, int repeats, double *seconds)
{
    char *src = aligned_alloc(64, round_up(bytes, 64)), *dst = aligned_alloc(64, round_up(bytes, 64));
    if (!src || !dst) {
        free(src), free(dst);
        return -1;
    }
    memset(src, 1, bytes);
    memset(dst, 0, bytes); /* touched once, so no copy below pays for page faults */
    for (int r = 0; r < repeats; ++r) {
        const double start = now();
        memcpy(dst, src, bytes);
        __asm__ volatile("" : : "r"(dst) : "memory");
        seconds[r] = now() - start;
        src[r % bytes] = (char)r;
    }
    free(src), free(dst);
    return 0;
}
