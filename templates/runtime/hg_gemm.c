/* hetgen's single-precision GEMM: GotoBLAS-style cache blocking around a register-tiled
   micro-kernel written with each vector ISA's intrinsics (hg_sgemm_tile.h). See hg_kernels.h for
   the contract, including the panel layouts that generate-time packing writes. */
#include "hg_kernels.h"
#include "hg_sgemm_small.h"
#include "hg_sgemm_tile.h"
#include "hg_threads.h"

#define PM HG_SGEMM_PANEL_M
#define PN HG_SGEMM_PANEL_N

_Static_assert(HG_SGEMM_MC % PM == 0, "MC must be a multiple of the A panel height");
_Static_assert(HG_SGEMM_NC % PN == 0, "NC must be a multiple of the B panel width");

/* Row-first tile order (sgemm_range) for B blocks up to this many floats (512 KiB: half an L2 of
   the cores with AVX-512); elsewhere the column-first order only. */
#ifdef HG_SGEMM_TILE_ANY_COLS
#define HG_SGEMM_ROWS_FIRST 1
#else
#define HG_SGEMM_ROWS_FIRST 0
#endif
#define HG_SGEMM_ROWS_FIRST_FLOATS (128u * 1024u)

/* Products of up to this many rows read a row-major B in place (sgemm_range), where the micro-kernel
   takes a B row stride (AVX-512); 0: B is always packed. Elsewhere, a B tile is the packed panel. */
#ifdef HG_SGEMM_TILE_LDB
#define HG_SGEMM_IN_PLACE_M 64u
#else
#define HG_SGEMM_IN_PLACE_M 0u
static inline void hg_sgemm_tile_ldb(size_t kc, const float *restrict pa, const float *restrict pb, size_t ldb,
                                     float *restrict c, size_t ldc, int add, size_t rows, size_t cols)
{
    HG_UNUSED(ldb); /* always a packed panel's PN */
    hg_sgemm_tile(kc, pa, pb, c, ldc, add, rows, cols);
}
#endif

static size_t min_size(size_t x, size_t y) { return x < y ? x : y; }

/* The call's own cache blocks where it gives them (a layer with a small workspace), else the platform's. */
static size_t block_kc(const hg_sgemm_operands *ops) { return ops->kc ? ops->kc : HG_SGEMM_KC; }
static size_t block_nc(const hg_sgemm_operands *ops) { return ops->nc ? ops->nc : HG_SGEMM_NC; }

static float *align64(void *p) { return (float *)(((uintptr_t)p + 63u) & ~(uintptr_t)63u); }

/* A block (mc x kc), read through strides -> PM-row panels, zero-padded. */
static void pack_a(size_t mc, size_t kc, const float *a, ptrdiff_t rs, ptrdiff_t cs, float *restrict pa)
{
    for (size_t i0 = 0; i0 < mc; i0 += PM) {
        const size_t rows = min_size(PM, mc - i0);
        if (cs == 1) {
            size_t p0 = 0;
#ifdef HG_SGEMM_PACK_A8
            /* whole panels 8 columns at a time, transposed in registers */
            if (rows == PM)
                for (; p0 + 8 <= kc; p0 += 8)
                    hg_sgemm_pack_a8(a + (ptrdiff_t)i0 * rs + (ptrdiff_t)p0, rs, pa + p0 * PM);
#endif
            /* row after row, so each source row streams once */
            for (size_t i = 0; i < rows && p0 < kc; ++i) {
                const float *restrict row = a + (ptrdiff_t)(i0 + i) * rs;
                for (size_t p = p0; p < kc; ++p)
                    pa[p * PM + i] = row[p];
            }
            for (size_t i = rows; i < PM; ++i)
                for (size_t p = 0; p < kc; ++p)
                    pa[p * PM + i] = 0.0f;
            pa += PM * kc;
            continue;
        }
        for (size_t p = 0; p < kc; ++p) {
            for (size_t i = 0; i < rows; ++i)
                pa[i] = a[(ptrdiff_t)(i0 + i) * rs + (ptrdiff_t)p * cs];
            for (size_t i = rows; i < PM; ++i)
                pa[i] = 0.0f;
            pa += PM;
        }
    }
}

/* Whether columns [j, j + cols) of a `b_rows` operand are a whole panel in one run of b_width (read
   in place). */
static int run_panel(const hg_sgemm_operands *ops, size_t j, size_t cols)
{
    return cols == PN && j % ops->b_width + PN <= ops->b_width;
}

/* One row of a B panel. */
typedef struct {
    float v[PN];
} hg_panel_row;

