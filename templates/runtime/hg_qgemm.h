/* int8 GEMM micro-kernels of hetgen's packed quantized convolution (templates/kernels/qconv_packed.c.j2).

   One layout for every ISA, made at generate time (hetgen/ops/qpack.py):
     weights      s8 [panels][K/4][HG_QG_MR][4]: HG_QG_MR output channels, groups of 4 consecutive k
                  (zero padded in both), then one int32 sum of each channel's weights (little-endian bytes);
     activations  [pixel blocks][K/4][HG_QG_NB][4] bytes, packed per call (im2col), pixels padded to HG_QG_NB.
   A block is HG_QG_MR channels x HG_QG_NB output pixels: the weights are broadcast (4 bytes, one channel),
   the activations are the vector (consecutive output pixels), so each channel's results are one
   contiguous run of an NCHW output row.

   The compiler's feature macros pick the path, the generated C is the same bytes for all:
     __AVX512VNNI__ (+BW, VL)  vpdpbusd zmm: u8 activations x s8 weights, 16 pixels a vector;
     __AVXVNNI__               vpdpbusd ymm, 8 pixels a vector;
     __AVX2__                  both widened to int16 (exact), vpmaddwd;
     __ARM_FEATURE_DOTPROD     sdot by lane: s8 activations x s8 weights, 4 pixels a vector;
     __aarch64__ (NEON)        smull/smlal widening, exact;
     otherwise                 plain C.
   vpdpbusd multiplies unsigned activations, sdot signed ones: activations of the other signedness are
   stored with their top bit flipped (x ^ 0x80 = x + 128 for int8, x - 128 for uint8), and the sum
   this adds (the shift times the channel's weight sum) is folded with the input zero point and the
   bias into one constant per channel (`hg_qg_shift`). Every path computes the exact int32 sum.

   Requantisation is hg_quant.h's, vectorised: (float)(acc + c) * scale, clamped to
   [qmin - zp, qmax - zp], rounded half to even (cvtps2dq in the default rounding mode), + zp. */
#ifndef HG_QGEMM_H
#define HG_QGEMM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hg_quant.h"

#define HG_QG_MR 8
#define HG_QG_NB 32

/* n rounded down to a multiple of k: a vector loop of k at a time runs `i < HG_QG_WHOLE(n, k)` and
   the scalar tail after it starts there. After `i + k <= n` GCC knows only that i + k > n, not that
   i <= n, and once a kernel's constant row length is inlined it warned of the tail's iteration 2^62
   (-Waggressive-loop-optimizations: GCC 12 at -O2 and -O3, on AVX2 and aarch64); this bound it sees
   is at most n. */
#define HG_QG_WHOLE(n, k) ((n) / (k) * (k))

/* not inlined (the block's registers stay its own); `unused` because a kernel file may include this
   header for its row kernels alone (a MaxPool on a Cortex-M, whose convolutions are hg_quant.h's) */
#if defined(__GNUC__)
#define HG_QG_NOINLINE __attribute__((noinline, unused))
#else
#define HG_QG_NOINLINE
#endif
#if defined(__GNUC__)
#define HG_QG_UNUSED __attribute__((unused))
#else
#define HG_QG_UNUSED
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define HG_QG_PATH_AVX512VNNI 1
#elif defined(__AVXVNNI__)
#define HG_QG_PATH_AVXVNNI 1
#elif defined(__AVX2__)
#define HG_QG_PATH_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#define HG_QG_PATH_SDOT 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define HG_QG_PATH_NEON 1
#else
#define HG_QG_PATH_SCALAR 1
#endif

#if defined(HG_QG_PATH_AVX512VNNI) || defined(HG_QG_PATH_AVXVNNI) || defined(HG_QG_PATH_AVX2)
#include <immintrin.h>
#endif
#if defined(HG_QG_PATH_SDOT) || defined(HG_QG_PATH_NEON)
#include <arm_neon.h>
#endif

/* The path's activations are signed (sdot, NEON) or unsigned (vpdpbusd, and the rest alike). */
#if defined(HG_QG_PATH_SDOT) || defined(HG_QG_PATH_NEON)
#define HG_QG_ACT_SIGNED 1
#else
#define HG_QG_ACT_SIGNED 0
#endif

/* The byte XORed into every activation of an input whose signedness is `x_signed`, and the value it adds
   to each activation (the stored activation is x + shift). */
static inline uint32_t hg_qg_flip(int x_signed)
{
    return x_signed == HG_QG_ACT_SIGNED ? 0u : 0x80808080u;
}

static inline int32_t hg_qg_shift(int x_signed)
{
    return x_signed == HG_QG_ACT_SIGNED ? 0 : (x_signed ? 128 : -128);
}

/* The int32 stored as 4 little-endian bytes at p (the packed weights' channel sums). */
static inline int32_t hg_qg_load_le32(const int8_t *p)
{
    const uint8_t *b = (const uint8_t *)p;
    return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}

static inline int32_t hg_qg_load32(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

#if defined(__aarch64__) && defined(__ARM_NEON)
/* 8 lanes: the bytes at src (stride 1), or every other byte from src (stride 2; the odd ones where `odd`);
   and their maximum with acc, signed as x_signed says (hg_qg_max_row) */
static inline uint8x8_t hg_qg_load8(const uint8_t *src, size_t stride, int odd)
{
    if (stride == 1)
        return vld1_u8(src);
    const uint8x8x2_t v = vld2_u8(src);
    return odd ? v.val[1] : v.val[0];
}

static inline uint8x16_t hg_qg_max16(uint8x16_t acc, uint8x16_t v, int x_signed)
{
    return x_signed ? vreinterpretq_u8_s8(vmaxq_s8(vreinterpretq_s8_u8(acc), vreinterpretq_s8_u8(v)))
                    : vmaxq_u8(acc, v);
}

static inline uint8x8_t hg_qg_max8(uint8x8_t acc, uint8x8_t v, int x_signed)
{
    return x_signed ? vreinterpret_u8_s8(vmax_s8(vreinterpret_s8_u8(acc), vreinterpret_s8_u8(v))) : vmax_u8(acc, v);
}
#endif

#if defined(HG_QG_PATH_SDOT) || defined(HG_QG_PATH_NEON)
/* 4 consecutive bytes (any alignment) in every 4 lanes */
static inline uint8x16_t hg_qg_load4(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return vreinterpretq_u8_u32(vdupq_n_u32(v));
}

/* hg_qg_interleave4 of 4 pixels (stride 1): each row's 4 bytes, zipped by bytes (rows 0 and 1, 2 and 3)
   and then by halfwords into the 4 dwords (9 instructions, where the scalar loop took about 10 a pixel) */
static inline void hg_qg_interleave4x4(uint8_t *dst, const uint8_t *r0, const uint8_t *r1, const uint8_t *r2,
                                       const uint8_t *r3, uint8x16_t flip)
{
    const uint16x8_t z01 = vreinterpretq_u16_u8(vzip1q_u8(hg_qg_load4(r0), hg_qg_load4(r1)));
    const uint16x8_t z23 = vreinterpretq_u16_u8(vzip1q_u8(hg_qg_load4(r2), hg_qg_load4(r3)));
    vst1q_u8(dst, veorq_u8(vreinterpretq_u8_u16(vzip1q_u16(z01, z23)), flip));
}

/* the same for 2 pixels: each row's 2 bytes, 8 bytes stored */
static inline uint8x8_t hg_qg_load2(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return vreinterpret_u8_u16(vdup_n_u16(v));
}

static inline void hg_qg_interleave4x2(uint8_t *dst, const uint8_t *r0, const uint8_t *r1, const uint8_t *r2,
                                       const uint8_t *r3, uint8x16_t flip)
{
    const uint16x4_t z01 = vreinterpret_u16_u8(vzip1_u8(hg_qg_load2(r0), hg_qg_load2(r1)));
    const uint16x4_t z23 = vreinterpret_u16_u8(vzip1_u8(hg_qg_load2(r2), hg_qg_load2(r3)));
    vst1_u8(dst, veor_u8(vreinterpret_u8_u16(vzip1_u16(z01, z23)), vget_low_u8(flip)));
}
#endif

#if defined(HG_QG_PATH_AVX512VNNI) || defined(HG_QG_PATH_AVXVNNI) || defined(HG_QG_PATH_AVX2)
/* 16 pixels of one row: the bytes at src (stride 1), or every other byte from src (stride 2): the even
   bytes of the 16 at src and the odd ones of the 16 ending at the 16th pixel's, so that no byte past
   the last one used is read */
static inline __m128i hg_qg_row16(const uint8_t *src, size_t stride)
{
    const __m128i lo = _mm_loadu_si128((const __m128i *)(const void *)src);
    if (stride == 1)
        return lo;
    const __m128i hi = _mm_loadu_si128((const __m128i *)(const void *)(src + 15));
    return _mm_packus_epi16(_mm_and_si128(lo, _mm_set1_epi16(0xFF)), _mm_srli_epi16(hi, 8));
}
#endif

/* Four bytes, one from each row, as one 32-bit word (row 0 in the lowest byte), XOR flip. */
static inline void hg_qg_interleave4(uint8_t *restrict dst, const uint8_t *r0, const uint8_t *r1, const uint8_t *r2,
                                     const uint8_t *r3, size_t n, size_t stride, uint32_t flip)
{
    uint32_t *restrict d = (uint32_t *)(void *)dst;
    size_t i = 0;
#if defined(HG_QG_PATH_SDOT) || defined(HG_QG_PATH_NEON)
    /* 16 (then 8) pixels of the four rows at a time, interleaved by st4; stride 2 reads each row's
       pairs (ld2, the even ones kept), whose last byte is one past the last tap read, so the
       vector stops a pixel early */
    const uint8x16_t vflip = vdupq_n_u8((uint8_t)flip);
    if (stride == 1) {
        for (; i + 16 <= n; i += 16) {
            uint8x16x4_t v;
            v.val[0] = veorq_u8(vld1q_u8(r0 + i), vflip);
            v.val[1] = veorq_u8(vld1q_u8(r1 + i), vflip);
            v.val[2] = veorq_u8(vld1q_u8(r2 + i), vflip);
            v.val[3] = veorq_u8(vld1q_u8(r3 + i), vflip);
            vst4q_u8(dst + 4 * i, v);
        }
        for (; i + 8 <= n; i += 8) {
            uint8x8x4_t v;
            v.val[0] = veor_u8(vld1_u8(r0 + i), vget_low_u8(vflip));
            v.val[1] = veor_u8(vld1_u8(r1 + i), vget_low_u8(vflip));
            v.val[2] = veor_u8(vld1_u8(r2 + i), vget_low_u8(vflip));
            v.val[3] = veor_u8(vld1_u8(r3 + i), vget_low_u8(vflip));
            vst4_u8(dst + 4 * i, v);
        }
    } else if (stride == 2) {
        for (; i + 17 <= n; i += 16) {
            uint8x16x4_t v;
            v.val[0] = veorq_u8(vld2q_u8(r0 + 2 * i).val[0], vflip);
            v.val[1] = veorq_u8(vld2q_u8(r1 + 2 * i).val[0], vflip);
            v.val[2] = veorq_u8(vld2q_u8(r2 + 2 * i).val[0], vflip);
            v.val[3] = veorq_u8(vld2q_u8(r3 + 2 * i).val[0], vflip);
            vst4q_u8(dst + 4 * i, v);
        }
        for (; i + 9 <= n; i += 8) {
            uint8x8x4_t v;
            v.val[0] = veor_u8(vld2_u8(r0 + 2 * i).val[0], vget_low_u8(vflip));
            v.val[1] = veor_u8(vld2_u8(r1 + 2 * i).val[0], vget_low_u8(vflip));
            v.val[2] = veor_u8(vld2_u8(r2 + 2 * i).val[0], vget_low_u8(vflip));
            v.val[3] = veor_u8(vld2_u8(r3 + 2 * i).val[0], vget_low_u8(vflip));
            vst4_u8(dst + 4 * i, v);
        }
    }
    /* the last 8 pixels, overlapping the ones before (the same words again); stride 2 reads from the
       byte before the first tap and keeps the odd bytes, so that its last byte read is the last tap */
    if (i < n && (stride == 1 ? n >= 8 : stride == 2 && n >= 9)) {
        const size_t at = n - 8, odd = stride - 1;
        uint8x8x4_t v;
        v.val[0] = veor_u8(hg_qg_load8(r0 + stride * at - odd, stride, (int)odd), vget_low_u8(vflip));
        v.val[1] = veor_u8(hg_qg_load8(r1 + stride * at - odd, stride, (int)odd), vget_low_u8(vflip));
        v.val[2] = veor_u8(hg_qg_load8(r2 + stride * at - odd, stride, (int)odd), vget_low_u8(vflip));
        v.val[3] = veor_u8(hg_qg_load8(r3 + stride * at - odd, stride, (int)odd), vget_low_u8(vflip));
        vst4_u8(dst + 4 * at, v);
        i = n;
    } else if (i < n && stride == 2 && n == 8) {
        /* 8 pixels of stride 2 span 15 bytes: two loads of 8 (at the first tap, and ending at the last),
           the even bytes of the first and the odd ones of the second */
        const uint8x8_t pick = vcreate_u8(0x0F0D0B0906040200ull);
        uint8x8x4_t v;
        v.val[0] = veor_u8(vqtbl1_u8(vcombine_u8(vld1_u8(r0), vld1_u8(r0 + 7)), pick), vget_low_u8(vflip));
        v.val[1] = veor_u8(vqtbl1_u8(vcombine_u8(vld1_u8(r1), vld1_u8(r1 + 7)), pick), vget_low_u8(vflip));
        v.val[2] = veor_u8(vqtbl1_u8(vcombine_u8(vld1_u8(r2), vld1_u8(r2 + 7)), pick), vget_low_u8(vflip));
        v.val[3] = veor_u8(vqtbl1_u8(vcombine_u8(vld1_u8(r3), vld1_u8(r3 + 7)), pick), vget_low_u8(vflip));
        vst4_u8(dst, v);
        i = n;
    } else if (i < n && stride == 1 && n >= 4) {
        /* 4 to 7 pixels (a row's piece at a block's edge): its first 4 and its last 4, overlapping */
        hg_qg_interleave4x4(dst, r0, r1, r2, r3, vflip);
        hg_qg_interleave4x4(dst + 4 * (n - 4), r0 + n - 4, r1 + n - 4, r2 + n - 4, r3 + n - 4, vflip);
        i = n;
    } else if (i < n && stride == 1 && n >= 2) {
        /* 2 or 3 pixels: the first 2 and the last 2 */
        hg_qg_interleave4x2(dst, r0, r1, r2, r3, vflip);
        hg_qg_interleave4x2(dst + 4 * (n - 2), r0 + n - 2, r1 + n - 2, r2 + n - 2, r3 + n - 2, vflip);
        i = n;
    }
#endif
#if defined(HG_QG_PATH_AVX512VNNI) || defined(HG_QG_PATH_AVXVNNI) || defined(HG_QG_PATH_AVX2)
    /* 16 pixels of the four rows at a time (hg_qg_row16), zipped by bytes and then by halfwords into
       the 16 dwords; a row's last piece of 16 overlaps the one before (the same dwords again). The
       scalar loop took about 10 instructions a pixel: the stem's packing was most of its time. */
    if (n >= 16 && (stride == 1 || stride == 2)) {
        const __m128i vflip = _mm_set1_epi32((int)flip);
        for (size_t at = 0; at < n; at += 16) {
            at = at + 16 > n ? n - 16 : at;
            const __m128i a0 = hg_qg_row16(r0 + stride * at, stride), a1 = hg_qg_row16(r1 + stride * at, stride);
            const __m128i a2 = hg_qg_row16(r2 + stride * at, stride), a3 = hg_qg_row16(r3 + stride * at, stride);
            const __m128i lo01 = _mm_unpacklo_epi8(a0, a1), hi01 = _mm_unpackhi_epi8(a0, a1);
            const __m128i lo23 = _mm_unpacklo_epi8(a2, a3), hi23 = _mm_unpackhi_epi8(a2, a3);
            _mm_storeu_si128((__m128i *)(void *)(dst + 4 * at), _mm_xor_si128(_mm_unpacklo_epi16(lo01, lo23), vflip));
            _mm_storeu_si128((__m128i *)(void *)(dst + 4 * at + 16), _mm_xor_si128(_mm_unpackhi_epi16(lo01, lo23), vflip));
            _mm_storeu_si128((__m128i *)(void *)(dst + 4 * at + 32), _mm_xor_si128(_mm_unpacklo_epi16(hi01, hi23), vflip));
            _mm_storeu_si128((__m128i *)(void *)(dst + 4 * at + 48), _mm_xor_si128(_mm_unpackhi_epi16(hi01, hi23), vflip));
        }
        i = n;
    }
#endif
    if (stride == 1) {
        for (; i < n; ++i)
            d[i] = ((uint32_t)r0[i] | (uint32_t)r1[i] << 8 | (uint32_t)r2[i] << 16 | (uint32_t)r3[i] << 24) ^ flip;
    } else {
        for (; i < n; ++i)
            d[i] = ((uint32_t)r0[i * stride] | (uint32_t)r1[i * stride] << 8 | (uint32_t)r2[i * stride] << 16 |
                    (uint32_t)r3[i * stride] << 24) ^
                   flip;
    }
}

/* n pixels of one block's activations for hg_qg_block (its groups HG_QG_NB * 4 bytes apart): group g's
   n dwords copied from a + taps[g] (the gathered convolution's interleaved plane, qconv_gather.c.j2);
   the common run lengths are copies of a constant size. */
static inline void hg_qg_gather(uint8_t *restrict dst, const uint8_t *a, const uint32_t *taps, size_t kg, size_t n)
{
    if (n == HG_QG_NB)
        for (size_t g = 0; g < kg; ++g)
            memcpy(dst + g * HG_QG_NB * 4u, a + taps[g], HG_QG_NB * 4u);
    else if (n == HG_QG_NB / 2)
        for (size_t g = 0; g < kg; ++g)
            memcpy(dst + g * HG_QG_NB * 4u, a + taps[g], HG_QG_NB * 2u);
    else
        for (size_t g = 0; g < kg; ++g)
            memcpy(dst + g * HG_QG_NB * 4u, a + taps[g], 4u * n);
}

#if defined(HG_QG_PATH_SDOT) || defined(HG_QG_PATH_NEON)
#if defined(__GNUC__)
#define HG_QG_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define HG_QG_ALWAYS_INLINE inline
#endif
/* 8 sums requantised to int16 (hg_qg_requant_row): round((float)(acc + c) * s) half to even (fcvtns),
   saturated to int16, plus the zero point (saturating). */
static HG_QG_ALWAYS_INLINE int16x8_t hg_qg_requant8(const int32_t *acc, int32x4_t vc, float s, int16x8_t vzp)
{
    const int32x4_t q0 = vcvtnq_s32_f32(vmulq_n_f32(vcvtq_f32_s32(vaddq_s32(vld1q_s32(acc), vc)), s));
    const int32x4_t q1 = vcvtnq_s32_f32(vmulq_n_f32(vcvtq_f32_s32(vaddq_s32(vld1q_s32(acc + 4), vc)), s));
    return vqaddq_s16(vqmovn_high_s32(vqmovn_s32(q0), q1), vzp);
}

/* 16 int16 values to bytes: mode 0 int8 (saturating), 1 int8 then the bounds, 2 uint8, 3 uint8 then the bounds */
static HG_QG_ALWAYS_INLINE uint8x16_t hg_qg_narrow16(int16x8_t h0, int16x8_t h1, uint8x16_t blo, uint8x16_t bhi,
                                                     int mode)
{
    if (mode >= 2) {
        const uint8x16_t v = vqmovun_high_s16(vqmovun_s16(h0), h1);
        return mode == 3 ? vminq_u8(vmaxq_u8(v, blo), bhi) : v;
    }
    const int8x16_t v = vqmovn_high_s16(vqmovn_s16(h0), h1);
    return vreinterpretq_u8_s8(
        mode == 1 ? vminq_s8(vmaxq_s8(v, vreinterpretq_s8_u8(blo)), vreinterpretq_s8_u8(bhi)) : v);
}

static HG_QG_ALWAYS_INLINE uint8x8_t hg_qg_narrow8(int16x8_t h, uint8x16_t blo, uint8x16_t bhi, int mode)
{
    if (mode >= 2) {
        const uint8x8_t v = vqmovun_s16(h);
        return mode == 3 ? vmin_u8(vmax_u8(v, vget_low_u8(blo)), vget_low_u8(bhi)) : v;
    }
    const int8x8_t v = vqmovn_s16(h);
    return vreinterpret_u8_s8(
        mode == 1 ? vmin_s8(vmax_s8(v, vreinterpret_s8_u8(vget_low_u8(blo))), vreinterpret_s8_u8(vget_low_u8(bhi)))
                  : v);
}

/* hg_qg_requant_row for n >= 8: 16 at a time, then the last 16 (or 8) the row allows, overlapping the
   ones before (the same bytes again) */
static HG_QG_ALWAYS_INLINE void hg_qg_requant_neon(const int32_t *acc, size_t n, int32x4_t vc, float s,
                                                   int16x8_t vzp, uint8x16_t blo, uint8x16_t bhi, uint8_t *y,
                                                   int mode)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        vst1q_u8(y + i, hg_qg_narrow16(hg_qg_requant8(acc + i, vc, s, vzp), hg_qg_requant8(acc + i + 8, vc, s, vzp),
                                       blo, bhi, mode));
    if (i < n && n >= 16) {
        i = n - 16;
        vst1q_u8(y + i, hg_qg_narrow16(hg_qg_requant8(acc + i, vc, s, vzp), hg_qg_requant8(acc + i + 8, vc, s, vzp),
                                       blo, bhi, mode));
    } else if (i < n) {
        vst1_u8(y, hg_qg_narrow8(hg_qg_requant8(acc, vc, s, vzp), blo, bhi, mode));
        vst1_u8(y + n - 8, hg_qg_narrow8(hg_qg_requant8(acc + n - 8, vc, s, vzp), blo, bhi, mode));
    }
}

