/* hetgen's single-precision GEMM: GotoBLAS-style cache blocking around a register-tiled
   micro-kernel. Plain C11: the micro-kernel's fixed-size loops are what gcc/clang -O3
   auto-vectorise, on every target, without intrinsics. See hg_kernels.h for the contract. */
#include "hg_kernels.h"

/* Register tile (rows x columns of C held in registers), chosen per vector ISA by measurement:
   gcc keeps MR broadcast A values and MR * NR / lanes accumulators live, so a tile that would
   spill registers is much slower than a smaller one. */
#if defined(__clang__) && defined(__x86_64__)
/* clang allocates registers differently: its best tiles, measured like gcc's below */
#if defined(__AVX__) && !defined(__AVX512F__) && defined(__FMA__)
#define MR 4
#define NR 16
#else
#define MR 6
#define NR 16
#endif
#elif defined(__AVX512F__)
#define MR 8
#define NR 32
#elif defined(__AVX__) && defined(FP_FAST_FMAF)
#define MR 3
#define NR 32
#elif defined(__AVX__) || defined(__aarch64__) || defined(__ARM_NEON)
#define MR 4
#define NR 16
#else
#define MR 4
#define NR 8
#endif

_Static_assert(MR <= HG_SGEMM_MAX_MR && NR <= HG_SGEMM_MAX_NR, "pack workspace too small");
_Static_assert(HG_SGEMM_MC % MR == 0, "MC must be a multiple of MR");

/* fmaf is one instruction where FP_FAST_FMAF says so; elsewhere it would be a slow call. */
#ifdef FP_FAST_FMAF
#define HG_MADD(a, b, c) fmaf((a), (b), (c))
#else
#define HG_MADD(a, b, c) ((a) * (b) + (c))
#endif

static size_t min_size(size_t x, size_t y) { return x < y ? x : y; }

/* A block (mc x kc) -> MR-row panels, each stored k-major: pa[panel][p][0..MR). */
static void pack_a(size_t mc, size_t kc, const float *a, ptrdiff_t rs, ptrdiff_t cs,
                   float *restrict pa)
{
    for (size_t i0 = 0; i0 < mc; i0 += MR) {
        const size_t rows = min_size(MR, mc - i0);
        for (size_t p = 0; p < kc; ++p) {
            for (size_t i = 0; i < rows; ++i)
                pa[i] = a[(ptrdiff_t)(i0 + i) * rs + (ptrdiff_t)p * cs];
            for (size_t i = rows; i < MR; ++i)
                pa[i] = 0.0f;
            pa += MR;
        }
    }
}

/* B block (kc x nc) -> NR-column panels, each stored k-major: pb[panel][p][0..NR). */
static void pack_b(size_t kc, size_t nc, const float *b, ptrdiff_t rs, ptrdiff_t cs,
                   float *restrict pb)
{
    for (size_t j0 = 0; j0 < nc; j0 += NR) {
        const size_t cols = min_size(NR, nc - j0);
        if (cs == 1 && cols == NR) {
            for (size_t p = 0; p < kc; ++p) {
                const float *restrict row = b + (ptrdiff_t)p * rs + (ptrdiff_t)j0;
                for (size_t j = 0; j < NR; ++j)
                    pb[j] = row[j];
                pb += NR;
            }
            continue;
        }
        for (size_t p = 0; p < kc; ++p) {
            for (size_t j = 0; j < cols; ++j)
                pb[j] = b[(ptrdiff_t)p * rs + (ptrdiff_t)(j0 + j) * cs];
            for (size_t j = cols; j < NR; ++j)
                pb[j] = 0.0f;
            pb += NR;
        }
    }
}

/* C tile (rows x cols <= MR x NR) (+)= packed A panel * packed B panel. */
static void micro_kernel(size_t kc, const float *restrict pa, const float *restrict pb,
                         float *restrict c, size_t ldc, size_t rows, size_t cols, int add)
{
    float acc[MR][NR];
    for (size_t i = 0; i < MR; ++i)
        for (size_t j = 0; j < NR; ++j)
            acc[i][j] = 0.0f;
    for (size_t p = 0; p < kc; ++p) {
#pragma GCC unroll 16
        for (size_t i = 0; i < MR; ++i) {
            const float ai = pa[i];
#pragma GCC unroll 32
            for (size_t j = 0; j < NR; ++j)
                acc[i][j] = HG_MADD(ai, pb[j], acc[i][j]);
        }
        pa += MR;
        pb += NR;
    }
    if (rows == MR && cols == NR) {
        for (size_t i = 0; i < MR; ++i) {
            float *restrict row = c + i * ldc;
            if (add)
                for (size_t j = 0; j < NR; ++j)
                    row[j] += acc[i][j];
            else
                for (size_t j = 0; j < NR; ++j)
                    row[j] = acc[i][j];
        }
        return;
    }
    for (size_t i = 0; i < rows; ++i) {
        float *restrict row = c + i * ldc;
        if (add)
            for (size_t j = 0; j < cols; ++j)
                row[j] += acc[i][j];
        else
            for (size_t j = 0; j < cols; ++j)
                row[j] = acc[i][j];
    }
}

