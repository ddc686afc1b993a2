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

/* clamp as SSE's MAXPS/MINPS do it: a NaN becomes `lo`. On aarch64 as FMAXNM then FMINNM, which
   give the same (a NaN operand yields the other; the bounds are integers, never -0), and which GCC
   vectorises: the comparisons' branches kept a quantized Add's loop scalar (24 instructions an
   element under qemu). */
static inline float hg_clamp_q(float v, float lo, float hi)
{
#if defined(__aarch64__)
    return __builtin_fminf(__builtin_fmaxf(v, lo), hi);
#else
    v = v > lo ? v : lo;
    return v < hi ? v : hi;
#endif
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

/* -- products that read int8/uint8 weights where they are stored ---------------------------------

   The integer convolution and matrix product (templates/kernels/qconv.c.j2, qmatmul.c.j2) widen a
   few activation columns to int16 (zero point subtracted) in a small buffer and read each weight
   row as the model stores it (in flash on a microcontroller): nothing is copied, widened or
   re-packed per inference. hg_qdot_<w>_RxC sums R weight rows times C int16 columns over k:
   exact int32 sums of w * x, the weight's zero point not subtracted (the caller corrects the sum
   by zp * sum(x), hg_q15_sum). With the DSP extension four weights are read as one word and
   widened in registers by SXTB16 (UXTB16 for uint8) into (w0, w2) and, rotated by 8, (w1, w3); the
   columns are stored in that order (hg_q15_reorder swaps the middle two of every four values), so
   SMLAD multiplies and adds two pairs at a time. With Helium (MVE) VLDRB widens eight weights into
   int16 lanes and VMLADAVA multiplies them with eight column values and sums them in one
   instruction, the tail predicated. */
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#define HG_Q15_REORDERED 0
/* Whole vectors unpredicated with post-incremented pointers, the tail predicated once, in a function
   of its own: GCC unrolls a predicated loop inlined with a constant k into stack spills. */
#define HG_QDOT_VECTORS(w, wtype, load, load_z)                                                            \
    static __attribute__((noinline, unused)) void hg_qdot_##w##_2x2(const wtype *w0, const wtype *w1,             \
                                                            const int16_t *x0, const int16_t *x1, size_t k, \
                                                            int32_t s[4])                                  \
    {                                                                                                      \
        int32_t s00 = 0, s01 = 0, s10 = 0, s11 = 0;                                                        \
        _Pragma("GCC unroll 1") for (size_t n = k / 8u; n > 0; --n)                                       \
        {                                                                                                  \
            const int16x8_t a = load(w0), b = load(w1), c = vld1q_s16(x0), d = vld1q_s16(x1);             \
            w0 += 8;                                                                                       \
            w1 += 8;                                                                                       \
            x0 += 8;                                                                                       \
            x1 += 8;                                                                                       \
            s00 = vmladavaq_s16(s00, a, c);                                                                \
            s01 = vmladavaq_s16(s01, a, d);                                                                \
            s10 = vmladavaq_s16(s10, b, c);                                                                \
            s11 = vmladavaq_s16(s11, b, d);                                                                \
        }                                                                                                  \
        if (k % 8u) {                                                                                      \
            const mve_pred16_t live = vctp16q((uint32_t)(k % 8u));                                         \
            const int16x8_t a = load_z(w0, live), b = load_z(w1, live);                                    \
            const int16x8_t c = vldrhq_z_s16(x0, live), d = vldrhq_z_s16(x1, live);                        \
            s00 = vmladavaq_p_s16(s00, a, c, live);                                                        \
            s01 = vmladavaq_p_s16(s01, a, d, live);                                                        \
            s10 = vmladavaq_p_s16(s10, b, c, live);                                                        \
            s11 = vmladavaq_p_s16(s11, b, d, live);                                                        \
        }                                                                                                  \
        s[0] = s00;                                                                                        \
        s[1] = s01;                                                                                        \
        s[2] = s10;                                                                                        \
        s[3] = s11;                                                                                        \
    }                                                                                                      \
    static inline void hg_qdot_##w##_2x1(const wtype *w0, const wtype *w1, const int16_t *x, size_t k,    \
                                         int32_t s[2])                                                     \
    {                                                                                                      \
        int32_t s0 = 0, s1 = 0;                                                                            \
        _Pragma("GCC unroll 1") for (size_t n = k / 8u; n > 0; --n)                                       \
        {                                                                                                  \
            const int16x8_t c = vld1q_s16(x);                                                              \
            s0 = vmladavaq_s16(s0, load(w0), c);                                                           \
            s1 = vmladavaq_s16(s1, load(w1), c);                                                           \
            w0 += 8;                                                                                       \
            w1 += 8;                                                                                       \
            x += 8;                                                                                        \
        }                                                                                                  \
        if (k % 8u) {                                                                                      \
            const mve_pred16_t live = vctp16q((uint32_t)(k % 8u));                                         \
            const int16x8_t c = vldrhq_z_s16(x, live);                                                     \
            s0 = vmladavaq_p_s16(s0, load_z(w0, live), c, live);                                           \
            s1 = vmladavaq_p_s16(s1, load_z(w1, live), c, live);                                           \
        }                                                                                                  \
        s[0] = s0;                                                                                         \
        s[1] = s1;                                                                                         \
    }