/* hg_qg_requant_row for `rows` rows of n >= 8 sums (acc_stride apart, each with its constant c[r] and
   scale s[r], stored ldy apart), the bounds set up once. The clamp is done on the integers (the bounds
   are integers, so clamping before or after rounding is the same): saturating narrows to int16, the
   zero point added saturating, a saturating narrow to the output's bytes (signed, or unsigned where
   the upper bound is past 127), then the bounds as bytes where they are narrower than the type's.
   The saturations never cut a value inside the bounds: int16's lie outside every byte's range. */
static inline void hg_qg_requant_rows(const int32_t *acc, size_t acc_stride, size_t rows, size_t n, const int32_t *c,
                                      const float *s, int32_t zp, float lo, float hi, uint8_t *y, size_t ldy)
{
    const int32_t qhi = (int32_t)hi + zp, qlo = (int32_t)lo + zp < qhi ? (int32_t)lo + zp : qhi; /* lo > hi: hi */
    const int y_unsigned = qhi > 127;
    const int clamp = y_unsigned ? qlo > 0 || qhi < 255 : qlo > -128 || qhi < 127;
    const int mode = (y_unsigned ? 2 : 0) + clamp;
    const int16x8_t vzp = vdupq_n_s16((int16_t)zp);
    const uint8x16_t blo = vdupq_n_u8((uint8_t)qlo), bhi = vdupq_n_u8((uint8_t)qhi);
    /* one loop per mode (a constant in each) */
    for (size_t r = 0; r < rows; ++r) {
        const int32_t *a = acc + r * acc_stride;
        uint8_t *yr = y + r * ldy;
        if (mode == 0)
            hg_qg_requant_neon(a, n, vdupq_n_s32(c[r]), s[r], vzp, blo, bhi, yr, 0);
        else if (mode == 1)
            hg_qg_requant_neon(a, n, vdupq_n_s32(c[r]), s[r], vzp, blo, bhi, yr, 1);
        else if (mode == 2)
            hg_qg_requant_neon(a, n, vdupq_n_s32(c[r]), s[r], vzp, blo, bhi, yr, 2);
        else
            hg_qg_requant_neon(a, n, vdupq_n_s32(c[r]), s[r], vzp, blo, bhi, yr, 3);
    }
}
#endif

/* Requantise n int32 sums: y[i] = clamp((float)(acc[i] + c) * s, lo, hi) rounded half to even + zp, as a
   byte (int8 or uint8: the value is in range, so its low byte is the stored one). */
static inline void hg_qg_requant_row(const int32_t *acc, size_t n, int32_t c, float s, int32_t zp, float lo, float hi,
                                     uint8_t *y)
{
    size_t i = 0;
#if defined(HG_QG_PATH_AVX512VNNI)
    const __m512i vc = _mm512_set1_epi32(c), vzp = _mm512_set1_epi32(zp);
    const __m512 vs = _mm512_set1_ps(s), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    for (; i < n; i += 16) {
        const __mmask16 lanes = (__mmask16)(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1u);
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_maskz_loadu_epi32(lanes, acc + i), vc)), vs);
        f = _mm512_min_ps(_mm512_max_ps(f, vlo), vhi);
        _mm_mask_storeu_epi8(y + i, lanes, _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(f), vzp)));
    }
#elif defined(HG_QG_PATH_AVXVNNI) || defined(HG_QG_PATH_AVX2)
    const __m256i vc = _mm256_set1_epi32(c), vzp = _mm256_set1_epi32(zp);
    const __m256 vs = _mm256_set1_ps(s), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    /* the low byte of each int16 (the values are in range: int8 or uint8 alike) */
    const __m128i low_bytes = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
    for (; i < HG_QG_WHOLE(n, 8); i += 8) {
        __m256 f = _mm256_mul_ps(
            _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(acc + i)), vc)), vs);
        f = _mm256_min_ps(_mm256_max_ps(f, vlo), vhi);
        const __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(f), vzp);
        const __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64((__m128i *)(void *)(y + i), _mm_shuffle_epi8(h, low_bytes));
    }
#elif defined(HG_QG_PATH_SDOT) || defined(HG_QG_PATH_NEON)
    /* fcvtns rounds half to even, as hg_round_even does (hg_qg_requant_rows) */
    if (n >= 8) {
        hg_qg_requant_rows(acc, 0, 1, n, &c, &s, zp, lo, hi, y, 0);
        return;
    }
#endif
    for (; i < n; ++i)
        y[i] = (uint8_t)(hg_round_even(hg_clamp_q((float)(acc[i] + c) * s, lo, hi)) + zp);
}

/* Depthwise: n int32 sums out[i] = sum over taps t of w[t] * x_t[i * stride], x_t the bytes at taps[t]
   (int8 or uint8 as x_signed says). Vectorised across the output row for strides 1 and 2 (a stride-2
   row read as int16 pairs, the even one kept); reads at most HG_QG_DW_SLACK bytes past a tap's last. */
#define HG_QG_DW_SLACK 32

static inline void hg_qg_dw_row(const uint8_t *const *taps, const int32_t *w, size_t ntaps, size_t stride, size_t n,
                                int x_signed, int32_t *out)
{
    size_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    /* masked: a short row (8 or 4 outputs deep in a network) is one partial vector, not scalar */
    if (stride <= 2)
        for (; i < n; i += 16) {
            const size_t live = n - i < 16 ? n - i : 16;
            const __mmask16 lanes = (__mmask16)((1u << live) - 1u);
            const __mmask32 bytes = (__mmask32)(live == 16 ? 0xFFFFFFFFu : (1u << (2 * live)) - 1u);
            __m512i acc = _mm512_setzero_si512();
            for (size_t t = 0; t < ntaps; ++t) {
                const uint8_t *p = taps[t] + i * stride;
                __m512i v;
                if (stride == 1) {
                    const __m128i b = _mm_maskz_loadu_epi8(lanes, p);
                    v = x_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
                } else {
                    const __m256i b = _mm256_maskz_loadu_epi8(bytes, p);
                    v = x_signed ? _mm512_cvtepi8_epi16(b) : _mm512_cvtepu8_epi16(b);
                    v = _mm512_srai_epi32(_mm512_slli_epi32(v, 16), 16);
                }
                acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(v, _mm512_set1_epi32(w[t])));
            }
            _mm512_mask_storeu_epi32(out + i, lanes, acc);
        }
#elif defined(__AVX2__)
    if (stride <= 2)
        for (; i < HG_QG_WHOLE(n, 8); i += 8) {
            __m256i acc = _mm256_setzero_si256();
            for (size_t t = 0; t < ntaps; ++t) {
                const uint8_t *p = taps[t] + i * stride;
                __m256i v;
                if (stride == 1) {
                    const __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)p);
                    v = x_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
                } else {
                    const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)p);
                    v = x_signed ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b);
                    v = _mm256_srai_epi32(_mm256_slli_epi32(v, 16), 16);
                }
                acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, _mm256_set1_epi32(w[t])));
            }
            _mm256_storeu_si256((__m256i *)(void *)(out + i), acc);
        }
#elif defined(HG_QG_PATH_SDOT) || defined(HG_QG_PATH_NEON)
    /* 8 outputs: the bytes widened to int16 (stride 2: ld2 keeps the even ones), smlal by the tap's
       weight (it fits int16: a byte less a zero point) into two int32x4; int8 bytes with weights in
       [-127, 127] first 16 outputs at a time, two taps' products summed in int16 (smull + smlal,
       |sum| <= 2 * 128 * 127 < 2^15: exact) and widened onto four int32x4 (saddw), then 8 alike */
    int pairs = x_signed && stride <= 2;
    for (size_t t = 0; t < ntaps; ++t)
        pairs &= w[t] >= -127 && w[t] <= 127;
    if (pairs)
        for (; i < HG_QG_WHOLE(n, 16); i += 16) {
            int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
            for (size_t t = 0; t < ntaps; t += 2) {
                const uint8_t *p0 = taps[t] + i * stride;
                const int8x16_t b0 = vreinterpretq_s8_u8(stride == 1 ? vld1q_u8(p0) : vld2q_u8(p0).val[0]);
                const int8x16_t w0 = vdupq_n_s8((int8_t)w[t]);
                int16x8_t l = vmull_s8(vget_low_s8(b0), vget_low_s8(w0));
                int16x8_t h = vmull_high_s8(b0, w0);
                if (t + 1 < ntaps) {
                    const uint8_t *p1 = taps[t + 1] + i * stride;
                    const int8x16_t b1 = vreinterpretq_s8_u8(stride == 1 ? vld1q_u8(p1) : vld2q_u8(p1).val[0]);
                    const int8x16_t w1 = vdupq_n_s8((int8_t)w[t + 1]);
                    l = vmlal_s8(l, vget_low_s8(b1), vget_low_s8(w1));
                    h = vmlal_high_s8(h, b1, w1);
                }
                a0 = vaddw_s16(a0, vget_low_s16(l));
                a1 = vaddw_high_s16(a1, l);
                a2 = vaddw_s16(a2, vget_low_s16(h));
                a3 = vaddw_high_s16(a3, h);
            }
            vst1q_s32(out + i, a0);
            vst1q_s32(out + i + 4, a1);
            vst1q_s32(out + i + 8, a2);
            vst1q_s32(out + i + 12, a3);
        }
    if (pairs)
        for (; i < HG_QG_WHOLE(n, 8); i += 8) {
            int32x4_t a0 = vdupq_n_s32(0), a1 = a0;
            for (size_t t = 0; t < ntaps; t += 2) {
                const uint8_t *p0 = taps[t] + i * stride;
                int16x8_t l = vmull_s8(vreinterpret_s8_u8(stride == 1 ? vld1_u8(p0) : vld2_u8(p0).val[0]),
                                       vdup_n_s8((int8_t)w[t]));
                if (t + 1 < ntaps) {
                    const uint8_t *p1 = taps[t + 1] + i * stride;
                    l = vmlal_s8(l, vreinterpret_s8_u8(stride == 1 ? vld1_u8(p1) : vld2_u8(p1).val[0]),
                                 vdup_n_s8((int8_t)w[t + 1]));
                }
                a0 = vaddw_s16(a0, vget_low_s16(l));
                a1 = vaddw_high_s16(a1, l);
            }
            vst1q_s32(out + i, a0);
            vst1q_s32(out + i + 4, a1);
        }
    if (stride <= 2)
        for (; i < HG_QG_WHOLE(n, 8); i += 8) {
            int32x4_t s0 = vdupq_n_s32(0), s1 = vdupq_n_s32(0);
            for (size_t t = 0; t < ntaps; ++t) {
                const uint8_t *p = taps[t] + i * stride;
                const uint8x8_t b = stride == 1 ? vld1_u8(p) : vld2_u8(p).val[0];
                const int16x8_t v = x_signed ? vmovl_s8(vreinterpret_s8_u8(b)) : vreinterpretq_s16_u16(vmovl_u8(b));
                s0 = vmlal_n_s16(s0, vget_low_s16(v), (int16_t)w[t]);
                s1 = vmlal_n_s16(s1, vget_high_s16(v), (int16_t)w[t]);
            }
            vst1q_s32(out + i, s0);
            vst1q_s32(out + i + 4, s1);
        }
#endif
    for (; i < n; ++i) {
        int32_t sum = 0;
        for (size_t t = 0; t < ntaps; ++t) {
            const uint8_t b = taps[t][i * stride];
            sum += w[t] * (x_signed ? (int32_t)(int8_t)b : (int32_t)b);
        }
        out[i] = sum;
    }
}

