/* hetgen remote device: an hg_device whose five calls are requests over a byte-stream transport
 * (hg_transport.h) to a device server in another process or on another machine.
 *
 * Where each device is served comes from the root program's `--device NAME=ENDPOINT` option
 * (hg_remote_options) or else the environment variable HG_DEVICE_<NAME> (NAME upper-cased, every
 * other character '_'); ENDPOINT is exec:COMMAND or tcp:HOST:PORT. The connection opens on the
 * first call with the authenticated handshake of hg_auth.h on the key file `--key FILE` (or
 * HG_TRANSPORT_KEY) names: both sides prove they hold the key, and the hello checks the protocol
 * version, the device's name and that the server was built from this program's generated project
 * (the plan hash). With HG_TRANSPORT_STATS=FILE, each device's traffic is appended
 * to FILE as one JSON line when the program exits.
 *
 * The connections are process state: a board program drives its remote devices from one thread.
 * A failure is reported once on stderr (which device, what happened) and returned as an error
 * code; the device then stays failed, so later calls fail at once instead of waiting again.
 */
#ifndef HG_REMOTE_H
#define HG_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "hg_auth.h"
#include "hg_device.h"
#include "hg_transport.h"

typedef struct {
    const char *name;         /* the device's name under its controller, e.g. "vdevice0" */
    const char *env_name;     /* "HG_DEVICE_VDEVICE0" */
    uint64_t memory_size;     /* the device memory the generated program expects the server to have */
    uint32_t num_programs;
    unsigned char plan_hash[HG_PLAN_HASH_SIZE];  /* the generated project both programs come from */
    /* Mutable, process-wide: the endpoint chosen and the connection. */
    const char *endpoint;
    hg_channel channel;
    int state;                /* 0 not connected, 1 connected, -1 failed */
    uint32_t sequence;
    uint64_t runs;
} hg_remote;

extern const hg_device_ops hg_remote_ops;

/* The device `remote` as its controller sees it, for one run's state block (unused: the state lives
 * in the server's process). */
struct hg_device hg_remote_device(hg_remote *remote, void *state);

/* The start of a run: the server empties its queues and zeroes its counters. A failure here is
 * returned by the run's next call. */
void hg_remote_reset(hg_remote *remote);

/* The remote devices of this program (defined by the generated remote_devices.c). */
extern hg_remote *const hg_remote_devices[];
extern const size_t hg_remote_num_devices;

/* Take `--device NAME=ENDPOINT` and `--key FILE` options out of argv (argc updated); 0, or -1 after
 * a message on stderr for an unknown device name or a malformed option. */
int hg_remote_options(int *argc, char **argv);

/* Close every connection (servers started by exec: exit) and write the traffic counters. */
void hg_remote_close_all(void);

#endif /* HG_REMOTE_H */
