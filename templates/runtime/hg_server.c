/* hetgen device server. See hg_server.h. */
#define _POSIX_C_SOURCE 200809L
#include "hg_server.h"

#include <errno.h>
#include <string.h>

#include "hg_runtime.h"

#if defined(HG_TRANSPORT_UART)
/* A bare-metal server: the board's UART, SysTick and semihosting (hg_uart.h); no OS, no heap. */
#include "hg_uart.h"
#define server_log hg_uart_log
#else
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define server_log(...) fprintf(stderr, __VA_ARGS__)
#endif

#define DEFAULT_MAX_SESSIONS 8

typedef struct {
    hg_channel *channel;
    const hg_served_device *device;
    const hg_key *key;
    unsigned char *buffer;   /* one request's payload, or one copy_out's data */
    uint64_t buffer_size;
    int authenticated;
    /* A UART does not close: a new peer's hello read inside a session ends it and opens the next. */
    int has_hello;
    int expect_hello;  /* the handshake's first frame */
    unsigned char *lent;  /* a bare-metal server's request buffer (hg_serve_forever) */
    uint64_t lent_size;
    hg_frame_header hello_header;
    unsigned char hello[HG_HANDSHAKE_MAX_PAYLOAD];
} session;

static int reply(session *s, const hg_frame_header *request, int32_t status, const void *data, uint32_t length)
{
    unsigned char head[4];
    hg_put_u32(head, (uint32_t)status);
    return hg_send_frame(s->channel, (uint16_t)(request->type | HG_MSG_REPLY), request->sequence, head, 4, data,
                         length);
}

/* A refusal: the status and its reason, and the session goes on. */
static int refuse(session *s, const hg_frame_header *request, int32_t status, const char *reason)
{
    server_log("hg_server %s: refused request #%u: %s\n", s->device->name, request->sequence, reason);
    return reply(s, request, status, reason, (uint32_t)strlen(reason));
}

/* Whether [offset, offset + bytes) lies inside the device memory (without overflow). */
static int inside(const session *s, uint64_t offset, uint64_t bytes)
{
    return offset <= s->device->memory_size && bytes <= s->device->memory_size - offset;
}

/* Test builds only (-DHG_TIME_TEST_DELAY_NS=N): each timed run also sleeps N ns, so that a test can
 * tell the server's clock from the host's. 0 in every generated build. */
#ifndef HG_TIME_TEST_DELAY_NS
#define HG_TIME_TEST_DELAY_NS 0
#endif

static uint64_t monotonic_ns(void)
{
#if defined(HG_TRANSPORT_UART)
    return hg_uart_now_ns();  /* SysTick at the core clock */
#else
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
#endif
}

/* HG_MSG_TIME (hg_server.h): `repeats` runs of `program`, each timed with invoke and wait. */
static int time_program(session *s, const hg_frame_header *request, struct hg_device *bound, uint32_t program,
                        uint32_t repeats)
{
    unsigned char out[12 + 8 * HG_TIME_MAX_REPEATS];
    for (uint32_t r = 0; r < repeats; ++r) {
        s->device->reset(s->device->state); /* each run starts as a root's run does, untimed */
        const uint64_t start = monotonic_ns();
        int status = bound->ops->invoke(bound, program);
        if (status == HG_OK) {
            status = bound->ops->wait(bound);
        }
#if HG_TIME_TEST_DELAY_NS > 0
        const struct timespec delay = { 0, HG_TIME_TEST_DELAY_NS };
        nanosleep(&delay, NULL);
#endif
        const uint64_t end = monotonic_ns();
        if (status != HG_OK) {
            char reason[80];
            snprintf(reason, sizeof reason, "program %u failed with status %d", program, status);
            return refuse(s, request, status, reason);
        }
        hg_put_u64(out + 12 + 8 * r, end - start);
    }
    hg_put_u32(out, HG_TIME_FORMAT);
    hg_put_u32(out + 4, HG_CLOCK_MONOTONIC);
    hg_put_u32(out + 8, repeats);
    return reply(s, request, HG_OK, out, 12 + 8 * repeats);
}