/* hg_qg_dw_row's sums requantised (hg_qg_requant_row) into n bytes at y; on AVX-512 in registers. */
static inline void hg_qg_dw_row_q(const uint8_t *const *taps, const int32_t *w, size_t ntaps, size_t stride, size_t n,
                                  int x_signed, int32_t *sums, int32_t c, float s, int32_t zp, float lo, float hi,
                                  uint8_t *y)
{
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    if (stride <= 2) {
        const __m512i vc = _mm512_set1_epi32(c), vzp = _mm512_set1_epi32(zp);
        const __m512 vs = _mm512_set1_ps(s), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
        for (size_t i = 0; i < n; i += 16) {
            const size_t live = n - i < 16 ? n - i : 16;
            const __mmask16 lanes = (__mmask16)((1u << live) - 1u);
            const __mmask32 bytes = (__mmask32)(live == 16 ? 0xFFFFFFFFu : (1u << (2 * live)) - 1u);
            __m512i acc = vc;
            for (size_t t = 0; t < ntaps; ++t) {
                const uint8_t *p = taps[t] + i * stride;
                __m512i v;
                if (stride == 1) {
                    const __m128i b = _mm_maskz_loadu_epi8(lanes, p);
                    v = x_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
                    acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(v, _mm512_set1_epi32(w[t])));
                } else {
                    /* the pairs as int16, the odd one's weight 0: one vpmaddwd (the weight is a byte
                       less a zero point, it fits int16), where the even one sign-extended to int32
                       and multiplied by vpmulld took four instructions; the same exact products */
                    const __m256i b = _mm256_maskz_loadu_epi8(bytes, p);
                    v = x_signed ? _mm512_cvtepi8_epi16(b) : _mm512_cvtepu8_epi16(b);
                    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(v, _mm512_set1_epi32((int32_t)(uint16_t)w[t])));
                }
            }
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), vs);
            f = _mm512_min_ps(_mm512_max_ps(f, vlo), vhi);
            _mm_mask_storeu_epi8(y + i, lanes, _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(f), vzp)));
        }
        return;
    }
#endif
    hg_qg_dw_row(taps, w, ntaps, stride, n, x_signed, sums);
    hg_qg_requant_row(sums, n, c, s, zp, lo, hi, y);
}

/* Depthwise, stride 1, output plane the input's size along its rows (in_w == out_w, <= 64), int8
   weights: on AVX-512 VNNI the input itself, no padded plane. Output v = oh * out_w + ow reads tap t
   at x[v + off[t]], one run per tap; the lanes whose tap falls in the padding are the bits of
   masks[t] left clear, and read the input zero point (a merge-masked load) instead. */
#if defined(HG_QG_PATH_AVX512VNNI)
#define HG_QG_DW_MASKED 1

/* Tap t's valid outputs as bits, [ntaps][(out_h * out_w + 63) / 64] words: its row dh[t] and
   column dw[t] away from the output's inside the input. */
static inline void hg_qg_dw_masks(uint64_t *masks, const int32_t *dh, const int32_t *dw, size_t ntaps, size_t in_h,
                                  size_t out_h, size_t out_w)
{
    const size_t words = (out_h * out_w + 63) / 64;
    for (size_t t = 0; t < ntaps; ++t) {
        uint64_t cols = 0, *mt = masks + t * words;
        for (size_t ow = 0; ow < out_w; ++ow)
            cols |= (ptrdiff_t)ow + dw[t] >= 0 && (ptrdiff_t)ow + dw[t] < (ptrdiff_t)out_w ? (uint64_t)1 << ow : 0u;
        for (size_t i = 0; i < words; ++i)
            mt[i] = 0;
        for (size_t oh = 0; oh < out_h; ++oh) {
            const ptrdiff_t ih = (ptrdiff_t)oh + dh[t];
            if (ih < 0 || ih >= (ptrdiff_t)in_h)
                continue;
            const size_t first = oh * out_w, at = first % 64;
            mt[first / 64] |= cols << at;
            if (at + out_w > 64)
                mt[first / 64 + 1] |= cols >> (64 - at);
        }
    }
}

static inline void hg_qg_dw_masked_q(const uint8_t *x, const int32_t *off, const uint64_t *masks, const int32_t *w,
                                     size_t ntaps, size_t nv, int x_signed, int32_t xzp, int32_t c, float s, int32_t zp,
                                     float lo, float hi, uint8_t *y)
{
    const size_t words = (nv + 63) / 64;
    int32_t wsum = 0;
    for (size_t t = 0; t < ntaps; ++t)
        wsum += w[t];
    const __m512i flip = _mm512_set1_epi8(x_signed ? (char)0x80 : 0), pad = _mm512_set1_epi8((char)xzp);
    const __m512i vc = _mm512_set1_epi32(x_signed ? c - 128 * wsum : c), vzp = _mm512_set1_epi32(zp);
    const __m512 vs = _mm512_set1_ps(s), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    for (size_t i = 0; i < nv; i += 64) {
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t t = 0; t < ntaps; t += 4) {
            __m512i v[4];
            uint32_t quad = 0;
            for (size_t k = 0; k < 4; ++k) {
                v[k] = t + k < ntaps ? _mm512_xor_si512(_mm512_mask_loadu_epi8(pad, (__mmask64)masks[(t + k) * words + i / 64],
                                                                               x + (ptrdiff_t)i + off[t + k]),
                                                        flip)
                                     : _mm512_setzero_si512();
                quad |= t + k < ntaps ? (uint32_t)(uint8_t)w[t + k] << (8 * k) : 0u;
            }
            const __m512i wq = _mm512_set1_epi32((int32_t)quad);
            const __m512i ab_lo = _mm512_unpacklo_epi8(v[0], v[1]), ab_hi = _mm512_unpackhi_epi8(v[0], v[1]);
            const __m512i cd_lo = _mm512_unpacklo_epi8(v[2], v[3]), cd_hi = _mm512_unpackhi_epi8(v[2], v[3]);
            a0 = _mm512_dpbusd_epi32(a0, _mm512_unpacklo_epi16(ab_lo, cd_lo), wq);
            a1 = _mm512_dpbusd_epi32(a1, _mm512_unpackhi_epi16(ab_lo, cd_lo), wq);
            a2 = _mm512_dpbusd_epi32(a2, _mm512_unpacklo_epi16(ab_hi, cd_hi), wq);
            a3 = _mm512_dpbusd_epi32(a3, _mm512_unpackhi_epi16(ab_hi, cd_hi), wq);
        }
        const __m512i u0 = _mm512_shuffle_i32x4(a0, a1, 0x44), u1 = _mm512_shuffle_i32x4(a2, a3, 0x44);
        const __m512i u2 = _mm512_shuffle_i32x4(a0, a1, 0xEE), u3 = _mm512_shuffle_i32x4(a2, a3, 0xEE);
        const __m512i o[4] = { _mm512_shuffle_i32x4(u0, u1, 0x88), _mm512_shuffle_i32x4(u0, u1, 0xDD),
                               _mm512_shuffle_i32x4(u2, u3, 0x88), _mm512_shuffle_i32x4(u2, u3, 0xDD) };
        for (size_t j = 0; j < 4 && i + 16 * j < nv; ++j) {
            const size_t live = nv - i - 16 * j;
            const __mmask16 lanes = (__mmask16)(live >= 16 ? 0xFFFFu : (1u << live) - 1u);
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(o[j], vc)), vs);
            f = _mm512_min_ps(_mm512_max_ps(f, vlo), vhi);
            _mm_mask_storeu_epi8(y + i + 16 * j, lanes, _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(f), vzp)));
        }
    }
}
#endif

#if defined(HG_QG_PATH_SDOT) || defined(HG_QG_PATH_NEON)
/* The output's zero point and bounds as hg_qg_requant16 takes them, set up once per call as
   hg_qg_requant_rows sets up its own. The bytes are computed as int8: a uint8 output as its value less
   128 (the zero point and bounds too), the top bit flipped back after the clamp (x ^ 0x80 = x + 128). */
typedef struct {
    int16x8_t zp;
    int8x16_t lo, hi;
    uint8x16_t flip;
} hg_qg_bounds;

static inline hg_qg_bounds hg_qg_bounds_of(int32_t zp, float lo, float hi)
{
    const int32_t qhi = (int32_t)hi + zp, qlo = (int32_t)lo + zp < qhi ? (int32_t)lo + zp : qhi; /* lo > hi: hi */
    const int32_t shift = qhi > 127 ? 128 : 0;
    const hg_qg_bounds b = { vdupq_n_s16((int16_t)(zp - shift)), vdupq_n_s8((int8_t)(qlo - shift)),
                             vdupq_n_s8((int8_t)(qhi - shift)), vdupq_n_u8((uint8_t)shift) };
    return b;
}

/* 16 int32 sums (a0-a3, in order, the constant already in) requantised as hg_qg_requant_row does into
   16 bytes at y: rounded half to even (fcvtns), saturated to int16, the zero point added saturating, a
   saturating narrow to bytes, then the bounds (integers, so clamping after rounding is the same as
   before; no saturation cuts a value inside them). */
static HG_QG_ALWAYS_INLINE void hg_qg_requant16(int32x4_t a0, int32x4_t a1, int32x4_t a2, int32x4_t a3, float s,
                                                hg_qg_bounds b, uint8_t *y)
{
    const int32x4_t q0 = vcvtnq_s32_f32(vmulq_n_f32(vcvtq_f32_s32(a0), s));
    const int32x4_t q1 = vcvtnq_s32_f32(vmulq_n_f32(vcvtq_f32_s32(a1), s));
    const int32x4_t q2 = vcvtnq_s32_f32(vmulq_n_f32(vcvtq_f32_s32(a2), s));
    const int32x4_t q3 = vcvtnq_s32_f32(vmulq_n_f32(vcvtq_f32_s32(a3), s));
    const int16x8_t h0 = vqaddq_s16(vqmovn_high_s32(vqmovn_s32(q0), q1), b.zp);
    const int16x8_t h1 = vqaddq_s16(vqmovn_high_s32(vqmovn_s32(q2), q3), b.zp);
    const int8x16_t v = vminq_s8(vmaxq_s8(vqmovn_high_s16(vqmovn_s16(h0), h1), b.lo), b.hi);
    vst1q_u8(y, veorq_u8(vreinterpretq_u8_s8(v), b.flip));
}
#endif


/* A plane's rows into its padded copy (qconv_direct.c.j2): `rows` rows of `width` bytes from src (one
   after another) to dst, rows `stride` bytes apart, the padding around them already the zero point
   zp. aarch64, rows of 4 to 16 bytes: one 8-byte (or 16-byte) load and store a row, 4 rows a loop,
   the lanes past the row's bytes the zero point: they land on padding (which holds it) or on later
   rows' bytes (rewritten by those rows' stores, made in order); the last row exactly. The loads stay
   inside src (a row's 8 bytes end within the next row: 8 <= 2 * width) and the stores before the
   last row's end (8 <= stride + width). */
static inline void hg_qg_pad_rows(uint8_t *dst, size_t stride, const uint8_t *src, size_t rows, size_t width, uint8_t zp)
{
    size_t r = 0;
#if defined(__aarch64__) && defined(__ARM_NEON)
    const size_t but_last = rows ? rows - 1 : 0; /* the rows before the last, which is copied exactly */
    const uint8x16_t iota = vcombine_u8(vcreate_u8(0x0706050403020100ull), vcreate_u8(0x0F0E0D0C0B0A0908ull));
    const uint8x16_t keep = vcgtq_u8(vdupq_n_u8((uint8_t)width), iota), fill = vdupq_n_u8(zp);
    if (width >= 4 && width <= 8) {
        const uint8x8_t k = vget_low_u8(keep), f = vget_low_u8(fill);
        for (; r < HG_QG_WHOLE(but_last, 4); r += 4) {
            vst1_u8(dst + r * stride, vbsl_u8(k, vld1_u8(src + r * width), f));
            vst1_u8(dst + (r + 1) * stride, vbsl_u8(k, vld1_u8(src + (r + 1) * width), f));
            vst1_u8(dst + (r + 2) * stride, vbsl_u8(k, vld1_u8(src + (r + 2) * width), f));
            vst1_u8(dst + (r + 3) * stride, vbsl_u8(k, vld1_u8(src + (r + 3) * width), f));
        }
        for (; r < but_last; ++r)
            vst1_u8(dst + r * stride, vbsl_u8(k, vld1_u8(src + r * width), f));
    } else if (width > 8 && width <= 16) {
        for (; r < HG_QG_WHOLE(but_last, 4); r += 4) {
            vst1q_u8(dst + r * stride, vbslq_u8(keep, vld1q_u8(src + r * width), fill));
            vst1q_u8(dst + (r + 1) * stride, vbslq_u8(keep, vld1q_u8(src + (r + 1) * width), fill));
            vst1q_u8(dst + (r + 2) * stride, vbslq_u8(keep, vld1q_u8(src + (r + 2) * width), fill));
            vst1q_u8(dst + (r + 3) * stride, vbslq_u8(keep, vld1q_u8(src + (r + 3) * width), fill));
        }
        for (; r < but_last; ++r)
            vst1q_u8(dst + r * stride, vbslq_u8(keep, vld1q_u8(src + r * width), fill));
    }
#else
    (void)zp;
#endif
    for (; r < rows; ++r)
        memcpy(dst + r * stride, src + r * width, width);
}

#if defined(HG_QG_PATH_SDOT) || defined(HG_QG_PATH_NEON)
/* The virtual plane's rows (pw apart) to the output's (out_w apart). Rows of 4 to 16 bytes: one load
   and store of 8 (or 16) bytes a row, the bytes past the row rewritten by the next row's store, the
   last row exactly; the reads stay inside the virtual plane ((out_h - 1) * pw + out_w bytes: 8 <= pw
   + out_w) and the writes inside the channel's output (8 - out_w <= out_w); 4 rows a loop. */
static inline void hg_qg_dw_rows_out(uint8_t *y, const uint8_t *v, size_t out_h, size_t out_w, size_t pw)
{
    size_t oh = 0;
    const size_t but_last = out_h ? out_h - 1 : 0; /* the rows before the last, which is copied exactly */
    if (out_w >= 4 && out_w <= 8) {
        for (; oh < HG_QG_WHOLE(but_last, 4); oh += 4) {
            vst1_u8(y + oh * out_w, vld1_u8(v + oh * pw));
            vst1_u8(y + (oh + 1) * out_w, vld1_u8(v + (oh + 1) * pw));
            vst1_u8(y + (oh + 2) * out_w, vld1_u8(v + (oh + 2) * pw));
            vst1_u8(y + (oh + 3) * out_w, vld1_u8(v + (oh + 3) * pw));
        }
        for (; oh < but_last; ++oh)
            vst1_u8(y + oh * out_w, vld1_u8(v + oh * pw));
    } else if (out_w > 8 && out_w <= 16) {
        for (; oh < HG_QG_WHOLE(but_last, 4); oh += 4) {
            vst1q_u8(y + oh * out_w, vld1q_u8(v + oh * pw));
            vst1q_u8(y + (oh + 1) * out_w, vld1q_u8(v + (oh + 1) * pw));
            vst1q_u8(y + (oh + 2) * out_w, vld1q_u8(v + (oh + 2) * pw));
            vst1q_u8(y + (oh + 3) * out_w, vld1q_u8(v + (oh + 3) * pw));
        }
        for (; oh < but_last; ++oh)
            vst1q_u8(y + oh * out_w, vld1q_u8(v + oh * pw));
    }
    for (; oh < out_h; ++oh)
        memcpy(y + oh * out_w, v + oh * pw, out_w);
}
#endif
/* Depthwise with stride 1 along the rows, a whole (2-D) output plane of out_h x out_w at once: the
   padded plane's rows are pw bytes apart, so output (oh, ow) at "virtual" index v = oh * pw + ow reads
   tap t at plane + off[t] + v, one contiguous run per tap for the whole plane (the pw - out_w
   columns between rows are computed and dropped). taps: ntaps pointers of scratch; vbytes:
   HG_QG_DW_VIRTUAL(out_h, out_w, pw) bytes of scratch; sums: out_w int32 (the other paths' rows).
   AVX-512 VNNI, when the weights fit int8: 64 outputs at a time, groups of 4 taps interleaved to
   dwords (unpack bytes, then words: in-lane, so the sums come out lane-transposed and are put back
   in order once per 64 outputs) and vpdpbusd by the group's 4 weights; signed activations flipped
   to unsigned (+128, taken off with the weights' sum). On aarch64 NEON the same virtual plane, 16 outputs
   a vector (widened to int16, smlal by the tap's weight). Elsewhere hg_qg_dw_row_q row by row. */
#define HG_QG_DW_VIRTUAL(out_h, out_w, pw) ((((out_h) - 1) * (pw) + (out_w) + 63) / 64 * 64)

