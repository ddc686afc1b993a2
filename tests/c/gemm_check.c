/* Checks hg_sgemm_ex (templates/runtime/hg_gemm.c) on one shape against a reference computed by
   the test in numpy, for every way an operand can reach it: strided, transposed, packed at
   generate time (panels written by hetgen/ops/_gemm_plan.py) and packed by a caller's function.

   usage: gemm_check M N K DIR   (DIR holds a.bin [M x K], b.bin [K x N], a_panels.bin,
   b_panels.bin and c.bin [M x N], float32). Prints the micro-kernel's ISA and, per mode, the
   largest error relative to the largest |C|, and how many of the three clamps hg_sgemm_finish
   (bias, residual, clamp in the micro-kernel) gave other bits than the C epilogue; exits 1 when an
   error exceeds 1e-5 or a clamp differs. */
#include <stdio.h>
#include <stdlib.h>

#include "hg_kernels.h"
#include "hg_sgemm_tile.h"

static float *read_floats(const char *dir, const char *name, size_t count)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    float *data = malloc(count * sizeof *data + 1);
    FILE *file = fopen(path, "rb");
    if (!data || !file || fread(data, sizeof *data, count, file) != count) {
        fprintf(stderr, "cannot read %zu floats from %s\n", count, path);
        exit(2);
    }
    fclose(file);
    return data;
}

/* a caller's packing function, as a convolution's implicit im2col: here B read row-major */
typedef struct {
    const float *b;
    size_t n;
} row_major;

static void pack_rows(const void *src, size_t p0, size_t kc, size_t j0, size_t nc, float *panels)
{
    const row_major *b = src;
    for (size_t j = 0; j < (nc + HG_SGEMM_PANEL_N - 1) / HG_SGEMM_PANEL_N * HG_SGEMM_PANEL_N; ++j)
        for (size_t p = 0; p < kc; ++p)
            panels[j / HG_SGEMM_PANEL_N * kc * HG_SGEMM_PANEL_N + p * HG_SGEMM_PANEL_N + j % HG_SGEMM_PANEL_N] =
                j < nc ? b->b[(p0 + p) * b->n + j0 + j] : 0.0f;
}

/* adds 1 to every element: checks the epilogue sees every element of C exactly once */
static void plus_one(float *c, size_t ldc, size_t row0, size_t col0, size_t rows, size_t cols, const void *ctx)
{
    HG_UNUSED(row0);
    HG_UNUSED(col0);
    HG_UNUSED(ctx);
    for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < cols; ++j)
            c[i * ldc + j] += 1.0f;
}

/* the C epilogue of a convolution with bias, residual and Relu or Clip, as templates/kernels/_conv_gemm.j2
   writes it: what hg_sgemm_finish must reproduce bit for bit where the micro-kernel applies it */
