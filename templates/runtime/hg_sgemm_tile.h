/* hetgen's GEMM micro-kernels, one per vector ISA, all reading the same panel layouts.

   hg_sgemm_tile(kc, pa, pb, c, ldc, add, rows, cols): the HG_SGEMM_PANEL_M x HG_SGEMM_PANEL_N
   (8 x 32) tile of C (+)= an A panel (kc steps of 8 floats) times a B panel (kc steps of 32
   floats). At least the leading `rows` x `cols` of the tile are written (a kernel may skip whole
   sub-tiles beyond them, and computes whatever it writes from the zero-padded panels); with
   rows = 8 and cols = 32 or 16, exactly those.

   The ISA is the one the compiler targets, so a target only ever receives the instructions its
   toolchain flags (the kind's -march/-mcpu, or -march=native in the native build) allow:
   AVX-512F, else AVX2 + FMA, else NEON (AArch64), else RVV 1.0 (a riscv64 kind with `vector: rvv`),
   else Helium with floating point (Cortex-M55), else portable C that the compiler vectorises. */
#ifndef HG_SGEMM_TILE_H
#define HG_SGEMM_TILE_H

#include "hg_kernels.h"

_Static_assert(HG_SGEMM_PANEL_M == 8 && HG_SGEMM_PANEL_N == 32, "the micro-kernels below assume 8 x 32 tiles");

/* Floats ahead of the A panel to prefetch (256 k steps: a default k block's, so a tile fetches
   the next k block's part of its panel, which A's whole-k panels hold right after). Weights packed
   at generate time stream from L3 or DRAM when a layer's exceed L2 (deep layers, small images):
   measured on Zen 4, a 512 x 16 x 4608 product went from ~80 to ~109 GFLOP/s with 64 steps ahead;
   256 steps took resnet18-real@224's 7 x 7 layers (512 x 49 x 4608, 9.4 MB of weights) 3-5 %
   further (bench_layers --against, 3 rounds of 10), ResNet-50 @ 224's and the suite ResNet-18's
   layers within the noise. A prefetch never faults, so reading past the panel's end is harmless. */
#define HG_SGEMM_PREFETCH_A 2048

#if defined(__AVX512F__)
#include <immintrin.h>
#define HG_SGEMM_ISA "avx512"
/* This kernel writes exactly rows = 8 x any cols <= 32 (masked stores), so hg_gemm.c calls it on
   every 8-row tile, the last columns of a block included, with no edge copy. */
#define HG_SGEMM_TILE_ANY_COLS 1

/* The finishing steps of hg_sgemm_finish (hg_kernels.h) on one vector of row i, columns
   [off, off + lanes) of the tile, in the order and with the operations of the C epilogue: MAX(a, b)
   is a > b ? a : b and MIN(a, b) a < b ? a : b, NaN and signed zeros included. */
#define HG_FIN16(v, i, off, mask)                                                                  \
    if (finish) {                                                                                  \
        if (bias)                                                                                  \
            v = _mm512_add_ps(v, _mm512_set1_ps(bias[i]));                                         \
        if (res)                                                                                   \
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, res + (i) * ldc + (off)));            \
        if (clamp == HG_SGEMM_CLAMP_RELU)                                                          \
            v = _mm512_max_ps(v, _mm512_setzero_ps());                                             \
        else if (clamp == HG_SGEMM_CLAMP_CLIP)                                                     \
            v = _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), v));           \
    }
#define HG_FIN8(v, i, off, mask)                                                                   \
    if (finish) {                                                                                  \
        if (bias)                                                                                  \
            v = _mm256_add_ps(v, _mm256_set1_ps(bias[i]));                                         \
        if (res)                                                                                   \
            v = _mm256_add_ps(v, _mm256_maskz_loadu_ps(mask, res + (i) * ldc + (off)));            \
        if (clamp == HG_SGEMM_CLAMP_RELU)                                                          \
            v = _mm256_max_ps(v, _mm256_setzero_ps());                                             \
        else if (clamp == HG_SGEMM_CLAMP_CLIP)                                                     \
            v = _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), v));           \
    }

/* 8 rows x (2 x 16 lanes): 16 accumulators, 2 loads of B and 8 broadcasts of A per 16 FMAs.
   Narrower tiles (the last columns of a layer whose width is no multiple of 32: 49 pixels at 7 x 7,
   196 at 14 x 14) run as narrow as their columns allow: 24 (16 + 8 lanes), 16 or 8 lanes, the last
   vector's store masked (where 32 rows of a block are left and the columns are no multiple of 8,
   hg_sgemm_tile_t below instead). Every element is the same chain of FMAs over k whatever the
   width, so the width changes no bit. */
/* The tile's rows of C where they are read after the k loop (`add`: every k block after the first)
   and of the residual (`res`), prefetched a row a k step during the first 8 steps, so the reads at
   the end find them in L1: a C that does not fit the L2 (a 1024 x 1024 product's 4 MiB) otherwise
   stalls every tile on 16 misses at its end. Measured on Zen 4, the best of 18 runs of
   hg_sgemm_ex: 1024 x 1024 x 1024 from ~89 to ~97 GFLOP/s with A packed at run time, ~96 to ~105
   with A's panels; 256 x 784 x 2304 (a 3 x 3 convolution's) ~94 to ~101; the products whose k is
   one block (no C read) unchanged. Prefetching C where it is only written (the first k block)
   measured 3-4 % slower on ResNet-50's 1x1 and 7 x 7 layers, so it is not done. */