static inline void hg_qg_dw_plane_q(const uint8_t *plane, const uint32_t *off, const uint8_t **taps, const int32_t *w,
                                    size_t ntaps, size_t pw, size_t out_h, size_t out_w, int x_signed, int32_t *sums,
                                    uint8_t *vbytes, int32_t c, float s, int32_t zp, float lo, float hi, uint8_t *y,
                                    int grouping)
{
    (void)grouping; /* plain NEON's (and SDOT's) alone */
#if defined(HG_QG_PATH_AVX512VNNI)
    int fits = 1;
    int32_t wsum = 0;
    for (size_t t = 0; t < ntaps; ++t) {
        fits &= w[t] >= -128 && w[t] <= 127;
        wsum += w[t];
    }
    if (fits) {
        const size_t nv = (out_h - 1) * pw + out_w;
        const __m512i flip = _mm512_set1_epi8(x_signed ? (char)0x80 : 0);
        const __m512i vc = _mm512_set1_epi32(x_signed ? c - 128 * wsum : c), vzp = _mm512_set1_epi32(zp);
        const __m512 vs = _mm512_set1_ps(s), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
        for (size_t i = 0; i < nv; i += 64) {
            const __mmask64 live = nv - i >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (nv - i)) - 1;
            __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
            for (size_t t = 0; t < ntaps; t += 4) {
                __m512i v[4];
                uint32_t quad = 0;
                for (size_t k = 0; k < 4; ++k) {
                    v[k] = t + k < ntaps ? _mm512_xor_si512(_mm512_maskz_loadu_epi8(live, plane + off[t + k] + i), flip)
                                         : _mm512_setzero_si512();
                    quad |= t + k < ntaps ? (uint32_t)(uint8_t)w[t + k] << (8 * k) : 0u;
                }
                const __m512i wq = _mm512_set1_epi32((int32_t)quad);
                const __m512i ab_lo = _mm512_unpacklo_epi8(v[0], v[1]), ab_hi = _mm512_unpackhi_epi8(v[0], v[1]);
                const __m512i cd_lo = _mm512_unpacklo_epi8(v[2], v[3]), cd_hi = _mm512_unpackhi_epi8(v[2], v[3]);
                a0 = _mm512_dpbusd_epi32(a0, _mm512_unpacklo_epi16(ab_lo, cd_lo), wq); /* lane L: 16L + 0-3 */
                a1 = _mm512_dpbusd_epi32(a1, _mm512_unpackhi_epi16(ab_lo, cd_lo), wq); /* 16L + 4-7 */
                a2 = _mm512_dpbusd_epi32(a2, _mm512_unpacklo_epi16(ab_hi, cd_hi), wq); /* 16L + 8-11 */
                a3 = _mm512_dpbusd_epi32(a3, _mm512_unpackhi_epi16(ab_hi, cd_hi), wq); /* 16L + 12-15 */
            }
            /* the 4 x 4 transpose of 128-bit lanes: outputs 16j-16j+15 are lane j of a0, a1, a2, a3 */
            const __m512i u0 = _mm512_shuffle_i32x4(a0, a1, 0x44), u1 = _mm512_shuffle_i32x4(a2, a3, 0x44);
            const __m512i u2 = _mm512_shuffle_i32x4(a0, a1, 0xEE), u3 = _mm512_shuffle_i32x4(a2, a3, 0xEE);
            const __m512i o[4] = { _mm512_shuffle_i32x4(u0, u1, 0x88), _mm512_shuffle_i32x4(u0, u1, 0xDD),
                                   _mm512_shuffle_i32x4(u2, u3, 0x88), _mm512_shuffle_i32x4(u2, u3, 0xDD) };
            for (size_t j = 0; j < 4; ++j) {
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(o[j], vc)), vs);
                f = _mm512_min_ps(_mm512_max_ps(f, vlo), vhi);
                _mm_storeu_si128((__m128i *)(void *)(vbytes + i + 16 * j),
                                 _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(f), vzp)));
            }
        }
        for (size_t oh = 0; oh < out_h; ++oh)
            memcpy(y + oh * out_w, vbytes + oh * pw, out_w);
        return;
    }
#elif defined(HG_QG_PATH_SDOT) || defined(HG_QG_PATH_NEON)
    /* 16 outputs of the virtual plane at a time (a row as short as 5 is no longer scalar), into four
       int32x4 requantised into vbytes; reads up to 15 bytes past a tap's last (within HG_QG_DW_SLACK)
       for outputs that are dropped. int8 bytes (|x| <= 128) with weights in [-127, 127]: several taps'
       products summed in int16 (smull, then smlal) before they are widened onto the int32 sums (saddw,
       4 instructions for 16 outputs), exact while 128 * sum(|w|) of the taps summed <= 32767. grouping
       (hetgen/ops/qlinear.py dw_tap_groups decides it per channel from the constant weights; -1: here,
       2 or 0): 3, three taps in their order (a 3-wide window's rows), 4, three by the columns of a 3 x 3
       window (3 widenings for 9 taps); 2, two taps (|sum| <= 2 * 128 * 127 < 2^15: 5 widenings); 0,
       each tap's 16 bytes widened to int16, smlal by its weight (a byte less a zero point: it fits). */
    (void)taps;
    (void)sums;
    const size_t nv = (out_h - 1) * pw + out_w;
    const hg_qg_bounds b = hg_qg_bounds_of(zp, lo, hi);
    if (grouping < 0) {
        grouping = x_signed && ntaps <= 16 ? 2 : 0;
        for (size_t t = 0; t < ntaps; ++t)
            grouping = w[t] >= -127 && w[t] <= 127 ? grouping : 0;
    }
    size_t group = 0; /* the arrays below hold 16 taps, 15 in threes */
    if ((grouping == 3 || grouping == 4) && ntaps <= 15 && ntaps % 3 == 0)
        group = 3;
    else if (grouping == 2 && ntaps <= 16)
        group = 2;
    if (group == 3) {
        const uint8_t *p[15];
        int8x16_t wq[15];
        for (size_t t = 0; t < ntaps; ++t) {
            const size_t tap = grouping == 4 ? (t % 3) * 3 + t / 3 : t;
            p[t] = plane + off[tap];
            wq[t] = vdupq_n_s8((int8_t)w[tap]);
        }
        for (size_t i = 0; i < nv; i += 16) {
            int32x4_t a0 = vdupq_n_s32(c), a1 = a0, a2 = a0, a3 = a0;
            for (size_t t = 0; t < ntaps; t += 3) {
                const int8x16_t b0 = vld1q_s8((const int8_t *)(p[t] + i));
                const int8x16_t b1 = vld1q_s8((const int8_t *)(p[t + 1] + i));
                const int8x16_t b2 = vld1q_s8((const int8_t *)(p[t + 2] + i));
                int16x8_t l = vmull_s8(vget_low_s8(b0), vget_low_s8(wq[t]));
                int16x8_t h = vmull_high_s8(b0, wq[t]);
                l = vmlal_s8(l, vget_low_s8(b1), vget_low_s8(wq[t + 1]));
                h = vmlal_high_s8(h, b1, wq[t + 1]);
                l = vmlal_s8(l, vget_low_s8(b2), vget_low_s8(wq[t + 2]));
                h = vmlal_high_s8(h, b2, wq[t + 2]);
                a0 = vaddw_s16(a0, vget_low_s16(l));
                a1 = vaddw_high_s16(a1, l);
                a2 = vaddw_s16(a2, vget_low_s16(h));
                a3 = vaddw_high_s16(a3, h);
            }
            hg_qg_requant16(a0, a1, a2, a3, s, b, vbytes + i);
        }
    } else if (group == 2) {
        int8x16_t wq[16];
        for (size_t t = 0; t < ntaps; ++t)
            wq[t] = vdupq_n_s8((int8_t)w[t]);
        for (size_t i = 0; i < nv; i += 16) {
            int32x4_t a0 = vdupq_n_s32(c), a1 = a0, a2 = a0, a3 = a0;
            for (size_t t = 0; t < ntaps; t += 2) {
                const int8x16_t b0 = vld1q_s8((const int8_t *)(plane + off[t] + i));
                int16x8_t l = vmull_s8(vget_low_s8(b0), vget_low_s8(wq[t]));
                int16x8_t h = vmull_high_s8(b0, wq[t]);
                if (t + 1 < ntaps) {
                    const int8x16_t b1 = vld1q_s8((const int8_t *)(plane + off[t + 1] + i));
                    l = vmlal_s8(l, vget_low_s8(b1), vget_low_s8(wq[t + 1]));
                    h = vmlal_high_s8(h, b1, wq[t + 1]);
                }
                a0 = vaddw_s16(a0, vget_low_s16(l));
                a1 = vaddw_high_s16(a1, l);
                a2 = vaddw_s16(a2, vget_low_s16(h));
                a3 = vaddw_high_s16(a3, h);
            }
            hg_qg_requant16(a0, a1, a2, a3, s, b, vbytes + i);
        }
    }
    for (size_t i = 0; i < nv && !group; i += 16) {
        int32x4_t a0 = vdupq_n_s32(c), a1 = a0, a2 = a0, a3 = a0;
        for (size_t t = 0; t < ntaps; ++t) {
            const uint8x16_t bt = vld1q_u8(plane + off[t] + i);
            const int16x8_t l = x_signed ? vmovl_s8(vget_low_s8(vreinterpretq_s8_u8(bt)))
                                         : vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(bt)));
            const int16x8_t h = x_signed ? vmovl_high_s8(vreinterpretq_s8_u8(bt))
                                         : vreinterpretq_s16_u16(vmovl_high_u8(bt));
            const int16_t wt = (int16_t)w[t];
            a0 = vmlal_n_s16(a0, vget_low_s16(l), wt);
            a1 = vmlal_high_n_s16(a1, l, wt);
            a2 = vmlal_n_s16(a2, vget_low_s16(h), wt);
            a3 = vmlal_high_n_s16(a3, h, wt);
        }
        hg_qg_requant16(a0, a1, a2, a3, s, b, vbytes + i);
    }
    hg_qg_dw_rows_out(y, vbytes, out_h, out_w, pw);
#endif
#if !defined(HG_QG_PATH_SDOT) && !defined(HG_QG_PATH_NEON)
    (void)vbytes;
    for (size_t oh = 0; oh < out_h; ++oh) {
        for (size_t t = 0; t < ntaps; ++t)
            taps[t] = plane + off[t] + oh * pw;
        hg_qg_dw_row_q(taps, w, ntaps, 1, out_w, x_signed, sums, c, s, zp, lo, hi, y + oh * out_w);
    }
#endif
}

/* MaxPool on int8/uint8 (templates/kernels/pool.c.j2), one output row of n: y[i] = the largest of
   init and rows[r][i * stride + kw * dil - pad] over the nrows input rows and the taps kw < kw_n whose
   column is inside the row (i in [lo[kw], hi[kw])), the bytes signed as x_signed says. AVX-512 with
   BMI2: 32 outputs at a time in a register, each tap's load masked to its valid lanes (strides 1
   and 2: stride 2 loads int16 lanes and keeps their low bytes); elsewhere plain C. */
static inline void hg_qg_max_cols(uint8_t *y, const uint8_t *const *rows, size_t nrows, size_t kw_n, size_t dil,
                                  ptrdiff_t pad, const size_t *lo, const size_t *hi, size_t i, size_t end, size_t stride,
                                  int x_signed, uint8_t init)
{
    for (size_t o = i; o < end; ++o)
        y[o] = init;
    for (size_t r = 0; r < nrows; ++r)
        for (size_t kw = 0; kw < kw_n; ++kw) {
            const size_t first = lo[kw] > i ? lo[kw] : i, last = hi[kw] < end ? hi[kw] : end;
            for (size_t o = first; o < last; ++o) {
                const uint8_t v = rows[r][(ptrdiff_t)(o * stride + kw * dil) - pad];
                if (x_signed ? (int8_t)v > (int8_t)y[o] : v > y[o])
                    y[o] = v;
            }
        }
}

/* inlined into the pooling kernel on aarch64, where its constants (taps, stride, width) pick the loops */
#if defined(__aarch64__) && defined(__ARM_NEON) && defined(__GNUC__)
#define HG_QG_MAX_INLINE inline __attribute__((always_inline))
#else
#define HG_QG_MAX_INLINE inline
#endif

static HG_QG_MAX_INLINE void hg_qg_max_taps(uint8_t *y, const uint8_t *const *rows, size_t nrows, size_t kw_n, size_t dil,
                                  ptrdiff_t pad, const size_t *lo, const size_t *hi, size_t n, size_t stride,
                                  int x_signed, uint8_t init)
{
    size_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__BMI2__)
    if (stride <= 2)
        for (; i < n; i += 32) {
            const size_t live = n - i < 32 ? n - i : 32;
            __m256i acc = _mm256_set1_epi8((char)init);
            for (size_t r = 0; r < nrows; ++r)
                for (size_t kw = 0; kw < kw_n; ++kw) {
                    const size_t first = lo[kw] > i ? lo[kw] - i : 0, end = hi[kw] < i + live ? hi[kw] - i : live;
                    if (first >= end)
                        continue;
                    /* lanes [first, end) */
                    const uint32_t lanes = (uint32_t)(((uint64_t)1 << end) - ((uint64_t)1 << first));
                    const uint8_t *src = rows[r] + (ptrdiff_t)(i * stride + kw * dil) - pad;
                    __m256i v;
                    if (stride == 1)
                        v = _mm256_maskz_loadu_epi8((__mmask32)lanes, src);
                    else
                        v = _mm512_cvtepi16_epi8(
                            _mm512_maskz_loadu_epi8((__mmask64)_pdep_u64(lanes, 0x5555555555555555ull), src));
                    acc = x_signed ? _mm256_mask_max_epi8(acc, (__mmask32)lanes, acc, v)
                                   : _mm256_mask_max_epu8(acc, (__mmask32)lanes, acc, v);
                }
            _mm256_mask_storeu_epi8(y + i, (__mmask32)(live == 32 ? 0xFFFFFFFFu : (1u << live) - 1u), acc);
        }
#elif defined(__aarch64__) && defined(__ARM_NEON)
    /* the columns every tap reads (no masks on NEON): [inner_lo, inner_hi) */
    size_t inner_lo = 0, inner_hi = n;
    for (size_t kw = 0; kw < kw_n; ++kw) {
        inner_lo = lo[kw] > inner_lo ? lo[kw] : inner_lo;
        inner_hi = hi[kw] < inner_hi ? hi[kw] : inner_hi;
    }
    /* inner_lo < inner_hi follows from the sum's bound (inner_lo <= n: it cannot wrap), but GCC took a
       wrapped sum as possible and warned of the left edge's memset (-Wstringop-overflow, GCC 12 -O2);
       the bound as a difference (inner_hi - inner_lo >= 7 + stride) made it warn of `rows` instead */
    if (stride <= 2 && nrows && inner_lo + 7 + stride <= inner_hi && inner_lo < inner_hi) {
        if (inner_lo && inner_lo <= 8) {
            /* the left edge in the first 8: tap kw's valid lanes [lo[kw], 8) loaded from its first valid
               column and moved up by lo[kw] lanes (tbx: the lanes below take init) */
            const uint8x8_t fill = vdup_n_u8(init), iota = vcreate_u8(0x0706050403020100ull);
            uint8x8_t acc = fill;
            for (size_t kw = 0; kw < kw_n; ++kw) {
                const uint8x8_t idx = vsub_u8(iota, vdup_n_u8((uint8_t)lo[kw]));
                for (size_t r = 0; r < nrows; ++r) {
                    const uint8_t *src = rows[r] + (ptrdiff_t)(lo[kw] * stride + kw * dil) - pad;
                    acc = hg_qg_max8(acc, vtbx1_u8(fill, hg_qg_load8(src, stride, 0), idx), x_signed);
                }
            }
            vst1_u8(y, acc);
            i = 8;
        } else {
            if (inner_lo)
                hg_qg_max_cols(y, rows, nrows, kw_n, dil, pad, lo, hi, 0, inner_lo, stride, x_signed, init);
            i = inner_lo;
        }
        /* 16 at a time (stride 2: ld2 also reads the odd byte after a vector's last tap, inside the row
           while i + 16 < inner_hi) */
        for (; stride == 1 ? i + 16 <= inner_hi : i + 16 < inner_hi; i += 16) {
            uint8x16_t acc = vdupq_n_u8(init);
            for (size_t r = 0; r < nrows; ++r)
                for (size_t kw = 0; kw < kw_n; ++kw) {
                    const uint8_t *src = rows[r] + (ptrdiff_t)(i * stride + kw * dil) - pad;
                    const uint8x16_t v = stride == 1 ? vld1q_u8(src) : vld2q_u8(src).val[0];
                    acc = x_signed ? vreinterpretq_u8_s8(vmaxq_s8(vreinterpretq_s8_u8(acc), vreinterpretq_s8_u8(v)))
                                   : vmaxq_u8(acc, v);
                }
            vst1q_u8(y + i, acc);
        }
        /* 8 at a time up to inner_hi, the last 8 overlapping the ones before (max is idempotent); stride 2's
           last 8 read from the byte before their first tap and keep the odd bytes, so that the last byte
           read is the last tap's (the byte before is inside the row: at >= inner_lo + 1) */
        while (i < inner_hi) {
            const size_t at = i + 8 <= inner_hi ? i : inner_hi - 8;
            const int odd = stride == 2 && at + 8 == inner_hi;
            uint8x8_t acc = vdup_n_u8(init);
            for (size_t r = 0; r < nrows; ++r)
                for (size_t kw = 0; kw < kw_n; ++kw) {
                    const uint8_t *src = rows[r] + (ptrdiff_t)(at * stride + kw * dil) - pad - odd;
                    acc = hg_qg_max8(acc, hg_qg_load8(src, stride, odd), x_signed);
                }
            vst1_u8(y + at, acc);
            i = at + 8;
        }
    }