static void finish_in_c(float *c, size_t ldc, size_t row0, size_t col0, size_t rows, size_t cols, const void *ctx)
{
    const hg_sgemm_finish *f = ctx;
    for (size_t i = 0; i < rows; ++i) {
        for (size_t j = 0; j < cols; ++j) {
            float v = c[i * ldc + j] + f->bias[row0 + i] + f->residual[(row0 + i) * ldc + col0 + j];
            if (f->clamp == HG_SGEMM_CLAMP_RELU)
                v = (v > 0.0f ? v : 0.0f);
            else if (f->clamp == HG_SGEMM_CLAMP_CLIP)
                v = ((v < f->lo ? f->lo : v) > f->hi ? f->hi : (v < f->lo ? f->lo : v));
            c[i * ldc + j] = v;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s M N K DIR\n", argv[0]);
        return 2;
    }
    const size_t m = strtoul(argv[1], NULL, 10), n = strtoul(argv[2], NULL, 10), k = strtoul(argv[3], NULL, 10);
    const char *dir = argv[4];
    const size_t pm = (m + HG_SGEMM_PANEL_M - 1) / HG_SGEMM_PANEL_M * HG_SGEMM_PANEL_M;
    const size_t pn = (n + HG_SGEMM_PANEL_N - 1) / HG_SGEMM_PANEL_N * HG_SGEMM_PANEL_N;
    float *a = read_floats(dir, "a.bin", m * k), *b = read_floats(dir, "b.bin", k * n);
    float *a_panels = read_floats(dir, "a_panels.bin", pm * k), *b_panels = read_floats(dir, "b_panels.bin", k * pn);
    float *want = read_floats(dir, "c.bin", m * n);
    float *at = malloc(m * k * sizeof *at + 1), *bt = malloc(k * n * sizeof *bt + 1);
    for (size_t i = 0; i < m; ++i)
        for (size_t p = 0; p < k; ++p)
            at[p * m + i] = a[i * k + p];
    for (size_t p = 0; p < k; ++p)
        for (size_t j = 0; j < n; ++j)
            bt[j * k + p] = b[p * n + j];
    /* C with a wider row stride than n, to catch a kernel writing past its tile */
    const size_t ldc = n + 3;
    float *c = malloc(m * ldc * sizeof *c + 1);
    void *work = malloc(HG_SGEMM_PACK_BYTES(m, n, k));
    /* a bias per row and a residual as C, scaled to put values on both sides of the clamps */
    float *bias = malloc(m * sizeof *bias + 1), *residual = malloc(m * ldc * sizeof *residual + 1);
    float *ref = malloc(m * ldc * sizeof *ref + 1);
    for (size_t i = 0; i < m; ++i)
        bias[i] = 0.25f * (float)((int)(i % 7) - 3);
    for (size_t i = 0; i < m * ldc; ++i)
        residual[i] = 0.125f * (float)((int)(i % 11) - 5);
    const row_major rows = {b, n};
    const hg_sgemm_operands modes[] = {
        {.a = a, .a_rs = (ptrdiff_t)k, .a_cs = 1, .b = b, .b_rs = (ptrdiff_t)n, .b_cs = 1},
        {.a = at, .a_rs = 1, .a_cs = (ptrdiff_t)m, .b = bt, .b_rs = 1, .b_cs = (ptrdiff_t)k},
        {.a_panels = a_panels, .b = b, .b_rs = (ptrdiff_t)n, .b_cs = 1},
        {.a = a, .a_rs = (ptrdiff_t)k, .a_cs = 1, .b_panels = b_panels},
        {.a_panels = a_panels, .b_panels = b_panels},
        {.a_panels = a_panels, .pack_b = pack_rows, .b_src = &rows},
    };
    const char *names[] = {"strided", "transposed", "a_panels", "b_panels", "both_panels", "pack_b"};
    printf("isa %s\n", HG_SGEMM_ISA);
    int failed = 0;
    for (size_t mode = 0; mode < sizeof modes / sizeof modes[0]; ++mode) {
        for (int accumulate = 0; accumulate < 2; ++accumulate) {
            for (size_t i = 0; i < m * ldc; ++i)
                c[i] = accumulate ? 2.0f : -7.0f; /* the padding columns must keep -7 / 2 */
            hg_sgemm_ex(m, n, k, &modes[mode], c, ldc, accumulate, plus_one, NULL, work);
            float scale = 1.0f, worst = 0.0f;
            for (size_t i = 0; i < m * n; ++i)
                scale = fabsf(want[i]) > scale ? fabsf(want[i]) : scale;
            for (size_t i = 0; i < m; ++i) {
                for (size_t j = 0; j < ldc; ++j) {
                    const float expected = j < n ? want[i * n + j] + 1.0f + (accumulate ? 2.0f : 0.0f)
                                                 : (accumulate ? 2.0f : -7.0f);
                    const float error = fabsf(c[i * ldc + j] - expected) / scale;
                    worst = error > worst ? error : worst;
                }
            }
            printf("%s%s %.3g\n", names[mode], accumulate ? "+=" : "", (double)worst);
            failed |= !(worst <= 1e-5f);
        }
        /* bias, residual and each clamp applied by the micro-kernel (where it can) and by the C
           epilogue: the same bits, k split in blocks or not, padding columns untouched */
        size_t differ = 0;
        for (int clamp = HG_SGEMM_CLAMP_NONE; clamp <= HG_SGEMM_CLAMP_CLIP; ++clamp) {
            const hg_sgemm_finish finish = {.bias = bias, .residual = residual, .clamp = clamp, .lo = -0.5f, .hi = 0.75f};
            hg_sgemm_operands with = modes[mode];
            with.finish = &finish;
            for (size_t i = 0; i < m * ldc; ++i)
                c[i] = ref[i] = -7.0f;
            hg_sgemm_ex(m, n, k, &modes[mode], ref, ldc, 0, finish_in_c, &finish, work);
            hg_sgemm_ex(m, n, k, &with, c, ldc, 0, finish_in_c, &finish, work);
            differ += (size_t)(memcmp(c, ref, m * ldc * sizeof *c) != 0);
        }
        printf("%s finish %zu\n", names[mode], differ);
        failed |= differ != 0;
    }
    free(a), free(b), free(a_panels), free(b_panels), free(want), free(at), free(bt), free(c), free(work), free(bias), free(residual), free(ref);
    return failed;
}