/* x . y with 16 independent partial sums, which the compiler vectorises without reassociating.
   (Plain multiply-add: gcc vectorises this reduction worse with fmaf.) */
static float dot(size_t k, const float *restrict x, const float *restrict y)
{
    float part[16] = {0};
    const size_t main_k = k - k % 16;
    for (size_t p = 0; p < main_k; p += 16)
        for (size_t q = 0; q < 16; ++q)
            part[q] = x[p + q] * y[p + q] + part[q];
    float sum = 0.0f;
    for (size_t q = 0; q < 16; ++q)
        sum += part[q];
    for (size_t p = main_k; p < k; ++p)
        sum += x[p] * y[p];
    return sum;
}

/* Few rows of C (m < MR): packing would cost as much as the arithmetic, so stream B. */
static void small_m(size_t m, size_t n, size_t k, const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                    const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs, float *c, size_t ldc,
                    int accumulate)
{
    for (size_t i = 0; i < m; ++i) {
        float *restrict row = c + i * ldc;
        const float *ai = a + (ptrdiff_t)i * a_rs;
        if (b_cs == 1) {
            if (!accumulate)
                for (size_t j = 0; j < n; ++j)
                    row[j] = 0.0f;
            for (size_t p = 0; p < k; ++p) {
                const float s = ai[(ptrdiff_t)p * a_cs];
                const float *restrict bp = b + (ptrdiff_t)p * b_rs;
                for (size_t j = 0; j < n; ++j)
                    row[j] = HG_MADD(s, bp[j], row[j]);
            }
        } else if (b_rs == 1 && a_cs == 1) {
            for (size_t j = 0; j < n; ++j) {
                const float sum = dot(k, ai, b + (ptrdiff_t)j * b_cs);
                row[j] = accumulate ? row[j] + sum : sum;
            }
        } else {
            for (size_t j = 0; j < n; ++j) {
                float sum = 0.0f;
                for (size_t p = 0; p < k; ++p)
                    sum = HG_MADD(ai[(ptrdiff_t)p * a_cs], b[(ptrdiff_t)p * b_rs + (ptrdiff_t)j * b_cs],
                                  sum);
                row[j] = accumulate ? row[j] + sum : sum;
            }
        }
    }
}

void hg_sgemm(size_t m, size_t n, size_t k, const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
              const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs, float *c, size_t ldc, int accumulate,
              hg_gemm_epilogue_fn epilogue, const void *ctx, void *pack)
{
    if (m == 0 || n == 0)
        return;
    if (m < MR || k == 0) {
        small_m(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc, accumulate);
        if (epilogue)
            epilogue(c, ldc, 0, 0, m, n, ctx);
        return;
    }
    /* 64-byte aligned packing buffers carved out of the workspace */
    float *pa = (float *)(((uintptr_t)pack + 63u) & ~(uintptr_t)63u);
    float *pb = pa + (min_size(m, HG_SGEMM_MC) + HG_SGEMM_MAX_MR) * min_size(k, HG_SGEMM_KC);
    pb = (float *)(((uintptr_t)pb + 63u) & ~(uintptr_t)63u);

    for (size_t jc = 0; jc < n; jc += HG_SGEMM_NC) {
        const size_t nc = min_size(HG_SGEMM_NC, n - jc);
        for (size_t pc = 0; pc < k; pc += HG_SGEMM_KC) {
            const size_t kc = min_size(HG_SGEMM_KC, k - pc);
            const int add = accumulate || pc > 0;
            const int last = pc + kc == k;
            pack_b(kc, nc, b + (ptrdiff_t)pc * b_rs + (ptrdiff_t)jc * b_cs, b_rs, b_cs, pb);
            for (size_t ic = 0; ic < m; ic += HG_SGEMM_MC) {
                const size_t mc = min_size(HG_SGEMM_MC, m - ic);
                pack_a(mc, kc, a + (ptrdiff_t)ic * a_rs + (ptrdiff_t)pc * a_cs, a_rs, a_cs, pa);
                for (size_t jr = 0; jr < nc; jr += NR) {
                    const size_t cols = min_size(NR, nc - jr);
                    const float *panel_b = pb + (jr / NR) * NR * kc;
                    for (size_t ir = 0; ir < mc; ir += MR) {
                        const size_t rows = min_size(MR, mc - ir);
                        micro_kernel(kc, pa + (ir / MR) * MR * kc, panel_b,
                                     c + (ic + ir) * ldc + jc + jr, ldc, rows, cols, add);
                    }
                }
                if (last && epilogue)
                    epilogue(c + ic * ldc + jc, ldc, ic, jc, mc, nc, ctx);
            }
        }
    }
}