#define HG_LOAD_S8_ALL(p) vldrbq_s16((p))
#define HG_LOAD_U8_ALL(p) vreinterpretq_s16_u16(vldrbq_u16((p)))
#define HG_LOAD_S8(p, live) vldrbq_z_s16((p), (live))
#define HG_LOAD_U8(p, live) vreinterpretq_s16_u16(vldrbq_z_u16((p), (live)))
HG_QDOT_VECTORS(s8, int8_t, HG_LOAD_S8_ALL, HG_LOAD_S8)
HG_QDOT_VECTORS(u8, uint8_t, HG_LOAD_U8_ALL, HG_LOAD_U8)
#elif defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#define HG_Q15_REORDERED 1
static inline uint32_t hg_word(const void *p)
{
    uint32_t word;
    memcpy(&word, p, sizeof word); /* one LDR: Armv7E-M loads unaligned words */
    return word;
}
/* rotate right by 8 (arm_acle.h's __ror is GCC 13's): SXTB16's ROR #8 operand */
static inline uint32_t hg_ror8(uint32_t word)
{
    return word >> 8 | word << 24;
}
/* Four int8 (uint8) values of a word widened to int16 pairs: (v0, v2) by SXTB16 (UXTB16), and
   (v1, v3) by the same of the word rotated right by 8, one instruction (the builtins take no
   rotation, and GCC leaves it a separate MOV). */
static inline uint32_t hg_widen_s8(uint32_t word)
{
    return __sxtb16(word);
}
static inline uint32_t hg_widen_u8(uint32_t word)
{
    return __uxtb16(word);
}
static inline uint32_t hg_widen_s8_ror8(uint32_t word)
{
    uint32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(word));
    return r;
}
static inline uint32_t hg_widen_u8_ror8(uint32_t word)
{
    uint32_t r;
    __asm__("uxtb16 %0, %1, ror #8" : "=r"(r) : "r"(word));
    return r;
}
/* The 2x2 dot product is a function of its own (not inlined into the convolution's loops), so
   that its eight sums and widened weights stay in registers. */