#endif
    if (i < n)
        hg_qg_max_cols(y, rows, nrows, kw_n, dil, pad, lo, hi, i, n, stride, x_signed, init);
}

#if defined(__aarch64__) && defined(__ARM_NEON)
/* The pairwise maximum (smaxp/umaxp) of [a, b]: lanes 0-7 a's adjacent pairs, 8-15 b's. */
static inline uint8x16_t hg_qg_maxp16(uint8x16_t a, uint8x16_t b, int x_signed)
{
    return x_signed ? vreinterpretq_u8_s8(vpmaxq_s8(vreinterpretq_s8_u8(a), vreinterpretq_s8_u8(b)))
                    : vpmaxq_u8(a, b);
}

/* A 2 x 2 window of stride 2 over two rows, every tap inside them (no padding, n outputs from the rows'
   first 2n bytes, n >= 4): the rows' maximum, then adjacent pairs' (smaxp), 16 outputs from 32 bytes a
   row. A row shorter than 16 outputs takes its first and last 16 (or 8) outputs' bytes and stores the
   two halves overlapping; nothing is read outside the 2n bytes. LeNet-5's rows of 5 and 14 outputs
   were 116 and 73 instructions each through the general path. */
static inline void hg_qg_max2x2(uint8_t *y, const uint8_t *r0, const uint8_t *r1, size_t n, int x_signed)
{
    size_t o = 0;
    for (; o + 16 <= n; o += 16) {
        const uint8x16_t a = hg_qg_max16(vld1q_u8(r0 + 2 * o), vld1q_u8(r1 + 2 * o), x_signed);
        const uint8x16_t b = hg_qg_max16(vld1q_u8(r0 + 2 * o + 16), vld1q_u8(r1 + 2 * o + 16), x_signed);
        vst1q_u8(y + o, hg_qg_maxp16(a, b, x_signed));
    }
    if (o == n)
        return;
    if (n >= 16) {
        o = n - 16;
        const uint8x16_t a = hg_qg_max16(vld1q_u8(r0 + 2 * o), vld1q_u8(r1 + 2 * o), x_signed);
        const uint8x16_t b = hg_qg_max16(vld1q_u8(r0 + 2 * o + 16), vld1q_u8(r1 + 2 * o + 16), x_signed);
        vst1q_u8(y + o, hg_qg_maxp16(a, b, x_signed));
    } else if (n >= 8) {
        const size_t last = 2 * n - 16;
        const uint8x16_t a = hg_qg_max16(vld1q_u8(r0), vld1q_u8(r1), x_signed);
        const uint8x16_t b = hg_qg_max16(vld1q_u8(r0 + last), vld1q_u8(r1 + last), x_signed);
        const uint8x16_t v = hg_qg_maxp16(a, b, x_signed);
        vst1_u8(y, vget_low_u8(v));
        vst1_u8(y + n - 8, vget_high_u8(v));
    } else {
        const size_t last = 2 * n - 8;
        const uint8x8_t a = hg_qg_max8(vld1_u8(r0), vld1_u8(r1), x_signed);
        const uint8x8_t b = hg_qg_max8(vld1_u8(r0 + last), vld1_u8(r1 + last), x_signed);
        const uint32x2_t v = vreinterpret_u32_u8(
            x_signed ? vreinterpret_u8_s8(vpmax_s8(vreinterpret_s8_u8(a), vreinterpret_s8_u8(b))) : vpmax_u8(a, b));
        const uint32_t first4 = vget_lane_u32(v, 0), last4 = vget_lane_u32(v, 1);
        memcpy(y + n - 4, &last4, 4);
        memcpy(y, &first4, 4);
    }
}
#endif

/* On aarch64 NEON, a window of several rows first takes the rows' maximum column by column, 16 at a
   time (the last 16 overlapping), over the columns the taps read, [cmin, cmax], into a row of its own
   whose taps are then taken as one row's: each column's rows are compared once, not once per tap
   reading it. Both are inlined into the kernel (always_inline): not inlined, the loops over the
   taps' tables cost more than the pass saves on tiny_cnn's 2x2 windows. */
#define HG_QG_MAX_SPAN 512

static HG_QG_MAX_INLINE void hg_qg_max_row(uint8_t *y, const uint8_t *const *rows, size_t nrows, size_t kw_n,
                                           size_t dil, ptrdiff_t pad, const size_t *lo, const size_t *hi, size_t n,
                                           size_t stride, int x_signed, uint8_t init)
{
#if defined(__aarch64__) && defined(__ARM_NEON)
    if (nrows == 2 && kw_n == 2 && stride == 2 && dil == 1 && pad == 0 && n >= 4 && lo[0] == 0 && lo[1] == 0 &&
        hi[0] == n && hi[1] == n) {
        hg_qg_max2x2(y, rows[0], rows[1], n, x_signed);
        return;
    }
    ptrdiff_t cmin = PTRDIFF_MAX, cmax = -1;
    for (size_t kw = 0; kw < kw_n; ++kw)
        if (lo[kw] < hi[kw]) {
            const ptrdiff_t first = (ptrdiff_t)(lo[kw] * stride + kw * dil) - pad;
            const ptrdiff_t last = (ptrdiff_t)((hi[kw] - 1) * stride + kw * dil) - pad;
            cmin = first < cmin ? first : cmin;
            cmax = last > cmax ? last : cmax;
        }
    if (nrows > 1 && stride <= 2 && cmax >= cmin && cmax - cmin + 1 >= 16 && cmax - cmin + 1 <= HG_QG_MAX_SPAN) {
        const size_t span = (size_t)(cmax - cmin + 1);
        uint8_t m[HG_QG_MAX_SPAN];
        const uint8_t *const one[1] = {m};
        /* GCC threads a path with nrows > 2 past the 2 x 2 test above and then flags rows[2] of a two-row
           window's table (-Warray-bounds); the index is 2 only where nrows > 2 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif
        const uint8_t *r0 = rows[0] + cmin, *r1 = rows[1] + cmin, *r2 = rows[nrows > 2 ? 2 : 1] + cmin;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
        for (size_t c = 0; c < span; c += 16) {
            const size_t at = c + 16 <= span ? c : span - 16;
            /* three rows (or two: the second again) in registers, any more from the table */
            uint8x16_t v = hg_qg_max16(hg_qg_max16(vld1q_u8(r0 + at), vld1q_u8(r1 + at), x_signed), vld1q_u8(r2 + at),
                                       x_signed);
            for (size_t r = 3; r < nrows; ++r)
                v = hg_qg_max16(v, vld1q_u8(rows[r] + cmin + at), x_signed);
            vst1q_u8(m + at, v);
        }
        hg_qg_max_taps(y, one, 1, kw_n, dil, pad + cmin, lo, hi, n, stride, x_signed, init);
        return;
    }
#endif
    hg_qg_max_taps(y, rows, nrows, kw_n, dil, pad, lo, hi, n, stride, x_signed, init);
}

/* One block: rows (<= HG_QG_MR) output channels x npx (<= HG_QG_NB) output pixels.
   w: the panel, [kg][HG_QG_MR][4]; a: the activations of the block's first pixel, kgroup stride `as`
   bytes; c, s: the rows' constants and scales; y: row r's pixels at y + r * ldy. */
#if defined(HG_QG_PATH_AVX512VNNI)
/* 16 sums that already hold their constant (the block's accumulators start at it) */
static inline __m128i hg_qg_requant16(__m512i acc, float s, int32_t zp, float lo, float hi)
{
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(s));
    f = _mm512_min_ps(_mm512_max_ps(f, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
    return _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(f), _mm512_set1_epi32(zp)));
}

/* One group of 4 k into the 16 accumulators: rows r's 4 weight bytes broadcast (w + 4r) times the
   activations of pixels 0-15 (a0) and 16-31 (a1). GCC 12 copies the accumulators of the intrinsic on
   every step (a move per vpdpbusd, and spills), so there the step is one inline assembly statement
   with the accumulators tied in place; other compilers get the intrinsics. */
#if defined(__GNUC__) && !defined(__clang__)
#define HG_QG_DP(r, lo_, hi_) "vpdpbusd " #r "*4(%[w])%{1to16%}, %[a0], %[" #lo_ "]\n\t" \
                              "vpdpbusd " #r "*4(%[w])%{1to16%}, %[a1], %[" #hi_ "]\n\t"
/* (two statements of 8 accumulators: an asm takes at most 30 operands, an in-out one counts twice) */
#define HG_QG_HALF(r0, r1, r2, r3, l0, h0, l1, h1, l2, h2, l3, h3)                                          \
    __asm__(HG_QG_DP(r0, l0, h0) HG_QG_DP(r1, l1, h1) HG_QG_DP(r2, l2, h2) HG_QG_DP(r3, l3, h3)            \
            : [l0] "+v"(l0), [h0] "+v"(h0), [l1] "+v"(l1), [h1] "+v"(h1), [l2] "+v"(l2), [h2] "+v"(h2),    \
              [l3] "+v"(l3), [h3] "+v"(h3)                                                                 \
            : [a0] "v"(a0), [a1] "v"(a1), [w] "r"(w), "m"(*(const int8_t(*)[4 * HG_QG_MR])w))
#define HG_QG_STEP()                                                                                       \
    do {                                                                                                   \
        HG_QG_HALF(0, 1, 2, 3, c00, c01, c10, c11, c20, c21, c30, c31);                                    \
        HG_QG_HALF(4, 5, 6, 7, c40, c41, c50, c51, c60, c61, c70, c71);                                    \
    } while (0)
#else
#define HG_QG_ROW(r, lo_, hi_)                                                                             \
    do {                                                                                                   \
        const __m512i b_ = _mm512_set1_epi32(hg_qg_load32(w + 4 * (r)));                                   \
        lo_ = _mm512_dpbusd_epi32(lo_, a0, b_);                                                            \
        hi_ = _mm512_dpbusd_epi32(hi_, a1, b_);                                                            \
    } while (0)
#define HG_QG_STEP()                                                                                       \
    do {                                                                                                   \
        HG_QG_ROW(0, c00, c01);                                                                            \
        HG_QG_ROW(1, c10, c11);                                                                            \
        HG_QG_ROW(2, c20, c21);                                                                            \
        HG_QG_ROW(3, c30, c31);                                                                            \
        HG_QG_ROW(4, c40, c41);                                                                            \
        HG_QG_ROW(5, c50, c51);                                                                            \
        HG_QG_ROW(6, c60, c61);                                                                            \
        HG_QG_ROW(7, c70, c71);                                                                            \
    } while (0)
#endif

/* The block's 16 accumulators, each row's starting at its constant (the int32 sum is the same, the
   requantisation has one add fewer); rows past `rows` at 0 (their constants are not read). */
#define HG_QG_INIT_ROW(r) _mm512_set1_epi32((r) < rows ? c[r] : 0)
#define HG_QG_INIT_BLOCK()                                                                                  \
    __m512i c00 = HG_QG_INIT_ROW(0), c01 = c00, c10 = HG_QG_INIT_ROW(1), c11 = c10, c20 = HG_QG_INIT_ROW(2); \
    __m512i c21 = c20, c30 = HG_QG_INIT_ROW(3), c31 = c30, c40 = HG_QG_INIT_ROW(4), c41 = c40;              \
    __m512i c50 = HG_QG_INIT_ROW(5), c51 = c50, c60 = HG_QG_INIT_ROW(6), c61 = c60, c70 = HG_QG_INIT_ROW(7); \
    __m512i c71 = c70

/* The block's 16 accumulators requantised and stored: rows < `rows`, pixels < `npx` (hg_qg_block, hg_qg_block_taps). */
#define HG_QG_STORE(r, lo_, hi_)                                                                            \
    if ((r) < rows) {                                                                                       \
        _mm_mask_storeu_epi8(y + (r) * ldy, m0, hg_qg_requant16(lo_, s[r], zp, lo, hi));              \
        _mm_mask_storeu_epi8(y + (r) * ldy + 16, m1, hg_qg_requant16(hi_, s[r], zp, lo, hi));         \
    }
#define HG_QG_STORE_BLOCK()                                                                                 \
    do {                                                                                                    \
        const __mmask16 m0 = (__mmask16)(npx >= 16 ? 0xFFFFu : (1u << npx) - 1u);                           \
        const __mmask16 m1 = (__mmask16)(npx >= 32 ? 0xFFFFu : npx <= 16 ? 0u : (1u << (npx - 16)) - 1u);  \
        HG_QG_STORE(0, c00, c01)                                                                            \
        HG_QG_STORE(1, c10, c11)                                                                            \
        HG_QG_STORE(2, c20, c21)                                                                            \
        HG_QG_STORE(3, c30, c31)                                                                            \
        HG_QG_STORE(4, c40, c41)                                                                            \
        HG_QG_STORE(5, c50, c51)                                                                            \
        HG_QG_STORE(6, c60, c61)                                                                            \
        HG_QG_STORE(7, c70, c71)                                                                            \
    } while (0)

/* hg_qg_block of at most 16 pixels (a layer's last, short block: 36 pixels of 6x6 are a block and 4,
   3x3's 9 are one): the 8 accumulators of pixels 0-15 only, half the block's vpdpbusd, the same sums. */
#if defined(__GNUC__) && !defined(__clang__)
#define HG_QG_DP16(r, acc) "vpdpbusd " #r "*4(%[w])%{1to16%}, %[a0], %[" #acc "]\n\t"
#define HG_QG_STEP16()                                                                                     \
    __asm__(HG_QG_DP16(0, c00) HG_QG_DP16(1, c10) HG_QG_DP16(2, c20) HG_QG_DP16(3, c30) HG_QG_DP16(4, c40)  \
                HG_QG_DP16(5, c50) HG_QG_DP16(6, c60) HG_QG_DP16(7, c70)                                   \
            : [c00] "+v"(c00), [c10] "+v"(c10), [c20] "+v"(c20), [c30] "+v"(c30), [c40] "+v"(c40),         \
              [c50] "+v"(c50), [c60] "+v"(c60), [c70] "+v"(c70)                                            \
            : [a0] "v"(a0), [w] "r"(w), "m"(*(const int8_t(*)[4 * HG_QG_MR])w))
#else
#define HG_QG_ROW16(r, acc) acc = _mm512_dpbusd_epi32(acc, a0, _mm512_set1_epi32(hg_qg_load32(w + 4 * (r))))
#define HG_QG_STEP16()                                                                                     \
    do {                                                                                                   \
        HG_QG_ROW16(0, c00);                                                                               \
        HG_QG_ROW16(1, c10);                                                                               \
        HG_QG_ROW16(2, c20);                                                                               \
        HG_QG_ROW16(3, c30);                                                                               \
        HG_QG_ROW16(4, c40);                                                                               \
        HG_QG_ROW16(5, c50);                                                                               \
        HG_QG_ROW16(6, c60);                                                                               \
        HG_QG_ROW16(7, c70);                                                                               \
    } while (0)
#endif
#define HG_QG_STORE16(r, acc)                                                                               \
    if ((r) < rows)                                                                                         \
        _mm_mask_storeu_epi8(y + (r) * ldy, m0, hg_qg_requant16(acc, s[r], zp, lo, hi));
HG_QG_NOINLINE static void hg_qg_block16(const int8_t *restrict w, const uint8_t *restrict a, size_t kg, size_t as,
                                         size_t rows, size_t npx, const int32_t *c, const float *s, int32_t zp,
                                         float lo, float hi, uint8_t *y, size_t ldy)
{
    __m512i c00 = HG_QG_INIT_ROW(0), c10 = HG_QG_INIT_ROW(1), c20 = HG_QG_INIT_ROW(2), c30 = HG_QG_INIT_ROW(3);
    __m512i c40 = HG_QG_INIT_ROW(4), c50 = HG_QG_INIT_ROW(5), c60 = HG_QG_INIT_ROW(6), c70 = HG_QG_INIT_ROW(7);
    for (size_t g = 0; g < kg; ++g, a += as, w += 4 * HG_QG_MR) {
        const __m512i a0 = _mm512_loadu_si512(a);
        HG_QG_STEP16();
    }
    const __mmask16 m0 = (__mmask16)((1u << npx) - 1u);
    HG_QG_STORE16(0, c00)
    HG_QG_STORE16(1, c10)
    HG_QG_STORE16(2, c20)
    HG_QG_STORE16(3, c30)
    HG_QG_STORE16(4, c40)
    HG_QG_STORE16(5, c50)
    HG_QG_STORE16(6, c60)
    HG_QG_STORE16(7, c70)
}
#undef HG_QG_STORE16

