/* hg_quant.h on a bare-metal Cortex-M (tests/test_int8_mcu.py): the integer GEMM (SMLAD where the
 * core has the DSP extension) against a plain reference loop, and the rounding rules. The exit
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