#define HG_QDOT_PAIRS(w, wtype)                                                                            \
    static __attribute__((noinline, unused)) void hg_qdot_##w##_2x2(const wtype *w0, const wtype *w1, const int16_t *x0, const int16_t *x1, \
                                         size_t k, int32_t s[4])                                           \
    {                                                                                                      \
        int32_t s00 = 0, s01 = 0, s10 = 0, s11 = 0;                                                        \
        const size_t k4 = k & ~(size_t)3;                                                                 \
        for (size_t p = 0; p < k4; p += 4) {                                                               \
            const uint32_t a = hg_word(w0 + p), b = hg_word(w1 + p);                                       \
            const uint32_t a02 = hg_widen_##w(a), a13 = hg_widen_##w##_ror8(a);                                       \
            const uint32_t b02 = hg_widen_##w(b), b13 = hg_widen_##w##_ror8(b);                                       \
            uint32_t lo = hg_word(x0 + p), hi = hg_word(x0 + p + 2); /* one column at a time: */           \
            s00 = __smlad(a13, hi, __smlad(a02, lo, s00));           /* fewer registers live */            \
            s10 = __smlad(b13, hi, __smlad(b02, lo, s10));                                                 \
            lo = hg_word(x1 + p);                                                                          \
            hi = hg_word(x1 + p + 2);                                                                      \
            s01 = __smlad(a13, hi, __smlad(a02, lo, s01));                                                 \
            s11 = __smlad(b13, hi, __smlad(b02, lo, s11));                                                 \
        }                                                                                                  \
        for (size_t p = k4; p < k; ++p) {                                                                  \
            s00 += (int32_t)w0[p] * x0[p];                                                                 \
            s01 += (int32_t)w0[p] * x1[p];                                                                 \
            s10 += (int32_t)w1[p] * x0[p];                                                                 \
            s11 += (int32_t)w1[p] * x1[p];                                                                 \
        }                                                                                                  \
        s[0] = s00;                                                                                        \
        s[1] = s01;                                                                                        \
        s[2] = s10;                                                                                        \
        s[3] = s11;                                                                                        \
    }                                                                                                      \
    static inline void hg_qdot_##w##_2x1(const wtype *w0, const wtype *w1, const int16_t *x, size_t k,    \
                                         int32_t s[2])                                                     \
    {                                                                                                      \
        int32_t s0 = 0, s1 = 0;                                                                            \
        const size_t k4 = k & ~(size_t)3;                                                                 \
        for (size_t p = 0; p < k4; p += 4) {                                                               \
            const uint32_t a = hg_word(w0 + p), b = hg_word(w1 + p);                                       \
            const uint32_t c02 = hg_word(x + p), c13 = hg_word(x + p + 2);                                 \
            s0 = __smlad(hg_widen_##w(a), c02, __smlad(hg_widen_##w##_ror8(a), c13, s0));                             \
            s1 = __smlad(hg_widen_##w(b), c02, __smlad(hg_widen_##w##_ror8(b), c13, s1));                             \
        }                                                                                                  \
        for (size_t p = k4; p < k; ++p) {                                                                  \
            s0 += (int32_t)w0[p] * x[p];                                                                   \
            s1 += (int32_t)w1[p] * x[p];                                                                   \
        }                                                                                                  \
        s[0] = s0;                                                                                         \
        s[1] = s1;                                                                                         \
    }
HG_QDOT_PAIRS(s8, int8_t)
HG_QDOT_PAIRS(u8, uint8_t)
#else
#define HG_Q15_REORDERED 0
#define HG_QDOT_LOOPS(w, wtype)                                                                            \
    static inline void hg_qdot_##w##_2x2(const wtype *w0, const wtype *w1, const int16_t *x0, const int16_t *x1, \
                                         size_t k, int32_t s[4])                                           \
    {                                                                                                      \
        int32_t s00 = 0, s01 = 0, s10 = 0, s11 = 0;                                                        \
        for (size_t p = 0; p < k; ++p) {                                                                   \
            s00 += (int32_t)w0[p] * x0[p];                                                                 \
            s01 += (int32_t)w0[p] * x1[p];                                                                 \
            s10 += (int32_t)w1[p] * x0[p];                                                                 \
            s11 += (int32_t)w1[p] * x1[p];                                                                 \
        }                                                                                                  \
        s[0] = s00;                                                                                        \
        s[1] = s01;                                                                                        \
        s[2] = s10;                                                                                        \
        s[3] = s11;                                                                                        \
    }                                                                                                      \
    static inline void hg_qdot_##w##_2x1(const wtype *w0, const wtype *w1, const int16_t *x, size_t k,    \
                                         int32_t s[2])                                                     \
    {                                                                                                      \
        int32_t s0 = 0, s1 = 0;                                                                            \
        for (size_t p = 0; p < k; ++p) {                                                                   \
            s0 += (int32_t)w0[p] * x[p];                                                                   \
            s1 += (int32_t)w1[p] * x[p];                                                                   \
        }                                                                                                  \
        s[0] = s0;                                                                                         \
        s[1] = s1;                                                                                         \
    }