/* B block (kc x nc), read through strides -> PN-column panels, zero-padded. */
static void pack_b(size_t kc, size_t nc, const float *b, ptrdiff_t rs, ptrdiff_t cs, float *restrict pb)
{
    for (size_t j0 = 0; j0 < nc; j0 += PN) {
        const size_t cols = min_size(PN, nc - j0);
        if (cs == 1 && cols == PN) {
            /* one panel row as one fixed-size object, which compilers copy inline (an element loop
               became a memmove call per row, about 4 % of a ResNet-50's time) */
            for (size_t p = 0; p < kc; ++p) {
                *(hg_panel_row *)pb = *(const hg_panel_row *)(b + (ptrdiff_t)p * rs + (ptrdiff_t)j0);
                pb += PN;
            }
            continue;
        }
        if (cs == 1) {
            /* the last columns of a row (a 14 x 14 or 7 x 7 layer's 4 or 17): one fixed-size loop
               with a condition, which compilers vectorise as masked moves, where a copy of `cols`
               floats becomes a memmove call per row */
            for (size_t p = 0; p < kc; ++p) {
                const float *restrict row = b + (ptrdiff_t)p * rs + (ptrdiff_t)j0;
                for (size_t j = 0; j < PN; ++j)
                    pb[j] = j < cols ? row[j] : 0.0f;
                pb += PN;
            }
            continue;
        }
        /* column after column (B transposed), so each source column streams once */
        for (size_t j = 0; j < cols; ++j) {
            const float *restrict col = b + (ptrdiff_t)(j0 + j) * cs;
            for (size_t p = 0; p < kc; ++p)
                pb[p * PN + j] = col[(ptrdiff_t)p * rs];
        }
        for (size_t p = 0; p < kc; ++p)
            for (size_t j = cols; j < PN; ++j)
                pb[p * PN + j] = 0.0f;
        pb += PN * kc;
    }
}

/* An edge tile: computed whole into a local tile, then the rows x cols that exist are merged. */
static void edge_tile(size_t kc, const float *pa, const float *pb, size_t ldb, float *c, size_t ldc, size_t rows,
                      size_t cols, int add)
{
    _Alignas(64) float tile[PM * PN];
    hg_sgemm_tile_ldb(kc, pa, pb, ldb, tile, PN, 0, rows, cols);
    for (size_t i = 0; i < rows; ++i) {
        float *restrict row = c + i * ldc;
        const float *restrict t = tile + i * PN;
        if (add)
            for (size_t j = 0; j < cols; ++j)
                row[j] += t[j];
        else
            for (size_t j = 0; j < cols; ++j)
                row[j] = t[j];
    }
}

/* Rows [i0, i1) x columns [j0, j1) of C, serially. i0 is a multiple of PM and j0 of PN, so the tiles
   are the very tiles a call over all of C computes, each summed over k in the same order: splitting
   C between threads changes no bit of the result. */
