/* Float dot products over operands read where they are (weights in flash on a microcontroller),
   for the bare-metal kernels that do not pack (templates/kernels/conv_in_place.c.j2,
   product_in_place.c.j2; hetgen/ops/_in_place.py). With Helium (MVE-F: Cortex-M55) four lanes of
   VFMA at a time along the depth, the tail predicated, each lane's sum added at the end; elsewhere
   scalar multiply-adds (VFMA on an FPv4/FPv5 FPU under -ffp-contract=fast). The order of the sums
   differs between the two, within float32 tolerance. */
#ifndef HG_SDOT_H
#define HG_SDOT_H

#include <stddef.h>

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 2)
#include <arm_mve.h>

static inline float hg_sdot_lanes(float32x4_t v)
{
    return (vgetq_lane_f32(v, 0) + vgetq_lane_f32(v, 1)) + (vgetq_lane_f32(v, 2) + vgetq_lane_f32(v, 3));
}

/* s[2 r + t] = sum over k of w_r[p] * c_t[p], two rows and two columns (eight Q registers). A
   function of its own, not inlined: inlined into a convolution's loops with a constant k, GCC
   unrolls the whole depth and spills the vectors to the stack (ds_cnn's pointwise layers ran 2.5
   instructions per multiply-add that way, 0.8 as a loop). */
static __attribute__((noinline, unused)) void hg_sdot_2x2(const float *w0, const float *w1, const float *c0, const float *c1,
                                                  size_t k, float s[4])
{
    float32x4_t s00 = vdupq_n_f32(0.0f), s01 = s00, s10 = s00, s11 = s00;
    /* whole vectors unpredicated, one at a time (unrolled, GCC spills the sums), the pointers
       post-incremented (VLDRW writeback), then the tail */
#pragma GCC unroll 1
    for (size_t n = k / 4u; n > 0; --n) {
        const float32x4_t a = vld1q_f32(w0), b = vld1q_f32(w1), x = vld1q_f32(c0), y = vld1q_f32(c1);
        w0 += 4;
        w1 += 4;
        c0 += 4;
        c1 += 4;
        s00 = vfmaq_f32(s00, a, x);
        s01 = vfmaq_f32(s01, a, y);
        s10 = vfmaq_f32(s10, b, x);
        s11 = vfmaq_f32(s11, b, y);
    }
    if (k % 4u) {
        const mve_pred16_t live = vctp32q((uint32_t)(k % 4u));
        const float32x4_t a = vldrwq_z_f32(w0, live), b = vldrwq_z_f32(w1, live);
        const float32x4_t x = vldrwq_z_f32(c0, live), y = vldrwq_z_f32(c1, live);
        s00 = vfmaq_f32(s00, a, x);
        s01 = vfmaq_f32(s01, a, y);
        s10 = vfmaq_f32(s10, b, x);
        s11 = vfmaq_f32(s11, b, y);
    }
    s[0] = hg_sdot_lanes(s00);
    s[1] = hg_sdot_lanes(s01);
    s[2] = hg_sdot_lanes(s10);
    s[3] = hg_sdot_lanes(s11);
}

/* s[2 r + t] for four rows and two columns: two passes of two rows */
static inline void hg_sdot_4x2(const float *w0, const float *w1, const float *w2, const float *w3, const float *c0,
                               const float *c1, size_t k, float s[8])
{
    hg_sdot_2x2(w0, w1, c0, c1, k, s);
    hg_sdot_2x2(w2, w3, c0, c1, k, s + 4);
}

