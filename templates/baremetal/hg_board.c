/* hetgen bare-metal board support for Arm Cortex-M (see hg_board.h): the vector table, the reset
 * handler (.data copied from flash, .bss zeroed, the FPU enabled, the stack painted), a fault handler
 * that reports and exits, SysTick as a tick counter, and semihosting calls. */
#include <stdint.h>
#include <string.h>

#include "hg_board.h"

/* From the linker script hetgen writes (link.ld). */
extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _sstack[], _estack[];

int main(void);

/* Semihosting operation numbers (Arm semihosting specification). */
enum {
    SYS_OPEN = 0x01,
    SYS_CLOSE = 0x02,
    SYS_WRITE = 0x05,
    SYS_READ = 0x06,
    SYS_FLEN = 0x0C,
    SYS_GET_CMDLINE = 0x15,
    SYS_EXIT = 0x18,
    SYS_EXIT_EXTENDED = 0x20,
};
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u
#define STACK_PAINT 0xC0FFEE5Au

static int semihost_call(int operation, void *argument)
{
    register int r0 __asm__("r0") = operation;
    register void *r1 __asm__("r1") = argument;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

int hg_semihost_open(const char *path, int mode)
{
    uintptr_t block[3] = { (uintptr_t)path, (uintptr_t)mode, (uintptr_t)strlen(path) };
    return semihost_call(SYS_OPEN, block);
}

int hg_semihost_close(int handle)
{
    uintptr_t block[1] = { (uintptr_t)handle };
    return semihost_call(SYS_CLOSE, block);
}

long hg_semihost_length(int handle)
{
    uintptr_t block[1] = { (uintptr_t)handle };
    return semihost_call(SYS_FLEN, block);
}

/* SYS_READ and SYS_WRITE return the number of bytes NOT transferred. */
int hg_semihost_read(int handle, void *buffer, size_t bytes)
{
    uintptr_t block[3] = { (uintptr_t)handle, (uintptr_t)buffer, (uintptr_t)bytes };
    return semihost_call(SYS_READ, block) == 0 ? 0 : -1;
}

int hg_semihost_write(int handle, const void *buffer, size_t bytes)
{
    uintptr_t block[3] = { (uintptr_t)handle, (uintptr_t)buffer, (uintptr_t)bytes };
    return semihost_call(SYS_WRITE, block) == 0 ? 0 : -1;
}

/* ":tt" is the host's console: opened for writing ("w", 4) it is stdout, for appending ("a", 8) stderr. */
static void console(const char *text, int mode)
{
    static int handles[2] = { -1, -1 };
    int *handle = &handles[mode == 8];
    if (*handle < 0) {
        *handle = hg_semihost_open(":tt", mode);
    }
    if (*handle >= 0) {
        (void)hg_semihost_write(*handle, text, strlen(text));
    }
}

void hg_board_print(const char *text)
{
    console(text, 4);
}

void hg_board_error(const char *text)
{
    console(text, 8);
}

int hg_semihost_command_line(char *buffer, size_t size)
{
    uintptr_t block[2] = { (uintptr_t)buffer, (uintptr_t)(size - 1) };
    if (size < 2 || semihost_call(SYS_GET_CMDLINE, block) != 0 || block[1] >= size) {
        return -1;
    }
    buffer[block[1]] = '\0';
    return 0;
}

void hg_board_exit(int code)
{
    uintptr_t block[2] = { ADP_STOPPED_APPLICATION_EXIT, (uintptr_t)code };
    (void)semihost_call(SYS_EXIT_EXTENDED, block);
    /* A host without SYS_EXIT_EXTENDED: the plain exit reports success or failure only. */
    (void)semihost_call(SYS_EXIT, (void *)(uintptr_t)(code == 0 ? ADP_STOPPED_APPLICATION_EXIT : 0x20023u));
    for (;;) {
        __asm__ volatile("wfi");
    }
}

char *hg_board_decimal(uint64_t value, char *buffer)
{
    char digits[21];
    size_t count = 0;
    do {
        digits[count++] = (char)('0' + value % 10u);
        value /= 10u;
    } while (value != 0);
    for (size_t i = 0; i < count; ++i) {
        buffer[i] = digits[count - 1 - i];
    }
    buffer[count] = '\0';
    return buffer;
}

/* SysTick (Armv7-M/Armv8-M system timer): a 24-bit down-counter at the core clock. */
#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define SYST_RELOAD 0x00FFFFFFu
static volatile uint32_t systick_wraps;

void SysTick_Handler(void)
{
    systick_wraps = systick_wraps + 1u;
}

void hg_board_ticks_start(void)
{
    SYST_CSR = 0;
    SYST_RVR = SYST_RELOAD;
    SYST_CVR = 0;
    systick_wraps = 0;
    SYST_CSR = 0x7u; /* enable, interrupt on wrap, core clock */
}

uint64_t hg_board_ticks(void)
{
    uint32_t wraps, count;
    do { /* re-read if the counter wrapped between the two reads */
        wraps = systick_wraps;
        count = SYST_CVR;
    } while (wraps != systick_wraps);
    return (uint64_t)wraps * (SYST_RELOAD + 1u) + (SYST_RELOAD - count);
}

size_t hg_board_stack_size(void)
{
    return (size_t)((uintptr_t)_estack - (uintptr_t)_sstack);
}

size_t hg_board_stack_used(void)
{
    const uint32_t *word = _sstack;
    while (word < _estack && *word == STACK_PAINT) {
        ++word;
    }
    return (size_t)((uintptr_t)_estack - (uintptr_t)word);
}

void Reset_Handler(void) __attribute__((noreturn));
void Reset_Handler(void)
{
    for (uint32_t *src = _sidata, *dst = _sdata; dst < _edata;) {
        *dst++ = *src++;
    }
    for (uint32_t *dst = _sbss; dst < _ebss;) {
        *dst++ = 0;
    }
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    /* CPACR: full access to coprocessors 10 and 11 (the FPU, and Helium's registers) */
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    uint32_t *here;
    __asm__ volatile("mov %0, sp" : "=r"(here));
    for (uint32_t *word = _sstack; word < here - 64; ++word) { /* paint below this frame */
        *word = STACK_PAINT;
    }
    hg_board_exit(main());
}

static void Fault_Handler(void)
{
    hg_board_error("hg_board: the core took a fault (hard fault, memory, bus or usage fault)\n");
    hg_board_exit(70);
}

static void Default_Handler(void)
{
    hg_board_error("hg_board: an unexpected interrupt\n");
    hg_board_exit(71);
}

typedef void (*hg_vector)(void);

/* The vector table at the start of flash: the initial stack pointer, then the handlers. */
__attribute__((section(".vectors"), used)) static const hg_vector hg_vectors[16] = {
    (hg_vector)(uintptr_t)_estack,
    Reset_Handler,
    Default_Handler, /* NMI */
    Fault_Handler,   /* HardFault */
    Fault_Handler,   /* MemManage */
    Fault_Handler,   /* BusFault */
    Fault_Handler,   /* UsageFault */
    0, 0, 0, 0,
    Default_Handler, /* SVCall */
    Default_Handler, /* DebugMonitor */
    0,
    Default_Handler, /* PendSV */
    SysTick_Handler,
};