static void sgemm_range(size_t m, size_t i0, size_t i1, size_t j0, size_t j1, size_t k, const hg_sgemm_operands *ops,
                        float *c, size_t ldc, int accumulate, hg_gemm_epilogue_fn epilogue, const void *ctx,
                        void *work)
{
    /* 64-byte aligned packing buffers carved out of the workspace (HG_SGEMM_PACK_BYTES_FOR): none
       for an operand packed at generate time */
    const size_t block_k = block_kc(ops), block_n = block_nc(ops);
    float *pa = align64(work);
    float *pb = ops->a_panels ? pa : align64(pa + (min_size(m, HG_SGEMM_MC) + PM) * min_size(k, block_k));

    /* B read where it lies, no packing, by a product of few rows (a 1x1 convolution's projection:
       its activations are B, rows H x W apart), whose packing its few A panels would not repay:
       measured on Zen 4, 16 x 12544 x 32 from ~175 to ~139 us, 24 x 3136 x 144 ~263 to ~224, 64 x
       196 x 384 ~105 to ~92; with more rows (96 x 12544 x 16) reading packed panels is ~2 % faster. */
    const int in_place = HG_SGEMM_IN_PLACE_M && m <= HG_SGEMM_IN_PLACE_M && ops->b && !ops->b_panels && !ops->pack_b &&
                         ops->b_cs == 1;
    /* The same for B rows at offsets of their own (a convolution's taps in its phase planes,
       `b_rows`): the whole panels that lie in one run (one output row) are read in place, the
       others packed alone. Measured on Zen 4 in the models (fastest of 10 runs):
       ResNet-18's stem (64 x 50176 x 27, 3x3 on 224 x 224) from ~1.92 to ~1.83 ms, DenseNet-121's
       (64 x 6400 x 147, 7x7 stride 2 on 160 x 160) ~1.37 to ~1.19. */
#ifdef HG_SGEMM_TILE_ROWS
    const int by_table = ops->b_rows && ops->pack_b && m <= HG_SGEMM_IN_PLACE_M && m % PM == 0;
#else
    const int by_table = 0;
#endif
    for (size_t jc = j0; jc < j1; jc += block_n) {
        const size_t nc = min_size(block_n, j1 - jc);
        for (size_t pc = 0; pc < k; pc += block_k) {
            const size_t kc = min_size(block_k, k - pc);
            const int add = accumulate || pc > 0;
            const int last = pc + kc == k;
            const float *b_block = pb;
            size_t b_step = kc * PN; /* floats from one B panel to the next */
            size_t ldb = PN;         /* ... and from one row of a panel to the next */
            if (in_place) {
                b_block = ops->b + (ptrdiff_t)pc * ops->b_rs + (ptrdiff_t)jc;
                b_step = PN;
                ldb = (size_t)ops->b_rs;
                if (nc % PN) /* the last panel, narrower, is packed alone (the tiles read 32 columns) */
                    pack_b(kc, nc % PN, b_block + (nc - nc % PN), ops->b_rs, 1, pb);
            } else if (ops->b_panels) {
                b_block = ops->b_panels + (jc / PN) * k * PN + pc * PN;
                b_step = k * PN;
            } else if (by_table) {
                /* only the panels that straddle runs, each alone, in its place among the block's */
                for (size_t jr = 0; jr < nc; jr += PN)
                    if (!run_panel(ops, jc + jr, min_size(PN, nc - jr)))
                        ops->pack_b(ops->b_src, pc, kc, jc + jr, min_size(PN, nc - jr), pb + (jr / PN) * kc * PN);
            } else if (ops->pack_b) {
                ops->pack_b(ops->b_src, pc, kc, jc, nc, pb);
            } else {
                pack_b(kc, nc, ops->b + (ptrdiff_t)pc * ops->b_rs + (ptrdiff_t)jc * ops->b_cs, ops->b_rs,
                       ops->b_cs, pb);
            }
            for (size_t ic = i0; ic < i1; ic += HG_SGEMM_MC) {
                const size_t mc = min_size(HG_SGEMM_MC, i1 - ic);
                const float *a_block = pa;
                size_t a_step = kc * PM;
                if (ops->a_panels) {
                    a_block = ops->a_panels + (ic / PM) * k * PM + pc * PM;
                    a_step = k * PM;
                } else {
                    pack_a(mc, kc, ops->a + (ptrdiff_t)ic * ops->a_rs + (ptrdiff_t)pc * ops->a_cs, ops->a_rs,
                           ops->a_cs, pa);
                }
                /* Tiles column after column (a B panel in L1 for all of the block's A panels), or,
                   where the B block is small enough to stay in L2, row after row: a layer with a
                   short k and a wide C (a 1x1 convolution's expansion at 112 x 112: 96 x 12544 x 16)
                   then writes C along 8 rows at a time instead of all mc (measured on Zen 4: 96 x
                   12544 x 16 from ~550 to ~430 us, 144 x 3136 x 24 ~240 to ~225 us; no shape slower
                   beyond noise). Every tile is the same sum whichever order: no bit changes. */
                const size_t col_steps = (nc + PN - 1) / PN, row_steps = (mc + PM - 1) / PM;
                const int by_rows = HG_SGEMM_ROWS_FIRST && kc * nc <= HG_SGEMM_ROWS_FIRST_FLOATS;
                for (size_t step = 0; step < col_steps * row_steps; ++step) {
                    const size_t jr = (by_rows ? step % col_steps : step / row_steps) * PN;
                    const size_t ir = (by_rows ? step / col_steps : step % row_steps) * PM;
                    const size_t cols = min_size(PN, nc - jr);
                    const float *panel_b = b_block + (jr / PN) * b_step;
                    size_t panel_ld = ldb;
                    if (in_place && cols < PN) { /* the last, narrower panel: packed, as it reads 32 columns */
                        panel_b = pb;
                        panel_ld = PN;
                    }
                    {
                        const size_t rows = min_size(PM, mc - ir);
                        const float *panel_a = a_block + (ir / PM) * a_step;
                        float *tile = c + (ic + ir) * ldc + jc + jr;
#ifdef HG_SGEMM_TILE_ROWS
                        if (by_table && run_panel(ops, jc + jr, cols)) {
                            const size_t j = jc + jr;
                            const float *first = ops->b + (j / ops->b_width) * ops->b_ld + j % ops->b_width;
                            const hg_sgemm_finish *f = last ? ops->finish : NULL;
                            hg_sgemm_tile_rows(kc, panel_a, first, ops->b_rows + pc, tile, ldc, add, f, ic + ir, j);
                            if (last && epilogue && !f)
                                epilogue(tile, ldc, ic + ir, j, rows, cols, ctx);
                            continue;
                        }
#endif
#ifdef HG_SGEMM_TILE_T
                        /* The last columns of a block, where the 8-row kernels' vectors would run
                           partly empty (17 of 24 lanes for a 7 x 7 plane's 49 = 32 + 17), 32 rows
                           at a time with the rows in the lanes (hg_sgemm_tile_t): the tile of the
                           first 8 of them computes all 32, the other three are done. The same
                           bits. Measured on Zen 4 with A's panels given, 512 x 49 x 4608 (a 3 x 3
                           convolution at 7 x 7): from ~93 to ~107 GFLOP/s (best of 30); its 17
                           last columns alone ~71 to ~96. */
                        if (cols % 8 && kc >= HG_SGEMM_TILE_T_MIN_K) {
                            const size_t group = ir - ir % HG_SGEMM_TILE_T_ROWS;
                            if (group + HG_SGEMM_TILE_T_ROWS <= mc) {
                                if (ir != group)
                                    continue;
                                const hg_sgemm_finish *f = last ? ops->finish : NULL;
                                hg_sgemm_tile_t(kc, panel_a, a_step, panel_b, panel_ld, tile, ldc, add, cols, f,
                                                ic + ir, jc + jr);
                                if (last && epilogue && !f)
                                    epilogue(tile, ldc, ic + ir, jc + jr, HG_SGEMM_TILE_T_ROWS, cols, ctx);
                                continue;
                            }
                        }
#endif
                        /* every ISA writes exactly 32 or 16 columns when asked for them, and
                           AVX-512 any number up to 32 */
#ifdef HG_SGEMM_TILE_FINISH
                        /* bias, residual and clamp in registers, on the way to C: no second pass */
                        if (rows == PM && last && ops->finish) {
                            hg_sgemm_tile_finish(kc, panel_a, panel_b, panel_ld, tile, ldc, add, cols, ops->finish, ic + ir,
                                                 jc + jr);
                            continue;
                        }
#endif
#ifdef HG_SGEMM_TILE_ANY_COLS
                        if (rows == PM)
#else
                        if (rows == PM && (cols == PN || cols == PN / 2))
#endif
                            hg_sgemm_tile_ldb(kc, panel_a, panel_b, panel_ld, tile, ldc, add, PM, cols);
                        else
                            edge_tile(kc, panel_a, panel_b, panel_ld, tile, ldc, rows, cols, add);
                        /* the tile is finished and still in L1: bias and activations now */
                        if (last && epilogue)
                            epilogue(tile, ldc, ic + ir, jc + jr, rows, cols, ctx);
                    }
                }
            }
        }
    }
}

