/* hg_auth.c built for a bare-metal device server: the byte stream is the board's UART (hg_uart.h). */
#define HG_TRANSPORT_UART 1
#include "hg_auth.c"
