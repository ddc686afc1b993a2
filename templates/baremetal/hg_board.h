/* hetgen bare-metal board support for Arm Cortex-M: startup, semihosting, a tick counter and the
 * stack's high-water mark. No heap, no OS, no other SDK: with the linker script hetgen writes, this
 * file and hg_board.c are all a generated model needs to run on the board (or under
 * qemu-system-arm with -semihosting-config enable=on).
 *
 * Semihosting (Arm's "Semihosting for AArch32 and AArch64", operations called with `bkpt 0xab` on
 * M-profile cores) reaches the debugger's host: files, the console and the exit status. On a board
 * without a debugger attached, a semihosting call stops the core; programs that must run
 * stand-alone use the model's C API (hg_<name>.h) and leave these out.
 */
#ifndef HG_BOARD_H
#define HG_BOARD_H

#include <stddef.h>
#include <stdint.h>

/* Open modes of SYS_OPEN, as fopen spells them. */
#define HG_SEMIHOST_READ_BINARY 1   /* "rb" */
#define HG_SEMIHOST_WRITE_BINARY 5  /* "wb" */

/* Open `path` (a host path, relative to the debugger's or emulator's folder); -1 on failure. */
int hg_semihost_open(const char *path, int mode);
int hg_semihost_close(int handle);
/* The file's length in bytes, or -1. */
long hg_semihost_length(int handle);
/* Read or write all `bytes`; 0 on success, -1 when fewer moved. */
int hg_semihost_read(int handle, void *buffer, size_t bytes);
int hg_semihost_write(int handle, const void *buffer, size_t bytes);
/* Write a NUL-terminated message to the host's stdout or stderr. */
void hg_board_print(const char *text);
void hg_board_error(const char *text);
/* The command line the host passed (qemu: -semihosting-config arg=...), NUL-terminated in
 * `buffer`; 0 on success, -1 when there is none or it does not fit. */
int hg_semihost_command_line(char *buffer, size_t size);
/* Stop with exit status `code` (the emulator exits with it). */
void hg_board_exit(int code) __attribute__((noreturn));

/* Ticks of SysTick at the core clock since hg_board_ticks_start() (24-bit counter, wraps counted). */
void hg_board_ticks_start(void);
uint64_t hg_board_ticks(void);
/* The most stack any code used since reset, in bytes (the stack is painted at reset). */
size_t hg_board_stack_used(void);
size_t hg_board_stack_size(void);

/* `value` as decimal digits in `buffer` (at least 21 bytes); returns buffer. */
char *hg_board_decimal(uint64_t value, char *buffer);

#endif /* HG_BOARD_H */