/* One thread's share of a split GEMM: a run of whole A panels (rows) or B panels (columns). */
typedef struct {
    size_t m, n, k, panels, parts;
    int split_rows;
    const hg_sgemm_operands *ops;
    float *c;
    size_t ldc;
    int accumulate;
    hg_gemm_epilogue_fn epilogue;
    const void *ctx;
    void *work;
} sgemm_job;

static void sgemm_part(void *arg, size_t part, void *scratch)
{
    const sgemm_job *job = arg;
    const size_t first = part * job->panels / job->parts, end = (part + 1) * job->panels / job->parts;
    void *work = scratch ? scratch : job->work;
    if (job->split_rows)
        sgemm_range(job->m, first * PM, min_size(end * PM, job->m), 0, job->n, job->k, job->ops, job->c, job->ldc,
                    job->accumulate, job->epilogue, job->ctx, work);
    else
        sgemm_range(job->m, 0, job->m, first * PN, min_size(end * PN, job->n), job->k, job->ops, job->c, job->ldc,
                    job->accumulate, job->epilogue, job->ctx, work);
}

/* One thread's share of a small-m GEMM: a run of whole 32-column blocks. */
static void sgemm_small_part(void *arg, size_t part, void *scratch)
{
    const sgemm_job *job = arg;
    const size_t first = part * job->panels / job->parts, end = (part + 1) * job->panels / job->parts;
    hg_sgemm_small(job->m, first * PN, min_size(end * PN, job->n), job->k, job->ops, job->c, job->ldc, job->accumulate,
                   job->epilogue, job->ctx, align64(scratch ? scratch : job->work));
}

