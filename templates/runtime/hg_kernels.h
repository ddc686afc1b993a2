/* Shared declarations for hetgen's generated kernels. */
#ifndef HG_KERNELS_H
#define HG_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hg_constants.h"

#define HG_UNUSED(x) ((void)(x))

/* A kernel's range function (templates/kernels/_parallel.j2) stays a function of its own: inlined
   into its pool task, gcc 12 no longer vectorises the inner loops (MaxPool rows ran 2x slower). */
#if defined(__GNUC__)
#define HG_NOINLINE __attribute__((noinline))
#else
#define HG_NOINLINE
#endif

/* ---- hg_gemm.c: single-precision GEMM ------------------------------------------------------

   C[m x n] (row-major, row stride ldc) = A[m x k] * B[k x n]   (or += when `accumulate`).
   `epilogue`, when not NULL, is called once for every finished tile of C (all k summed), while
   the tile is still in L1: it applies bias and fused activations in place. `work` is a workspace
   of at least HG_SGEMM_PACK_BYTES(m, n, k) bytes.

   The micro-kernels (hg_sgemm_tile.h) multiply panels: an A panel holds HG_SGEMM_PANEL_M rows of
   A, column after column (panel[p * PANEL_M + i] = A[i][p]); a B panel holds HG_SGEMM_PANEL_N
   columns of B, row after row (panel[p * PANEL_N + j] = B[p][j]); rows and columns past the
   matrix are zeros. A constant operand is packed whole at generate time (hetgen/ops/_gemm_plan.py:
   its panels one after another, each spanning all k); any other operand is packed here, block by
   block, from strides or by the caller's `pack_b` function (a convolution's implicit im2col). */

/* Panel sizes (HG_SGEMM_PANEL_M, HG_SGEMM_PANEL_N): the layout contract with hetgen/ops/_gemm_plan.py,
   the same for every ISA, in hg_constants.h (generated from hetgen/abi.py). */
/* Cache blocking: the platform's (`options: {tuning: ...}`, measured by `hetgen tune`) from the
   generated hg_gemm_config.h, else these defaults; hetgen/ops/_gemm_plan.py (GemmBlocks) sizes
   every kernel's workspace with the same values, and the kernels check it with _Static_assert. */
#if defined(__has_include)
#if __has_include("hg_gemm_config.h")
#include "hg_gemm_config.h"
#endif
#endif
#ifndef HG_SGEMM_MC
#define HG_SGEMM_MC 128
#endif
#ifndef HG_SGEMM_KC
#define HG_SGEMM_KC 256
#endif
#ifndef HG_SGEMM_NC
#define HG_SGEMM_NC 1024
#endif

#define HG_SGEMM_MIN_(x, y) ((x) < (y) ? (x) : (y))
#define HG_SGEMM_PACK_BYTES(m, n, k)                                                               \
    (4u * ((HG_SGEMM_MIN_((size_t)(m), (size_t)HG_SGEMM_MC) + HG_SGEMM_PANEL_M) *                  \
               HG_SGEMM_MIN_((size_t)(k), (size_t)HG_SGEMM_KC) +                                   \
           (HG_SGEMM_MIN_((size_t)(n), (size_t)HG_SGEMM_NC) + HG_SGEMM_PANEL_N) *                  \
               HG_SGEMM_MIN_((size_t)(k), (size_t)HG_SGEMM_KC)) +                                  \
     128u)
/* The same where A or B comes packed at generate time: its packing buffer is not needed. */
#define HG_SGEMM_PACK_BYTES_FOR(m, n, k, a_packed, b_packed)                                       \
    (4u * (((a_packed) ? 0u : HG_SGEMM_MIN_((size_t)(m), (size_t)HG_SGEMM_MC) + HG_SGEMM_PANEL_M) * \
               HG_SGEMM_MIN_((size_t)(k), (size_t)HG_SGEMM_KC) +                                   \
           ((b_packed) ? 0u : HG_SGEMM_MIN_((size_t)(n), (size_t)HG_SGEMM_NC) + HG_SGEMM_PANEL_N) * \
               HG_SGEMM_MIN_((size_t)(k), (size_t)HG_SGEMM_KC)) +                                  \
     128u)
