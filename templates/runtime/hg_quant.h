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

/* The dot product of two int16 rows: exact int32 sum. */
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#include <arm_mve.h>

/* Cortex-M with Helium (M55, M85): VMLADAVA multiplies 8 int16 pairs and adds all the products to
   the sum in one instruction; the last partial vector is tail-predicated (VCTP), so its lanes
   past k are neither loaded nor added. */
static inline int32_t hg_idot_s16(const int16_t *a, const int16_t *b, size_t k)
{
    int32_t sum = 0;
    for (size_t p = 0; p < k; p += 8) {
        const mve_pred16_t live = vctp16q((uint32_t)(k - p));
        sum = vmladavaq_p_s16(sum, vldrhq_z_s16(a + p, live), vldrhq_z_s16(b + p, live), live);
    }
    return sum;
}
#define HG_IGEMM_BY_DOT 1
#elif defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>

/* Cortex-M with the DSP extension (M4, M7, M33, M55): SMLAD multiplies two int16 pairs and adds
   both products to the sum in one instruction; pairs are loaded as one (unaligned) 32-bit word. */
static inline uint32_t hg_int16_pair(const int16_t *p)
{
    uint32_t pair;
    memcpy(&pair, p, sizeof pair);
    return pair;
}

static inline int32_t hg_idot_s16(const int16_t *a, const int16_t *b, size_t k)
{
    int32_t sum = 0;
    size_t p = 0;
    for (; p + 2 <= k; p += 2)
        sum = __smlad(hg_int16_pair(a + p), hg_int16_pair(b + p), sum);
    if (p < k)
        sum += (int32_t)a[p] * (int32_t)b[p];
    return sum;
}
#define HG_IGEMM_BY_DOT 1
#else
static inline int32_t hg_idot_s16(const int16_t *a, const int16_t *b, size_t k)
{
    int32_t sum = 0;
    for (size_t p = 0; p < k; ++p)
        sum += (int32_t)a[p] * (int32_t)b[p];
    return sum;
}
#define HG_IGEMM_BY_DOT 0
#endif

/* C[m x n] (row stride ldc) = A[m x k] * B[k x n], with B given transposed (bt: n rows of k), both
   int16 with their zero points already subtracted; exact int32 sums. Every output is a dot product
   along k of two contiguous rows, which compilers turn into pairwise multiply-adds (pmaddwd,
   vpdpwssd); four columns at a time reuse each load of A's row (one SMLAD dot product at a time on Cortex-M). */
static inline void hg_igemm_s16(size_t m, size_t n, size_t k, const int16_t *a, const int16_t *bt, int32_t *c,
                                size_t ldc)
{
    /* The column count of the 4-wide part is computed up front (not left in j0 after the loop) so
       that with constant sizes the compiler sees the tail's exact trip count. */
    const size_t n4 = HG_IGEMM_BY_DOT ? 0 : n - n % 4;
    for (size_t j0 = 0; j0 < n4; j0 += 4) {
        const int16_t *b0 = bt + j0 * k, *b1 = b0 + k, *b2 = b1 + k, *b3 = b2 + k;
        for (size_t i = 0; i < m; ++i) {
            const int16_t *ai = a + i * k;
            int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (size_t p = 0; p < k; ++p) {
                const int32_t x = ai[p];
                s0 += x * b0[p];
                s1 += x * b1[p];
                s2 += x * b2[p];
                s3 += x * b3[p];
            }
            int32_t *ci = c + i * ldc + j0;
            ci[0] = s0;
            ci[1] = s1;
            ci[2] = s2;
            ci[3] = s3;
        }
    }
    for (size_t j = n4; j < n; ++j)
        for (size_t i = 0; i < m; ++i)
            c[i * ldc + j] = hg_idot_s16(a + i * k, bt + j * k, k);
}

#endif /* HG_QUANT_H */
