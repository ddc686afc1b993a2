/* hetgen bare-metal transport backend (see hg_uart.h): the CMSDK UART, polled; SysTick time; and
 * what hg_auth.c takes from the OS on a hosted server (random numbers, the key file), through
 * semihosting. */
#include <errno.h>
#include <string.h>  /* before hg_uart.h, whose macros stand in for its strerror (and stdio's) */

#include "hg_uart.h"

#include "hg_auth.h"
#include "hg_board.h"

#define UART_DATA 0x00u
#define UART_STATE 0x04u
#define UART_CTRL 0x08u
#define UART_BAUDDIV 0x10u
#define UART_STATE_TX_FULL 0x1u
#define UART_STATE_RX_FULL 0x2u
#define UART_CTRL_TX_RX 0x3u

static volatile uint32_t *uart;
static uint32_t ticks_per_ms = 1;
static uint64_t clock_hz = 1;
static int emulated;

static volatile uint32_t *reg(uint32_t offset)
{
    return uart + offset / 4u;
}

void hg_uart_init(uintptr_t base, uint32_t divider, uint32_t clock)
{
    uart = (volatile uint32_t *)base;
    *reg(UART_CTRL) = 0;
    *reg(UART_BAUDDIV) = divider < 16u ? 16u : divider;
    *reg(UART_CTRL) = UART_CTRL_TX_RX;
    clock_hz = clock != 0 ? clock : 1u;
    ticks_per_ms = clock / 1000u != 0 ? clock / 1000u : 1u;
    hg_board_ticks_start();
}

int64_t hg_uart_now_ms(void)
{
    return (int64_t)(hg_board_ticks() / ticks_per_ms);
}

uint64_t hg_uart_now_ns(void)
{
    const uint64_t ticks = hg_board_ticks();
    return ticks / clock_hz * 1000000000u + ticks % clock_hz * 1000000000u / clock_hz;
}

int hg_uart_readable(void)
{
    return (*reg(UART_STATE) & UART_STATE_RX_FULL) != 0;
}

int hg_uart_read_byte(int64_t deadline_ms)
{
    while (!hg_uart_readable()) {
        if (deadline_ms >= 0 && hg_uart_now_ms() >= deadline_ms) {
            return -1;
        }
    }
    return (int)(*reg(UART_DATA) & 0xffu);
}

int hg_uart_write_byte(unsigned char byte, int64_t deadline_ms)
{
    while ((*reg(UART_STATE) & UART_STATE_TX_FULL) != 0) {
        if (deadline_ms >= 0 && hg_uart_now_ms() >= deadline_ms) {
            return -1;
        }
    }
    *reg(UART_DATA) = byte;
    return 0;
}

int hg_uart_emulated(void)
{
    return emulated;
}

void hg_uart_set_emulated(int value)
{
    emulated = value;
}

/* ---- formatting ---- */

typedef struct {
    char *out;
    size_t size;
    size_t length; /* as vsnprintf counts: what would have been written */
} sink;

static void put(sink *s, char c)
{
    if (s->length + 1 < s->size) {
        s->out[s->length] = c;
    }
    s->length += 1;
}

static void put_number(sink *s, unsigned long long value, unsigned base, int negative, int width, char pad)
{
    static const char digits[] = "0123456789abcdef";
    char text[24];
    int count = 0;
    do {
        text[count++] = digits[value % base];
        value /= base;
    } while (value != 0);
    if (negative) {
        text[count++] = '-';
    }
    for (int i = count; i < width; ++i) {
        put(s, pad);
    }
    while (count > 0) {
        put(s, text[--count]);
    }
}

