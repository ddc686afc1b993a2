/* Phase planes of a stride-2 window: one input row into its even and odd columns, the one or two
   column phases that read them (the implicit GEMM's planes, templates/kernels/conv_implicit_planes.c.j2;
   hetgen/ops/_conv_planes.py). A pass per row, both phases at once: copied phase by phase, each
   row was read twice, by a strided loop that GCC made one permute and scalar inserts a vector
   (ResNet-18's stride-2 layers, docs/kernels.md). Copies only: every path gives the same bits. */
#ifndef HG_PLANES_H
#define HG_PLANES_H

#include <stddef.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#if defined(__AVX512F__)
/* The lanes below `n` (0 to 16). */
static inline __mmask16 hg_planes_lanes(ptrdiff_t n)
{
    return n >= 16 ? (__mmask16)0xFFFFu : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* src[0, 32) to its 16 even floats, to its 16 odd ones: permutes of two vectors */
#define HG_PLANES_EVEN _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
#define HG_PLANES_ODD _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)
#endif

/* src[2 m] to even[m] for m < n_even, src[2 m + 1] to odd[m] for m < n_odd (both at least 1),
   reading no float past the last one taken. */
static inline void hg_split_columns(const float *restrict src, float *restrict even, size_t n_even,
                                    float *restrict odd, size_t n_odd)
{
    size_t k = 0;
    const size_t both = n_even < n_odd ? n_even : n_odd;
    (void)both;
#if defined(__AVX512F__)
    const __m512i pick_even = HG_PLANES_EVEN, pick_odd = HG_PLANES_ODD;
    for (; k + 16 <= both; k += 16) {
        const __m512 lo = _mm512_loadu_ps(src + 2 * k), hi = _mm512_loadu_ps(src + 2 * k + 16);
        _mm512_storeu_ps(even + k, _mm512_permutex2var_ps(lo, pick_even, hi));
        _mm512_storeu_ps(odd + k, _mm512_permutex2var_ps(lo, pick_odd, hi));
    }
    /* the floats read: up to src[2 n_even - 2] and src[2 n_odd - 1] */
    const ptrdiff_t last_even = 2 * (ptrdiff_t)n_even - 1, last_odd = 2 * (ptrdiff_t)n_odd;
    const ptrdiff_t span = last_even > last_odd ? last_even : last_odd;
    for (; k < n_even || k < n_odd; k += 16) {
        const ptrdiff_t left = span - 2 * (ptrdiff_t)k;
        const __m512 lo = _mm512_maskz_loadu_ps(hg_planes_lanes(left), src + 2 * k);
        const __m512 hi = left > 16 ? _mm512_maskz_loadu_ps(hg_planes_lanes(left - 16), src + 2 * k + 16)
                                    : _mm512_setzero_ps();
        if (k < n_even)
            _mm512_mask_storeu_ps(even + k, hg_planes_lanes((ptrdiff_t)(n_even - k)),
                                  _mm512_permutex2var_ps(lo, pick_even, hi));
        if (k < n_odd)
            _mm512_mask_storeu_ps(odd + k, hg_planes_lanes((ptrdiff_t)(n_odd - k)),
                                  _mm512_permutex2var_ps(lo, pick_odd, hi));
    }
#else
#if defined(__AVX2__)
    for (; k + 8 <= both; k += 8) {
        const __m256 lo = _mm256_loadu_ps(src + 2 * k), hi = _mm256_loadu_ps(src + 2 * k + 8);
        /* within each 128-bit half, then the halves' 64-bit quarters in order 0, 2, 1, 3 */
        const __m256d e = _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
        const __m256d o = _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm256_storeu_ps(even + k, _mm256_castpd_ps(_mm256_permute4x64_pd(e, _MM_SHUFFLE(3, 1, 2, 0))));
        _mm256_storeu_ps(odd + k, _mm256_castpd_ps(_mm256_permute4x64_pd(o, _MM_SHUFFLE(3, 1, 2, 0))));
    }
#elif defined(__ARM_NEON)
    for (; k + 4 <= both; k += 4) {
        const float32x4x2_t pair = vld2q_f32(src + 2 * k);
        vst1q_f32(even + k, pair.val[0]);
        vst1q_f32(odd + k, pair.val[1]);
    }
#endif
    for (size_t m = k; m < n_even; ++m)
        even[m] = src[2 * m];
    for (size_t m = k; m < n_odd; ++m)
        odd[m] = src[2 * m + 1];
#endif
}

/* src[2 m] to dst[m] for m < n: one column phase, the other unread (a 1x1 stride-2 window),
   reading no float past src[2 n - 2]. */
static inline void hg_every_other_column(const float *restrict src, float *restrict dst, size_t n)
{
#if defined(__AVX512F__)
    const __m512i pick_even = HG_PLANES_EVEN;
    const ptrdiff_t span = 2 * (ptrdiff_t)n - 1;
    size_t k = 0;
    for (; 2 * (ptrdiff_t)k + 32 <= span; k += 16) {
        const __m512 lo = _mm512_loadu_ps(src + 2 * k), hi = _mm512_loadu_ps(src + 2 * k + 16);
        _mm512_storeu_ps(dst + k, _mm512_permutex2var_ps(lo, pick_even, hi));
    }
    for (; k < n; k += 16) {
        const ptrdiff_t left = span - 2 * (ptrdiff_t)k;
        const __m512 lo = _mm512_maskz_loadu_ps(hg_planes_lanes(left), src + 2 * k);
        const __m512 hi = left > 16 ? _mm512_maskz_loadu_ps(hg_planes_lanes(left - 16), src + 2 * k + 16)
                                    : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(dst + k, hg_planes_lanes((ptrdiff_t)(n - k)), _mm512_permutex2var_ps(lo, pick_even, hi));
    }
#else
    for (size_t m = 0; m < n; ++m)
        dst[m] = src[2 * m];
#endif
}

#endif