/* Below HG_SGEMM_SPLIT_MACS multiply-adds (hg_constants.h), waking a worker costs more than it saves. */
void hg_sgemm_ex(size_t m, size_t n, size_t k, const hg_sgemm_operands *ops, float *c, size_t ldc,
                 int accumulate, hg_gemm_epilogue_fn epilogue, const void *ctx, void *work)
{
    if (m == 0 || n == 0)
        return;
    if (k == 0) {
        for (size_t i = 0; i < m && !accumulate; ++i)
            for (size_t j = 0; j < n; ++j)
                c[i * ldc + j] = 0.0f;
        if (epilogue)
            epilogue(c, ldc, 0, 0, m, n, ctx);
        return;
    }
    const size_t threads = (double)m * n * k < HG_SGEMM_SPLIT_MACS ? 1 : hg_threads_count();
    if (hg_sgemm_small_fits(m, ops)) {
        const size_t blocks = (n + PN - 1) / PN;
        if (threads == 1 || blocks < threads) {
            hg_sgemm_small(m, 0, n, k, ops, c, ldc, accumulate, epilogue, ctx, align64(work));
            return;
        }
        sgemm_job job = {
            .m = m, .n = n, .k = k, .panels = blocks, .parts = threads, .ops = ops, .c = c, .ldc = ldc,
            .accumulate = accumulate, .epilogue = epilogue, .ctx = ctx, .work = work,
        };
        hg_parallel_for(threads, sgemm_small_part, &job);
        return;
    }
    const size_t row_panels = (m + PM - 1) / PM, col_panels = (n + PN - 1) / PN;
    /* Each thread reads the whole of the operand that is not split: split columns and every thread
       reads all of A (and packs it, unless it came packed), split rows and every thread reads all
       of B. Split the side that makes that repeated work smaller (packing counted as three reads):
       columns for a convolution (A the packed weights, B its im2col), rows for a tall product of
       activations by packed weights. */
    const size_t repeat_by_cols = m * (ops->a_panels ? 1u : 3u);
    const size_t repeat_by_rows = n * (ops->b_panels ? 1u : 3u);
    const int split_rows = col_panels < threads || (row_panels >= threads && repeat_by_rows < repeat_by_cols);
    const size_t panels = split_rows ? row_panels : col_panels;
    if (threads == 1 || panels < threads) {
        sgemm_range(m, 0, m, 0, n, k, ops, c, ldc, accumulate, epilogue, ctx, work);
        return;
    }
    /* More parts than threads where each stays large beside the operand it reads again (at least
       HG_SGEMM_PART_MIN rows or columns per read, a pack three): the threads claim parts one at a
       time, so one the OS runs late (a busy machine) leaves its share to the others instead of the
       caller waiting for its one half. A whole number of parts per thread, so that on an idle
       machine each thread still takes an equal share. */
    const size_t reads = split_rows ? (ops->b_panels ? 1u : 3u) : (ops->a_panels ? 1u : 3u);
    size_t per_thread = (split_rows ? m : n) / (HG_SGEMM_PART_MIN * reads * threads);
    per_thread = per_thread < 1 ? 1 : per_thread > HG_SGEMM_PARTS_PER_THREAD ? HG_SGEMM_PARTS_PER_THREAD : per_thread;
    const size_t parts = panels < per_thread * threads ? panels : per_thread * threads;
    sgemm_job job = {
        .m = m, .n = n, .k = k, .panels = panels, .parts = parts, .split_rows = split_rows, .ops = ops,
        .c = c, .ldc = ldc, .accumulate = accumulate, .epilogue = epilogue, .ctx = ctx, .work = work,
    };
    hg_parallel_for(parts, sgemm_part, &job);
}

void hg_sgemm(size_t m, size_t n, size_t k, const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs, const float *b,
              ptrdiff_t b_rs, ptrdiff_t b_cs, float *c, size_t ldc, int accumulate, hg_gemm_epilogue_fn epilogue,
              const void *ctx, void *pack)
{
    const hg_sgemm_operands ops = {
        .a = a, .a_rs = a_rs, .a_cs = a_cs, .b = b, .b_rs = b_rs, .b_cs = b_cs,
    };
    hg_sgemm_ex(m, n, k, &ops, c, ldc, accumulate, epilogue, ctx, pack);
}