/* The same for a call that gives its own kc and nc (hg_sgemm_operands.kc, .nc): a layer whose
   workspace hetgen/lower/prepack.py keeps small. */
#define HG_SGEMM_PACK_BYTES_BLOCKS(m, n, k, a_packed, b_packed, kc, nc)                             \
    (4u * (((a_packed) ? 0u : HG_SGEMM_MIN_((size_t)(m), (size_t)HG_SGEMM_MC) + HG_SGEMM_PANEL_M) * \
               HG_SGEMM_MIN_((size_t)(k), (size_t)(kc)) +                                          \
           ((b_packed) ? 0u : HG_SGEMM_MIN_((size_t)(n), (size_t)(nc)) + HG_SGEMM_PANEL_N) *        \
               HG_SGEMM_MIN_((size_t)(k), (size_t)(kc))) +                                         \
     128u)

typedef void (*hg_gemm_epilogue_fn)(float *c, size_t ldc, size_t row0, size_t col0, size_t rows,
                                    size_t cols, const void *ctx);

/* Writes rows [p0, p0 + kc) x columns [j0, j0 + nc) of B as ceil(nc / PANEL_N) B panels of kc
   rows each, one after another, zero-padded. */
typedef void (*hg_sgemm_pack_fn)(const void *src, size_t p0, size_t kc, size_t j0, size_t nc,
                                 float *panels);

/* What a tile of C gets before it is stored, where the micro-kernel can apply it in registers
   (hg_sgemm_tile.h defines HG_SGEMM_TILE_FINISH): v = C[i][j] (all k summed); v += bias[i];
   v += residual[i * ldc + j] (the residual laid out as C, same ldc); then the clamp. Each step is
   the very operation the C epilogues do (templates/kernels/_conv_gemm.j2), so either path gives the
   same bits. A call that gives it still passes its epilogue, for the tiles (and ISAs) that store
   without it. */
enum { HG_SGEMM_CLAMP_NONE = 0, HG_SGEMM_CLAMP_RELU = 1, HG_SGEMM_CLAMP_CLIP = 2 };
typedef struct {
    const float *bias;     /* one per row of C; NULL: none */
    const float *residual; /* C's shape and ldc; NULL: none */
    int clamp;             /* RELU: v > 0 ? v : 0; CLIP: v < lo ? lo : v, then v > hi ? hi : v */
    float lo, hi;
} hg_sgemm_finish;

typedef struct {
    const float *a_panels; /* A packed whole at generate time; else A[i][p] = a[i * a_rs + p * a_cs] */
    const float *a;
    ptrdiff_t a_rs, a_cs;
    const float *b_panels; /* B packed whole at generate time; else pack_b(b_src, ...); else strides */
    hg_sgemm_pack_fn pack_b;
    const void *b_src;
    const float *b; /* B[p][j] = b[p * b_rs + j * b_cs] */
    ptrdiff_t b_rs, b_cs;
    /* B read in place by whole panels that lie in one run of b_width: B[p][j] =
       b[b_rows[p] + (j / b_width) * b_ld + j % b_width] (a convolution's taps in its phase planes,
       runs its output rows); the other tiles read pack_b's panels. NULL: pack_b's panels only. Taken
       where the micro-kernel reads rows at offsets (HG_SGEMM_TILE_ROWS) by products whose few A panels
       would not repay packing (m a multiple of the A panel, at most HG_SGEMM_IN_PLACE_M: hg_gemm.c). */
    const uint32_t *b_rows;
    size_t b_width, b_ld;
    size_t kc, nc; /* this call's cache blocks, at most HG_SGEMM_KC and HG_SGEMM_NC; 0: those */
    const hg_sgemm_finish *finish; /* applied in registers instead of the epilogue where it can be */
} hg_sgemm_operands;

