/* hetgen byte-stream transport: framed, versioned messages between a controller and a device
 * served by another process (a pipe pair to a child process, possibly under an emulator) or another
 * machine (TCP).
 *
 * A frame is a 20-byte little-endian header followed by `length` payload bytes (and, once the
 * channel is sealed, a 32-byte tag: hg_channel_seal):
 *
 *     offset  size  field
 *          0     4  magic        "HGTP" (0x50544748)
 *          4     2  version      HG_TRANSPORT_VERSION
 *          6     2  type         enum hg_message_type (a reply sets HG_MSG_REPLY)
 *          8     4  sequence     a request's number; its reply carries the same one
 *         12     4  length       payload bytes (at most HG_TRANSPORT_MAX_PAYLOAD)
 *         16     4  crc          CRC-32 (IEEE) of header bytes 0..15, then of the payload
 *
 * Deadlines are per frame, not per read: a frame must arrive (or leave) whole within the channel's
 * timeout (HG_TRANSPORT_TIMEOUT_MS, default 30000 ms) however it trickles, so a dead, silent or
 * slow peer is an error code, never a hang. Errors are HG_TRANSPORT_* codes; the last one's text is
 * in channel->error.
 */
#ifndef HG_TRANSPORT_H
#define HG_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "hg_auth.h"

#define HG_TRANSPORT_MAGIC 0x50544748u
#define HG_TRANSPORT_VERSION 2u  /* 2: the authenticated handshake (hg_auth.h) */
#define HG_TRANSPORT_HEADER_SIZE 20u
#define HG_TRANSPORT_MAX_PAYLOAD (256u * 1024u * 1024u)
#define HG_TRANSPORT_DEFAULT_TIMEOUT_MS 30000
/* Before a session is authenticated a peer may send only small frames (a hello, an auth). */
#define HG_HANDSHAKE_MAX_PAYLOAD 256u
#define HG_DEVICE_NAME_MAX 64u

enum hg_message_type {
    HG_MSG_HELLO = 1,     /* u32 version, client nonce, plan hash, then the device name the client expects */
    HG_MSG_ALLOC = 2,     /* u64 bytes */
    HG_MSG_COPY_IN = 3,   /* u64 offset, u64 bytes, then the bytes */
    HG_MSG_COPY_OUT = 4,  /* u64 offset, u64 bytes; the reply carries the bytes after its status */
    HG_MSG_INVOKE = 5,    /* u32 program */
    HG_MSG_WAIT = 6,      /* empty */
    HG_MSG_RESET = 7,     /* empty: the start of a run (empty queues, zero counters) */
    HG_MSG_AUTH = 8,      /* the client's proof (hg_auth.h); the reply opens the session */
    HG_MSG_TIME = 9,      /* u32 program, u32 repeats: the server times the program with its own clock
                             (hg_server.h); the reply: u32 format, u32 clock, u32 count, count u64 ns */
    HG_MSG_ERROR = 0x7f,  /* i32 code, then a message: the peer refused a frame and ends the session */
    HG_MSG_REPLY = 0x80   /* set on a reply: payload i32 status, then the call's results */
};

/* Return codes of the transport functions (negative; 0 is success). */
#define HG_TRANSPORT_OK 0
#define HG_TRANSPORT_CLOSED (-10)    /* the peer closed the stream (or died) */
#define HG_TRANSPORT_TIMEOUT (-11)   /* nothing arrived within the timeout */
#define HG_TRANSPORT_IO (-12)        /* a read or write failed */
#define HG_TRANSPORT_FRAME (-13)     /* a broken frame: bad magic, CRC, length or a truncated one */
#define HG_TRANSPORT_VERSION_MISMATCH (-14)
#define HG_TRANSPORT_PROTOCOL (-15)  /* a well-formed frame that makes no sense here */
#define HG_TRANSPORT_CONNECT (-16)   /* the endpoint could not be started or reached */

/* What crossed one channel, in both directions, headers included. */
typedef struct {
    uint64_t bytes_sent;
    uint64_t bytes_received;
    uint64_t messages_sent;
    uint64_t messages_received;
} hg_transport_stats;

typedef struct {
    int read_fd;
    int write_fd;
    int is_socket;
    int child_pid;              /* the server started by exec:, or 0 */
    int timeout_ms;             /* per frame; < 0 waits forever */
    int64_t deadline_ms;        /* when the frame being read must be whole (CLOCK_MONOTONIC), or -1 */
    int frame_budget_ms;        /* the time that frame was given, for messages */
    /* Sealed once the handshake is done: every frame but an error then carries a tag (below). */
    int sealed;
    unsigned char seal_key[HG_SHA256_SIZE];
    unsigned char send_direction;     /* 'C' for frames the client sends, 'S' for the server's */
    uint64_t frames_sent;             /* sealed frames, each direction counted from 0 */
    uint64_t frames_received;
    hg_transport_stats stats;
    char error[256];
} hg_channel;

