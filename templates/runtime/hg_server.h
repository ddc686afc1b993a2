/* hetgen device server: serves one device over the byte-stream transport (hg_transport.h), the
 * other end of hg_remote.h. A co-processor's board program is a generated main around hg_server_main.
 *
 * Every request is checked against the device's memory before memory is touched: offset + size
 * within the device memory, a known program index, a payload that matches its declared size. A bad
 * request gets a refusal (status and reason) and the session goes on; a broken frame (magic, CRC,
 * length, truncation) or another protocol version ends the session with a message on stderr.
 */
#ifndef HG_SERVER_H
#define HG_SERVER_H

#include <stdint.h>

#include "hg_device.h"
#include "hg_transport.h"

typedef struct {
    const char *name;              /* the served device's path, for messages */
    struct hg_device (*bind)(void *state);  /* the device on a state block (NULL: init only) */
    void (*reset)(void *state);    /* the start of a run */
    void *state;                   /* the device's state block, owned by the server */
    uint64_t memory_size;          /* the device memory a peer may read and write */
    uint32_t num_programs;
} hg_served_device;

/* Serve requests on `channel` until the peer closes it: 0 after a clean close, 1 after a broken
 * session (the reason on stderr). */
int hg_serve(hg_channel *channel, const hg_served_device *device);

/* The server program: pipe mode on stdin/stdout by default; `--listen ADDR:PORT` serves TCP
 * connections one after another (loopback unless ADDR names another interface; port 0 picks a free
 * one, printed as "listening on HOST:PORT"), `--once` ends after the first connection; `--timeout-ms
 * N` bounds every read once a request has started (default HG_TRANSPORT_TIMEOUT_MS). */
int hg_server_main(int argc, char **argv, const hg_served_device *device);

#endif /* HG_SERVER_H */