/* s[r] = sum over k of w_r[p] * x[p], four rows against one column */
static inline void hg_sdot_4x1(const float *w0, const float *w1, const float *w2, const float *w3, const float *x,
                               size_t k, float s[4])
{
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
    for (size_t p = 0; p < k; p += 4) {
        const mve_pred16_t live = vctp32q((uint32_t)(k - p));
        const float32x4_t v = vldrwq_z_f32(x + p, live);
        s0 = vfmaq_f32(s0, vldrwq_z_f32(w0 + p, live), v);
        s1 = vfmaq_f32(s1, vldrwq_z_f32(w1 + p, live), v);
        s2 = vfmaq_f32(s2, vldrwq_z_f32(w2 + p, live), v);
        s3 = vfmaq_f32(s3, vldrwq_z_f32(w3 + p, live), v);
    }
    s[0] = hg_sdot_lanes(s0);
    s[1] = hg_sdot_lanes(s1);
    s[2] = hg_sdot_lanes(s2);
    s[3] = hg_sdot_lanes(s3);
}

/* s[c] = sum over k of a[p] * b[p * ldb + c] for the `width` (1..4) columns of a row-major B */
static inline void hg_sdot_columns(const float *a, const float *b, size_t ldb, size_t k, size_t width, float s[4])
{
    const mve_pred16_t live = vctp32q((uint32_t)width);
    float32x4_t sum = vdupq_n_f32(0.0f);
    for (size_t p = 0; p < k; ++p)
        sum = vfmaq_m_n_f32(sum, vldrwq_z_f32(b + p * ldb, live), a[p], live);
    vstrwq_f32(s, sum);
}
#define HG_SDOT_VECTOR 1
#else
static inline void hg_sdot_4x2(const float *w0, const float *w1, const float *w2, const float *w3, const float *c0,
                               const float *c1, size_t k, float s[8])
{
    float s00 = 0.0f, s01 = 0.0f, s10 = 0.0f, s11 = 0.0f, s20 = 0.0f, s21 = 0.0f, s30 = 0.0f, s31 = 0.0f;
    for (size_t p = 0; p < k; ++p) {
        const float x = c0[p], y = c1[p], a = w0[p], b = w1[p], c = w2[p], d = w3[p];
        s00 += a * x;
        s01 += a * y;
        s10 += b * x;
        s11 += b * y;
        s20 += c * x;
        s21 += c * y;
        s30 += d * x;
        s31 += d * y;
    }
    s[0] = s00;
    s[1] = s01;
    s[2] = s10;
    s[3] = s11;
    s[4] = s20;
    s[5] = s21;
    s[6] = s30;
    s[7] = s31;
}

static inline void hg_sdot_4x1(const float *w0, const float *w1, const float *w2, const float *w3, const float *x,
                               size_t k, float s[4])
{
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (size_t p = 0; p < k; ++p) {
        const float v = x[p];
        s0 += w0[p] * v;
        s1 += w1[p] * v;
        s2 += w2[p] * v;
        s3 += w3[p] * v;
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}

static inline void hg_sdot_2x2(const float *w0, const float *w1, const float *c0, const float *c1, size_t k, float s[4])
{
    float s00 = 0.0f, s01 = 0.0f, s10 = 0.0f, s11 = 0.0f;
    for (size_t p = 0; p < k; ++p) {
        const float x = c0[p], y = c1[p], a = w0[p], b = w1[p];
        s00 += a * x;
        s01 += a * y;
        s10 += b * x;
        s11 += b * y;
    }
    s[0] = s00;
    s[1] = s01;
    s[2] = s10;
    s[3] = s11;
}

static inline void hg_sdot_columns(const float *a, const float *b, size_t ldb, size_t k, size_t width, float s[4])
{
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    const size_t c1 = width > 1u ? 1u : 0u, c2 = width > 2u ? 2u : width - 1u, c3 = width - 1u;
    for (size_t p = 0; p < k; ++p) {
        const float v = a[p];
        const float *row = b + p * ldb;
        s0 += v * row[0];
        s1 += v * row[c1];
        s2 += v * row[c2];
        s3 += v * row[c3];
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}
#define HG_SDOT_VECTOR 0
#endif

#endif /* HG_SDOT_H */