/* Not inlined: inside a kernel's loops GCC 12 allocates the 16 accumulators worse (moves and spills). */
HG_QG_NOINLINE static void hg_qg_block(const int8_t *restrict w, const uint8_t *restrict a, size_t kg, size_t as,
                                       size_t rows, size_t npx, const int32_t *c, const float *s, int32_t zp, float lo,
                                       float hi, uint8_t *y, size_t ldy)
{
    if (npx <= 2) {
        /* a row or two of pixels (a fully connected layer): the panel's 8 channels are the vector,
           each pixel's 4 bytes broadcast, one ymm vpdpbusd per group of 4 k */
        const __mmask8 live = (__mmask8)((1u << rows) - 1u);
        const __m256 vs = _mm256_maskz_loadu_ps(live, s), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
        const __m256i vc = _mm256_maskz_loadu_epi32(live, c), vzp = _mm256_set1_epi32(zp);
        for (size_t p = 0; p < npx; ++p) {
            __m256i acc = _mm256_setzero_si256();
            const uint8_t *ap = a + 4 * p;
            for (size_t g = 0; g < kg; ++g)
                acc = _mm256_dpbusd_epi32(acc, _mm256_set1_epi32(hg_qg_load32(ap + g * as)),
                                          _mm256_loadu_si256((const __m256i *)(const void *)(w + g * 4 * HG_QG_MR)));
            __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(acc, vc)), vs);
            f = _mm256_min_ps(_mm256_max_ps(f, vlo), vhi);
            uint8_t out[16];
            _mm_storeu_si128((__m128i *)(void *)out, _mm256_cvtepi32_epi8(_mm256_add_epi32(_mm256_cvtps_epi32(f), vzp)));
            for (size_t r = 0; r < rows; ++r)
                y[r * ldy + p] = out[r];
        }
        return;
    }
    if (npx <= 16) {
        hg_qg_block16(w, a, kg, as, rows, npx, c, s, zp, lo, hi, y, ldy);
        return;
    }
    HG_QG_INIT_BLOCK();
    for (size_t g = 0; g < kg; ++g, a += as, w += 4 * HG_QG_MR) {
        const __m512i a0 = _mm512_loadu_si512(a), a1 = _mm512_loadu_si512(a + 64);
        HG_QG_STEP();
    }
    HG_QG_STORE_BLOCK();
}

/* hg_qg_block of HG_QG_NB pixels read in place (the gathered convolution, qconv_gather.c.j2, where
   each half of a block of output pixels lies in one output row): group g's activations of pixels
   0-15 at lo_at + taps[g], of pixels 16-31 at hi_at + taps[g] (the interleaved plane), no copy. */
#define HG_QG_BLOCK_TAPS 1
HG_QG_NOINLINE static void hg_qg_block_taps(const int8_t *restrict w, const uint8_t *lo_at, const uint8_t *hi_at,
                                            const uint32_t *taps, size_t kg, size_t rows, const int32_t *c,
                                            const float *s, int32_t zp, float lo, float hi, uint8_t *y, size_t ldy)
{
    const size_t npx = HG_QG_NB;
    HG_QG_INIT_BLOCK();
    for (size_t g = 0; g < kg; ++g, w += 4 * HG_QG_MR) {
        const __m512i a0 = _mm512_loadu_si512(lo_at + taps[g]), a1 = _mm512_loadu_si512(hi_at + taps[g]);
        HG_QG_STEP();
    }
    HG_QG_STORE_BLOCK();
}
#undef HG_QG_STORE_BLOCK
#undef HG_QG_STORE
#undef HG_QG_INIT_BLOCK
#undef HG_QG_INIT_ROW

/* every path but plain NEON computes any int8 weight alike (hg_qg_block_w128: see there) */
static inline HG_QG_UNUSED void hg_qg_block_w128(const int8_t *restrict w, const uint8_t *restrict a, size_t kg,
                                                 size_t as, size_t rows, size_t npx, const int32_t *c, const float *s,
                                                 int32_t zp, float lo, float hi, uint8_t *y, size_t ldy)
{
    hg_qg_block(w, a, kg, as, rows, npx, c, s, zp, lo, hi, y, ldy);
}
#else
#if defined(HG_QG_PATH_AVXVNNI) || defined(HG_QG_PATH_AVX2)
/* 8 pixels' sums of one channel, pairs form: lanes (p0 k01, p0 k23, p1 k01, ...) in lo (p0-3) and hi (p4-7). */
static inline __m256i hg_qg_pairs_to_8(__m256i lo, __m256i hi)
{
    /* hadd: (lo0+lo1, lo2+lo3, hi0+hi1, hi2+hi3 | lo4+lo5, lo6+lo7, hi4+hi5, hi6+hi7) = p0 p1 p4 p5 | p2 p3 p6 p7 */
    return _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xD8);
}
#endif

#if defined(HG_QG_PATH_NEON)
/* The "mlal" organisation (onnxruntime's MLAS and XNNPACK on ARMv8.0 without the dot product): one
   channel's 4 weights of group g broadcast times 4 pixels' 4 activations of g, smull into int16, plus
   group g + 1's products by smlal into the same lanes (exact: weights in [-127, 127], so
   |w x + w' x'| <= 2 * 127 * 128 < 2^15), then sadalp adds adjacent int16 pairs into the int32 sums.
   A tile is 4 channels x 8 pixels: 16 accumulators (v16-v31), each (pixel p: k 0+4, 1+5 and 2+6,
   3+7 summed pairwise; pixel p + 1: the same), added across at the end (addp) into `t`'s rows.
   Per two groups 56 instructions for 256 products: 48 multiply or accumulate, 2 loads of the 8
   pixels' activations (ld1 of two registers, each group's, post-indexed by the group stride), 4
   ld2r broadcasting two channels' 4 weights each (g's from wa, g + 1's from wb, both post-indexed),
   subs and b.ne. The first two groups start the accumulators (saddlp: no zeroing); a last odd group
   adds its products alone (smull, sadalp). One asm statement (the accumulators live in fixed
   registers across its loop): GCC's intrinsics left one accumulator spilled and 8 address adds a
   loop. */
#define HG_QG_A_ROW(c0, c1, c2, c3, u, v, op)                                                              \
    "smull  v8.8h, v0.8b, " u ".8b\n\t"                                                                    \
    "smull2 v9.8h, v0.16b, " u ".16b\n\t"                                                                  \
    "smlal  v8.8h, v2.8b, " v ".8b\n\t"                                                                    \
    "smlal2 v9.8h, v2.16b, " v ".16b\n\t"                                                                  \
    op " " c0 ".4s, v8.8h\n\t"                                                                             \
    op " " c1 ".4s, v9.8h\n\t"                                                                             \
    "smull  v8.8h, v1.8b, " u ".8b\n\t"                                                                    \
    "smull2 v9.8h, v1.16b, " u ".16b\n\t"                                                                  \
    "smlal  v8.8h, v3.8b, " v ".8b\n\t"                                                                    \
    "smlal2 v9.8h, v3.16b, " v ".16b\n\t"                                                                  \
    op " " c2 ".4s, v8.8h\n\t"                                                                             \
    op " " c3 ".4s, v9.8h\n\t"
#define HG_QG_A_PAIR(op)                                                                                   \
    "ld1  {v0.16b, v1.16b}, [%[a]], %[as]\n\t"                                                             \
    "ld1  {v2.16b, v3.16b}, [%[a]], %[as]\n\t"                                                             \
    "ld2r {v4.4s, v5.4s}, [%[wa]], #8\n\t"                                                                 \
    "ld2r {v6.4s, v7.4s}, [%[wb]], #8\n\t"                                                                 \
    HG_QG_A_ROW("v16", "v17", "v18", "v19", "v4", "v6", op)                                                \
    HG_QG_A_ROW("v20", "v21", "v22", "v23", "v5", "v7", op)                                                \
    "ld2r {v4.4s, v5.4s}, [%[wa]], %[skip]\n\t"                                                            \
    "ld2r {v6.4s, v7.4s}, [%[wb]], %[skip]\n\t"                                                            \
    HG_QG_A_ROW("v24", "v25", "v26", "v27", "v4", "v6", op)                                                \
    HG_QG_A_ROW("v28", "v29", "v30", "v31", "v5", "v7", op)
/* the last, odd group: its products alone */
#define HG_QG_A_ONE(c0, c1, c2, c3, u)                                                                     \
    "smull  v8.8h, v0.8b, " u ".8b\n\t"                                                                    \
    "smull2 v9.8h, v0.16b, " u ".16b\n\t"                                                                  \
    "sadalp " c0 ".4s, v8.8h\n\t"                                                                          \
    "sadalp " c1 ".4s, v9.8h\n\t"                                                                          \
    "smull  v8.8h, v1.8b, " u ".8b\n\t"                                                                    \
    "smull2 v9.8h, v1.16b, " u ".16b\n\t"                                                                  \
    "sadalp " c2 ".4s, v8.8h\n\t"                                                                          \
    "sadalp " c3 ".4s, v9.8h\n\t"
#define HG_QG_A_ZERO(c0, c1, c2, c3) "movi " c0 ".4s, #0\n\tmovi " c1 ".4s, #0\n\tmovi " c2 ".4s, #0\n\tmovi " c3 ".4s, #0\n\t"
/* channel r's 8 sums: pixels 0-3 and 4-7, stored at t + r * HG_QG_NB (128 bytes a row) */
#define HG_QG_A_STORE(c0, c1, c2, c3, at)                                                                  \
    "addp v0.4s, " c0 ".4s, " c1 ".4s\n\t"                                                                 \
    "addp v1.4s, " c2 ".4s, " c3 ".4s\n\t"                                                                 \
    "stp  q0, q1, [%[t], #" at "]\n\t"

/* sums of the 4 channels whose weights w points to ([kg][HG_QG_MR][4], the panel's) by 8 pixels of
   activations from a (groups `as` bytes apart), into t (rows HG_QG_NB apart) */
static void hg_qg_mlal_tile(const int8_t *restrict w, const uint8_t *restrict a, size_t kg, size_t as, int32_t *t)
{
    const int8_t *wa = w, *wb = w + 4 * HG_QG_MR;
    size_t pairs = kg / 2;
    const size_t skip = 8 * HG_QG_MR - 8, odd = kg % 2;
    __asm__ volatile("cbz %[pairs], 10f\n\t" HG_QG_A_PAIR("saddlp") "subs %[pairs], %[pairs], #1\n\t"
                     "b.eq 20f\n"
                     "1:\n\t" HG_QG_A_PAIR("sadalp") "subs %[pairs], %[pairs], #1\n\t"
                     "b.ne 1b\n\t"
                     "b 20f\n"
                     "10:\n\t" HG_QG_A_ZERO("v16", "v17", "v18", "v19") HG_QG_A_ZERO("v20", "v21", "v22", "v23")
                         HG_QG_A_ZERO("v24", "v25", "v26", "v27") HG_QG_A_ZERO("v28", "v29", "v30", "v31")
                     "20:\n\t"
                     "cbz %[odd], 30f\n\t"
                     "ld1  {v0.16b, v1.16b}, [%[a]]\n\t"
                     "ld2r {v4.4s, v5.4s}, [%[wa]], #8\n\t"
                     "ld2r {v6.4s, v7.4s}, [%[wa]]\n\t" HG_QG_A_ONE("v16", "v17", "v18", "v19", "v4")
                         HG_QG_A_ONE("v20", "v21", "v22", "v23", "v5") HG_QG_A_ONE("v24", "v25", "v26", "v27", "v6")
                             HG_QG_A_ONE("v28", "v29", "v30", "v31", "v7")
                     "30:\n\t" HG_QG_A_STORE("v16", "v17", "v18", "v19", "0")
                         HG_QG_A_STORE("v20", "v21", "v22", "v23", "128") HG_QG_A_STORE("v24", "v25", "v26", "v27", "256")
                             HG_QG_A_STORE("v28", "v29", "v30", "v31", "384")
                     : [a] "+r"(a), [wa] "+r"(wa), [wb] "+r"(wb), [pairs] "+r"(pairs)
                     : [as] "r"(as), [skip] "r"(skip), [odd] "r"(odd), [t] "r"(t)
                     : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v16", "v17", "v18", "v19", "v20",
                       "v21", "v22", "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31", "cc", "memory");
}
/* hg_qg_mlal_tile for a tile whose last 2 channels are past the panel's live ones (a layer of 6 or
   2 channels mod 8): only its first 2 channels' sums (rows 0 and 1 of t), per two groups 30
   instructions (24 multiply or accumulate, 2 activation loads, 2 ld2r) instead of 56. */
#define HG_QG_A_PAIR2(op)                                                                                  \
    "ld1  {v0.16b, v1.16b}, [%[a]], %[as]\n\t"                                                             \
    "ld1  {v2.16b, v3.16b}, [%[a]], %[as]\n\t"                                                             \
    "ld2r {v4.4s, v5.4s}, [%[wa]], %[step]\n\t"                                                            \
    "ld2r {v6.4s, v7.4s}, [%[wb]], %[step]\n\t"                                                            \
    HG_QG_A_ROW("v16", "v17", "v18", "v19", "v4", "v6", op)                                                \
    HG_QG_A_ROW("v20", "v21", "v22", "v23", "v5", "v7", op)
static void hg_qg_mlal_tile2(const int8_t *restrict w, const uint8_t *restrict a, size_t kg, size_t as, int32_t *t)
{
    const int8_t *wa = w, *wb = w + 4 * HG_QG_MR;
    size_t pairs = kg / 2;
    const size_t step = 8 * HG_QG_MR, odd = kg % 2;
    __asm__ volatile("cbz %[pairs], 10f\n\t" HG_QG_A_PAIR2("saddlp") "subs %[pairs], %[pairs], #1\n\t"
                     "b.eq 20f\n"
                     "1:\n\t" HG_QG_A_PAIR2("sadalp") "subs %[pairs], %[pairs], #1\n\t"
                     "b.ne 1b\n\t"
                     "b 20f\n"
                     "10:\n\t" HG_QG_A_ZERO("v16", "v17", "v18", "v19") HG_QG_A_ZERO("v20", "v21", "v22", "v23")
                     "20:\n\t"
                     "cbz %[odd], 30f\n\t"
                     "ld1  {v0.16b, v1.16b}, [%[a]]\n\t"
                     "ld2r {v4.4s, v5.4s}, [%[wa]]\n\t" HG_QG_A_ONE("v16", "v17", "v18", "v19", "v4")
                         HG_QG_A_ONE("v20", "v21", "v22", "v23", "v5")
                     "30:\n\t" HG_QG_A_STORE("v16", "v17", "v18", "v19", "0")
                         HG_QG_A_STORE("v20", "v21", "v22", "v23", "128")
                     : [a] "+r"(a), [wa] "+r"(wa), [wb] "+r"(wb), [pairs] "+r"(pairs)
                     : [as] "r"(as), [step] "r"(step), [odd] "r"(odd), [t] "r"(t)
                     : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v16", "v17", "v18", "v19", "v20",
                       "v21", "v22", "v23", "cc", "memory");
}
#undef HG_QG_A_PAIR2
#undef HG_QG_A_ROW
#undef HG_QG_A_PAIR
#undef HG_QG_A_ONE
#undef HG_QG_A_ZERO
#undef HG_QG_A_STORE
#endif

/* The sums of one block, computed by the path, then requantised by row: exact int32 in `t`. */
static inline void hg_qg_block_sums(const int8_t *restrict w, const uint8_t *restrict a, size_t kg, size_t as,
                                    size_t rows, size_t npx, int full_range, int32_t t[HG_QG_MR][HG_QG_NB])
{
    (void)full_range;
    (void)rows; /* plain NEON sums only the first `rows` channels' tiles; the other paths all 8 */
#if defined(HG_QG_PATH_AVXVNNI)
    for (size_t p0 = 0; p0 < npx; p0 += 8) {
        __m256i acc[HG_QG_MR];
        for (size_t r = 0; r < HG_QG_MR; ++r)
            acc[r] = _mm256_setzero_si256();
        const int8_t *wg = w;
        const uint8_t *ag = a + 4 * p0;
        for (size_t g = 0; g < kg; ++g, ag += as, wg += 4 * HG_QG_MR) {
            const __m256i av = _mm256_loadu_si256((const __m256i *)(const void *)ag);
            for (size_t r = 0; r < HG_QG_MR; ++r)
                acc[r] = _mm256_dpbusd_avx_epi32(acc[r], av, _mm256_set1_epi32(hg_qg_load32(wg + 4 * r)));
        }
        for (size_t r = 0; r < HG_QG_MR; ++r)
            _mm256_storeu_si256((__m256i *)(void *)(t[r] + p0), acc[r]);
    }
#elif defined(HG_QG_PATH_AVX2)
    for (size_t p0 = 0; p0 < npx; p0 += 8)
        for (size_t r0 = 0; r0 < HG_QG_MR; r0 += 4) {
            __m256i lo[4], hi[4];
            for (size_t r = 0; r < 4; ++r)
                lo[r] = hi[r] = _mm256_setzero_si256();
            const int8_t *wg = w + 4 * r0;
            const uint8_t *ag = a + 4 * p0;
            for (size_t g = 0; g < kg; ++g, ag += as, wg += 4 * HG_QG_MR) {
                const __m256i a0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)ag));
                const __m256i a1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(ag + 16)));
                for (size_t r = 0; r < 4; ++r) {
                    const __m256i b = _mm256_cvtepi8_epi16(_mm_set1_epi32(hg_qg_load32(wg + 4 * r)));
                    lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(a0, b));
                    hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(a1, b));
                }
            }
            for (size_t r = 0; r < 4; ++r)
                _mm256_storeu_si256((__m256i *)(void *)(t[r0 + r] + p0), hg_qg_pairs_to_8(lo[r], hi[r]));
        }