static int handle(session *s, const hg_frame_header *request, const unsigned char *payload)
{
    const hg_served_device *device = s->device;
    struct hg_device bound = device->bind(device->state);
    char reason[200];
    const uint32_t length = request->length;
    switch (request->type) {
    case HG_MSG_ALLOC: {
        if (length != 8) {
            return refuse(s, request, HG_ERR_ARGUMENT, "alloc takes 8 bytes of arguments");
        }
        const uint64_t bytes = hg_get_u64(payload);
        if (bytes > device->memory_size) {
            snprintf(reason, sizeof reason, "alloc of %llu bytes exceeds the device's %llu", (unsigned long long)bytes,
                     (unsigned long long)device->memory_size);
            return refuse(s, request, HG_ERR_CAPACITY, reason);
        }
        struct hg_device init = device->bind(NULL);
        return reply(s, request, init.ops->alloc(&init, bytes), NULL, 0);
    }
    case HG_MSG_COPY_IN:
    case HG_MSG_COPY_OUT: {
        const int is_in = request->type == HG_MSG_COPY_IN;
        if (length < 16) {
            return refuse(s, request, HG_ERR_ARGUMENT, "a copy takes 16 bytes of arguments");
        }
        const uint64_t offset = hg_get_u64(payload);
        const uint64_t bytes = hg_get_u64(payload + 8);
        if (!inside(s, offset, bytes)) {
            snprintf(reason, sizeof reason, "%s of %llu bytes at offset %llu lies outside the device's %llu-byte memory",
                     is_in ? "copy_in" : "copy_out", (unsigned long long)bytes, (unsigned long long)offset,
                     (unsigned long long)device->memory_size);
            return refuse(s, request, HG_ERR_CAPACITY, reason);
        }
        if (is_in) {
            if (length - 16u != bytes) {
                snprintf(reason, sizeof reason, "copy_in declares %llu bytes but carries %u",
                         (unsigned long long)bytes, length - 16u);
                return refuse(s, request, HG_ERR_ARGUMENT, reason);
            }
            return reply(s, request, bound.ops->copy_in(&bound, offset, payload + 16, bytes), NULL, 0);
        }
        if (length != 16) {
            return refuse(s, request, HG_ERR_ARGUMENT, "copy_out takes 16 bytes of arguments");
        }
        const int status = bound.ops->copy_out(&bound, s->buffer, offset, bytes);
        return reply(s, request, status, s->buffer, status == HG_OK ? (uint32_t)bytes : 0u);
    }
    case HG_MSG_INVOKE: {
        if (length != 4) {
            return refuse(s, request, HG_ERR_ARGUMENT, "invoke takes 4 bytes of arguments");
        }
        const uint32_t program = hg_get_u32(payload);
        if (program >= device->num_programs) {
            snprintf(reason, sizeof reason, "invoke of program %u; the device has %u", program, device->num_programs);
            return refuse(s, request, HG_ERR_ARGUMENT, reason);
        }
        return reply(s, request, bound.ops->invoke(&bound, program), NULL, 0);
    }
    case HG_MSG_WAIT:
        if (length != 0) {
            return refuse(s, request, HG_ERR_ARGUMENT, "wait takes no arguments");
        }
        return reply(s, request, bound.ops->wait(&bound), NULL, 0);
    case HG_MSG_TIME: {
        if (length != 8) {
            return refuse(s, request, HG_ERR_ARGUMENT, "time takes 8 bytes of arguments");
        }
        const uint32_t program = hg_get_u32(payload);
        const uint32_t repeats = hg_get_u32(payload + 4);
        if (program >= device->num_programs) {
            snprintf(reason, sizeof reason, "time of program %u; the device has %u", program, device->num_programs);
            return refuse(s, request, HG_ERR_ARGUMENT, reason);
        }
        if (repeats == 0 || repeats > HG_TIME_MAX_REPEATS) {
            snprintf(reason, sizeof reason, "time of %u runs; from 1 to %u", repeats, HG_TIME_MAX_REPEATS);
            return refuse(s, request, HG_ERR_ARGUMENT, reason);
        }
#if defined(HG_TRANSPORT_UART)
        if (hg_uart_emulated()) {  /* started with --emulated */
#else
        const char *emulated = getenv("HG_EMULATED");
        if (emulated != NULL && emulated[0] != '\0') {
#endif
            return refuse(s, request, HG_ERR_DEVICE,
                          "this server runs under an emulator (HG_EMULATED is set): emulated time is not the "
                          "board's; run the server on the board itself");
        }
        return time_program(s, request, &bound, program, repeats);
    }
    case HG_MSG_RESET:
        if (length != 0) {
            return refuse(s, request, HG_ERR_ARGUMENT, "reset takes no arguments");
        }
        device->reset(device->state);
        return reply(s, request, HG_OK, NULL, 0);
    default:
        snprintf(reason, sizeof reason, "unknown message type 0x%x", request->type);
        return refuse(s, request, HG_ERR_ARGUMENT, reason);
    }
}

/* End the session over a frame that cannot be answered in kind: tell the peer why, then stop. */
static enum hg_session_end end_session(session *s, uint32_t sequence, int32_t code, const char *reason)
{
    server_log("hg_server %s: %s; ending the session\n", s->device->name, reason);
    unsigned char head[4];
    hg_put_u32(head, (uint32_t)code);
    (void)hg_send_frame(s->channel, HG_MSG_ERROR, sequence, head, 4, reason, (uint32_t)strnlen(reason, 250) + 1);
    hg_channel_linger(s->channel, s->channel->timeout_ms < 1000 ? s->channel->timeout_ms : 1000);
    return s->authenticated ? HG_SESSION_BROKEN : HG_SESSION_UNAUTHENTICATED;
}

/* Read one whole frame into `payload` (at most `limit` bytes): 0, or the session's end (told). */
static int read_request(session *s, hg_frame_header *header, unsigned char *payload, uint32_t limit, int wait_ms,
                        enum hg_session_end *end)
{
    hg_channel *channel = s->channel;
    int status = hg_read_header(channel, header, wait_ms);
    if (status == HG_TRANSPORT_CLOSED) {
        if (!s->authenticated) {
            server_log("hg_server %s: the peer closed the connection before the handshake\n", s->device->name);
        }
        *end = s->authenticated ? HG_SESSION_CLEAN : HG_SESSION_UNAUTHENTICATED;
        return -1;
    }
    if (status != HG_TRANSPORT_OK) {
        *end = end_session(s, 0, status, channel->error);
        return -1;
    }
    char reason[200];
    if (header->version != HG_TRANSPORT_VERSION) {
        snprintf(reason, sizeof reason, "protocol version mismatch: the client speaks version %u, this server %u",
                 header->version, HG_TRANSPORT_VERSION);
        *end = end_session(s, header->sequence, HG_TRANSPORT_VERSION_MISMATCH, reason);
        return -1;
    }
#if defined(HG_TRANSPORT_UART)
    if (!s->expect_hello && header->type == HG_MSG_HELLO && header->length <= HG_HANDSHAKE_MAX_PAYLOAD) {
        /* The line has no end-of-stream: a hello inside a session, or in place of the auth, is a
         * new peer (a root that ended, or gave up on the handshake, and started again), whose
         * hello carries no tag. This session ends as if closed, and the hello opens the next
         * handshake, which must prove the key like any other. */
        if (!s->authenticated) {
            server_log("hg_server %s: a new hello before the auth; starting the handshake again\n", s->device->name);
        }
        channel->sealed = 0;
        status = hg_read_payload(channel, header, s->hello, header->length, NULL);
        if (status != HG_TRANSPORT_OK) {
            *end = end_session(s, header->sequence, status, channel->error);
            return -1;
        }
        s->hello_header = *header;
        s->has_hello = 1;
        *end = s->authenticated ? HG_SESSION_CLEAN : HG_SESSION_UNAUTHENTICATED;
        return -1;
    }
#endif
    if (header->length > limit) {
        if (s->authenticated) {
            snprintf(reason, sizeof reason, "a %u-byte request exceeds the device's %llu-byte memory", header->length,
                     (unsigned long long)s->device->memory_size);
        } else {
            snprintf(reason, sizeof reason, "a %u-byte frame before authentication; a handshake frame has at most %u",
                     header->length, limit);
        }
        *end = end_session(s, header->sequence, HG_TRANSPORT_PROTOCOL, reason);
        return -1;
    }
    status = hg_read_payload(channel, header, payload, header->length, NULL);
    if (status != HG_TRANSPORT_OK) {
        *end = end_session(s, header->sequence, status, channel->error);
        return -1;
    }
    return 0;
}

static void hex8(const unsigned char *bytes, char out[17])
{
    for (unsigned i = 0; i < 8; ++i) {
        snprintf(out + 2 * i, 3, "%02x", bytes[i]);
    }
}

/* The handshake (hg_auth.h): 0 once the peer has proved it holds the key, else the session's end. */
static int handshake(session *s, enum hg_session_end *end)
{
    const hg_served_device *device = s->device;
    hg_channel *channel = s->channel;
    unsigned char payload[HG_HANDSHAKE_MAX_PAYLOAD];
    hg_frame_header header;
    char reason[320];
    /* The hello must arrive whole within the timeout of the connection's start: an idle or trickling
     * peer is dropped, and holds nothing but its own process meanwhile. */
    if (s->has_hello) {  /* read by the session it ended (a UART's) */
        header = s->hello_header;
        memcpy(payload, s->hello, header.length);
        s->has_hello = 0;
    } else {
        s->expect_hello = 1;
#if defined(HG_TRANSPORT_UART)
        const int first_byte_ms = -1;  /* a line has no connection to start a clock: its first byte does */
#else
        const int first_byte_ms = channel->timeout_ms;
#endif
        const int status = read_request(s, &header, payload, sizeof payload, first_byte_ms, end);
        s->expect_hello = 0;
        if (status != 0) {
            return -1;
        }
    }
    const uint32_t fixed = 4 + HG_NONCE_SIZE + HG_PLAN_HASH_SIZE;
    if (header.type != HG_MSG_HELLO || header.length < fixed || header.length > fixed + HG_DEVICE_NAME_MAX) {
        snprintf(reason, sizeof reason, "expected a hello (message type 1 of %u..%u bytes), got type 0x%x of %u bytes",
                 fixed, fixed + HG_DEVICE_NAME_MAX, header.type, header.length);
        *end = end_session(s, header.sequence, HG_TRANSPORT_PROTOCOL, reason);
        return -1;
    }
    const uint32_t version = hg_get_u32(payload);
    const unsigned char *client_nonce = payload + 4;
    const unsigned char *plan_hash = client_nonce + HG_NONCE_SIZE;
    const char *name = (const char *)(plan_hash + HG_PLAN_HASH_SIZE);
    const size_t name_length = header.length - fixed;
    if (version != HG_TRANSPORT_VERSION) {
        snprintf(reason, sizeof reason, "protocol version mismatch: the client's hello says version %u, this server %u",
                 version, HG_TRANSPORT_VERSION);
        *end = end_session(s, header.sequence, HG_TRANSPORT_VERSION_MISMATCH, reason);
        return -1;
    }
    if (name_length != strlen(device->device_name) || memcmp(name, device->device_name, name_length) != 0) {
        char asked[4 * HG_DEVICE_NAME_MAX + 4];
        hg_escape_text(name, name_length, asked, sizeof asked);
        snprintf(reason, sizeof reason, "the client asks for device \"%s\"; this server serves %s", asked,
                 device->device_name);
        *end = end_session(s, header.sequence, HG_TRANSPORT_PROTOCOL, reason);
        return -1;
    }
    if (memcmp(plan_hash, device->plan_hash, HG_PLAN_HASH_SIZE) != 0) {
        char theirs[17], mine[17];
        hex8(plan_hash, theirs);
        hex8(device->plan_hash, mine);
        snprintf(reason, sizeof reason,
                 "the client was built from another generated project (plan hash %s..., this server %s...): rebuild "
                 "both from one",
                 theirs, mine);
        *end = end_session(s, header.sequence, HG_TRANSPORT_PROTOCOL, reason);
        return -1;
    }
    unsigned char challenge[4 + HG_NONCE_SIZE + HG_SHA256_SIZE];
    unsigned char *server_nonce = challenge + 4;
    if (hg_random_bytes(server_nonce, HG_NONCE_SIZE) != 0) {
        snprintf(reason, sizeof reason, "no random numbers for a nonce: %s", strerror(errno));
        *end = end_session(s, header.sequence, HG_TRANSPORT_IO, reason);
        return -1;
    }
    hg_put_u32(challenge, HG_TRANSPORT_VERSION);
    hg_handshake_proof(s->key, HG_PROOF_SERVER, client_nonce, server_nonce, device->plan_hash, version, name,
                       name_length, challenge + 4 + HG_NONCE_SIZE);
    /* Both from the hello, which the auth's frame overwrites in `payload`. */
    unsigned char expected[HG_SHA256_SIZE];
    hg_handshake_proof(s->key, HG_PROOF_CLIENT, client_nonce, server_nonce, device->plan_hash, version, name,
                       name_length, expected);
    unsigned char session_key[HG_SHA256_SIZE];
    hg_handshake_proof(s->key, HG_SESSION_KEY, client_nonce, server_nonce, device->plan_hash, version, name, name_length,
                       session_key);
    if (reply(s, &header, HG_OK, challenge, sizeof challenge) != HG_TRANSPORT_OK) {
        server_log("hg_server %s: %s; ending the session\n", device->name, channel->error);
        hg_wipe(session_key, sizeof session_key);
        *end = HG_SESSION_UNAUTHENTICATED;
        return -1;
    }
    if (read_request(s, &header, payload, sizeof payload, channel->timeout_ms, end) != 0) {
        hg_wipe(session_key, sizeof session_key);
        return -1;
    }
    if (header.type != HG_MSG_AUTH || header.length != HG_SHA256_SIZE || !hg_equal_secret(payload, expected, HG_SHA256_SIZE)) {
        /* One refusal for every way of not proving the key, so that a peer learns nothing more. */
        hg_wipe(session_key, sizeof session_key);
        *end = end_session(s, header.sequence, HG_TRANSPORT_PROTOCOL,
                           "authentication failed: the client did not prove that it holds this server's transport key");
        return -1;
    }
    s->authenticated = 1;
    hg_channel_seal(channel, session_key, 1);  /* from the auth's reply on */
    hg_wipe(session_key, sizeof session_key);
    hg_wipe(device->state, (size_t)device->state_size);  /* a session starts on zeroed memory */
    device->reset(device->state);
    unsigned char opened[8 + 4];
    hg_put_u64(opened, device->memory_size);
    hg_put_u32(opened + 8, device->num_programs);
    if (reply(s, &header, HG_OK, opened, sizeof opened) != HG_TRANSPORT_OK) {
        server_log("hg_server %s: %s; ending the session\n", device->name, channel->error);
        *end = HG_SESSION_BROKEN;
        return -1;
    }
    return 0;
}

static enum hg_session_end serve_requests(session *s)
{
    /* The largest request is a copy_in of the whole memory: its arguments and data. Only an
     * authenticated peer gets a buffer that large. */
    s->buffer_size = s->device->memory_size + 16u;
#if defined(HG_TRANSPORT_UART)
    /* Lent by the server, which has no heap (hg_serve_forever), sized for this request. */
    s->buffer = s->buffer_size <= s->lent_size ? s->lent : NULL;
#else
    if (s->buffer_size <= HG_TRANSPORT_MAX_PAYLOAD) {
        s->buffer = calloc(1, (size_t)s->buffer_size);
    }
#endif
    if (s->buffer_size > HG_TRANSPORT_MAX_PAYLOAD || s->buffer == NULL) {
        char reason[160];
        snprintf(reason, sizeof reason, "cannot hold a %llu-byte request", (unsigned long long)s->buffer_size);
        s->buffer_size = 0;
        return end_session(s, 0, HG_TRANSPORT_IO, reason);
    }
    for (;;) {
        hg_frame_header header;
        enum hg_session_end end;
        /* The next request may be a while coming (the controller computes); a started frame has the timeout. */
        if (read_request(s, &header, s->buffer, (uint32_t)s->buffer_size, -1, &end) != 0) {
            return end;
        }
        if (header.type == HG_MSG_HELLO || header.type == HG_MSG_AUTH) {
            return end_session(s, header.sequence, HG_TRANSPORT_PROTOCOL, "a handshake message inside a session");
        }
        if (handle(s, &header, s->buffer) != HG_TRANSPORT_OK) {
            server_log("hg_server %s: %s; ending the session\n", s->device->name, s->channel->error);
            return HG_SESSION_BROKEN;
        }
    }
}

static enum hg_session_end serve_session(session *s)
{
    enum hg_session_end end;
    s->authenticated = 0;
    if (handshake(s, &end) == 0) {
        end = serve_requests(s);
    }
    /* Nothing of this session outlives it: not the device memory, not the last request's data, not
     * its key. */
    hg_wipe(s->device->state, (size_t)s->device->state_size);
    hg_wipe(s->channel->seal_key, sizeof s->channel->seal_key);
    s->channel->sealed = 0;
    if (s->buffer != NULL) {
        hg_wipe(s->buffer, (size_t)s->buffer_size);
#if !defined(HG_TRANSPORT_UART)
        free(s->buffer);
#endif
        s->buffer = NULL;
    }
    return end;
}

enum hg_session_end hg_serve(hg_channel *channel, const hg_served_device *device, const hg_key *key)
{
    static session zero;
    session s = zero;
    s.channel = channel;
    s.device = device;
    s.key = key;
    return serve_session(&s);
}

#if defined(HG_TRANSPORT_UART)
/* See hg_uart.h. */
void hg_serve_forever(hg_channel *channel, const hg_served_device *device, const hg_key *key, unsigned char *buffer,
                      uint64_t buffer_size)
{
    static session s;  /* static: its hello buffer stays off the stack */
    s.channel = channel;
    s.device = device;
    s.key = key;
    s.lent = buffer;
    s.lent_size = buffer_size;
    for (;;) {
        (void)serve_session(&s);
    }
}
#else

static int usage(const char *program)
{
    fprintf(stderr,
            "usage: %s --key FILE [--listen ADDR:PORT [--allow-remote] [--once] [--max-sessions N]] [--timeout-ms N]\n"
            "  serves its device on stdin/stdout, or on TCP (loopback unless ADDR says otherwise and\n"
            "  --allow-remote allows it); FILE is the build's transport key (board/transport.key), or\n"
            "  HG_TRANSPORT_KEY names it\n",
            program);
    return 2;
}

static int positive_option(const char *name, const char *text, long limit, long *value)
{
    char *end = NULL;
    *value = strtol(text, &end, 10);
    if (end == text || *end != '\0' || *value <= 0 || *value > limit) {
        server_log("%s %s: expected a whole number from 1 to %ld\n", name, text, limit);
        return -1;
    }
    return 0;
}

/* A connection the server cannot take: one refusal, then the close. */
static void refuse_connection(int fd, const char *reason)
{
    hg_channel channel;
    hg_channel_init(&channel, fd, fd, 1, 1000);
    unsigned char head[4];
    hg_put_u32(head, (uint32_t)HG_TRANSPORT_PROTOCOL);
    (void)hg_send_frame(&channel, HG_MSG_ERROR, 0, head, 4, reason, (uint32_t)strlen(reason) + 1);
    hg_channel_linger(&channel, 100);  /* short: the server's own loop waits meanwhile */
    close(fd);
}

/* Each connection in a process of its own (fork): a session's device memory is its own copy of the
 * server's (the parent never serves, so every copy starts as the program started), a slow or idle
 * peer holds only its own process, and a crash ends one session. */
static int serve_tcp(int listen_fd, const hg_served_device *device, const hg_key *key, int timeout_ms, int once,
                     long max_sessions)
{
    long active = 0;
    int result = 0;
    int done = 0;
    /* A connection that is reset between poll and accept must not block the loop in accept. */
    const int flags = fcntl(listen_fd, F_GETFL);
    if (flags >= 0) {
        (void)fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK);
    }
    while (!done || active > 0) {
        int status = 0;
        pid_t ended;
        while ((ended = waitpid(-1, &status, done ? 0 : WNOHANG)) > 0) {
            active -= 1;
            const int code = WIFEXITED(status) ? WEXITSTATUS(status) : HG_SESSION_BROKEN;
            if (once && !done && code != HG_SESSION_UNAUTHENTICATED) {
                done = 1;  /* the first authenticated session has ended: accept no more */
                result = code;
                close(listen_fd);
            }
            if (done && active == 0) {
                break;
            }
        }
        if (ended < 0 && errno == ECHILD) {
            active = 0;
        }
        if (done) {
            continue;
        }
        struct pollfd entry = { listen_fd, POLLIN, 0 };
        if (poll(&entry, 1, 100) <= 0) {
            continue;  /* and reap the sessions that ended meanwhile */
        }
        const int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) {
            continue;
        }
        if (active >= max_sessions) {
            char reason[120];
            snprintf(reason, sizeof reason, "the server is busy: %ld sessions at once (--max-sessions)", max_sessions);
            server_log("hg_server %s: %s; refused a connection\n", device->name, reason);
            refuse_connection(fd, reason);
            continue;
        }
        const pid_t pid = fork();
        if (pid == 0) {
            close(listen_fd);
            hg_channel channel;
            hg_channel_init(&channel, fd, fd, 1, timeout_ms);
            const enum hg_session_end end = hg_serve(&channel, device, key);
            close(fd);
            exit((int)end);
        }
        close(fd);
        if (pid < 0) {
            server_log("hg_server %s: fork failed: %s\n", device->name, strerror(errno));
            continue;
        }
        active += 1;
    }
    return result == HG_SESSION_UNAUTHENTICATED ? 1 : result;
}