HG_QDOT_LOOPS(s8, int8_t)
HG_QDOT_LOOPS(u8, uint8_t)
#endif

/* Put an int16 column of k values in the order hg_qdot_* reads it: with SMLAD, (x0, x2, x1, x3)
   in every whole group of four (the tail as it is); elsewhere unchanged. */
static inline void hg_q15_reorder(int16_t *x, size_t k)
{
#if HG_Q15_REORDERED
    for (size_t p = 0; p + 4 <= k; p += 4) {
        const int16_t t = x[p + 1];
        x[p + 1] = x[p + 2];
        x[p + 2] = t;
    }
#else
    (void)x;
    (void)k;
#endif
}

/* n int8/uint8 values of a row, less the zero point, as int16 in hg_qdot_*'s order: the same as
   widening them one by one and then hg_q15_reorder(d, n). With the DSP extension four values are
   one (unaligned) word, widened by SXTB16 (UXTB16) straight into the (x0, x2), (x1, x3) pairs and
   the zero point taken from both halves by one SSUB16; with Helium VLDRB widens eight, the tail
   predicated. */
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#define HG_Q15_WIDEN(w, xtype, load)                                                                      \
    static inline void hg_q15_widen_##w(int16_t *restrict d, const xtype *src, size_t n, int32_t zp)     \
    {                                                                                                      \
        for (size_t p = 0; p < n; p += 8) {                                                                \
            const mve_pred16_t live = vctp16q((uint32_t)(n - p));                                          \
            vstrhq_p_s16(d + p, vsubq_n_s16(load(src + p, live), (int16_t)zp), live);                     \
        }                                                                                                  \
    }