#elif defined(HG_QG_PATH_SDOT)
    for (size_t p0 = 0; p0 < npx; p0 += 8) {
        int32x4_t acc[HG_QG_MR][2];
        for (size_t r = 0; r < HG_QG_MR; ++r)
            acc[r][0] = acc[r][1] = vdupq_n_s32(0);
        const int8_t *wg = w;
        const uint8_t *ag = a + 4 * p0;
        for (size_t g = 0; g < kg; ++g, ag += as, wg += 4 * HG_QG_MR) {
            const int8x16_t a0 = vreinterpretq_s8_u8(vld1q_u8(ag)), a1 = vreinterpretq_s8_u8(vld1q_u8(ag + 16));
            const int8x16_t w0 = vld1q_s8(wg), w1 = vld1q_s8(wg + 16);
            acc[0][0] = vdotq_laneq_s32(acc[0][0], a0, w0, 0);
            acc[0][1] = vdotq_laneq_s32(acc[0][1], a1, w0, 0);
            acc[1][0] = vdotq_laneq_s32(acc[1][0], a0, w0, 1);
            acc[1][1] = vdotq_laneq_s32(acc[1][1], a1, w0, 1);
            acc[2][0] = vdotq_laneq_s32(acc[2][0], a0, w0, 2);
            acc[2][1] = vdotq_laneq_s32(acc[2][1], a1, w0, 2);
            acc[3][0] = vdotq_laneq_s32(acc[3][0], a0, w0, 3);
            acc[3][1] = vdotq_laneq_s32(acc[3][1], a1, w0, 3);
            acc[4][0] = vdotq_laneq_s32(acc[4][0], a0, w1, 0);
            acc[4][1] = vdotq_laneq_s32(acc[4][1], a1, w1, 0);
            acc[5][0] = vdotq_laneq_s32(acc[5][0], a0, w1, 1);
            acc[5][1] = vdotq_laneq_s32(acc[5][1], a1, w1, 1);
            acc[6][0] = vdotq_laneq_s32(acc[6][0], a0, w1, 2);
            acc[6][1] = vdotq_laneq_s32(acc[6][1], a1, w1, 2);
            acc[7][0] = vdotq_laneq_s32(acc[7][0], a0, w1, 3);
            acc[7][1] = vdotq_laneq_s32(acc[7][1], a1, w1, 3);
        }
        for (size_t r = 0; r < HG_QG_MR; ++r) {
            vst1q_s32(t[r] + p0, acc[r][0]);
            vst1q_s32(t[r] + p0 + 4, acc[r][1]);
        }
    }
#elif defined(HG_QG_PATH_NEON)
    if (!full_range) {
        /* weights in [-127, 127]: two products summed in int16 (smull + smlal, |sum| <= 2 * 128 * 127) */
        for (size_t r0 = 0; r0 < rows; r0 += 4)
            for (size_t p0 = 0; p0 < npx; p0 += 8) {
                if (rows - r0 > 2)
                    hg_qg_mlal_tile(w + 4 * r0, a + 4 * p0, kg, as, &t[r0][p0]);
                else
                    hg_qg_mlal_tile2(w + 4 * r0, a + 4 * p0, kg, as, &t[r0][p0]);
            }
        return;
    }
    /* a weight of -128: 4 pixels x 4 k of activations (s8) times one channel's 4 weights (repeated): smull to int16
       (a product fits, two summed do not always), then sadalp adds adjacent pairs into int32, the
       sums kept by pairs of k until the end: (p0 k01, p0 k23, p1 k01, p1 k23) for pixels 0-1 in lo,
       2-3 in hi, added across at the end. */
    for (size_t p0 = 0; p0 < npx; p0 += 4) {
        int32x4_t lo[HG_QG_MR], hi[HG_QG_MR];
        for (size_t r = 0; r < HG_QG_MR; ++r)
            lo[r] = hi[r] = vdupq_n_s32(0);
        const int8_t *wg = w;
        const uint8_t *ag = a + 4 * p0;
        for (size_t g = 0; g < kg; ++g, ag += as, wg += 4 * HG_QG_MR) {
            const int8x16_t av = vreinterpretq_s8_u8(vld1q_u8(ag));
            const int8x8_t a01 = vget_low_s8(av), a23 = vget_high_s8(av);
            for (size_t r = 0; r < HG_QG_MR; ++r) {
                const int8x8_t b = vreinterpret_s8_s32(vdup_n_s32(hg_qg_load32(wg + 4 * r)));
                lo[r] = vpadalq_s16(lo[r], vmull_s8(a01, b));
                hi[r] = vpadalq_s16(hi[r], vmull_s8(a23, b));
            }
        }
        for (size_t r = 0; r < HG_QG_MR; ++r)
            vst1q_s32(t[r] + p0, vpaddq_s32(lo[r], hi[r]));
    }
#else
    for (size_t r = 0; r < HG_QG_MR; ++r)
        for (size_t p = 0; p < npx; ++p)
            t[r][p] = 0;
    for (size_t g = 0; g < kg; ++g, a += as, w += 4 * HG_QG_MR)
        for (size_t r = 0; r < HG_QG_MR; ++r) {
            const int32_t w0 = w[4 * r], w1 = w[4 * r + 1], w2 = w[4 * r + 2], w3 = w[4 * r + 3];
            for (size_t p = 0; p < npx; ++p) {
#if HG_QG_ACT_SIGNED
                const int8_t *ap = (const int8_t *)a + 4 * p;
#else
                const uint8_t *ap = a + 4 * p;
#endif
                t[r][p] += w0 * ap[0] + w1 * ap[1] + w2 * ap[2] + w3 * ap[3];
            }
        }
#endif
}

static inline void hg_qg_block_any(const int8_t *restrict w, const uint8_t *restrict a, size_t kg, size_t as,
                                   size_t rows, size_t npx, const int32_t *c, const float *s, int32_t zp, float lo,
                                   float hi, uint8_t *y, size_t ldy, int full_range)
{
    int32_t t[HG_QG_MR][HG_QG_NB];
    hg_qg_block_sums(w, a, kg, as, rows, npx, full_range, t);
#if defined(HG_QG_PATH_SDOT) || defined(HG_QG_PATH_NEON)
    if (npx >= 8) {
        hg_qg_requant_rows(t[0], HG_QG_NB, rows, npx, c, s, zp, lo, hi, y, ldy);
        return;
    }
#endif
    for (size_t r = 0; r < rows; ++r)
        hg_qg_requant_row(t[r], npx, c[r], s[r], zp, lo, hi, y + r * ldy);
}

static inline void hg_qg_block(const int8_t *restrict w, const uint8_t *restrict a, size_t kg, size_t as, size_t rows,
                               size_t npx, const int32_t *c, const float *s, int32_t zp, float lo, float hi,
                               uint8_t *y, size_t ldy)
{
    hg_qg_block_any(w, a, kg, as, rows, npx, c, s, zp, lo, hi, y, ldy, 0);
}

/* A panel whose weights hold -128 (hetgen/ops/qlinear.py checks the constant at generate time): on plain
   NEON two of its products may not fit int16 together, so each is widened alone (smull + sadalp). */
static inline HG_QG_UNUSED void hg_qg_block_w128(const int8_t *restrict w, const uint8_t *restrict a, size_t kg,
                                                 size_t as, size_t rows, size_t npx, const int32_t *c, const float *s,
                                                 int32_t zp, float lo, float hi, uint8_t *y, size_t ldy)
{
    hg_qg_block_any(w, a, kg, as, rows, npx, c, s, zp, lo, hi, y, ldy, 1);
}
#endif

/* A fully connected layer (one output pixel: the GEMV of a 1x1 convolution on a 1x1 input, or a row
   of a MatMul with constant B) on the packed weights: y[r] for the `rows` channels of `panels` panels.
   a: the input's kg groups of 4 bytes (flipped to the path's signedness), followed by
   HG_QG_GEMV_SLACK readable bytes; c, s: each channel's constant and scale; the channels' bytes are
   stored contiguously at y.
   AVX-512 VNNI: 8 panels (64 channels) at a time, each panel's two consecutive groups of 4 k one zmm
   (the packed [kg][8][4] layout holds them side by side), the activations' 8 bytes spread to match
   (lanes 0-7 group g, 8-15 group g + 1): 8 independent vpdpbusd chains, one load each, the halves
   added at the end; a short last chunk repeats its last panel (its results unused). Elsewhere one
   hg_qg_block of one pixel per panel (the activations' group stride 4). */
#define HG_QG_GEMV_SLACK 32

#if defined(HG_QG_PATH_AVX512VNNI)
/* 16 channels' sums (two panels' ymm halves) requantised with their own constants and scales. */
static inline void hg_qg_gemv_store16(__m256i lo8, __m256i hi8, const int32_t *c, const float *s, int32_t zp, float lo,
                                      float hi, uint8_t *y, size_t live)
{
    const __mmask16 lanes = (__mmask16)(live >= 16 ? 0xFFFFu : (1u << live) - 1u);
    const __m512i acc = _mm512_inserti64x4(_mm512_castsi256_si512(lo8), hi8, 1);
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc, _mm512_maskz_loadu_epi32(lanes, c))),
                             _mm512_maskz_loadu_ps(lanes, s));
    f = _mm512_min_ps(_mm512_max_ps(f, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
    _mm_mask_storeu_epi8(y, lanes, _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(f), _mm512_set1_epi32(zp))));
}

static inline __m256i hg_qg_gemv_halves(__m512i acc)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
}

HG_QG_NOINLINE static void hg_qg_gemv(const int8_t *restrict w, const uint8_t *restrict a, size_t kg, size_t rows,
                                      const int32_t *c, const float *s, int32_t zp, float lo, float hi, uint8_t *y)
{
    const size_t panels = (rows + HG_QG_MR - 1) / HG_QG_MR, pb = kg * 4 * HG_QG_MR;
    const __m512i spread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (size_t p0 = 0; p0 < panels; p0 += 8) {
        const size_t last = panels - 1;
        const int8_t *w0 = w + p0 * pb;
        const int8_t *w1 = w + (p0 + 1 < last ? p0 + 1 : last) * pb, *w2 = w + (p0 + 2 < last ? p0 + 2 : last) * pb;
        const int8_t *w3 = w + (p0 + 3 < last ? p0 + 3 : last) * pb, *w4 = w + (p0 + 4 < last ? p0 + 4 : last) * pb;
        const int8_t *w5 = w + (p0 + 5 < last ? p0 + 5 : last) * pb, *w6 = w + (p0 + 6 < last ? p0 + 6 : last) * pb;
        const int8_t *w7 = w + (p0 + 7 < last ? p0 + 7 : last) * pb;
        __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
        size_t g = 0;
        for (; g + 2 <= kg; g += 2) {
            const __m512i av = _mm512_permutexvar_epi32(
                spread, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(const void *)(a + 4 * g))));
            const size_t o = g * 4 * HG_QG_MR;
            s0 = _mm512_dpbusd_epi32(s0, av, _mm512_loadu_si512(w0 + o));
            s1 = _mm512_dpbusd_epi32(s1, av, _mm512_loadu_si512(w1 + o));
            s2 = _mm512_dpbusd_epi32(s2, av, _mm512_loadu_si512(w2 + o));
            s3 = _mm512_dpbusd_epi32(s3, av, _mm512_loadu_si512(w3 + o));
            s4 = _mm512_dpbusd_epi32(s4, av, _mm512_loadu_si512(w4 + o));
            s5 = _mm512_dpbusd_epi32(s5, av, _mm512_loadu_si512(w5 + o));
            s6 = _mm512_dpbusd_epi32(s6, av, _mm512_loadu_si512(w6 + o));
            s7 = _mm512_dpbusd_epi32(s7, av, _mm512_loadu_si512(w7 + o));
        }
        if (g < kg) { /* an odd last group: the low half only */
            const __m512i av = _mm512_maskz_set1_epi32(0x00FF, hg_qg_load32(a + 4 * g));
            const size_t o = g * 4 * HG_QG_MR;
            s0 = _mm512_dpbusd_epi32(s0, av, _mm512_maskz_loadu_epi32(0x00FF, w0 + o));
            s1 = _mm512_dpbusd_epi32(s1, av, _mm512_maskz_loadu_epi32(0x00FF, w1 + o));
            s2 = _mm512_dpbusd_epi32(s2, av, _mm512_maskz_loadu_epi32(0x00FF, w2 + o));
            s3 = _mm512_dpbusd_epi32(s3, av, _mm512_maskz_loadu_epi32(0x00FF, w3 + o));
            s4 = _mm512_dpbusd_epi32(s4, av, _mm512_maskz_loadu_epi32(0x00FF, w4 + o));
            s5 = _mm512_dpbusd_epi32(s5, av, _mm512_maskz_loadu_epi32(0x00FF, w5 + o));
            s6 = _mm512_dpbusd_epi32(s6, av, _mm512_maskz_loadu_epi32(0x00FF, w6 + o));
            s7 = _mm512_dpbusd_epi32(s7, av, _mm512_maskz_loadu_epi32(0x00FF, w7 + o));
        }
        const size_t m0 = p0 * HG_QG_MR, left = rows - m0;
        hg_qg_gemv_store16(hg_qg_gemv_halves(s0), hg_qg_gemv_halves(s1), c + m0, s + m0, zp, lo, hi, y + m0, left);
        if (left > 16)
            hg_qg_gemv_store16(hg_qg_gemv_halves(s2), hg_qg_gemv_halves(s3), c + m0 + 16, s + m0 + 16, zp, lo, hi,
                               y + m0 + 16, left - 16);
        if (left > 32)
            hg_qg_gemv_store16(hg_qg_gemv_halves(s4), hg_qg_gemv_halves(s5), c + m0 + 32, s + m0 + 32, zp, lo, hi,
                               y + m0 + 32, left - 32);
        if (left > 48)
            hg_qg_gemv_store16(hg_qg_gemv_halves(s6), hg_qg_gemv_halves(s7), c + m0 + 48, s + m0 + 48, zp, lo, hi,
                               y + m0 + 48, left - 48);
    }
}

static inline HG_QG_UNUSED void hg_qg_gemv_w128(const int8_t *restrict w, const uint8_t *restrict a, size_t kg,
                                                size_t rows, const int32_t *c, const float *s, int32_t zp, float lo,
                                                float hi, uint8_t *y)
{
    hg_qg_gemv(w, a, kg, rows, c, s, zp, lo, hi, y);
}
#else
/* hg_qg_block of one pixel per panel; with a weight of -128 on plain NEON its widening form */
static inline void hg_qg_gemv_blocks(const int8_t *restrict w, const uint8_t *restrict a, size_t kg, size_t rows,
                                     const int32_t *c, const float *s, int32_t zp, float lo, float hi, uint8_t *y,
                                     int full_range)
{
    for (size_t m0 = 0; m0 < rows; m0 += HG_QG_MR) {
        const size_t live = rows - m0 < HG_QG_MR ? rows - m0 : HG_QG_MR;
        hg_qg_block_any(w + m0 * kg * 4, a, kg, 4, live, 1, c + m0, s + m0, zp, lo, hi, y + m0, 1, full_range);
    }
}

#if defined(HG_QG_PATH_NEON)
/* hg_qg_gemv's loop of four groups, `quads` times (ag and wg advanced past them): the groups'
   activation words broadcast one group a register (ld4r: v0-v3), the weights of groups g and g + 1
   (v4-v7) and of g + 2 and g + 3 (v16-v19), then `products`, which accumulate into the sums named
   by the output operands after it ([s0] and [s1]: a panel's channels 0-3; [s2] and [s3]: 4-7). */
