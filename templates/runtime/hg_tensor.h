/* Helpers for hetgen's elementwise and data-movement kernels: the integer and float cases whose
   plain C spelling would be undefined behaviour, with numpy's (and ONNX's reference) results.
   Header-only, static inline: each generated kernel inlines what it uses. */
#ifndef HG_TENSOR_H
#define HG_TENSOR_H

#include <math.h>
#include <stdint.h>

/* Float to integer as x86 converts (and numpy therefore does): truncation toward zero; NaN and
   out-of-range values give the type's minimum instead of undefined behaviour. Narrower integer
   types go through int32 and wrap. */
static inline int32_t hg_f2i32(double x)
{
    return (x > -2147483649.0 && x < 2147483648.0) ? (int32_t)x : INT32_MIN;
}

static inline int64_t hg_f2i64(double x)
{
    return (x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? (int64_t)x : INT64_MIN;
}

/* Integer Div truncates toward zero (C, ONNX); Mod with fmod=0 takes the divisor's sign (Python),
   with fmod=1 the dividend's (C). A zero divisor gives 0 (numpy) and INT_MIN / -1 wraps. */
#define HG_SIGNED_DIVMOD(T, UT, S)                                                                 \
    static inline T hg_div_##S(T a, T b)                                                           \
    {                                                                                              \
        return b == 0 ? (T)0 : b == -1 ? (T)(0u - (UT)a) : (T)(a / b);                             \
    }                                                                                              \
    static inline T hg_fmod_##S(T a, T b)                                                          \
    {                                                                                              \
        return (b == 0 || b == -1) ? (T)0 : (T)(a % b);                                            \
    }                                                                                              \
    static inline T hg_mod_##S(T a, T b)                                                           \
    {                                                                                              \
        const T r = hg_fmod_##S(a, b);                                                             \
        return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;                                  \
    }                                                                                              \
    static inline T hg_pow_##S(T a, T b)                                                           \
    {                                                                                              \
        if (b < 0)                                                                                 \
            return a == 1 ? (T)1 : a == -1 ? ((b % 2) ? (T)-1 : (T)1) : (T)0;                      \
        UT result = 1u, base = (UT)a;                                                              \
        while (b) {                                                                                \
            if (b % 2)                                                                             \
                result = (UT)(result * base);                                                      \
            base = (UT)(base * base);                                                              \
            b = (T)(b / 2);                                                                        \
        }                                                                                          \
        return (T)result;                                                                          \
    }

HG_SIGNED_DIVMOD(int8_t, uint8_t, i8)
HG_SIGNED_DIVMOD(int32_t, uint32_t, i32)
HG_SIGNED_DIVMOD(int64_t, uint64_t, i64)
HG_SIGNED_DIVMOD(int16_t, uint32_t, i16) /* uint32_t: 16-bit products would overflow int */

/* Unsigned Div and Mod: a zero divisor gives 0 (numpy); Pow wraps. WT holds a product without
   promotion to int. */
#define HG_UNSIGNED_DIVMOD(T, WT, S)                                                               \
    static inline T hg_div_##S(T a, T b)                                                           \
    {                                                                                              \
        return b == 0 ? (T)0 : (T)(a / b);                                                         \
    }                                                                                              \
    static inline T hg_mod_##S(T a, T b)                                                           \
    {                                                                                              \
        return b == 0 ? (T)0 : (T)(a % b);                                                         \
    }                                                                                              \
    static inline T hg_fmod_##S(T a, T b)                                                          \
    {                                                                                              \
        return hg_mod_##S(a, b);                                                                   \
    }                                                                                              \
    static inline T hg_pow_##S(T a, T b)                                                           \
    {                                                                                              \
        WT result = 1u, base = a;                                                                  \
        while (b) {                                                                                \
            if (b & 1u)                                                                            \
                result = (T)(result * base);                                                       \
            base = (T)(base * base);                                                               \
            b = (T)(b >> 1);                                                                       \
        }                                                                                          \
        return (T)result;                                                                          \
    }

HG_UNSIGNED_DIVMOD(uint16_t, uint32_t, u16)
HG_UNSIGNED_DIVMOD(uint32_t, uint32_t, u32)
HG_UNSIGNED_DIVMOD(uint64_t, uint64_t, u64)

static inline uint8_t hg_div_u8(uint8_t a, uint8_t b)
{
    return b == 0 ? (uint8_t)0 : (uint8_t)(a / b);
}

static inline uint8_t hg_mod_u8(uint8_t a, uint8_t b)
{
    return b == 0 ? (uint8_t)0 : (uint8_t)(a % b);
}

static inline uint8_t hg_fmod_u8(uint8_t a, uint8_t b)
{
    return hg_mod_u8(a, b);
}

static inline uint8_t hg_pow_u8(uint8_t a, uint8_t b)
{
    unsigned result = 1u, base = a;
    while (b) {
        if (b & 1u)
            result = (result * base) & 0xffu;
        base = (base * base) & 0xffu;
        b = (uint8_t)(b >> 1);
    }
    return (uint8_t)result;
}

/* Float Mod with fmod=0: the result takes the divisor's sign (numpy.mod). */
static inline float hg_mod_f32(float a, float b)
{
    float r = fmodf(a, b);
    if (r != 0.0f) {
        if ((r < 0.0f) != (b < 0.0f))
            r += b;
    } else {
        r = copysignf(0.0f, b);
    }
    return r;
}

static inline double hg_mod_f64(double a, double b)
{
    double r = fmod(a, b);
    if (r != 0.0) {
        if ((r < 0.0) != (b < 0.0))
            r += b;
    } else {
        r = copysign(0.0, b);
    }
    return r;
}

#endif /* HG_TENSOR_H */