void hg_sgemm_ex(size_t m, size_t n, size_t k, const hg_sgemm_operands *ops, float *c, size_t ldc,
                 int accumulate, hg_gemm_epilogue_fn epilogue, const void *ctx, void *work);

/* Both operands read through element strides (transposes need no copy). */
void hg_sgemm(size_t m, size_t n, size_t k, const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
              const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs, float *c, size_t ldc, int accumulate,
              hg_gemm_epilogue_fn epilogue, const void *ctx, void *pack);

/* ---- sliding-window geometry ------------------------------------------------------------- */

/* The outputs o in [*lo, *hi) of [0, out) whose input position o * stride + offset lies in
   [0, in): the part of a row that needs no padding check. */
static inline void hg_valid_range(ptrdiff_t offset, ptrdiff_t stride, ptrdiff_t in, size_t out,
                                  size_t *lo, size_t *hi)
{
    ptrdiff_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    ptrdiff_t end = in - offset <= 0 ? 0 : (in - offset + stride - 1) / stride;
    if (end > (ptrdiff_t)out)
        end = (ptrdiff_t)out;
    if (first > end)
        first = end;
    *lo = (size_t)first;
    *hi = (size_t)end;
}

/* ---- vectorisable elementary functions ----------------------------------------------------
   Plain C that gcc/clang auto-vectorise (no libm call per element). */

static inline uint32_t hg_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float hg_f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* exp(x) within ~2 ulp for x in [-87.3, 88.7]; smaller x give ~1e-38 (not 0), larger x give
   ~1.7e38 (not inf). Range reduction x = k ln2 + r with the round-to-nearest "magic number"
   trick, so no float-to-int conversion (well defined for NaN too). */
static inline float hg_expf(float x)
{
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.3f ? 88.3f : x;
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    const float kf = x * 1.44269504088896341f + magic;
    const uint32_t ki = hg_f32_bits(kf) - hg_f32_bits(magic); /* k mod 2^32 */
    const float k = kf - magic;
    float r = x - k * 0.693145751953125f;
    r = r - k * 1.42860682030941723212e-6f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * hg_f32_from_bits((ki + 127u) << 23);
}

/* erf(x) within ~3e-7 relative, branch-free so loops over it vectorise (libm's erff is a call
   per element). |x| < 0.5: its odd Taylor series to x^13 (truncation < 2e-8 relative); otherwise
   1 - erfc(|x|), with erfc from the Chebyshev-fitted form t exp(-x^2 + P(t)), t = 1 / (1 + |x| / 2)
   (fractional error < 1.2e-7, Numerical Recipes' erfcc), the sign restored last. */
static inline float hg_erff(float x)
{
    const float z = fabsf(x), z2 = x * x;
    float s = -1.0f / 9360.0f;
    s = s * z2 + 1.0f / 1320.0f;
    s = s * z2 - 1.0f / 216.0f;
    s = s * z2 + 1.0f / 42.0f;
    s = s * z2 - 1.0f / 10.0f;
    s = s * z2 + 1.0f / 3.0f;
    s = s * z2 - 1.0f;
    const float small = -1.12837916709551257f * x * s; /* 2 / sqrt(pi) * (x - x^3 / 3 + ...) */
    const float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    const float large = 1.0f - t * hg_expf(p - z2);
    const float magnitude = z < 0.5f ? fabsf(small) : large;
    return copysignf(magnitude, x);
}

/* ---- row reductions ------------------------------------------------------------------------
   16 independent partial results let the compiler vectorise without reassociating floats. */

static inline float hg_row_sum(const float *restrict x, size_t n)
{
    float part[16] = {0};
    const size_t main_n = n - n % 16;
    for (size_t i = 0; i < main_n; i += 16)
        for (size_t q = 0; q < 16; ++q)
            part[q] += x[i + q];
    float sum = 0.0f;
    for (size_t q = 0; q < 16; ++q)
        sum += part[q];
    for (size_t i = main_n; i < n; ++i)
        sum += x[i];
    return sum;
}

