/* hetgen bare-metal transport backend: the device server's byte stream is the board's UART (an Arm
 * CMSDK APB UART, as on the MPS2 and MPS3 boards), polled, with SysTick for the per-frame deadlines.
 * No heap, no OS: what the hosted server gets from POSIX (a clock, random numbers, the key file,
 * stderr, snprintf) comes from here, through semihosting where a host is needed (hg_board.h).
 *
 * hg_transport.c, hg_auth.c and hg_server.c are compiled for the board with HG_TRANSPORT_UART set
 * (hg_transport_uart.c, hg_auth_uart.c, hg_server_uart.c include them), which selects this backend
 * in place of file descriptors. See docs/transport.md ("A bare-metal co-processor").
 *
 * CMSDK APB UART registers (Arm Cortex-M System Design Kit Technical Reference Manual, DDI 0479,
 * "APB UART"): DATA at +0x00, STATE at +0x04 (bit 0 TX buffer full, bit 1 RX buffer full), CTRL at
 * +0x08 (bit 0 TX enable, bit 1 RX enable), BAUDDIV at +0x10 (at least 16: baud = PCLK / BAUDDIV).
 */
#ifndef HG_UART_H
#define HG_UART_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "hg_server.h"

/* Start the UART at `base` (BAUDDIV `divider`, at least 16) and the tick counter at `clock_hz`. */
void hg_uart_init(uintptr_t base, uint32_t divider, uint32_t clock_hz);
/* One byte from the UART, or -1 when `deadline_ms` (hg_uart_now_ms's clock; -1: never) passes first. */
int hg_uart_read_byte(int64_t deadline_ms);
/* Whether a byte waits to be read. */
int hg_uart_readable(void);
/* Send one byte; -1 when the transmitter stays full past `deadline_ms`. */
int hg_uart_write_byte(unsigned char byte, int64_t deadline_ms);
/* Milliseconds and nanoseconds since hg_uart_init, from SysTick at the core clock. */
int64_t hg_uart_now_ms(void);
uint64_t hg_uart_now_ns(void);

/* The bare-metal server (hg_server.c built with HG_TRANSPORT_UART; hg_server.h's types): it serves
 * session after session on the UART, for ever. A line has no end-of-stream, so a new peer's hello
 * ends the session before it (and is then authenticated like any other); after a refused handshake
 * what the peer still sends is drained until the line is quiet. Without a heap, the request buffer
 * is lent: `buffer` of `buffer_size` bytes, at least the device's memory_size + 16 (the largest
 * request, a copy_in of the whole memory). */
void hg_serve_forever(hg_channel *channel, const hg_served_device *device, const hg_key *key, unsigned char *buffer,
                      uint64_t buffer_size) __attribute__((noreturn));

/* Whether the server was started with --emulated (it then refuses to time its programs). */
int hg_uart_emulated(void);
void hg_uart_set_emulated(int emulated);

/* The semihosting host's stderr (hg_board_error), formatted. */
void hg_uart_log(const char *format, ...);

/* A small vsnprintf without newlib's stdio (which would need the OS calls a bare-metal image lacks):
 * %d %u %x %c %s %% with the 0 flag, a width, .* for strings, and the l, ll and z length modifiers.
 * Not declared printf-like: the hosted sources it serves pass uint32_t to %u, which is right where
 * they are checked (on Linux, unsigned int) and, on arm-none-eabi, an unsigned long of the same
 * size and calling convention, which gcc's format check would flag. */
int hg_vsnprintf(char *out, size_t size, const char *format, va_list args);
int hg_snprintf(char *out, size_t size, const char *format, ...);

/* The reason of an error code, without newlib's table (which its OS-less build links oddly). */
const char *hg_uart_strerror(int code);

#define snprintf hg_snprintf
#define strerror hg_uart_strerror
#define vsnprintf hg_vsnprintf

#endif /* HG_UART_H */
