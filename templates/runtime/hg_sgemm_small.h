/* hetgen's GEMM for few rows (m <= HG_SGEMM_SMALL_M): a transformer at batch 1 with a few tokens,
   a Gemm with one row. The blocked path would pack A into 8-row panels and run the 8-row micro-kernel,
   so one row costs eight rows of arithmetic plus the packing; here A is read in place through its
   strides, and B streams once, 32 columns at a time, from its generate-time panels or straight from
   its rows, into m x 32 accumulators. Sums run over k in the blocked path's order, with fused
   multiply-adds where it uses them, and HG_SGEMM_KC rows of B at a time, each block's sum added to
   C as the blocked path adds it: both paths give the same bits. Included by hg_gemm.c only. */
#ifndef HG_SGEMM_SMALL_H
#define HG_SGEMM_SMALL_H

#include "hg_kernels.h"

#define HG_SGEMM_SMALL_M 8

/* A multiply-add as the micro-kernels do it: fused where the target has an FMA instruction. */
#ifdef FP_FAST_FMAF
#define HG_SMALL_MADD(a, b, c) fmaf((a), (b), (c))
#else
#define HG_SMALL_MADD(a, b, c) ((a) * (b) + (c))
#endif

/* C[rows x 32] (+)= A[rows x k] B[k x 32], with B's row p at b + p * b_rs. Fixed-size loops (R
   rows, 32 columns) that the compiler keeps in vector registers for the ISA it targets. Columns
   past `cols` are computed (from the zero padding of the panels, or from a padded copy) and
   dropped. */
#define HG_SMALL_M_KERNEL(R)                                                                       \
    static void hg_sgemm_small_##R(size_t k, const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,       \
                                   const float *b, ptrdiff_t b_rs, float *c, size_t ldc, size_t cols, \
                                   int add)                                                        \
    {                                                                                              \
        float acc[R][HG_SGEMM_PANEL_N];                                                            \
        for (size_t i = 0; i < (R); ++i)                                                           \
            for (size_t j = 0; j < HG_SGEMM_PANEL_N; ++j)                                          \
                acc[i][j] = 0.0f;                                                                  \
        for (size_t p = 0; p < k; ++p) {                                                           \
            const float *restrict row = b + (ptrdiff_t)p * b_rs;                                   \
            for (size_t i = 0; i < (R); ++i) {                                                     \
                const float ai = a[(ptrdiff_t)i * a_rs + (ptrdiff_t)p * a_cs];                     \
                for (size_t j = 0; j < HG_SGEMM_PANEL_N; ++j)                                      \
                    acc[i][j] = HG_SMALL_MADD(ai, row[j], acc[i][j]);                              \
            }                                                                                      \
        }                                                                                          \
        for (size_t i = 0; i < (R); ++i) {                                                         \
            float *restrict out = c + i * ldc;                                                     \
            if (add)                                                                               \
                for (size_t j = 0; j < cols; ++j)                                                  \
                    out[j] += acc[i][j];                                                           \
            else                                                                                   \
                for (size_t j = 0; j < cols; ++j)                                                  \
                    out[j] = acc[i][j];                                                            \
        }                                                                                          \
    }

HG_SMALL_M_KERNEL(1)
HG_SMALL_M_KERNEL(2)
HG_SMALL_M_KERNEL(3)
HG_SMALL_M_KERNEL(4)
HG_SMALL_M_KERNEL(5)
HG_SMALL_M_KERNEL(6)
HG_SMALL_M_KERNEL(7)
HG_SMALL_M_KERNEL(8)

typedef void (*hg_sgemm_small_fn)(size_t, const float *, ptrdiff_t, ptrdiff_t, const float *, ptrdiff_t, float *,
                                  size_t, size_t, int);

static const hg_sgemm_small_fn hg_sgemm_small_kernels[HG_SGEMM_SMALL_M] = {
    hg_sgemm_small_1, hg_sgemm_small_2, hg_sgemm_small_3, hg_sgemm_small_4,
    hg_sgemm_small_5, hg_sgemm_small_6, hg_sgemm_small_7, hg_sgemm_small_8,
};

/* Whether the small-m path takes this product: few rows, and B either packed at generate time or
   read by rows (unit column stride); a transposed or gathered B goes through the blocked path,
   whose packing reads it once. */
static inline int hg_sgemm_small_fits(size_t m, const hg_sgemm_operands *ops)
{
    return m <= HG_SGEMM_SMALL_M && !ops->a_panels && !ops->pack_b && (ops->b_panels || ops->b_cs == 1);
}

/* Columns [j0, j1) of C (j0 a multiple of 32), the call's kc (else HG_SGEMM_KC) rows of B at a time. The last, partial
   block of an unpacked B is copied, zero-padded, into `spare` (the GEMM workspace), so the kernel
   reads no further than B. */
static void hg_sgemm_small(size_t m, size_t j0, size_t j1, size_t k, const hg_sgemm_operands *ops, float *c,
                           size_t ldc, int accumulate, hg_gemm_epilogue_fn epilogue, const void *ctx, float *spare)
{
    const hg_sgemm_small_fn kernel = hg_sgemm_small_kernels[m - 1];
    const size_t block_k = ops->kc ? ops->kc : HG_SGEMM_KC;
    for (size_t j = j0; j < j1; j += HG_SGEMM_PANEL_N) {
        const size_t cols = j1 - j < HG_SGEMM_PANEL_N ? j1 - j : HG_SGEMM_PANEL_N;
        for (size_t pc = 0; pc < k; pc += block_k) {
            const size_t kc = k - pc < block_k ? k - pc : block_k;
            const float *a = ops->a + (ptrdiff_t)pc * ops->a_cs;
            const int add = accumulate || pc > 0;
            if (ops->b_panels) {
                const float *panel = ops->b_panels + (j / HG_SGEMM_PANEL_N) * k * HG_SGEMM_PANEL_N;
                kernel(kc, a, ops->a_rs, ops->a_cs, panel + pc * HG_SGEMM_PANEL_N, HG_SGEMM_PANEL_N, c + j, ldc, cols,
                       add);
            } else if (cols == HG_SGEMM_PANEL_N) {
                kernel(kc, a, ops->a_rs, ops->a_cs, ops->b + (ptrdiff_t)pc * ops->b_rs + (ptrdiff_t)j, ops->b_rs, c + j,
                       ldc, cols, add);
            } else {
                for (size_t p = 0; p < kc; ++p) {
                    const float *restrict row = ops->b + (ptrdiff_t)(pc + p) * ops->b_rs + (ptrdiff_t)j;
                    for (size_t t = 0; t < HG_SGEMM_PANEL_N; ++t)
                        spare[p * HG_SGEMM_PANEL_N + t] = t < cols ? row[t] : 0.0f;
                }
                kernel(kc, a, ops->a_rs, ops->a_cs, spare, HG_SGEMM_PANEL_N, c + j, ldc, cols, add);
            }
        }
        if (epilogue)
            epilogue(c + j, ldc, 0, j, m, cols, ctx);
    }
}

#endif