int hg_server_main(int argc, char **argv, const hg_served_device *device)
{
    const char *listen_at = NULL;
    const char *key_option = NULL;
    int once = 0;
    int allow_remote = 0;
    long max_sessions = DEFAULT_MAX_SESSIONS;
    int timeout_ms = hg_transport_timeout_from_env();
    for (int i = 1; i < argc; ++i) {
        long value = 0;
        if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
            listen_at = argv[++i];
        } else if (strcmp(argv[i], "--key") == 0 && i + 1 < argc) {
            key_option = argv[++i];
        } else if (strcmp(argv[i], "--once") == 0) {
            once = 1;
        } else if (strcmp(argv[i], "--allow-remote") == 0) {
            allow_remote = 1;
        } else if (strcmp(argv[i], "--max-sessions") == 0 && i + 1 < argc) {
            if (positive_option("--max-sessions", argv[++i], 1024, &value) != 0) {
                return 2;
            }
            max_sessions = value;
        } else if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc) {
            if (positive_option("--timeout-ms", argv[++i], 86400000L, &value) != 0) {
                return 2;
            }
            timeout_ms = (int)value;
        } else {
            return usage(argv[0]);
        }
    }
    const char *key_path = hg_key_path(key_option);
    if (key_path == NULL) {
        server_log("hg_server %s: no transport key: pass --key FILE (the board build writes board/transport.key) "
                        "or set HG_TRANSPORT_KEY\n",
                device->name);
        return 2;
    }
    hg_key key;
    char error[512];
    if (hg_key_load(&key, key_path, error, sizeof error) != 0) {
        server_log("hg_server %s: %s\n", device->name, error);
        return 2;
    }
    /* A peer that goes away must end a session, not the server. */
    signal(SIGPIPE, SIG_IGN);
    int result;
    if (listen_at == NULL) {
        hg_channel channel;
        hg_channel_init(&channel, 0, 1, 0, timeout_ms);
        result = hg_serve(&channel, device, &key) == HG_SESSION_CLEAN ? 0 : 1;
    } else {
        int listen_fd = -1;
        int port = 0;
        int is_remote = 0;
        if (hg_listen(listen_at, allow_remote, &listen_fd, &port, &is_remote, error, sizeof error) != HG_TRANSPORT_OK) {
            server_log("hg_server %s: %s\n", device->name, error);
            hg_wipe(&key, sizeof key);
            return 2;
        }
        if (is_remote) {
            fprintf(stderr,
                    "hg_server %s: warning: listening on %s, which other machines can reach: a peer needs the "
                    "transport key, but the traffic is not encrypted (anyone on the path reads the tensors)\n",
                    device->name, listen_at);
        }
        const char *colon = strrchr(listen_at, ':');
        printf("listening on %.*s:%d\n", colon == listen_at ? 9 : (int)(colon - listen_at),
               colon == listen_at ? "127.0.0.1" : listen_at, port);
        fflush(stdout);
        result = serve_tcp(listen_fd, device, &key, timeout_ms, once, max_sessions);
    }
    hg_wipe(&key, sizeof key);
    return result;
}
#endif /* !HG_TRANSPORT_UART */
