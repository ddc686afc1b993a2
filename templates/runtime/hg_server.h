/* hetgen device server: serves one device over the byte-stream transport (hg_transport.h), the
 * other end of hg_remote.h. A co-processor's board program is a generated main around hg_server_main.
 *
 * Every request is checked against the device's memory before memory is touched: offset + size
 * within the device memory, a known program index, a payload that matches its declared size. A bad
 * request gets a refusal (status and reason) and the session goes on; a broken frame (magic, CRC,
 * length, truncation, a frame not whole by its deadline) or another protocol version ends the
 * session with a message on stderr.
 *
 * A session starts with the authenticated handshake of hg_auth.h: until the peer has proved that it
 * holds the transport key, and named this device and this build's plan hash, it may send only a
 * hello and an auth, each small and whole within the timeout; anything else gets one refusal (an
 * error frame) and the connection is closed. The device's whole state block (its memory) is zeroed
 * when a session opens and when it ends, so no session reads another's data.
 */
/* Timing on the target (HG_MSG_TIME, `hetgen tune --on`): the server runs one of its programs
 * `repeats` times (1..HG_TIME_MAX_REPEATS) with invoke and wait, each timed with its own clock
 * (clock_gettime(CLOCK_MONOTONIC): the server is a hosted program), and replies with the format
 * HG_TIME_FORMAT, the clock HG_CLOCK_MONOTONIC and the nanoseconds of each run. A server started with
 * HG_EMULATED set in its environment (`hetgen verify --emulate` sets it for every server it runs
 * under qemu) refuses: emulated time is not the board's. A long request holds only its own session
 * (each connection is a process of its own). */
#ifndef HG_SERVER_H
#define HG_SERVER_H

#include <stdint.h>

#include "hg_auth.h"
#include "hg_device.h"
#include "hg_transport.h"

#define HG_TIME_MAX_REPEATS 256u
#define HG_TIME_FORMAT 1u
#define HG_CLOCK_MONOTONIC 1u

typedef struct {
    const char *name;              /* the served device's path, for messages */
    const char *device_name;       /* the name its controller gives it, which a hello must name */
    struct hg_device (*bind)(void *state);  /* the device on a state block (NULL: init only) */
    void (*reset)(void *state);    /* the start of a run */
    void *state;                   /* the device's state block, owned by the server */
    uint64_t state_size;           /* zeroed when a session opens and ends */
    uint64_t memory_size;          /* the device memory a peer may read and write */
    uint32_t num_programs;
    unsigned char plan_hash[HG_PLAN_HASH_SIZE];  /* the generated project both programs come from */
} hg_served_device;

/* How a session ended (hg_serve's result, and a session process's exit status). */
enum hg_session_end {
    HG_SESSION_CLEAN = 0,            /* authenticated, and the peer closed the stream */
    HG_SESSION_BROKEN = 1,           /* authenticated, then a broken frame or a failed write */
    HG_SESSION_UNAUTHENTICATED = 3   /* refused before the handshake completed */
};

/* Serve requests on `channel` until the peer closes it (the reason of any other end on stderr). */
enum hg_session_end hg_serve(hg_channel *channel, const hg_served_device *device, const hg_key *key);

/* The server program: pipe mode on stdin/stdout by default; `--listen ADDR:PORT` serves TCP
 * (loopback unless ADDR names another interface, which needs --allow-remote; port 0 picks a free
 * one, printed as "listening on HOST:PORT"), each connection in a process of its own (at most
 * `--max-sessions N` at once), `--once` ends after the first authenticated session; `--key FILE`
 * (or HG_TRANSPORT_KEY) names the key; `--timeout-ms N` is the per-frame deadline (default
 * HG_TRANSPORT_TIMEOUT_MS). */
int hg_server_main(int argc, char **argv, const hg_served_device *device);

#endif /* HG_SERVER_H */