#define HG_QG_GEMV_QUADS(ag, wg, quads, products, ...)                                                      \
    __asm__ volatile("1:\n\t"                                                                              \
                     "ld4r {v0.4s, v1.4s, v2.4s, v3.4s}, [%[a]], #16\n\t"                                  \
                     "ld1  {v4.16b, v5.16b, v6.16b, v7.16b}, [%[w]], #64\n\t"                              \
                     "ld1  {v16.16b, v17.16b, v18.16b, v19.16b}, [%[w]], #64\n\t" products                 \
                     "subs %[n], %[n], #1\n\t"                                                             \
                     "b.ne 1b\n\t"                                                                         \
                     : [a] "+r"(ag), [w] "+r"(wg), [n] "+r"(quads), __VA_ARGS__                            \
                     :                                                                                     \
                     : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v16", "v17", "v18", "v19", "v20",  \
                       "v21", "v22", "v23", "cc", "memory")

/* Plain NEON, weights in [-127, 127]: a panel's 8 channels are the vector, the input's 4 bytes of
   groups g and g + 1 broadcast together (ld2r) against them, group g + 1's products added in int16 by
   smlal (exact, as in hg_qg_mlal_tile), then sadalp into (channel r: two partial sums) pairs, added
   across at the end: 16 instructions per two groups (the panel's 64 weight bytes one ld1); a last
   panel of 4 live channels or fewer makes only their products. A whole panel's 8 channels are
   requantised together as hg_qg_requant16 does (the bounds set up once). */
static inline void hg_qg_gemv(const int8_t *restrict w, const uint8_t *restrict a, size_t kg, size_t rows,
                              const int32_t *c, const float *s, int32_t zp, float lo, float hi, uint8_t *y)
{
    const hg_qg_bounds b = hg_qg_bounds_of(zp, lo, hi);
    for (size_t m0 = 0; m0 < rows; m0 += HG_QG_MR, w += kg * 4 * HG_QG_MR) {
        int32x4_t s0 = vdupq_n_s32(0), s1 = s0, s2 = s0, s3 = s0;
        const int8_t *wg = w;
        size_t g = 0;
        const size_t live = rows - m0 < HG_QG_MR ? rows - m0 : HG_QG_MR;
        if (kg >= 4) {
            /* four groups a loop: their activations broadcast by one ld4r, the two pairs' weights two
               ld1 of 64 bytes, 24 multiply or accumulate: 29 instructions (GCC's intrinsics: 32); where
               the panel's channels 4-7 are padding (4 live or fewer) only channels 0-3's products: 17 */
            const uint8_t *ag = a;
            size_t quads = kg / 4;
            g = 4 * quads;
            if (live <= 4)
                HG_QG_GEMV_QUADS(ag, wg, quads,
                                 "smull  v20.8h, v4.8b, v0.8b\n\t"
                                 "smull2 v21.8h, v4.16b, v0.16b\n\t"
                                 "smlal  v20.8h, v6.8b, v1.8b\n\t"
                                 "smlal2 v21.8h, v6.16b, v1.16b\n\t"
                                 "sadalp %[s0].4s, v20.8h\n\t"
                                 "sadalp %[s1].4s, v21.8h\n\t"
                                 "smull  v20.8h, v16.8b, v2.8b\n\t"
                                 "smull2 v21.8h, v16.16b, v2.16b\n\t"
                                 "smlal  v20.8h, v18.8b, v3.8b\n\t"
                                 "smlal2 v21.8h, v18.16b, v3.16b\n\t"
                                 "sadalp %[s0].4s, v20.8h\n\t"
                                 "sadalp %[s1].4s, v21.8h\n\t",
                                 [s0] "+w"(s0), [s1] "+w"(s1));
            else
                HG_QG_GEMV_QUADS(ag, wg, quads,
                                 "smull  v20.8h, v4.8b, v0.8b\n\t"
                                 "smull2 v21.8h, v4.16b, v0.16b\n\t"
                                 "smull  v22.8h, v5.8b, v0.8b\n\t"
                                 "smull2 v23.8h, v5.16b, v0.16b\n\t"
                                 "smlal  v20.8h, v6.8b, v1.8b\n\t"
                                 "smlal2 v21.8h, v6.16b, v1.16b\n\t"
                                 "smlal  v22.8h, v7.8b, v1.8b\n\t"
                                 "smlal2 v23.8h, v7.16b, v1.16b\n\t"
                                 "sadalp %[s0].4s, v20.8h\n\t"
                                 "sadalp %[s1].4s, v21.8h\n\t"
                                 "sadalp %[s2].4s, v22.8h\n\t"
                                 "sadalp %[s3].4s, v23.8h\n\t"
                                 "smull  v20.8h, v16.8b, v2.8b\n\t"
                                 "smull2 v21.8h, v16.16b, v2.16b\n\t"
                                 "smull  v22.8h, v17.8b, v2.8b\n\t"
                                 "smull2 v23.8h, v17.16b, v2.16b\n\t"
                                 "smlal  v20.8h, v18.8b, v3.8b\n\t"
                                 "smlal2 v21.8h, v18.16b, v3.16b\n\t"
                                 "smlal  v22.8h, v19.8b, v3.8b\n\t"
                                 "smlal2 v23.8h, v19.16b, v3.16b\n\t"
                                 "sadalp %[s0].4s, v20.8h\n\t"
                                 "sadalp %[s1].4s, v21.8h\n\t"
                                 "sadalp %[s2].4s, v22.8h\n\t"
                                 "sadalp %[s3].4s, v23.8h\n\t",
                                 [s0] "+w"(s0), [s1] "+w"(s1), [s2] "+w"(s2), [s3] "+w"(s3));
        }
        if (live <= 4) /* the panel's channels 4-7 are padding: their products are not made */
            for (; g + 2 <= kg; g += 2, wg += 8 * HG_QG_MR) {
                const int32x4x2_t uv = vld2q_dup_s32((const int32_t *)(const void *)(a + 4 * g));
                const int8x16_t u = vreinterpretq_s8_s32(uv.val[0]), v = vreinterpretq_s8_s32(uv.val[1]);
                const int8x16_t w0 = vld1q_s8(wg), z0 = vld1q_s8(wg + 32);
                s0 = vpadalq_s16(s0, vmlal_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(u)), vget_low_s8(z0), vget_low_s8(v)));
                s1 = vpadalq_s16(s1, vmlal_high_s8(vmull_high_s8(w0, u), z0, v));
            }
        for (; g + 2 <= kg; g += 2, wg += 8 * HG_QG_MR) {
            const int32x4x2_t uv = vld2q_dup_s32((const int32_t *)(const void *)(a + 4 * g));
            const int8x16_t u = vreinterpretq_s8_s32(uv.val[0]), v = vreinterpretq_s8_s32(uv.val[1]);
            const int8x16x4_t wv = vld1q_s8_x4(wg);
            s0 = vpadalq_s16(s0, vmlal_s8(vmull_s8(vget_low_s8(wv.val[0]), vget_low_s8(u)), vget_low_s8(wv.val[2]),
                                          vget_low_s8(v)));
            s1 = vpadalq_s16(s1, vmlal_high_s8(vmull_high_s8(wv.val[0], u), wv.val[2], v));
            s2 = vpadalq_s16(s2, vmlal_s8(vmull_s8(vget_low_s8(wv.val[1]), vget_low_s8(u)), vget_low_s8(wv.val[3]),
                                          vget_low_s8(v)));
            s3 = vpadalq_s16(s3, vmlal_high_s8(vmull_high_s8(wv.val[1], u), wv.val[3], v));
        }
        if (g < kg) {
            const int8x16_t u = vreinterpretq_s8_s32(vdupq_n_s32(hg_qg_load32(a + 4 * g)));
            const int8x16_t w0 = vld1q_s8(wg), w1 = vld1q_s8(wg + 16);
            s0 = vpadalq_s16(s0, vmull_s8(vget_low_s8(w0), vget_low_s8(u)));
            s1 = vpadalq_s16(s1, vmull_high_s8(w0, u));
            s2 = vpadalq_s16(s2, vmull_s8(vget_low_s8(w1), vget_low_s8(u)));
            s3 = vpadalq_s16(s3, vmull_high_s8(w1, u));
        }
        const int32x4_t t0 = vpaddq_s32(s0, s1), t1 = vpaddq_s32(s2, s3);
        if (live == HG_QG_MR) {
            /* (float)(t + c) * s rounded half to even, then hg_qg_requant16's narrows and bounds */
            const int32x4_t q0 =
                vcvtnq_s32_f32(vmulq_f32(vcvtq_f32_s32(vaddq_s32(t0, vld1q_s32(c + m0))), vld1q_f32(s + m0)));
            const int32x4_t q1 =
                vcvtnq_s32_f32(vmulq_f32(vcvtq_f32_s32(vaddq_s32(t1, vld1q_s32(c + m0 + 4))), vld1q_f32(s + m0 + 4)));
            const int16x8_t h = vqaddq_s16(vqmovn_high_s32(vqmovn_s32(q0), q1), b.zp);
            const int8x8_t q = vmin_s8(vmax_s8(vqmovn_s16(h), vget_low_s8(b.lo)), vget_low_s8(b.hi));
            vst1_u8(y + m0, veor_u8(vreinterpret_u8_s8(q), vget_low_u8(b.flip)));
            continue;
        }
        int32_t t[HG_QG_MR];
        vst1q_s32(t, t0);
        vst1q_s32(t + 4, t1);
        for (size_t r = 0; r < live; ++r)
            y[m0 + r] = (uint8_t)(hg_round_even(hg_clamp_q((float)(t[r] + c[m0 + r]) * s[m0 + r], lo, hi)) + zp);
    }
}
#else
static inline void hg_qg_gemv(const int8_t *restrict w, const uint8_t *restrict a, size_t kg, size_t rows,
                              const int32_t *c, const float *s, int32_t zp, float lo, float hi, uint8_t *y)
{
    hg_qg_gemv_blocks(w, a, kg, rows, c, s, zp, lo, hi, y, 0);
}
#endif

/* The GEMV of a weight matrix holding -128 (hetgen/ops/qlinear.py checks the constant): on plain
   NEON two of its products may not fit int16 together, so each is widened alone. */
static inline HG_QG_UNUSED void hg_qg_gemv_w128(const int8_t *restrict w, const uint8_t *restrict a, size_t kg,
                                                size_t rows, const int32_t *c, const float *s, int32_t zp, float lo,
                                                float hi, uint8_t *y)
{
    hg_qg_gemv_blocks(w, a, kg, rows, c, s, zp, lo, hi, y, 1);
}
#endif

/* A matrix product's block of nr rows of A (rows `lda` bytes apart, each hg_qg_gemv's input) times the
   packed weights: y[i * ldy + j] for the `rows` channels j. AVX-512 VNNI, 4 rows: hg_qg_gemv's
   arrangement with 4 panels (32 channels) for each of the 4 rows, 16 vpdpbusd chains, each panel's
   weights loaded once for the 4 rows; elsewhere (and a short block) one hg_qg_gemv a row. The same
   int32 sums and requantisation as hg_qg_gemv: the results are the same bytes. */
#if defined(HG_QG_PATH_AVX512VNNI)
HG_QG_NOINLINE static void hg_qg_gemm4(const int8_t *restrict w, const uint8_t *restrict a, size_t lda, size_t kg,
                                       size_t rows, const int32_t *c, const float *s, int32_t zp, float lo, float hi,
                                       uint8_t *y, size_t ldy)
{
    const size_t panels = (rows + HG_QG_MR - 1) / HG_QG_MR, pb = kg * 4 * HG_QG_MR, last = panels - 1;
    const __m512i spread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const uint8_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
    for (size_t p0 = 0; p0 < panels; p0 += 4) {
        /* a short last chunk repeats its last panel (its results unused) */
        const int8_t *w0 = w + p0 * pb, *w1 = w + (p0 + 1 < last ? p0 + 1 : last) * pb;
        const int8_t *w2 = w + (p0 + 2 < last ? p0 + 2 : last) * pb, *w3 = w + (p0 + 3 < last ? p0 + 3 : last) * pb;
        /* s<row><panel> */
        __m512i s00 = _mm512_setzero_si512(), s01 = s00, s02 = s00, s03 = s00, s10 = s00, s11 = s00, s12 = s00, s13 = s00;
        __m512i s20 = s00, s21 = s00, s22 = s00, s23 = s00, s30 = s00, s31 = s00, s32 = s00, s33 = s00;
        size_t g = 0;
#define HG_QG_GEMM_ROW(r, av_)                                                                                \
    do {                                                                                                      \
        const __m512i av = (av_);                                                                             \
        s##r##0 = _mm512_dpbusd_epi32(s##r##0, av, v0);                                                       \
        s##r##1 = _mm512_dpbusd_epi32(s##r##1, av, v1);                                                       \
        s##r##2 = _mm512_dpbusd_epi32(s##r##2, av, v2);                                                       \
        s##r##3 = _mm512_dpbusd_epi32(s##r##3, av, v3);                                                       \
    } while (0)
#define HG_QG_SPREAD(ar) _mm512_permutexvar_epi32(spread, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(const void *)((ar) + 4 * g))))
        for (; g + 2 <= kg; g += 2) {
            const size_t o = g * 4 * HG_QG_MR;
            const __m512i v0 = _mm512_loadu_si512(w0 + o), v1 = _mm512_loadu_si512(w1 + o);
            const __m512i v2 = _mm512_loadu_si512(w2 + o), v3 = _mm512_loadu_si512(w3 + o);
            HG_QG_GEMM_ROW(0, HG_QG_SPREAD(a0));
            HG_QG_GEMM_ROW(1, HG_QG_SPREAD(a1));
            HG_QG_GEMM_ROW(2, HG_QG_SPREAD(a2));
            HG_QG_GEMM_ROW(3, HG_QG_SPREAD(a3));
        }
        if (g < kg) { /* an odd last group: the low half only */
            const size_t o = g * 4 * HG_QG_MR;
            const __m512i v0 = _mm512_maskz_loadu_epi32(0x00FF, w0 + o), v1 = _mm512_maskz_loadu_epi32(0x00FF, w1 + o);
            const __m512i v2 = _mm512_maskz_loadu_epi32(0x00FF, w2 + o), v3 = _mm512_maskz_loadu_epi32(0x00FF, w3 + o);
            HG_QG_GEMM_ROW(0, _mm512_maskz_set1_epi32(0x00FF, hg_qg_load32(a0 + 4 * g)));
            HG_QG_GEMM_ROW(1, _mm512_maskz_set1_epi32(0x00FF, hg_qg_load32(a1 + 4 * g)));
            HG_QG_GEMM_ROW(2, _mm512_maskz_set1_epi32(0x00FF, hg_qg_load32(a2 + 4 * g)));
            HG_QG_GEMM_ROW(3, _mm512_maskz_set1_epi32(0x00FF, hg_qg_load32(a3 + 4 * g)));
        }
#undef HG_QG_SPREAD
#undef HG_QG_GEMM_ROW
        const size_t m0 = p0 * HG_QG_MR, left = rows - m0;
#define HG_QG_GEMM_STORE(r)                                                                                   \
    do {                                                                                                      \
        uint8_t *yr = y + (r) * ldy + m0;                                                                     \
        hg_qg_gemv_store16(hg_qg_gemv_halves(s##r##0), hg_qg_gemv_halves(s##r##1), c + m0, s + m0, zp, lo, hi, \
                           yr, left);                                                                         \
        if (left > 16)                                                                                        \
            hg_qg_gemv_store16(hg_qg_gemv_halves(s##r##2), hg_qg_gemv_halves(s##r##3), c + m0 + 16, s + m0 + 16, \
                               zp, lo, hi, yr + 16, left - 16);                                               \
    } while (0)
        HG_QG_GEMM_STORE(0);
        HG_QG_GEMM_STORE(1);
        HG_QG_GEMM_STORE(2);
        HG_QG_GEMM_STORE(3);
#undef HG_QG_GEMM_STORE
    }
}
#endif

static inline void hg_qg_gemm_rows(const int8_t *restrict w, const uint8_t *restrict a, size_t lda, size_t nr,
                                   size_t kg, size_t rows, const int32_t *c, const float *s, int32_t zp, float lo,
                                   float hi, uint8_t *y, size_t ldy)
{
#if defined(HG_QG_PATH_AVX512VNNI)
    if (nr == 4) {
        hg_qg_gemm4(w, a, lda, kg, rows, c, s, zp, lo, hi, y, ldy);
        return;
    }
#endif
    for (size_t i = 0; i < nr; ++i)
        hg_qg_gemv(w, a + i * lda, kg, rows, c, s, zp, lo, hi, y + i * ldy);
}

/* hg_qg_gemm_rows for weights holding -128 (plain NEON's int16 pair sums: hg_qg_block_w128): one
   hg_qg_gemv_w128 a row */
static inline HG_QG_UNUSED void hg_qg_gemm_rows_w128(const int8_t *restrict w, const uint8_t *restrict a, size_t lda,
                                                     size_t nr, size_t kg, size_t rows, const int32_t *c,
                                                     const float *s, int32_t zp, float lo, float hi, uint8_t *y,
                                                     size_t ldy)
{
    for (size_t i = 0; i < nr; ++i)
        hg_qg_gemv_w128(w, a + i * lda, kg, rows, c, s, zp, lo, hi, y + i * ldy);
}

#endif /* HG_QGEMM_H */