HG_Q15_WIDEN(s8, int8_t, HG_LOAD_S8)
HG_Q15_WIDEN(u8, uint8_t, HG_LOAD_U8)
#elif defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#define HG_Q15_WIDEN(w, xtype)                                                                            \
    static inline void hg_q15_widen_##w(int16_t *restrict d, const xtype *src, size_t n, int32_t zp)     \
    {                                                                                                      \
        const uint32_t zz = (uint32_t)(uint16_t)zp * 0x10001u;                                             \
        const size_t n4 = n & ~(size_t)3;                                                                 \
        for (size_t p = 0; p < n4; p += 4) {                                                               \
            const uint32_t v = hg_word(src + p);                                                           \
            const uint32_t even = __ssub16(hg_widen_##w(v), zz), odd = __ssub16(hg_widen_##w##_ror8(v), zz);          \
            memcpy(d + p, &even, sizeof even);                                                             \
            memcpy(d + p + 2, &odd, sizeof odd);                                                           \
        }                                                                                                  \
        for (size_t p = n4; p < n; ++p)                                                                    \
            d[p] = (int16_t)((int32_t)src[p] - zp);                                                        \
    }
HG_Q15_WIDEN(s8, int8_t)
HG_Q15_WIDEN(u8, uint8_t)
#else
#define HG_Q15_WIDEN(w, xtype)                                                                            \
    static inline void hg_q15_widen_##w(int16_t *restrict d, const xtype *src, size_t n, int32_t zp)     \
    {                                                                                                      \
        for (size_t p = 0; p < n; ++p)                                                                     \
            d[p] = (int16_t)((int32_t)src[p] - zp);                                                        \
    }
HG_Q15_WIDEN(s8, int8_t)
HG_Q15_WIDEN(u8, uint8_t)
#endif

/* -- a fully connected layer: both operands read where they are --------------------------------

   hg_qvec_<w>_<x>_2x1 sums two weight rows (w0, w1) times an int8/uint8 vector x less its zero
   point over k: exact int32 sums of w * (x - xzp), the weight's zero point not subtracted (as
   hg_qdot_*). Nothing is widened into memory, so the kernel needs no workspace whatever k is (a
   buffer of the widened vector took 2k bytes, and an input longer than 256 values an int32 sum
   per row besides: the autoencoder's 640 -> 128 layer 1,024 bytes). With the DSP extension, as
   CMSIS-NN's arm_nn_vec_mat_mult_t_s8: four values of x are one word, widened by SXTAB16 (UXTAB16)
   with -xzp added to both halves into (x0 - zp, x2 - zp) and, rotated by 8, (x1 - zp, x3 - zp) --
   the order SXTB16 widens each row's word of weights into -- and two SMLADs a row take the four
   products. With Helium, int8 times int8 sums sixteen products per VMLADAV.S8 and takes the zero
   point out once at the end as xzp * sum(w) (VADDVA.S8 sums the row alongside); other types widen
   eight values of each into int16 lanes (VLDRB) and subtract the zero point from x's.

   hg_qvec_<w>_<x>_2x1_from adds the products over [p, k) onto s[0] and s[1] one value at a time:
   the whole product where there is neither extension, the tail after SMLAD's groups of four. */
#define HG_QVEC_2X1_FROM(w, wtype, x, xtype)                                                               \
    static inline void hg_qvec_##w##_##x##_2x1_from(const wtype *w0, const wtype *w1, const xtype *xv, size_t p, \
                                                    size_t k, int32_t xzp, int32_t s[2])                   \
    {                                                                                                      \
        int32_t s0 = s[0], s1 = s[1];                                                                      \
        for (; p < k; ++p) {                                                                               \
            const int32_t c = (int32_t)xv[p] - xzp;                                                        \
            s0 += (int32_t)w0[p] * c;                                                                      \
            s1 += (int32_t)w1[p] * c;                                                                      \
        }                                                                                                  \
        s[0] = s0;                                                                                         \
        s[1] = s1;                                                                                         \
    }
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#define HG_QVEC_LANES(w, wtype, x, xtype, W, X)                                                            \
    static inline void hg_qvec_##w##_##x##_2x1(const wtype *w0, const wtype *w1, const xtype *xv, size_t k, \
                                               int32_t xzp, int32_t s[2])                                  \
    {                                                                                                      \
        int32_t s0 = 0, s1 = 0;                                                                            \
        _Pragma("GCC unroll 1") for (size_t n = k / 8u; n > 0; --n)                                       \
        {                                                                                                  \
            const int16x8_t c = vsubq_n_s16(HG_LOAD_##X##_ALL(xv), (int16_t)xzp);                          \
            s0 = vmladavaq_s16(s0, HG_LOAD_##W##_ALL(w0), c);                                              \
            s1 = vmladavaq_s16(s1, HG_LOAD_##W##_ALL(w1), c);                                              \
            w0 += 8;                                                                                       \
            w1 += 8;                                                                                       \
            xv += 8;                                                                                       \
        }                                                                                                  \
        if (k % 8u) {                                                                                      \
            const mve_pred16_t live = vctp16q((uint32_t)(k % 8u));                                         \
            const int16x8_t c = vsubq_n_s16(HG_LOAD_##X(xv, live), (int16_t)xzp);                          \
            s0 = vmladavaq_p_s16(s0, HG_LOAD_##W(w0, live), c, live);                                      \
            s1 = vmladavaq_p_s16(s1, HG_LOAD_##W(w1, live), c, live);                                      \
        }                                                                                                  \
        s[0] = s0;                                                                                         \
        s[1] = s1;                                                                                         \
    }
HG_QVEC_LANES(u8, uint8_t, s8, int8_t, U8, S8)
HG_QVEC_LANES(s8, int8_t, u8, uint8_t, S8, U8)
HG_QVEC_LANES(u8, uint8_t, u8, uint8_t, U8, U8)
static inline void hg_qvec_s8_s8_2x1(const int8_t *w0, const int8_t *w1, const int8_t *x, size_t k, int32_t xzp,
                                     int32_t s[2])
{
    int32_t s0 = 0, s1 = 0, r0 = 0, r1 = 0; /* r: the rows' sums, for the zero point */
    _Pragma("GCC unroll 1") for (size_t n = k / 16u; n > 0; --n)
    {
        const int8x16_t c = vld1q_s8(x), a = vld1q_s8(w0), b = vld1q_s8(w1);
        s0 = vmladavaq_s8(s0, a, c);
        s1 = vmladavaq_s8(s1, b, c);
        r0 = vaddvaq_s8(r0, a);
        r1 = vaddvaq_s8(r1, b);
        w0 += 16;
        w1 += 16;
        x += 16;
    }
    if (k % 16u) {
        const mve_pred16_t live = vctp8q((uint32_t)(k % 16u));
        const int8x16_t c = vldrbq_z_s8(x, live), a = vldrbq_z_s8(w0, live), b = vldrbq_z_s8(w1, live);
        s0 = vmladavaq_p_s8(s0, a, c, live);
        s1 = vmladavaq_p_s8(s1, b, c, live);
        r0 = vaddvaq_p_s8(r0, a, live);
        r1 = vaddvaq_p_s8(r1, b, live);
    }
    s[0] = s0 - xzp * r0;
    s[1] = s1 - xzp * r1;
}
#elif defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
/* (offset_lo + widened byte 0, offset_hi + widened byte 2), and of the word rotated right by 8 */
#define HG_WIDEN_ADD(x, insn)                                                                              \
    static inline uint32_t hg_widen_add_##x(uint32_t offset, uint32_t word)                               \
    {                                                                                                      \
        uint32_t r;                                                                                        \
        __asm__(insn " %0, %1, %2" : "=r"(r) : "r"(offset), "r"(word));                                    \
        return r;                                                                                          \
    }                                                                                                      \
    static inline uint32_t hg_widen_add_##x##_ror8(uint32_t offset, uint32_t word)                        \
    {                                                                                                      \
        uint32_t r;                                                                                        \
        __asm__(insn " %0, %1, %2, ror #8" : "=r"(r) : "r"(offset), "r"(word));                            \
        return r;                                                                                          \
    }
HG_WIDEN_ADD(s8, "sxtab16")
HG_WIDEN_ADD(u8, "uxtab16")
#define HG_QVEC_PAIRS(w, wtype, x, xtype)                                                                  \
    HG_QVEC_2X1_FROM(w, wtype, x, xtype)                                                                   \
    static inline void hg_qvec_##w##_##x##_2x1(const wtype *w0, const wtype *w1, const xtype *xv, size_t k, \
                                               int32_t xzp, int32_t s[2])                                  \
    {                                                                                                      \
        const uint32_t offset = (uint32_t)(uint16_t)(-xzp) * 0x10001u;                                    \
        int32_t s0 = 0, s1 = 0;                                                                            \
        const size_t k4 = k & ~(size_t)3;                                                                 \
        for (size_t p = 0; p < k4; p += 4) {                                                               \
            const uint32_t v = hg_word(xv + p), a = hg_word(w0 + p), b = hg_word(w1 + p);                  \
            const uint32_t c02 = hg_widen_add_##x(offset, v), c13 = hg_widen_add_##x##_ror8(offset, v);    \
            s0 = __smlad(hg_widen_##w(a), c02, __smlad(hg_widen_##w##_ror8(a), c13, s0));                  \
            s1 = __smlad(hg_widen_##w(b), c02, __smlad(hg_widen_##w##_ror8(b), c13, s1));                  \
        }                                                                                                  \
        s[0] = s0;                                                                                         \
        s[1] = s1;                                                                                         \
        hg_qvec_##w##_##x##_2x1_from(w0, w1, xv, k4, k, xzp, s);                                           \
    }
HG_QVEC_PAIRS(s8, int8_t, s8, int8_t)
HG_QVEC_PAIRS(u8, uint8_t, s8, int8_t)
HG_QVEC_PAIRS(s8, int8_t, u8, uint8_t)
HG_QVEC_PAIRS(u8, uint8_t, u8, uint8_t)
#else
#define HG_QVEC_LOOPS(w, wtype, x, xtype)                                                                  \
    HG_QVEC_2X1_FROM(w, wtype, x, xtype)                                                                   \
    static inline void hg_qvec_##w##_##x##_2x1(const wtype *w0, const wtype *w1, const xtype *xv, size_t k, \
                                               int32_t xzp, int32_t s[2])                                  \
    {                                                                                                      \
        s[0] = s[1] = 0;                                                                                   \
        hg_qvec_##w##_##x##_2x1_from(w0, w1, xv, 0, k, xzp, s);                                            \
    }
HG_QVEC_LOOPS(s8, int8_t, s8, int8_t)
HG_QVEC_LOOPS(u8, uint8_t, s8, int8_t)
HG_QVEC_LOOPS(s8, int8_t, u8, uint8_t)
HG_QVEC_LOOPS(u8, uint8_t, u8, uint8_t)
#endif

/* hg_quantize_scaled for a requantized sum, v = (float)(exact int32 sum) * multiplier, which is
   never NaN: the same integer. On a Cortex-M with a single-precision FPU VCVTR rounds half to even
   in the FPSCR's default mode (round to nearest, which the board's reset leaves) and the clamp is
   done on the integer (the bounds are integers, so clamping before or after rounding is the same):
   one FPU instruction where the rounding trick takes an addition, a move and two compares. */
static inline int32_t hg_requantize(float v, int32_t zero_point, int32_t qmin, int32_t qmax)
{
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M' && defined(__ARM_FP) && (__ARM_FP & 4)
    float rounded;
    int32_t q;
    __asm__("vcvtr.s32.f32 %0, %1" : "=t"(rounded) : "t"(v));
    memcpy(&q, &rounded, sizeof q);
    q = q < qmin - zero_point ? qmin - zero_point : q;
    q = q > qmax - zero_point ? qmax - zero_point : q;
    return q + zero_point;
#else
    return hg_quantize_scaled(v, zero_point, qmin, qmax);
#endif
}

/* acc + x[0] * lo(pair) + x[1] * hi(pair): two int16 values (adjacent, any alignment) times an
   int16 pair packed in a word, by one SMLAD where the core has the DSP extension. */
static inline int32_t hg_q15_mac_pair(const int16_t *x, uint32_t pair, int32_t acc)
{
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && !(defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1))
    uint32_t xs;
    memcpy(&xs, x, sizeof xs);
    return __smlad(xs, pair, acc);
#else
    return acc + (int32_t)x[0] * (int32_t)(int16_t)(uint16_t)(pair & 0xffffu) +
           (int32_t)x[1] * (int32_t)(int16_t)(uint16_t)(pair >> 16);
#endif
}

/* The sum of a column's k values: what a weight zero point multiplies (sum((w - zp) x) = sum(w x) -
   zp * sum(x)). */
static inline int32_t hg_q15_sum(const int16_t *x, size_t k)
{
    int32_t sum = 0;
    for (size_t p = 0; p < k; ++p)
        sum += x[p];
    return sum;
}

#endif /* HG_QUANT_H */