int hg_vsnprintf(char *out, size_t size, const char *format, va_list args)
{
    sink s = { out, size, 0 };
    for (const char *p = format; *p != '\0'; ++p) {
        if (*p != '%') {
            put(&s, *p);
            continue;
        }
        ++p;
        char pad = ' ';
        int width = 0;
        int precision = -1;
        int longs = 0;
        int size_t_arg = 0;
        if (*p == '0') {
            pad = '0';
            ++p;
        }
        while (*p >= '0' && *p <= '9') {
            width = width * 10 + (*p++ - '0');
        }
        if (*p == '.' && p[1] == '*') {
            precision = va_arg(args, int);
            p += 2;
        }
        for (; *p == 'l'; ++p) {
            longs += 1;
        }
        if (*p == 'z') {
            size_t_arg = 1;
            ++p;
        }
        switch (*p) {
        case 'd': {
            const long long value = longs >= 2 ? va_arg(args, long long) : longs ? va_arg(args, long) : va_arg(args, int);
            put_number(&s, value < 0 ? 0ull - (unsigned long long)value : (unsigned long long)value, 10, value < 0, width,
                       pad);
            break;
        }
        case 'u':
        case 'x': {
            const unsigned long long value = size_t_arg ? va_arg(args, size_t)
                                             : longs >= 2 ? va_arg(args, unsigned long long)
                                             : longs      ? va_arg(args, unsigned long)
                                                          : va_arg(args, unsigned);
            put_number(&s, value, *p == 'x' ? 16u : 10u, 0, width, pad);
            break;
        }
        case 'c':
            put(&s, (char)va_arg(args, int));
            break;
        case 's': {
            const char *text = va_arg(args, const char *);
            for (int i = 0; text[i] != '\0' && (precision < 0 || i < precision); ++i) {
                put(&s, text[i]);
            }
            break;
        }
        case '%':
            put(&s, '%');
            break;
        default: /* not one of ours: shown as it is */
            put(&s, '%');
            if (*p == '\0') {
                --p;
            } else {
                put(&s, *p);
            }
            break;
        }
    }
    if (size > 0) {
        out[s.length < size ? s.length : size - 1] = '\0';
    }
    return (int)s.length;
}

int hg_snprintf(char *out, size_t size, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    const int length = hg_vsnprintf(out, size, format, args);
    va_end(args);
    return length;
}

void hg_uart_log(const char *format, ...)
{
    char text[400];
    va_list args;
    va_start(args, format);
    (void)hg_vsnprintf(text, sizeof text, format, args);
    va_end(args);
    hg_board_error(text);
}

const char *hg_uart_strerror(int code)
{
    return code == EIO ? "input/output error (semihosting)" : "error";
}

/* ---- what hg_auth.c asks of the OS on a hosted server ---- */

/* Fresh nonces: on the emulator, the host's /dev/urandom through semihosting; a board without a
 * debugger reads its true random number generator here instead. */
int hg_random_bytes(void *buffer, size_t bytes)
{
    const int handle = hg_semihost_open("/dev/urandom", HG_SEMIHOST_READ_BINARY);
    if (handle < 0) {
        errno = EIO;
        return -1;
    }
    const int status = hg_semihost_read(handle, buffer, bytes);
    (void)hg_semihost_close(handle);
    if (status != 0) {
        errno = EIO;
    }
    return status;
}

const char *hg_key_path(const char *option)
{
    return option != NULL && option[0] != '\0' ? option : NULL;
}

/* The key file, read through semihosting at start (semihosting has no stat: the host that starts
 * the emulator checks the file's mode; hetgen verify --emulate does). */
int hg_key_load(hg_key *key, const char *path, char *error, size_t error_size)
{
    memset(key, 0, sizeof *key);
    const int handle = hg_semihost_open(path, HG_SEMIHOST_READ_BINARY);
    if (handle < 0) {
        hg_snprintf(error, error_size, "cannot open the transport key %s through semihosting", path);
        return -1;
    }
    const long length = hg_semihost_length(handle);
    int status = -1;
    if (length < (long)HG_KEY_MIN || length > (long)HG_KEY_MAX) {
        hg_snprintf(error, error_size, "the transport key %s holds %ld bytes; a key has %u to %u", path, length,
                    HG_KEY_MIN, HG_KEY_MAX);
    } else if (hg_semihost_read(handle, key->bytes, (size_t)length) != 0) {
        hg_snprintf(error, error_size, "cannot read the transport key %s", path);
    } else {
        key->length = (size_t)length;
        status = 0;
    }
    (void)hg_semihost_close(handle);
    if (status != 0) {
        hg_wipe(key, sizeof *key);
    }
    return status;
}
