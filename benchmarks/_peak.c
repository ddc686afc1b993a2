/* One core's float32 multiply-add peak: 12 independent chains of vector FMAs (enough to cover the
   FMA latency on two pipes), in the widest vector the compiler targets with -march=native. */
#if defined(__AVX512F__)
#define HG_PEAK_BYTES 64
#elif defined(__AVX__)
#define HG_PEAK_BYTES 32
#else
#define HG_PEAK_BYTES 16
#endif
typedef float hg_vec __attribute__((vector_size(HG_PEAK_BYTES)));
#define LANES (HG_PEAK_BYTES / 4)

double hg_peak_fma(long iterations);

double hg_peak_fma(long iterations)
{
    hg_vec b = {0}, c = {0};
    for (int i = 0; i < LANES; ++i) {
        b[i] = 0.999999f;
        c[i] = 1e-7f;
    }
    hg_vec a0 = b, a1 = b * 2, a2 = b * 3, a3 = b * 4, a4 = b * 5, a5 = b * 6;
    hg_vec a6 = b * 7, a7 = b * 8, a8 = b * 9, a9 = b * 10, a10 = b * 11, a11 = b * 12;
    for (long n = 0; n < iterations; ++n) {
        a0 = a0 * b + c; a1 = a1 * b + c; a2 = a2 * b + c; a3 = a3 * b + c;
        a4 = a4 * b + c; a5 = a5 * b + c; a6 = a6 * b + c; a7 = a7 * b + c;
        a8 = a8 * b + c; a9 = a9 * b + c; a10 = a10 * b + c; a11 = a11 * b + c;
#if defined(__x86_64__)
        __asm__ volatile("" : "+v"(b)); /* b unknown each iteration: the loop cannot be folded */
#elif defined(__aarch64__)
        __asm__ volatile("" : "+w"(b));
#endif
    }
    hg_vec sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    volatile float keep = sum[0];
    (void)keep;
    return 2.0 * 12.0 * LANES * (double)iterations;
}