#define HG_PREFETCH_TILE(p, wide)                                                                  \
    if ((p) < 8) {                                                                                 \
        if (add) {                                                                                 \
            _mm_prefetch((const char *)(c + (p) * ldc), _MM_HINT_T0);                              \
            if (wide)                                                                              \
                _mm_prefetch((const char *)(c + (p) * ldc + 16), _MM_HINT_T0);                     \
        }                                                                                          \
        if (res) {                                                                                 \
            _mm_prefetch((const char *)(res + (p) * ldc), _MM_HINT_T0);                            \
            if (wide)                                                                              \
                _mm_prefetch((const char *)(res + (p) * ldc + 16), _MM_HINT_T0);                   \
        }                                                                                          \
    }
#define HG_T_ZERO(i) __m512 c##i##a = _mm512_setzero_ps(), c##i##b = _mm512_setzero_ps();
#define HG_T_STEP(i)                                                                               \
    {                                                                                              \
        const __m512 ai = _mm512_set1_ps(pa[i]);                                                   \
        c##i##a = _mm512_fmadd_ps(ai, b0, c##i##a);                                                \
        c##i##b = _mm512_fmadd_ps(ai, b1, c##i##b);                                                \
    }
#define HG_T_STORE(i)                                                                              \
    {                                                                                              \
        float *row = c + (i) * ldc;                                                                \
        if (add) {                                                                                 \
            c##i##a = _mm512_add_ps(c##i##a, _mm512_loadu_ps(row));                                \
            c##i##b = _mm512_add_ps(c##i##b, _mm512_maskz_loadu_ps(last, row + 16));               \
        }                                                                                          \
        HG_FIN16(c##i##a, i, 0, (__mmask16)0xFFFFu)                                               \
        HG_FIN16(c##i##b, i, 16, last)                                                             \
        _mm512_storeu_ps(row, c##i##a);                                                            \
        _mm512_mask_storeu_ps(row + 16, last, c##i##b);                                            \
    }
/* 8 rows x 16 lanes, for tiles with at most 16 columns */
#define HG_H_ZERO(i) __m512 c##i = _mm512_setzero_ps();
#define HG_H_STEP(i) c##i = _mm512_fmadd_ps(_mm512_set1_ps(pa[i]), b0, c##i);
#define HG_H_STORE(i)                                                                              \
    {                                                                                              \
        float *row = c + (i) * ldc;                                                                \
        if (add)                                                                                   \
            c##i = _mm512_add_ps(c##i, _mm512_maskz_loadu_ps(last, row));                          \
        HG_FIN16(c##i, i, 0, last)                                                                 \
        _mm512_mask_storeu_ps(row, last, c##i);                                                    \
    }
#define HG_T_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

#if defined(__AVX512VL__)
/* 8 rows x (16 + 8 lanes), for 17 to 24 columns: an 8-lane FMA costs half a 16-lane one where the
   core splits 512-bit operations in two (Zen 4), and no more elsewhere. */
#define HG_W_ZERO(i) __m512 c##i##a = _mm512_setzero_ps(); __m256 c##i##b = _mm256_setzero_ps();
#define HG_W_STEP(i)                                                                               \
    {                                                                                              \
        const __m512 ai = _mm512_set1_ps(pa[i]);                                                   \
        c##i##a = _mm512_fmadd_ps(ai, b0, c##i##a);                                                \
        c##i##b = _mm256_fmadd_ps(_mm512_castps512_ps256(ai), b1, c##i##b);                       \
    }
#define HG_W_STORE(i)                                                                              \
    {                                                                                              \
        float *row = c + (i) * ldc;                                                                \
        if (add) {                                                                                 \
            c##i##a = _mm512_add_ps(c##i##a, _mm512_loadu_ps(row));                                \
            c##i##b = _mm256_add_ps(c##i##b, _mm256_maskz_loadu_ps(last8, row + 16));             \
        }                                                                                          \
        HG_FIN16(c##i##a, i, 0, (__mmask16)0xFFFFu)                                               \
        HG_FIN8(c##i##b, i, 16, last8)                                                             \
        _mm512_storeu_ps(row, c##i##a);                                                            \
        _mm256_mask_storeu_ps(row + 16, last8, c##i##b);                                           \
    }
/* 8 rows x 8 lanes, for at most 8 columns */
#define HG_E_ZERO(i) __m256 c##i = _mm256_setzero_ps();
#define HG_E_STEP(i) c##i = _mm256_fmadd_ps(_mm256_set1_ps(pa[i]), b0, c##i);
#define HG_E_STORE(i)                                                                              \
    {                                                                                              \
        float *row = c + (i) * ldc;                                                                \
        if (add)                                                                                   \
            c##i = _mm256_add_ps(c##i, _mm256_maskz_loadu_ps(last8, row));                         \
        HG_FIN8(c##i, i, 0, last8)                                                                 \
        _mm256_mask_storeu_ps(row, last8, c##i);                                                   \
    }
#endif

/* hg_sgemm_tile, and with `finish` the tile finished in registers before it is stored: `bias` the
   tile's first row's bias (or NULL), `res` the residual's element of the tile's first element (or
   NULL), `clamp`/`lo`/`hi` as hg_sgemm_finish. Inlined into both, so the plain tile keeps no trace
   of it. */
#define HG_SGEMM_TILE_FINISH 1
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void hg_sgemm_tile_fin(size_t kc, const float *restrict pa, const float *restrict pb,
                                     size_t ldb, float *restrict c, size_t ldc, int add, size_t cols, int finish,
                                     const float *bias, const float *res, int clamp, float lo, float hi)
{
    /* the lanes of the last vector that hold columns of the tile */
    const size_t tail = cols % 16 ? cols % 16 : 16;
    const __mmask16 last = (__mmask16)((1u << tail) - 1u);
#if defined(__AVX512VL__)
    const __mmask8 last8 = (__mmask8)((1u << (cols % 8 ? cols % 8 : 8)) - 1u);
    if (cols <= 8) {
        HG_T_ROWS(HG_E_ZERO)
        for (size_t p = 0; p < kc; ++p) {
            const __m256 b0 = _mm256_loadu_ps(pb);
            _mm_prefetch((const char *)(pa + HG_SGEMM_PREFETCH_A), _MM_HINT_T0);
            HG_PREFETCH_TILE(p, 0)
            HG_T_ROWS(HG_E_STEP)
            pa += 8;
            pb += ldb;
        }
        HG_T_ROWS(HG_E_STORE)
        return;
    }
    if (cols > 16 && cols <= 24) {
        HG_T_ROWS(HG_W_ZERO)
        for (size_t p = 0; p < kc; ++p) {
            const __m512 b0 = _mm512_loadu_ps(pb);
            const __m256 b1 = _mm256_loadu_ps(pb + 16);
            _mm_prefetch((const char *)(pa + HG_SGEMM_PREFETCH_A), _MM_HINT_T0);
            HG_PREFETCH_TILE(p, 1)
            HG_T_ROWS(HG_W_STEP)
            pa += 8;
            pb += ldb;
        }
        HG_T_ROWS(HG_W_STORE)
        return;
    }
#endif
    if (cols <= 16) {
        HG_T_ROWS(HG_H_ZERO)
        for (size_t p = 0; p < kc; ++p) {
            const __m512 b0 = _mm512_loadu_ps(pb);
            _mm_prefetch((const char *)(pa + HG_SGEMM_PREFETCH_A), _MM_HINT_T0);
            HG_PREFETCH_TILE(p, 0)
            HG_T_ROWS(HG_H_STEP)
            pa += 8;
            pb += ldb;
        }
        HG_T_ROWS(HG_H_STORE)
        return;
    }
    HG_T_ROWS(HG_T_ZERO)
    for (size_t p = 0; p < kc; ++p) {
        const __m512 b0 = _mm512_loadu_ps(pb), b1 = _mm512_loadu_ps(pb + 16);
        _mm_prefetch((const char *)(pa + HG_SGEMM_PREFETCH_A), _MM_HINT_T0);
        HG_PREFETCH_TILE(p, 1)
        HG_T_ROWS(HG_T_STEP)
        pa += 8;
        pb += ldb;
    }
    HG_T_ROWS(HG_T_STORE)
}

static inline void hg_sgemm_tile(size_t kc, const float *restrict pa, const float *restrict pb, float *restrict c,
                                 size_t ldc, int add, size_t rows, size_t cols)
{
    HG_UNUSED(rows);
    hg_sgemm_tile_fin(kc, pa, pb, 32, c, ldc, add, cols, 0, NULL, NULL, HG_SGEMM_CLAMP_NONE, 0.0f, 0.0f);
}

/* The same with B's rows `ldb` floats apart: B read where it lies (a row-major B, not packed). It
   reads 32 floats of each row (of 8, 16 or 24 columns: 8, 16 or 24 floats): only whole 32-column
   panels are read in place, so none reads past B. */
#define HG_SGEMM_TILE_LDB 1
static inline void hg_sgemm_tile_ldb(size_t kc, const float *restrict pa, const float *restrict pb, size_t ldb,
                                     float *restrict c, size_t ldc, int add, size_t rows, size_t cols)
{
    HG_UNUSED(rows);
    hg_sgemm_tile_fin(kc, pa, pb, ldb, c, ldc, add, cols, 0, NULL, NULL, HG_SGEMM_CLAMP_NONE, 0.0f, 0.0f);
}

/* An 8-row tile of any width up to 32, B's rows ldb apart, finished with `f` (its bias and residual
   from row row0, column col0). */
static inline void hg_sgemm_tile_finish(size_t kc, const float *restrict pa, const float *restrict pb,
                                        size_t ldb, float *restrict c, size_t ldc, int add, size_t cols,
                                        const hg_sgemm_finish *f, size_t row0, size_t col0)
{
    hg_sgemm_tile_fin(kc, pa, pb, ldb, c, ldc, add, cols, 1, f->bias ? f->bias + row0 : NULL,
                      f->residual ? f->residual + row0 * ldc + col0 : NULL, f->clamp, f->lo, f->hi);
}

/* A whole 8 x 32 tile whose B row p lies at pb + rows[p]: B read where it lies when its rows are at
   offsets of their own (a convolution's taps in its phase planes: hg_gemm.c's `b_rows`), finished
   with `f` (as hg_sgemm_tile_finish) where it is given, else stored. A function of its own, not a
   form of hg_sgemm_tile_fin: that one's loops, given the choice, measured ~2 % slower on a 256 x
   784 x 1152 product. */
#define HG_SGEMM_TILE_ROWS 1
static inline void hg_sgemm_tile_rows(size_t kc, const float *restrict pa, const float *restrict pb,
                                      const uint32_t *restrict rows, float *restrict c, size_t ldc, int add,
                                      const hg_sgemm_finish *f, size_t row0, size_t col0)
{
    const __mmask16 last = (__mmask16)0xFFFFu;
    const int finish = f != NULL;
    const float *bias = f && f->bias ? f->bias + row0 : NULL;
    const float *res = f && f->residual ? f->residual + row0 * ldc + col0 : NULL;
    const int clamp = f ? f->clamp : HG_SGEMM_CLAMP_NONE;
    const float lo = f ? f->lo : 0.0f, hi = f ? f->hi : 0.0f;
    HG_T_ROWS(HG_T_ZERO)
    for (size_t p = 0; p < kc; ++p) {
        const float *b_row = pb + rows[p];
        const __m512 b0 = _mm512_loadu_ps(b_row), b1 = _mm512_loadu_ps(b_row + 16);
        _mm_prefetch((const char *)(pa + HG_SGEMM_PREFETCH_A), _MM_HINT_T0);
        HG_PREFETCH_TILE(p, 1)
        HG_T_ROWS(HG_T_STEP)
        pa += 8;
    }
    HG_T_ROWS(HG_T_STORE)
}

#if defined(__AVX512VL__)
/* A tile of 32 rows x the last columns of a block whose count no vector width divides (49 pixels
   at 7 x 7: a 32-column tile, then 17 columns that the 8-row kernels above run as 24 lanes, 71 % of
   them used), computed the other way round: the tile's 32 rows (4 A panels, each step's 8 floats
   of 4 panels a_step apart) in two 16-lane vectors, its columns one by one (a broadcast of B each),
   up to 8 columns (16 accumulators) a pass. Every lane holds an element of C, so the FMAs do only
   useful work. Each element is the same chain of FMAs over k as the 8-row kernels' (a * b + c,
   the product commutes bit for bit), then + C (`add`), the bias, the residual and the clamp of
   HG_FIN8 on each row's 8 lanes: the same bits. The accumulators are transposed in registers into
   rows of 8 columns (2 x 16 x 8 floats, 64 shuffles a pass), since C is read and written once per
   k block: element by element, that measured 12 % of a 512 x 32 x 4608 product's time. Used from
   a kc of HG_SGEMM_TILE_T_MIN_K: below it the transpose and the 32 row stores of a pass (~130
   operations) weigh on its 16 x kc FMAs (not measured there; the layers it is for have kc 256). */
#define HG_SGEMM_TILE_T 1
#define HG_SGEMM_TILE_T_ROWS 32
#define HG_SGEMM_TILE_T_MIN_K 64
#define HG_C_ZERO(j) __m512 t##j##a = _mm512_setzero_ps(), t##j##b = _mm512_setzero_ps();
#define HG_C_STEP(j)                                                                               \
    if (np > (j)) {                                                                                \
        const __m512 bj = _mm512_set1_ps(pb[j]);                                                   \
        t##j##a = _mm512_fmadd_ps(a01, bj, t##j##a);                                               \
        t##j##b = _mm512_fmadd_ps(a23, bj, t##j##b);                                               \
    }
#define HG_C_COLS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
/* two A panels' 8 floats of one k step as one 16-lane vector (AVX-512F's insert: no DQ needed) */
#define HG_C_PAIR(p0, p1)                                                                          \
    _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(p0))), \
                                        _mm256_castps_pd(_mm256_loadu_ps(p1)), 1))
/* 128-bit lanes l0 and l1 of x and y as (x.l0, y.l0, x.l1, y.l1): two 256-bit halves */
#define HG_C_LANES(x, y, l0, l1) hg_sgemm_tile_t_lanes(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(l1, l0, l1, l0)))
static inline __m512 hg_sgemm_tile_t_lanes(__m512 u) { return _mm512_shuffle_f32x4(u, u, _MM_SHUFFLE(3, 1, 2, 0)); }

/* 8 vectors of 16 rows (one a column) as 16 rows of 8 columns: rows[i] the 8 columns of row i */
static inline void hg_sgemm_tile_t_rows(__m512 r0, __m512 r1, __m512 r2, __m512 r3, __m512 r4, __m512 r5, __m512 r6,
                                        __m512 r7, float rows[16][8])
{
    /* in each 128-bit lane L (rows 4L to 4L + 3): pairs of columns, then rows of 4 columns */
    const __m512 t0 = _mm512_unpacklo_ps(r0, r1), t1 = _mm512_unpackhi_ps(r0, r1);
    const __m512 t2 = _mm512_unpacklo_ps(r2, r3), t3 = _mm512_unpackhi_ps(r2, r3);
    const __m512 t4 = _mm512_unpacklo_ps(r4, r5), t5 = _mm512_unpackhi_ps(r4, r5);
    const __m512 t6 = _mm512_unpacklo_ps(r6, r7), t7 = _mm512_unpackhi_ps(r6, r7);
    const __m512 s[8] = {
        _mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xEE), /* rows 4L, 4L + 1: columns 0-3 */
        _mm512_shuffle_ps(t1, t3, 0x44), _mm512_shuffle_ps(t1, t3, 0xEE), /* rows 4L + 2, 4L + 3 */
        _mm512_shuffle_ps(t4, t6, 0x44), _mm512_shuffle_ps(t4, t6, 0xEE), /* the same rows: columns 4-7 */
        _mm512_shuffle_ps(t5, t7, 0x44), _mm512_shuffle_ps(t5, t7, 0xEE),
    };
    for (int i = 0; i < 4; ++i) {
        /* row i then row 4 + i (lanes 0 and 1 of both), row 8 + i then 12 + i (lanes 2 and 3) */
        const __m512 low = HG_C_LANES(s[i], s[4 + i], 0, 1), high = HG_C_LANES(s[i], s[4 + i], 2, 3);
        _mm256_storeu_ps(rows[i], _mm512_castps512_ps256(low));
        _mm256_storeu_ps(rows[4 + i], _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(low), 1)));
        _mm256_storeu_ps(rows[8 + i], _mm512_castps512_ps256(high));
        _mm256_storeu_ps(rows[12 + i], _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(high), 1)));
    }
}

/* np (1 to 8, a constant where it is inlined) columns of the 32-row tile */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void hg_sgemm_tile_t_pass(size_t kc, const float *restrict pa, size_t a_step, const float *restrict pb,
                                        size_t ldb, float *restrict c, size_t ldc, int add, const size_t np,
                                        int finish, const float *bias, const float *res, int clamp, float lo,
                                        float hi)
{
    _Alignas(64) float rows[HG_SGEMM_TILE_T_ROWS][8];
    const __mmask8 last8 = (__mmask8)((1u << np) - 1u);
    const float *pa1 = pa + a_step, *pa2 = pa + 2 * a_step, *pa3 = pa + 3 * a_step;
    HG_C_COLS(HG_C_ZERO)
    for (size_t p = 0; p < kc; ++p) {
        const __m512 a01 = HG_C_PAIR(pa, pa1), a23 = HG_C_PAIR(pa2, pa3);
        if (p % 2 == 0) { /* a prefetch a 64-byte line: every other step of 8 floats */
            _mm_prefetch((const char *)(pa + HG_SGEMM_PREFETCH_A), _MM_HINT_T0);
            _mm_prefetch((const char *)(pa1 + HG_SGEMM_PREFETCH_A), _MM_HINT_T0);
            _mm_prefetch((const char *)(pa2 + HG_SGEMM_PREFETCH_A), _MM_HINT_T0);
            _mm_prefetch((const char *)(pa3 + HG_SGEMM_PREFETCH_A), _MM_HINT_T0);
        }
        HG_C_COLS(HG_C_STEP)
        pa += 8;
        pa1 += 8;
        pa2 += 8;
        pa3 += 8;
        pb += ldb;
    }
    hg_sgemm_tile_t_rows(t0a, t1a, t2a, t3a, t4a, t5a, t6a, t7a, rows);
    hg_sgemm_tile_t_rows(t0b, t1b, t2b, t3b, t4b, t5b, t6b, t7b, rows + 16);
    for (size_t i = 0; i < HG_SGEMM_TILE_T_ROWS; ++i) {
        float *row = c + i * ldc;
        __m256 v = _mm256_load_ps(rows[i]);
        if (add)
            v = _mm256_add_ps(v, _mm256_maskz_loadu_ps(last8, row));
        HG_FIN8(v, i, 0, last8)
        _mm256_mask_storeu_ps(row, last8, v);
    }
}

/* The 32 rows x `cols` (at most 32) tile of C (+)= 4 A panels (a_step floats apart) times a B
   panel (rows ldb apart), finished with `f` (its bias and residual from row row0, column col0)
   where it is given: passes of at most 8 columns, as even as they go (17: 6, 6, 5). */
static inline void hg_sgemm_tile_t(size_t kc, const float *restrict pa, size_t a_step, const float *restrict pb,
                                   size_t ldb, float *restrict c, size_t ldc, int add, size_t cols,
                                   const hg_sgemm_finish *f, size_t row0, size_t col0)
{
    const int finish = f != NULL;
    const float *bias = f && f->bias ? f->bias + row0 : NULL;
    const float *res = f && f->residual ? f->residual + row0 * ldc + col0 : NULL;
    const int clamp = f ? f->clamp : HG_SGEMM_CLAMP_NONE;
    const float lo = f ? f->lo : 0.0f, hi = f ? f->hi : 0.0f;
    const size_t passes = (cols + 7) / 8;
    for (size_t q = 0, j = 0; q < passes; ++q) {
        const size_t np = (cols - j) / (passes - q) + ((cols - j) % (passes - q) != 0);
        const float *r = res ? res + j : NULL;
        switch (np) {
#define HG_C_CASE(n)                                                                               \
    case n:                                                                                        \
        hg_sgemm_tile_t_pass(kc, pa, a_step, pb + j, ldb, c + j, ldc, add, n, finish, bias, r, clamp, lo, hi); \
        break;
            HG_C_CASE(1)
            HG_C_CASE(2)
            HG_C_CASE(3)
            HG_C_CASE(4)
            HG_C_CASE(5)
            HG_C_CASE(6)
            HG_C_CASE(7)
            HG_C_CASE(8)
#undef HG_C_CASE
        default:
            break;
        }
        j += np;
    }
}

#endif

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HG_SGEMM_ISA "avx2"

/* 4 rows x (2 x 8 lanes) per pass: 8 accumulators + 2 B + 1 A fit the 16 ymm registers. */
#define HG_Q_ZERO(i) __m256 c##i##a = _mm256_setzero_ps(), c##i##b = _mm256_setzero_ps();
#define HG_Q_STEP(i)                                                                               \
    {                                                                                              \
        const __m256 ai = _mm256_broadcast_ss(pa + (i));                                           \
        c##i##a = _mm256_fmadd_ps(ai, b0, c##i##a);                                                \
        c##i##b = _mm256_fmadd_ps(ai, b1, c##i##b);                                                \
    }
#define HG_Q_STORE(i)                                                                              \
    {                                                                                              \
        float *row = c + (i) * ldc;                                                                \
        if (add) {                                                                                 \
            c##i##a = _mm256_add_ps(c##i##a, _mm256_loadu_ps(row));                                \
            c##i##b = _mm256_add_ps(c##i##b, _mm256_loadu_ps(row + 8));                            \
        }                                                                                          \
        _mm256_storeu_ps(row, c##i##a);                                                            \
        _mm256_storeu_ps(row + 8, c##i##b);                                                        \
    }
#define HG_Q_ROWS(X) X(0) X(1) X(2) X(3)

static inline void hg_sgemm_tile_4x16(size_t kc, const float *restrict pa, const float *restrict pb,
                                      float *restrict c, size_t ldc, int add)
{
    HG_Q_ROWS(HG_Q_ZERO)
    for (size_t p = 0; p < kc; ++p) {
        const __m256 b0 = _mm256_loadu_ps(pb), b1 = _mm256_loadu_ps(pb + 8);
        _mm_prefetch((const char *)(pa + HG_SGEMM_PREFETCH_A), _MM_HINT_T0);
        HG_Q_ROWS(HG_Q_STEP)
        pa += 8;
        pb += 32;
    }
    HG_Q_ROWS(HG_Q_STORE)
}

static inline void hg_sgemm_tile(size_t kc, const float *restrict pa, const float *restrict pb, float *restrict c,
                                 size_t ldc, int add, size_t rows, size_t cols)
{
    for (size_t i = 0; i < rows; i += 4)
        for (size_t j = 0; j < cols; j += 16)
            hg_sgemm_tile_4x16(kc, pa + i, pb + j, c + i * ldc + j, ldc, add);
}

#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define HG_SGEMM_ISA "neon"

/* 8 rows x (2 x 4 lanes) per pass: 16 accumulators; A's 8 values sit in two registers and each
   FMA takes its row's value by lane, so a step is 4 loads for 16 FMAs. */
#define HG_N_ZERO(i) float32x4_t c##i##a = vdupq_n_f32(0.0f), c##i##b = vdupq_n_f32(0.0f);
#define HG_N_STEP(i, reg, lane)                                                                    \
    c##i##a = vfmaq_laneq_f32(c##i##a, b0, reg, lane);                                             \
    c##i##b = vfmaq_laneq_f32(c##i##b, b1, reg, lane);
#define HG_N_STORE(i)                                                                              \
    {                                                                                              \
        float *row = c + (i) * ldc;                                                                \
        if (add) {                                                                                 \
            c##i##a = vaddq_f32(c##i##a, vld1q_f32(row));                                          \
            c##i##b = vaddq_f32(c##i##b, vld1q_f32(row + 4));                                      \
        }                                                                                          \
        vst1q_f32(row, c##i##a);                                                                   \
        vst1q_f32(row + 4, c##i##b);                                                               \
    }
#define HG_N_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

static inline void hg_sgemm_tile_8x8(size_t kc, const float *restrict pa, const float *restrict pb,
                                     float *restrict c, size_t ldc, int add)
{
    HG_N_ROWS(HG_N_ZERO)
    for (size_t p = 0; p < kc; ++p) {
        const float32x4_t a0 = vld1q_f32(pa), a1 = vld1q_f32(pa + 4);
        const float32x4_t b0 = vld1q_f32(pb), b1 = vld1q_f32(pb + 4);
        HG_N_STEP(0, a0, 0)
        HG_N_STEP(1, a0, 1)
        HG_N_STEP(2, a0, 2)
        HG_N_STEP(3, a0, 3)
        HG_N_STEP(4, a1, 0)
        HG_N_STEP(5, a1, 1)
        HG_N_STEP(6, a1, 2)
        HG_N_STEP(7, a1, 3)
        pa += 8;
        pb += 32;
    }
    HG_N_ROWS(HG_N_STORE)
}

static inline void hg_sgemm_tile(size_t kc, const float *restrict pa, const float *restrict pb, float *restrict c,
                                 size_t ldc, int add, size_t rows, size_t cols)
{
    HG_UNUSED(rows);
    for (size_t j = 0; j < cols; j += 8)
        hg_sgemm_tile_8x8(kc, pa, pb + j, c + j, ldc, add);
}

#elif defined(__riscv_v) && __riscv_v >= 1000000 && defined(__riscv_v_elen_fp) && __riscv_v_elen_fp >= 32
#define HG_SGEMM_ISA "rvv"

/* RISC-V Vector 1.0, vector-length agnostic: the tile is cut into column strips of vl floats
   (vsetvli on the columns left, e32 with LMUL 2: 8 floats at VLEN 128, 32 from VLEN 512), each
   strip 8 rows in 8 register groups (v8..v22) with B's row in v24, A's 8 values in ft0..ft7
   (vfmacc.vf takes its scalar from an FP register): a step is 1 vector load and 8 flw for 8 FMAs.
   Written as one inline-assembly block, not intrinsics: the riscv64 kind's compiler (gcc 12) has
   no RVV intrinsics and those it later got (and clang's) changed names between versions, while
   RVV 1.0 mnemonics are ratified and assembled by binutils >= 2.38 and clang alike. The whole k
   loop is one block because no compiler keeps vector registers alive between blocks for us. */
#define HG_RVV_VREGS                                                                               \
    , "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", \
        "v22", "v23", "v24", "v25"
/* compilers that use the vector unit themselves must be told what the block changes (gcc 12 never
   does, and knows no vector register names; clang 14 knows the registers but not vl and vtype) */
#if defined(__clang__)
#define HG_RVV_CLOBBERS HG_RVV_VREGS
#elif __GNUC__ >= 13
#define HG_RVV_CLOBBERS HG_RVV_VREGS, "vl", "vtype"
#else
#define HG_RVV_CLOBBERS
#endif

static inline void hg_sgemm_tile(size_t kc, const float *restrict pa, const float *restrict pb, float *restrict c,
                                 size_t ldc, int add, size_t rows, size_t cols)
{
    HG_UNUSED(rows);
    const size_t row_bytes = ldc * sizeof(float);
    for (size_t j = 0; j < cols;) {
        const float *a = pa, *b = pb + j;
        float *out = c + j, *row;
        size_t k = kc, vl;
        __asm__ volatile(
            "vsetvli    %[vl], %[left], e32, m2, ta, ma\n\t"
            "vmv.v.i    v8, 0\n\t"
            "vmv.v.i    v10, 0\n\t"
            "vmv.v.i    v12, 0\n\t"
            "vmv.v.i    v14, 0\n\t"
            "vmv.v.i    v16, 0\n\t"
            "vmv.v.i    v18, 0\n\t"
            "vmv.v.i    v20, 0\n\t"
            "vmv.v.i    v22, 0\n\t"
            "beqz       %[k], 2f\n"
            "1:\n\t"
            "vle32.v    v24, (%[b])\n\t"
            "flw        ft0, 0(%[a])\n\t"
            "flw        ft1, 4(%[a])\n\t"
            "flw        ft2, 8(%[a])\n\t"
            "flw        ft3, 12(%[a])\n\t"
            "flw        ft4, 16(%[a])\n\t"
            "flw        ft5, 20(%[a])\n\t"
            "flw        ft6, 24(%[a])\n\t"
            "flw        ft7, 28(%[a])\n\t"
            "vfmacc.vf  v8, ft0, v24\n\t"
            "vfmacc.vf  v10, ft1, v24\n\t"
            "vfmacc.vf  v12, ft2, v24\n\t"
            "vfmacc.vf  v14, ft3, v24\n\t"
            "vfmacc.vf  v16, ft4, v24\n\t"
            "vfmacc.vf  v18, ft5, v24\n\t"
            "vfmacc.vf  v20, ft6, v24\n\t"
            "vfmacc.vf  v22, ft7, v24\n\t"
            "addi       %[a], %[a], 32\n\t"
            "addi       %[b], %[b], 128\n\t"
            "addi       %[k], %[k], -1\n\t"
            "bnez       %[k], 1b\n"
            "2:\n\t"
            "beqz       %[add], 3f\n\t"
            "mv         %[row], %[out]\n\t"
            "vle32.v    v24, (%[row])\n\t"
            "vfadd.vv   v8, v8, v24\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vle32.v    v24, (%[row])\n\t"
            "vfadd.vv   v10, v10, v24\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vle32.v    v24, (%[row])\n\t"
            "vfadd.vv   v12, v12, v24\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vle32.v    v24, (%[row])\n\t"
            "vfadd.vv   v14, v14, v24\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vle32.v    v24, (%[row])\n\t"
            "vfadd.vv   v16, v16, v24\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vle32.v    v24, (%[row])\n\t"
            "vfadd.vv   v18, v18, v24\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vle32.v    v24, (%[row])\n\t"
            "vfadd.vv   v20, v20, v24\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vle32.v    v24, (%[row])\n\t"
            "vfadd.vv   v22, v22, v24\n"
            "3:\n\t"
            "mv         %[row], %[out]\n\t"
            "vse32.v    v8, (%[row])\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vse32.v    v10, (%[row])\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vse32.v    v12, (%[row])\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vse32.v    v14, (%[row])\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vse32.v    v16, (%[row])\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vse32.v    v18, (%[row])\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vse32.v    v20, (%[row])\n\t"
            "add        %[row], %[row], %[stride]\n\t"
            "vse32.v    v22, (%[row])\n\t"
            : [vl] "=&r"(vl), [a] "+&r"(a), [b] "+&r"(b), [k] "+&r"(k), [row] "=&r"(row)
            : [left] "r"(cols - j), [add] "r"(add), [out] "r"(out), [stride] "r"(row_bytes)
            : "ft0", "ft1", "ft2", "ft3", "ft4", "ft5", "ft6", "ft7", "memory" HG_RVV_CLOBBERS);
        j += vl;
    }
}

#elif defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 2)
#include <arm_mve.h>
#define HG_SGEMM_ISA "helium"

/* Arm Helium (M-profile Vector Extension with floating point, e.g. Cortex-M55): 4 rows x 4 lanes
   per pass. Helium has 8 vector registers, so 4 accumulators and B's 4 columns leave room; A's
   values stay in core registers, where VFMA takes its scalar operand (vfmaq_n_f32). */
#define HG_H_PASS_STEP(i) c##i = vfmaq_n_f32(c##i, b0, pa[i]);
#define HG_H_PASS_STORE(i)                                                                         \
    {                                                                                              \
        float *row = c + (i) * ldc;                                                                \
        vst1q_f32(row, add ? vaddq_f32(c##i, vld1q_f32(row)) : c##i);                               \
    }
#define HG_H_PASS_ROWS(X) X(0) X(1) X(2) X(3)

static inline void hg_sgemm_tile_4x4(size_t kc, const float *restrict pa, const float *restrict pb,
                                     float *restrict c, size_t ldc, int add)
{
    float32x4_t c0 = vdupq_n_f32(0.0f), c1 = c0, c2 = c0, c3 = c0;
    for (size_t p = 0; p < kc; ++p) {
        const float32x4_t b0 = vld1q_f32(pb);
        HG_H_PASS_ROWS(HG_H_PASS_STEP)
        pa += 8;
        pb += 32;
    }
    HG_H_PASS_ROWS(HG_H_PASS_STORE)
}

static inline void hg_sgemm_tile(size_t kc, const float *restrict pa, const float *restrict pb, float *restrict c,
                                 size_t ldc, int add, size_t rows, size_t cols)
{
    for (size_t i = 0; i < rows; i += 4)
        for (size_t j = 0; j < cols; j += 4)
            hg_sgemm_tile_4x4(kc, pa + i, pb + j, c + i * ldc + j, ldc, add);
}

#else
#define HG_SGEMM_ISA "portable"

/* fmaf is one instruction where FP_FAST_FMAF says so; elsewhere it would be a slow call. */
#ifdef FP_FAST_FMAF
#define HG_MADD(a, b, c) fmaf((a), (b), (c))
#else
#define HG_MADD(a, b, c) ((a) * (b) + (c))
#endif

/* 4 rows x 8 columns per pass: fixed-size loops the compiler keeps in (vector) registers. */
static inline void hg_sgemm_tile_4x8(size_t kc, const float *restrict pa, const float *restrict pb,
                                     float *restrict c, size_t ldc, int add)
{
    float acc[4][8] = {{0.0f}};
    for (size_t p = 0; p < kc; ++p) {
        for (size_t i = 0; i < 4; ++i)
            for (size_t j = 0; j < 8; ++j)
                acc[i][j] = HG_MADD(pa[i], pb[j], acc[i][j]);
        pa += 8;
        pb += 32;
    }
    for (size_t i = 0; i < 4; ++i) {
        float *restrict row = c + i * ldc;
        for (size_t j = 0; j < 8; ++j)
            row[j] = add ? row[j] + acc[i][j] : acc[i][j];
    }
}

static inline void hg_sgemm_tile(size_t kc, const float *restrict pa, const float *restrict pb, float *restrict c,
                                 size_t ldc, int add, size_t rows, size_t cols)
{
    for (size_t i = 0; i < rows; i += 4)
        for (size_t j = 0; j < cols; j += 8)
            hg_sgemm_tile_4x8(kc, pa + i, pb + j, c + i * ldc + j, ldc, add);
}
#endif

#if defined(__AVX__)
/* 8 rows x 8 columns of a row-major A (rows `rs` floats apart) as 8 steps of an A panel (column
   after column, 8 floats each): an 8 x 8 transpose in registers. hg_gemm.c's element loop wrote
   the panel 32 bytes apart a float at a time: packing a 1024 x 1024 A took ~7 % of its product
   with a packed B (Zen 4). A copy: the bits are the same. */
#include <immintrin.h>
#define HG_SGEMM_PACK_A8 1
static inline void hg_sgemm_pack_a8(const float *restrict a, ptrdiff_t rs, float *restrict pa)
{
    const __m256 r0 = _mm256_loadu_ps(a), r1 = _mm256_loadu_ps(a + rs), r2 = _mm256_loadu_ps(a + 2 * rs),
                 r3 = _mm256_loadu_ps(a + 3 * rs), r4 = _mm256_loadu_ps(a + 4 * rs), r5 = _mm256_loadu_ps(a + 5 * rs),
                 r6 = _mm256_loadu_ps(a + 6 * rs), r7 = _mm256_loadu_ps(a + 7 * rs);
    /* pairs of rows interleaved, then quads, then the 128-bit halves exchanged */
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                 t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(pa, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(pa + 8, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(pa + 16, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(pa + 24, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(pa + 32, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(pa + 40, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(pa + 48, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(pa + 56, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

#endif
