/* hg_quant.h on a bare-metal Cortex-M (tests/test_int8_mcu.py): the integer GEMM (SMLAD where the
 * core has the DSP extension, Helium's VMLADAVA on the M55) and the in-place dot products against
 * plain reference loops, and the rounding rules. The exit
 * status goes to the host through Arm semihosting: 0 = all agree. */
#include <stddef.h>
#include <stdint.h>

#include "hg_quant.h"

enum { M = 3, N = 5, K = 37 };
static int16_t a[M * K], bt[N * K];
static int32_t c[M * N];

static int run(void)
{
    for (int i = 0; i < M * K; ++i)
        a[i] = (int16_t)((i * 73) % 511 - 255);
    for (int i = 0; i < N * K; ++i)
        bt[i] = (int16_t)((i * 31) % 511 - 255);
    hg_igemm_s16(M, N, K, a, bt, c, N);
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            int32_t sum = 0;
            for (int p = 0; p < K; ++p)
                sum += (int32_t)a[i * K + p] * (int32_t)bt[j * K + p];
            if (c[i * N + j] != sum)
                return 1;
        }
    /* the in-place dot products: int8 and uint8 weight rows against int16 columns in the order
       hg_q15_reorder leaves them, two rows by two columns and two rows by one, K with a tail */
    static int16_t x0[K], x1[K];
    static int8_t ws[2 * K];
    static uint8_t wu[2 * K];
    for (int p = 0; p < K; ++p) {
        x0[p] = (int16_t)((p * 89) % 511 - 255);
        x1[p] = (int16_t)((p * 57) % 509 - 254);
    }
    for (int p = 0; p < 2 * K; ++p) {
        ws[p] = (int8_t)((p * 37) % 256 - 128);
        wu[p] = (uint8_t)((p * 53) % 256);
    }
    int32_t want[8] = { 0 }, want_sum = 0;
    for (int p = 0; p < K; ++p) {
        want_sum += x0[p];
        want[0] += ws[p] * x0[p];
        want[1] += ws[p] * x1[p];
        want[2] += ws[K + p] * x0[p];
        want[3] += ws[K + p] * x1[p];
        want[4] += wu[p] * x0[p];
        want[5] += wu[p] * x1[p];
        want[6] += wu[K + p] * x0[p];
        want[7] += wu[K + p] * x1[p];
    }
    hg_q15_reorder(x0, K);
    hg_q15_reorder(x1, K);
    int32_t got[4], one[2];
    hg_qdot_s8_2x2(ws, ws + K, x0, x1, K, got);
    if (got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3])
        return 4;
    hg_qdot_s8_2x1(ws, ws + K, x1, K, one);
    if (one[0] != want[1] || one[1] != want[3])
        return 5;
    hg_qdot_u8_2x2(wu, wu + K, x0, x1, K, got);
    if (got[0] != want[4] || got[1] != want[5] || got[2] != want[6] || got[3] != want[7])
        return 6;
    hg_qdot_u8_2x1(wu, wu + K, x0, K, one);
    if (one[0] != want[4] || one[1] != want[6] || hg_q15_sum(x0, K) != want_sum)
        return 7;
    /* a fully connected layer's rows against an int8 / uint8 vector read in place, less its zero
       point (hg_qvec_*), every pairing of types, K with a tail */
    static int8_t xs[K];
    static uint8_t xu[K];
    for (int p = 0; p < K; ++p) {
        xs[p] = (int8_t)((p * 71) % 256 - 128);
        xu[p] = (uint8_t)((p * 97) % 256);
    }
    const int32_t zs = -128, zu = 131;
    int32_t vec[8] = { 0 };
    for (int p = 0; p < K; ++p) {
        vec[0] += ws[p] * (xs[p] - zs);
        vec[1] += ws[K + p] * (xs[p] - zs);
        vec[2] += wu[p] * (xs[p] - zs);
        vec[3] += wu[K + p] * (xs[p] - zs);
        vec[4] += ws[p] * (xu[p] - zu);
        vec[5] += ws[K + p] * (xu[p] - zu);
        vec[6] += wu[p] * (xu[p] - zu);
        vec[7] += wu[K + p] * (xu[p] - zu);
    }
    hg_qvec_s8_s8_2x1(ws, ws + K, xs, K, zs, one);
    if (one[0] != vec[0] || one[1] != vec[1])
        return 8;
    hg_qvec_u8_s8_2x1(wu, wu + K, xs, K, zs, one);
    if (one[0] != vec[2] || one[1] != vec[3])
        return 9;
    hg_qvec_s8_u8_2x1(ws, ws + K, xu, K, zu, one);
    if (one[0] != vec[4] || one[1] != vec[5])
        return 10;
    hg_qvec_u8_u8_2x1(wu, wu + K, xu, K, zu, one);
    if (one[0] != vec[6] || one[1] != vec[7])
        return 11;
    if (hg_quantize_scaled(2.5f, 0, -128, 127) != 2 || hg_quantize_scaled(3.5f, 0, -128, 127) != 4)
        return 2; /* ties to even */
    if (hg_quantize_scaled(-2.5f, 10, 0, 255) != 8 || hg_quantize_scaled(1e9f, 0, -128, 127) != 127)
        return 3; /* zero point, saturation */
    return 0;
}

static void semihosting_exit(int code)
{
    uint32_t block[2] = { 0x20026u, (uint32_t)code }; /* ADP_Stopped_ApplicationExit, status */
    register uint32_t op __asm__("r0") = 0x20u;       /* SYS_EXIT */
    register uint32_t *arg __asm__("r1") = block;
    __asm__ volatile("bkpt 0xab" : : "r"(op), "r"(arg) : "memory");
}

void reset_handler(void)
{
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    /* the FPU (and Helium) is off at reset: CPACR's CP10 and CP11 full access */
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    semihosting_exit(run());
    for (;;) {
    }
}

extern uint32_t stack_top;
__attribute__((section(".vectors"), used)) const void *const vectors[2] = { &stack_top, (const void *)reset_handler };

void *memcpy(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    while (n--)
        *d++ = *s++;
    return dst;
}