typedef struct {
    uint16_t version;
    uint16_t type;
    uint32_t sequence;
    uint32_t length;
    uint32_t crc;          /* as the header says */
    uint32_t header_crc;   /* the CRC over the header's first 16 bytes, continued over the payload */
    unsigned char bytes[HG_TRANSPORT_HEADER_SIZE];  /* as it arrived, for a sealed frame's tag */
} hg_frame_header;

uint32_t hg_crc32_update(uint32_t crc, const void *data, size_t bytes);
uint32_t hg_crc32(const void *data, size_t bytes);

/* The per-frame timeout from HG_TRANSPORT_TIMEOUT_MS, or the default. */
int hg_transport_timeout_from_env(void);

void hg_channel_init(hg_channel *channel, int read_fd, int write_fd, int is_socket, int timeout_ms);

/* Open a channel to `spec`: "exec:COMMAND" (COMMAND run by /bin/sh with the channel on its
 * stdin/stdout, e.g. "exec:qemu-riscv64 -L /usr/riscv64-linux-gnu ./server") or "tcp:HOST:PORT". */
int hg_channel_open(hg_channel *channel, const char *spec, int timeout_ms);

/* Close both ends; a child started by exec: is given the timeout to exit, then killed. */
void hg_channel_close(hg_channel *channel);

/* After a refusal on a socket: stop sending, and read and drop what the peer still sends (at most
 * `ms` and 1 MiB) until it closes. Closing a socket with unread bytes resets the connection, and a
 * reset can discard the refusal before the peer reads it. */
void hg_channel_linger(hg_channel *channel, int ms);

/* Close a channel whose peer failed: a child started by exec: (and all it started) is killed at once. */
void hg_channel_kill(hg_channel *channel);

/* Send one frame (header, then `payload` of `length` bytes, then `extra` of `extra_length`: a
 * copy's data follows its arguments without being copied into one buffer). */
int hg_send_frame(hg_channel *channel, uint16_t type, uint32_t sequence, const void *payload, uint32_t length,
                  const void *extra, uint32_t extra_length);

/* From now on, seal the channel with the session key: every frame sent or read (but an error
 * frame, which only ends a session) is followed by a 32-byte tag, HMAC(key, direction | u64 frame
 * number | header | payload), so a frame altered, injected, replayed or reordered on the way is a
 * broken frame. `is_server` says which direction this end sends. */
void hg_channel_seal(hg_channel *channel, const unsigned char key[HG_SHA256_SIZE], int is_server);

/* Read one header. With `wait_ms` >= 0 the whole frame (header and payload) must arrive within
 * `wait_ms` from now; with `wait_ms` < 0 the first byte is waited for as long as it takes and the
 * whole frame must then arrive within the channel's timeout. Checks the magic and the length bound;
 * the version is returned for the caller to judge. */
int hg_read_header(hg_channel *channel, hg_frame_header *header, int wait_ms);

/* Read the frame's payload, its first `head_length` bytes into `head` and the rest into `tail`
 * (a copy's data lands where it belongs), by the deadline hg_read_header set, and check the CRC
 * over header and payload. */
int hg_read_payload(hg_channel *channel, const hg_frame_header *header, void *head, uint32_t head_length, void *tail);

/* Listen on "ADDR:PORT" (ADDR may be empty for loopback, PORT 0 for any free one); the bound port is
 * stored in *port. An address other than loopback is refused unless `allow_remote`, and then
 * *is_remote is set (the caller warns). */
int hg_listen(const char *address, int allow_remote, int *listen_fd, int *port, int *is_remote, char *error,
              size_t error_size);

/* `text` (`bytes` of it, from a peer) as printable ASCII: other bytes, and '\\', as \xNN, so that
 * no escape sequence reaches a terminal; cut to `out_size` with "..." where it does not fit. */
void hg_escape_text(const void *text, size_t bytes, char *out, size_t out_size);

/* Little-endian field access, the same on every host. */
static inline void hg_put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static inline void hg_put_u64(unsigned char *p, uint64_t v)
{
    hg_put_u32(p, (uint32_t)v);
    hg_put_u32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t hg_get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t hg_get_u64(const unsigned char *p)
{
    return (uint64_t)hg_get_u32(p) | (uint64_t)hg_get_u32(p + 4) << 32;
}

#endif /* HG_TRANSPORT_H */