/* sum of (x[i] - mean)^2 */
static inline float hg_row_sq_dev(const float *restrict x, size_t n, float mean)
{
    float part[16] = {0};
    const size_t main_n = n - n % 16;
    for (size_t i = 0; i < main_n; i += 16)
        for (size_t q = 0; q < 16; ++q) {
            const float d = x[i + q] - mean;
            part[q] += d * d;
        }
    float sum = 0.0f;
    for (size_t q = 0; q < 16; ++q)
        sum += part[q];
    for (size_t i = main_n; i < n; ++i) {
        const float d = x[i] - mean;
        sum += d * d;
    }
    return sum;
}

/* The largest element (n >= 1; NaN if any element is a positive NaN). gcc does not vectorise a
   float max reduction without -ffinite-math-only, so the floats are compared as unsigned keys
   ordered like the floats themselves, an integer reduction it vectorises. */
static inline float hg_row_max(const float *restrict x, size_t n)
{
    uint32_t best = 0;
    for (size_t i = 0; i < n; ++i) {
        const uint32_t u = hg_f32_bits(x[i]);
        const uint32_t key = (u >> 31) ? ~u : (u | 0x80000000u);
        best = key > best ? key : best;
    }
    return hg_f32_from_bits((best >> 31) ? (best & 0x7fffffffu) : ~best);
}

/* int8/uint8 quantisation arithmetic (the quantized kernels' expressions call it) */
#include "hg_quant.h"
/* float dot products over operands read in place (the bare-metal kernels that do not pack) */
#include "hg_sdot.h"

/* ---- float16 storage ------------------------------------------------------------------------
   float16 tensors are stored as their IEEE binary16 bits (uint16_t); kernels compute in float32
   (see hetgen/ops/_float16.py). Both conversions are exact: widening always is, and narrowing
   rounds to nearest, ties to even, from the double value (so a float64 is rounded once, not twice),
   with subnormals, infinities and NaN as numpy gives them. */

static inline float hg_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0) { /* zero or subnormal: mantissa * 2^-24, exact in float */
        float magnitude = (float)mantissa * 5.9604644775390625e-8f;
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 0x1fu)
        return hg_f32_from_bits(sign | 0x7f800000u | (mantissa << 13));
    return hg_f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

static inline uint16_t hg_f64_to_f16(double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 48) & 0x8000u);
    uint64_t magnitude = bits & 0x7fffffffffffffffull;
    if (magnitude >= 0x7ff0000000000000ull) /* inf stays inf; NaN stays a quiet NaN */
        return (uint16_t)(sign | (magnitude > 0x7ff0000000000000ull ? 0x7e00u : 0x7c00u));
    int exponent = (int)(magnitude >> 52) - 1023;
    if (exponent > 15)
        return (uint16_t)(sign | 0x7c00u);
    if (exponent < -25) /* below half the smallest subnormal: rounds to zero */
        return sign;
    uint64_t significand = (magnitude & 0xfffffffffffffull) | (1ull << 52);
    /* subnormal results count units of 2^-24; normal ones keep 10 mantissa bits */
    int shift = exponent < -14 ? 28 - exponent : 42;
    uint64_t kept = significand >> shift;
    if (exponent >= -14)
        kept = ((uint64_t)(exponent + 15) << 10) | (kept & 0x3ffu);
    uint64_t rest = significand & ((1ull << shift) - 1), halfway = 1ull << (shift - 1);
    if (rest > halfway || (rest == halfway && (kept & 1u)))
        kept++; /* a carry moves into the exponent, up to infinity: as it should */
    return (uint16_t)(sign | kept);
}

static inline uint16_t hg_f32_to_f16(float x)
{
    return hg_f64_to_f16((double)x);
}

static inline void hg_f16_widen(const uint16_t *restrict src, float *restrict dst, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        dst[i] = hg_f16_to_f32(src[i]);
}

static inline void hg_f16_narrow(const float *restrict src, uint16_t *restrict dst, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        dst[i] = hg_f32_to_f16(src[i]);
}

#endif /* HG_KERNELS_H */
