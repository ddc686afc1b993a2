/* int8/uint8 arithmetic of hetgen's quantized kernels, as onnxruntime's MLAS computes it.

   Quantize:   q = clamp(x / scale, qmin - zp, qmax - zp) rounded half to even, + zp
   Requantize: q = clamp((float)acc * scale, qmin - zp, qmax - zp) rounded half to even, + zp
   where acc is the exact int32 sum of products of zero-point-corrected operands (plus the int32
   bias) and scale = (x_scale * w_scale) / y_scale in float32 (MlasQuantizeLinear,
   MlasRequantizeOutput). The npu simulator includes this header, so both paths round alike. */
#ifndef HG_QUANT_H
#define HG_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 1.5 * 2^23: adding it to a float of magnitude below 2^22 leaves the value rounded half to even in
   the low mantissa bits, whatever the FPU rounding mode (MLAS_ROUNDING_BIAS_MAGIC). */
#define HG_ROUND_MAGIC 12582912.0f
#define HG_ROUND_MAGIC_BITS 0x4B400000

static inline int32_t hg_round_even(float x)
{
    uint32_t bits;
    const float biased = x + HG_ROUND_MAGIC;
    memcpy(&bits, &biased, sizeof bits);
    return (int32_t)bits - HG_ROUND_MAGIC_BITS;
}

/* clamp as SSE's MAXPS/MINPS do it: a NaN becomes `lo`. */
static inline float hg_clamp_q(float v, float lo, float hi)
{
    v = v > lo ? v : lo;
    return v < hi ? v : hi;
}

/* `v` already scaled into the quantized domain (before the zero point): the stored integer. */
static inline int32_t hg_quantize_scaled(float v, int32_t zero_point, int32_t qmin, int32_t qmax)
{
    return hg_round_even(hg_clamp_q(v, (float)(qmin - zero_point), (float)(qmax - zero_point))) + zero_point;
}

/* C[m x n] (row stride ldc) = A[m x k] (row-major) * B[k x n] (row stride ldb): int16 operands with
   their zero points already subtracted, exact int32 sums. Columns are blocked so a block of B's rows
   stays in cache while every row of A passes over it. */
#define HG_IGEMM_NB 256

static inline void hg_igemm_s16(size_t m, size_t n, size_t k, const int16_t *a, const int16_t *b, size_t ldb,
                                int32_t *c, size_t ldc)
{
    for (size_t j0 = 0; j0 < n; j0 += HG_IGEMM_NB) {
        const size_t nb = n - j0 < HG_IGEMM_NB ? n - j0 : HG_IGEMM_NB;
        for (size_t i = 0; i < m; ++i) {
            int32_t *restrict row = c + i * ldc + j0;
            const int16_t *arow = a + i * k;
            for (size_t j = 0; j < nb; ++j)
                row[j] = 0;
            for (size_t p = 0; p < k; ++p) {
                const int32_t av = arow[p];
                const int16_t *restrict brow = b + p * ldb + j0;
                for (size_t j = 0; j < nb; ++j)
                    row[j] += av * (int32_t)brow[j];
            }
        }
    }
}

#endif /* HG_QUANT_H */
