/* hetgen device server. See hg_server.h. */
#define _POSIX_C_SOURCE 200809L
#include "hg_server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hg_runtime.h"

typedef struct {
    hg_channel *channel;
    const hg_served_device *device;
    unsigned char *buffer;   /* one request's payload, or one copy_out's data */
    uint64_t buffer_size;
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
    fprintf(stderr, "hg_server %s: refused request #%u: %s\n", s->device->name, request->sequence, reason);
    return reply(s, request, status, reason, (uint32_t)strlen(reason));
}

/* Whether [offset, offset + bytes) lies inside the device memory (without overflow). */
static int inside(const session *s, uint64_t offset, uint64_t bytes)
{
    return offset <= s->device->memory_size && bytes <= s->device->memory_size - offset;
}

static int handle(session *s, const hg_frame_header *request, const unsigned char *payload)
{
    const hg_served_device *device = s->device;
    struct hg_device bound = device->bind(device->state);
    char reason[200];
    const uint32_t length = request->length;
    switch (request->type) {
    case HG_MSG_HELLO: {
        unsigned char hello[4 + 8 + 4];
        hg_put_u32(hello, HG_TRANSPORT_VERSION);
        hg_put_u64(hello + 4, device->memory_size);
        hg_put_u32(hello + 12, device->num_programs);
        device->reset(device->state);
        return reply(s, request, HG_OK, hello, sizeof hello);
    }
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
static int end_session(session *s, uint32_t sequence, int32_t code, const char *reason)
{
    fprintf(stderr, "hg_server %s: %s; ending the session\n", s->device->name, reason);
    unsigned char head[4];
    hg_put_u32(head, (uint32_t)code);
    (void)hg_send_frame(s->channel, HG_MSG_ERROR, sequence, head, 4, reason, (uint32_t)strnlen(reason, 250) + 1);
    return 1;
}

int hg_serve(hg_channel *channel, const hg_served_device *device)
{
    /* The largest request is a copy_in of the whole memory: its arguments and data. */
    session s = { channel, device, NULL, device->memory_size + 16u };
    if (s.buffer_size > HG_TRANSPORT_MAX_PAYLOAD || (s.buffer = malloc((size_t)s.buffer_size)) == NULL) {
        fprintf(stderr, "hg_server %s: cannot hold a %llu-byte request\n", device->name,
                (unsigned long long)s.buffer_size);
        return 1;
    }
    int result = 0;
    for (;;) {
        hg_frame_header header;
        /* The next request may be a while coming (the controller computes); inside one, the timeout holds. */
        int status = hg_read_header(channel, &header, -1);
        if (status == HG_TRANSPORT_CLOSED) {
            break;
        }
        if (status != HG_TRANSPORT_OK) {
            result = end_session(&s, 0, status, channel->error);
            break;
        }
        if (header.version != HG_TRANSPORT_VERSION) {
            char reason[160];
            snprintf(reason, sizeof reason, "protocol version mismatch: the client speaks version %u, this server %u",
                     header.version, HG_TRANSPORT_VERSION);
            result = end_session(&s, header.sequence, HG_TRANSPORT_VERSION_MISMATCH, reason);
            break;
        }
        if (header.length > s.buffer_size) {
            char reason[160];
            snprintf(reason, sizeof reason, "a %u-byte request exceeds the device's %llu-byte memory", header.length,
                     (unsigned long long)device->memory_size);
            result = end_session(&s, header.sequence, HG_TRANSPORT_PROTOCOL, reason);
            break;
        }
        status = hg_read_payload(channel, &header, s.buffer, header.length, NULL);
        if (status != HG_TRANSPORT_OK) {
            result = end_session(&s, header.sequence, status, channel->error);
            break;
        }
        if (handle(&s, &header, s.buffer) != HG_TRANSPORT_OK) {
            fprintf(stderr, "hg_server %s: %s; ending the session\n", device->name, channel->error);
            result = 1;
            break;
        }
    }
    free(s.buffer);
    return result;
}

static int usage(const char *program)
{
    fprintf(stderr,
            "usage: %s [--listen ADDR:PORT [--once]] [--timeout-ms N]\n"
            "  serves its device on stdin/stdout, or on TCP (loopback unless ADDR says otherwise)\n",
            program);
    return 2;
}

int hg_server_main(int argc, char **argv, const hg_served_device *device)
{
    const char *listen_at = NULL;
    int once = 0;
    int timeout_ms = hg_transport_timeout_from_env();
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
            listen_at = argv[++i];
        } else if (strcmp(argv[i], "--once") == 0) {
            once = 1;
        } else if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc) {
            char *end = NULL;
            const long value = strtol(argv[++i], &end, 10);
            if (*end != '\0' || value <= 0 || value > 86400000L) {
                fprintf(stderr, "--timeout-ms %s: expected a positive number of milliseconds\n", argv[i]);
                return 2;
            }
            timeout_ms = (int)value;
        } else {
            return usage(argv[0]);
        }
    }
    /* A peer that goes away must end a session, not the server. */
    signal(SIGPIPE, SIG_IGN);
    hg_channel channel;
    if (listen_at == NULL) {
        hg_channel_init(&channel, 0, 1, 0, timeout_ms);
        return hg_serve(&channel, device);
    }
    int listen_fd = -1;
    int port = 0;
    char error[256];
    if (hg_listen(listen_at, &listen_fd, &port, error, sizeof error) != HG_TRANSPORT_OK) {
        fprintf(stderr, "hg_server %s: %s\n", device->name, error);
        return 2;
    }
    const char *colon = strrchr(listen_at, ':');
    printf("listening on %.*s:%d\n", colon == listen_at ? 9 : (int)(colon - listen_at),
           colon == listen_at ? "127.0.0.1" : listen_at, port);
    fflush(stdout);
    int result = 0;
    do {
        const int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) {
            continue;
        }
        hg_channel_init(&channel, fd, fd, 1, timeout_ms);
        result = hg_serve(&channel, device);
        close(fd);
    } while (!once);
    close(listen_fd);
    return result;
}
