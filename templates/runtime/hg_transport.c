/* hetgen byte-stream transport: frames, CRC-32, pipe and TCP channels. See hg_transport.h. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "hg_transport.h"

#include <stdarg.h>
#include <string.h>

#if defined(HG_TRANSPORT_UART)
/* A bare-metal device server: the byte stream is the board's UART, deadlines count SysTick. */
#include "hg_uart.h"
#else
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#endif

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

/* CRC-32, IEEE 802.3 (reflected polynomial 0xEDB88320), one table lookup per byte. */
static const uint32_t hg_crc32_table[256] = {
    0x00000000u, 0x77073096u, 0xee0e612cu, 0x990951bau, 0x076dc419u, 0x706af48fu,
    0xe963a535u, 0x9e6495a3u, 0x0edb8832u, 0x79dcb8a4u, 0xe0d5e91eu, 0x97d2d988u,
    0x09b64c2bu, 0x7eb17cbdu, 0xe7b82d07u, 0x90bf1d91u, 0x1db71064u, 0x6ab020f2u,
    0xf3b97148u, 0x84be41deu, 0x1adad47du, 0x6ddde4ebu, 0xf4d4b551u, 0x83d385c7u,
    0x136c9856u, 0x646ba8c0u, 0xfd62f97au, 0x8a65c9ecu, 0x14015c4fu, 0x63066cd9u,
    0xfa0f3d63u, 0x8d080df5u, 0x3b6e20c8u, 0x4c69105eu, 0xd56041e4u, 0xa2677172u,
    0x3c03e4d1u, 0x4b04d447u, 0xd20d85fdu, 0xa50ab56bu, 0x35b5a8fau, 0x42b2986cu,
    0xdbbbc9d6u, 0xacbcf940u, 0x32d86ce3u, 0x45df5c75u, 0xdcd60dcfu, 0xabd13d59u,
    0x26d930acu, 0x51de003au, 0xc8d75180u, 0xbfd06116u, 0x21b4f4b5u, 0x56b3c423u,
    0xcfba9599u, 0xb8bda50fu, 0x2802b89eu, 0x5f058808u, 0xc60cd9b2u, 0xb10be924u,
    0x2f6f7c87u, 0x58684c11u, 0xc1611dabu, 0xb6662d3du, 0x76dc4190u, 0x01db7106u,
    0x98d220bcu, 0xefd5102au, 0x71b18589u, 0x06b6b51fu, 0x9fbfe4a5u, 0xe8b8d433u,
    0x7807c9a2u, 0x0f00f934u, 0x9609a88eu, 0xe10e9818u, 0x7f6a0dbbu, 0x086d3d2du,
    0x91646c97u, 0xe6635c01u, 0x6b6b51f4u, 0x1c6c6162u, 0x856530d8u, 0xf262004eu,
    0x6c0695edu, 0x1b01a57bu, 0x8208f4c1u, 0xf50fc457u, 0x65b0d9c6u, 0x12b7e950u,
    0x8bbeb8eau, 0xfcb9887cu, 0x62dd1ddfu, 0x15da2d49u, 0x8cd37cf3u, 0xfbd44c65u,
    0x4db26158u, 0x3ab551ceu, 0xa3bc0074u, 0xd4bb30e2u, 0x4adfa541u, 0x3dd895d7u,
    0xa4d1c46du, 0xd3d6f4fbu, 0x4369e96au, 0x346ed9fcu, 0xad678846u, 0xda60b8d0u,
    0x44042d73u, 0x33031de5u, 0xaa0a4c5fu, 0xdd0d7cc9u, 0x5005713cu, 0x270241aau,
    0xbe0b1010u, 0xc90c2086u, 0x5768b525u, 0x206f85b3u, 0xb966d409u, 0xce61e49fu,
    0x5edef90eu, 0x29d9c998u, 0xb0d09822u, 0xc7d7a8b4u, 0x59b33d17u, 0x2eb40d81u,
    0xb7bd5c3bu, 0xc0ba6cadu, 0xedb88320u, 0x9abfb3b6u, 0x03b6e20cu, 0x74b1d29au,
    0xead54739u, 0x9dd277afu, 0x04db2615u, 0x73dc1683u, 0xe3630b12u, 0x94643b84u,
    0x0d6d6a3eu, 0x7a6a5aa8u, 0xe40ecf0bu, 0x9309ff9du, 0x0a00ae27u, 0x7d079eb1u,
    0xf00f9344u, 0x8708a3d2u, 0x1e01f268u, 0x6906c2feu, 0xf762575du, 0x806567cbu,
    0x196c3671u, 0x6e6b06e7u, 0xfed41b76u, 0x89d32be0u, 0x10da7a5au, 0x67dd4accu,
    0xf9b9df6fu, 0x8ebeeff9u, 0x17b7be43u, 0x60b08ed5u, 0xd6d6a3e8u, 0xa1d1937eu,
    0x38d8c2c4u, 0x4fdff252u, 0xd1bb67f1u, 0xa6bc5767u, 0x3fb506ddu, 0x48b2364bu,
    0xd80d2bdau, 0xaf0a1b4cu, 0x36034af6u, 0x41047a60u, 0xdf60efc3u, 0xa867df55u,
    0x316e8eefu, 0x4669be79u, 0xcb61b38cu, 0xbc66831au, 0x256fd2a0u, 0x5268e236u,
    0xcc0c7795u, 0xbb0b4703u, 0x220216b9u, 0x5505262fu, 0xc5ba3bbeu, 0xb2bd0b28u,
    0x2bb45a92u, 0x5cb36a04u, 0xc2d7ffa7u, 0xb5d0cf31u, 0x2cd99e8bu, 0x5bdeae1du,
    0x9b64c2b0u, 0xec63f226u, 0x756aa39cu, 0x026d930au, 0x9c0906a9u, 0xeb0e363fu,
    0x72076785u, 0x05005713u, 0x95bf4a82u, 0xe2b87a14u, 0x7bb12baeu, 0x0cb61b38u,
    0x92d28e9bu, 0xe5d5be0du, 0x7cdcefb7u, 0x0bdbdf21u, 0x86d3d2d4u, 0xf1d4e242u,
    0x68ddb3f8u, 0x1fda836eu, 0x81be16cdu, 0xf6b9265bu, 0x6fb077e1u, 0x18b74777u,
    0x88085ae6u, 0xff0f6a70u, 0x66063bcau, 0x11010b5cu, 0x8f659effu, 0xf862ae69u,
    0x616bffd3u, 0x166ccf45u, 0xa00ae278u, 0xd70dd2eeu, 0x4e048354u, 0x3903b3c2u,
    0xa7672661u, 0xd06016f7u, 0x4969474du, 0x3e6e77dbu, 0xaed16a4au, 0xd9d65adcu,
    0x40df0b66u, 0x37d83bf0u, 0xa9bcae53u, 0xdebb9ec5u, 0x47b2cf7fu, 0x30b5ffe9u,
    0xbdbdf21cu, 0xcabac28au, 0x53b39330u, 0x24b4a3a6u, 0xbad03605u, 0xcdd70693u,
    0x54de5729u, 0x23d967bfu, 0xb3667a2eu, 0xc4614ab8u, 0x5d681b02u, 0x2a6f2b94u,
    0xb40bbe37u, 0xc30c8ea1u, 0x5a05df1bu, 0x2d02ef8du,
};

uint32_t hg_crc32_update(uint32_t crc, const void *data, size_t bytes)
{
    const unsigned char *p = (const unsigned char *)data;
    crc = ~crc;
    for (size_t i = 0; i < bytes; ++i) {
        crc = hg_crc32_table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
    }
    return ~crc;
}

uint32_t hg_crc32(const void *data, size_t bytes)
{
    return hg_crc32_update(0u, data, bytes);
}

static int fail(hg_channel *channel, int code, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(channel->error, sizeof channel->error, format, args);
    va_end(args);
    return code;
}

/* A channel on its two ends, no frame under way, nothing sealed (both builds' hg_channel_init). */
static void channel_defaults(hg_channel *channel, int read_fd, int write_fd, int is_socket, int timeout_ms)
{
    memset(channel, 0, sizeof *channel);
    channel->read_fd = read_fd;
    channel->write_fd = write_fd;
    channel->is_socket = is_socket;
    channel->timeout_ms = timeout_ms;
    channel->deadline_ms = -1;
    channel->frame_budget_ms = timeout_ms;
}

#if !defined(HG_TRANSPORT_UART)
int hg_transport_timeout_from_env(void)
{
    const char *text = getenv("HG_TRANSPORT_TIMEOUT_MS");
    if (text == NULL || *text == '\0') {
        return HG_TRANSPORT_DEFAULT_TIMEOUT_MS;
    }
    char *end = NULL;
    const long value = strtol(text, &end, 10);
    if (end == text || *end != '\0' || value <= 0 || value > 86400000L) {
        static int warned;  /* once per process, however many channels read it */
        if (!warned) {
            warned = 1;
            fprintf(stderr, "hetgen: HG_TRANSPORT_TIMEOUT_MS=%.40s is not 1..86400000 ms; using %d\n", text,
                    HG_TRANSPORT_DEFAULT_TIMEOUT_MS);
        }
        return HG_TRANSPORT_DEFAULT_TIMEOUT_MS;
    }
    return (int)value;
}

static void set_nonblocking(int fd)
{
    const int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) {
        (void)fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    }
}

void hg_channel_init(hg_channel *channel, int read_fd, int write_fd, int is_socket, int timeout_ms)
{
    channel_defaults(channel, read_fd, write_fd, is_socket, timeout_ms);
    /* Non-blocking ends, so that poll's timeout bounds every read and write. */
    set_nonblocking(read_fd);
    if (write_fd != read_fd) {
        set_nonblocking(write_fd);
    }
    if (is_socket) {
        /* A frame goes out in two writes (header, payload) and its reply waits for it: without
         * TCP_NODELAY, Nagle's algorithm and delayed ACKs add tens of milliseconds to every call. */
        const int one = 1;
        (void)setsockopt(read_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
}

static int64_t monotonic_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* The milliseconds left until `deadline_ms` (-1: none), for poll: never negative. */
static int remaining_ms(int64_t deadline_ms)
{
    if (deadline_ms < 0) {
        return -1;
    }
    const int64_t left = deadline_ms - monotonic_ms();
    return left <= 0 ? 0 : left > 86400000 ? 86400000 : (int)left;
}

static int64_t deadline_after(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : monotonic_ms() + timeout_ms;
}

/* Wait until `fd` is ready for `events`: 0, or TIMEOUT when `deadline_ms` passes (-1: never). */
static int wait_ready(int fd, short events, int64_t deadline_ms)
{
    struct pollfd entry = { fd, events, 0 };
    for (;;) {
        const int ready = poll(&entry, 1, remaining_ms(deadline_ms));
        if (ready > 0) {
            return 0;
        }
        if (ready == 0) {
            return HG_TRANSPORT_TIMEOUT;
        }
        if (errno != EINTR) {
            return HG_TRANSPORT_IO;
        }
    }
}

/* Read exactly `bytes` by the channel's frame deadline, however they trickle: the deadline is one
 * point in time for the whole frame, each poll waits only for what is left of it. CLOSED when the
 * stream ends before a header's first byte, FRAME when it ends inside a frame. */
static int read_exact(hg_channel *channel, void *buffer, size_t bytes, const char *what)
{
    unsigned char *p = (unsigned char *)buffer;
    size_t done = 0;
    while (done < bytes) {
        const int ready = wait_ready(channel->read_fd, POLLIN, channel->deadline_ms);
        if (ready == HG_TRANSPORT_TIMEOUT) {
            const int header_started = strcmp(what, "header") != 0 || done > 0;
            if (!header_started) {
                return fail(channel, HG_TRANSPORT_TIMEOUT, "no answer within %d ms", channel->frame_budget_ms);
            }
            return fail(channel, HG_TRANSPORT_TIMEOUT, "no whole frame within %d ms (%s: %zu of %zu bytes arrived)",
                        channel->frame_budget_ms, what, done, bytes);
        }
        if (ready != 0) {
            return fail(channel, HG_TRANSPORT_IO, "poll failed: %s", strerror(errno));
        }
        const ssize_t got = read(channel->read_fd, p + done, bytes - done);
        if (got > 0) {
            done += (size_t)got;
            channel->stats.bytes_received += (uint64_t)got;
        } else if (got == 0) {
            if (done == 0 && strcmp(what, "header") == 0) {
                return fail(channel, HG_TRANSPORT_CLOSED, "the peer closed the connection");
            }
            return fail(channel, HG_TRANSPORT_FRAME, "truncated frame: the stream ended after %zu of %zu %s bytes", done,
                        bytes, what);
        } else if (errno == ECONNRESET) {
            return fail(channel, HG_TRANSPORT_CLOSED, "the peer reset the connection");
        } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
            return fail(channel, HG_TRANSPORT_IO, "read failed: %s", strerror(errno));
        }
    }
    return HG_TRANSPORT_OK;
}

/* Before a request: its first byte, waited for as long as it takes. */
static int wait_for_first_byte(hg_channel *channel)
{
    const int ready = wait_ready(channel->read_fd, POLLIN, -1);
    return ready != 0 ? fail(channel, HG_TRANSPORT_IO, "poll failed: %s", strerror(errno)) : HG_TRANSPORT_OK;
}

/* Write exactly `bytes` by `deadline_ms`: a peer that stops taking a frame cannot hold it open. */
static int write_exact(hg_channel *channel, const void *buffer, size_t bytes, int64_t deadline_ms)
{
    const unsigned char *p = (const unsigned char *)buffer;
    size_t done = 0;
    while (done < bytes) {
        const int ready = wait_ready(channel->write_fd, POLLOUT, deadline_ms);
        if (ready == HG_TRANSPORT_TIMEOUT) {
            return fail(channel, HG_TRANSPORT_TIMEOUT, "the peer did not take the frame within %d ms (%zu of %zu bytes sent)",
                        channel->timeout_ms, done, bytes);
        }
        if (ready != 0) {
            return fail(channel, HG_TRANSPORT_IO, "poll failed: %s", strerror(errno));
        }
        const ssize_t put = channel->is_socket ? send(channel->write_fd, p + done, bytes - done, MSG_NOSIGNAL)
                                               : write(channel->write_fd, p + done, bytes - done);
        if (put > 0) {
            done += (size_t)put;
            channel->stats.bytes_sent += (uint64_t)put;
        } else if (put < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            return fail(channel, HG_TRANSPORT_CLOSED, "the peer closed the connection");
        } else if (put < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
            return fail(channel, HG_TRANSPORT_IO, "write failed: %s", strerror(errno));
        }
    }
    return HG_TRANSPORT_OK;
}

#else /* HG_TRANSPORT_UART: the board's UART, polled (hg_uart.h) */

void hg_channel_init(hg_channel *channel, int read_fd, int write_fd, int is_socket, int timeout_ms)
{
    channel_defaults(channel, read_fd, write_fd, is_socket, timeout_ms);
}

static int64_t deadline_after(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : hg_uart_now_ms() + timeout_ms;
}

/* As the hosted read_exact, byte by byte: the deadline is one point in time for the whole frame.
 * A UART does not close: a peer that went away is a frame that never comes (or a new hello). */
static int read_exact(hg_channel *channel, void *buffer, size_t bytes, const char *what)
{
    unsigned char *p = (unsigned char *)buffer;
    for (size_t done = 0; done < bytes; ++done) {
        const int byte = hg_uart_read_byte(channel->deadline_ms);
        if (byte < 0) {
            if (strcmp(what, "header") == 0 && done == 0) {
                return fail(channel, HG_TRANSPORT_TIMEOUT, "no answer within %d ms", channel->frame_budget_ms);
            }
            return fail(channel, HG_TRANSPORT_TIMEOUT, "no whole frame within %d ms (%s: %zu of %zu bytes arrived)",
                        channel->frame_budget_ms, what, done, bytes);
        }
        p[done] = (unsigned char)byte;
        channel->stats.bytes_received += 1;
    }
    return HG_TRANSPORT_OK;
}

static int write_exact(hg_channel *channel, const void *buffer, size_t bytes, int64_t deadline_ms)
{
    const unsigned char *p = (const unsigned char *)buffer;
    for (size_t done = 0; done < bytes; ++done) {
        if (hg_uart_write_byte(p[done], deadline_ms) != 0) {
            return fail(channel, HG_TRANSPORT_TIMEOUT,
                        "the UART did not take the frame within %d ms (%zu of %zu bytes sent)", channel->timeout_ms,
                        done, bytes);
        }
        channel->stats.bytes_sent += 1;
    }
    return HG_TRANSPORT_OK;
}

static int wait_for_first_byte(hg_channel *channel)
{
    (void)channel;
    while (!hg_uart_readable()) {
    }
    return HG_TRANSPORT_OK;
}

#endif /* HG_TRANSPORT_UART */

void hg_channel_seal(hg_channel *channel, const unsigned char key[HG_SHA256_SIZE], int is_server)
{
    memcpy(channel->seal_key, key, HG_SHA256_SIZE);
    channel->send_direction = is_server ? 'S' : 'C';
    channel->frames_sent = 0;
    channel->frames_received = 0;
    channel->sealed = 1;
}

/* A sealed frame's tag: HMAC(session key, direction | u64 frame number | header | payload). */
static void frame_tag(const hg_channel *channel, unsigned char direction, uint64_t number,
                      const unsigned char header[HG_TRANSPORT_HEADER_SIZE], const void *head, uint32_t head_length,
                      const void *tail, uint32_t tail_length, unsigned char tag[HG_SHA256_SIZE])
{
    unsigned char prefix[1 + 8];
    prefix[0] = direction;
    hg_put_u64(prefix + 1, number);
    const hg_bytes parts[] = {
        { prefix, sizeof prefix },
        { header, HG_TRANSPORT_HEADER_SIZE },
        { head, head_length },
        { tail, tail_length },
    };
    hg_hmac_sha256(channel->seal_key, sizeof channel->seal_key, parts, sizeof parts / sizeof parts[0], tag);
}

static void encode_header(unsigned char *out, uint16_t type, uint32_t sequence, uint32_t length)
{
    hg_put_u32(out, HG_TRANSPORT_MAGIC);
    out[4] = (unsigned char)HG_TRANSPORT_VERSION;
    out[5] = (unsigned char)(HG_TRANSPORT_VERSION >> 8);
    out[6] = (unsigned char)type;
    out[7] = (unsigned char)(type >> 8);
    hg_put_u32(out + 8, sequence);
    hg_put_u32(out + 12, length);
}

int hg_send_frame(hg_channel *channel, uint16_t type, uint32_t sequence, const void *payload, uint32_t length,
                  const void *extra, uint32_t extra_length)
{
    if ((uint64_t)length + extra_length > HG_TRANSPORT_MAX_PAYLOAD) {
        return fail(channel, HG_TRANSPORT_PROTOCOL, "a message of %llu bytes exceeds the %u-byte limit",
                    (unsigned long long)length + extra_length, HG_TRANSPORT_MAX_PAYLOAD);
    }
    unsigned char header[HG_TRANSPORT_HEADER_SIZE];
    encode_header(header, type, sequence, length + extra_length);
    uint32_t crc = hg_crc32_update(0u, header, 16);
    crc = hg_crc32_update(crc, payload, length);
    crc = hg_crc32_update(crc, extra, extra_length);
    hg_put_u32(header + 16, crc);
    const int64_t deadline = deadline_after(channel->timeout_ms);  /* the whole frame, not each write */
    int status = write_exact(channel, header, sizeof header, deadline);
    if (status == HG_TRANSPORT_OK && length > 0) {
        status = write_exact(channel, payload, length, deadline);
    }
    if (status == HG_TRANSPORT_OK && extra_length > 0) {
        status = write_exact(channel, extra, extra_length, deadline);
    }
    if (status == HG_TRANSPORT_OK && channel->sealed && type != HG_MSG_ERROR) {
        unsigned char tag[HG_SHA256_SIZE];
        frame_tag(channel, channel->send_direction, channel->frames_sent, header, payload, length, extra, extra_length,
                  tag);
        status = write_exact(channel, tag, sizeof tag, deadline);
        channel->frames_sent += 1;
    }
    if (status == HG_TRANSPORT_OK) {
        channel->stats.messages_sent += 1;
    }
    return status;
}

int hg_read_header(hg_channel *channel, hg_frame_header *header, int wait_ms)
{
    if (wait_ms < 0) {
        /* Between requests a session may idle (the controller computes); once a frame starts, its
         * deadline holds. */
        const int ready = wait_for_first_byte(channel);
        if (ready != HG_TRANSPORT_OK) {
            return ready;
        }
        wait_ms = channel->timeout_ms;
    }
    channel->frame_budget_ms = wait_ms;
    channel->deadline_ms = deadline_after(wait_ms);
    unsigned char bytes[HG_TRANSPORT_HEADER_SIZE];
    const int status = read_exact(channel, bytes, sizeof bytes, "header");
    if (status != HG_TRANSPORT_OK) {
        return status;
    }
    memcpy(header->bytes, bytes, sizeof bytes);
    const uint32_t magic = hg_get_u32(bytes);
    if (magic != HG_TRANSPORT_MAGIC) {
        return fail(channel, HG_TRANSPORT_FRAME, "bad frame: magic 0x%08x, expected 0x%08x", magic,
                    HG_TRANSPORT_MAGIC);
    }
    header->version = (uint16_t)(bytes[4] | bytes[5] << 8);
    header->type = (uint16_t)(bytes[6] | bytes[7] << 8);
    header->sequence = hg_get_u32(bytes + 8);
    header->length = hg_get_u32(bytes + 12);
    if (header->length > HG_TRANSPORT_MAX_PAYLOAD) {
        return fail(channel, HG_TRANSPORT_FRAME, "bad frame: a payload of %u bytes exceeds the %u-byte limit",
                    header->length, HG_TRANSPORT_MAX_PAYLOAD);
    }
    /* The CRC covers the header's first 16 bytes; hg_read_payload continues it over the payload. */
    header->crc = hg_get_u32(bytes + 16);
    header->header_crc = hg_crc32_update(0u, bytes, 16);
    return HG_TRANSPORT_OK;
}

int hg_read_payload(hg_channel *channel, const hg_frame_header *header, void *head, uint32_t head_length, void *tail)
{
    if (head_length > header->length) {
        head_length = header->length;
    }
    const uint32_t tail_length = header->length - head_length;
    int status = read_exact(channel, head, head_length, "payload");
    if (status == HG_TRANSPORT_OK && tail_length > 0) {
        status = read_exact(channel, tail, tail_length, "payload");
    }
    if (status == HG_TRANSPORT_CLOSED) {
        status = fail(channel, HG_TRANSPORT_FRAME, "truncated frame: the stream ended inside a %u-byte payload",
                      header->length);
    }
    if (status != HG_TRANSPORT_OK) {
        return status;
    }
    const int tagged = channel->sealed && header->type != HG_MSG_ERROR;
    unsigned char tag[HG_SHA256_SIZE];
    if (tagged && (status = read_exact(channel, tag, sizeof tag, "tag")) != HG_TRANSPORT_OK) {
        return status == HG_TRANSPORT_CLOSED ? fail(channel, HG_TRANSPORT_FRAME, "truncated frame: no tag") : status;
    }
    uint32_t actual = hg_crc32_update(header->header_crc, head, head_length);
    actual = hg_crc32_update(actual, tail, tail_length);
    if (actual != header->crc) {
        return fail(channel, HG_TRANSPORT_FRAME, "bad frame: CRC-32 0x%08x, the header says 0x%08x", actual,
                    header->crc);
    }
    if (tagged) {
        unsigned char expected[HG_SHA256_SIZE];
        const unsigned char from = channel->send_direction == 'S' ? 'C' : 'S';
        frame_tag(channel, from, channel->frames_received, header->bytes, head, head_length, tail, tail_length,
                  expected);
        if (!hg_equal_secret(tag, expected, sizeof tag)) {
            return fail(channel, HG_TRANSPORT_FRAME,
                        "bad frame: its tag does not match (altered, injected, replayed or reordered on the way)");
        }
        channel->frames_received += 1;
    }
    channel->stats.messages_received += 1;
    return HG_TRANSPORT_OK;
}

#if !defined(HG_TRANSPORT_UART)
/* exec: run COMMAND through /bin/sh with a pipe pair on its stdin and stdout; stderr is shared. */
static int open_exec(hg_channel *channel, const char *command, int timeout_ms)
{
    int to_child[2];
    int from_child[2];
    if (pipe(to_child) != 0) {
        return fail(channel, HG_TRANSPORT_CONNECT, "pipe failed: %s", strerror(errno));
    }
    if (pipe(from_child) != 0) {
        close(to_child[0]);
        close(to_child[1]);
        return fail(channel, HG_TRANSPORT_CONNECT, "pipe failed: %s", strerror(errno));
    }
    /* A write to a server that died must be an error code, not a signal that ends this process. */
    struct sigaction current;
    if (sigaction(SIGPIPE, NULL, &current) == 0 && current.sa_handler == SIG_DFL) {
        signal(SIGPIPE, SIG_IGN);
    }
    const pid_t pid = fork();
    if (pid < 0) {
        close(to_child[0]);
        close(to_child[1]);
        close(from_child[0]);
        close(from_child[1]);
        return fail(channel, HG_TRANSPORT_CONNECT, "fork failed: %s", strerror(errno));
    }
    if (pid == 0) {
        /* Its own process group, so that closing can stop everything the command started (the shell,
         * an emulator, the server), not only the shell. */
        setpgid(0, 0);
        signal(SIGPIPE, SIG_DFL);
        if (dup2(to_child[0], 0) < 0 || dup2(from_child[1], 1) < 0) {
            _exit(127);
        }
        close(to_child[0]);
        close(to_child[1]);
        close(from_child[0]);
        close(from_child[1]);
        execl("/bin/sh", "sh", "-c", command, (char *)NULL);
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    (void)fcntl(to_child[1], F_SETFD, FD_CLOEXEC);
    (void)fcntl(from_child[0], F_SETFD, FD_CLOEXEC);
    hg_channel_init(channel, from_child[0], to_child[1], 0, timeout_ms);
    channel->child_pid = (int)pid;
    return HG_TRANSPORT_OK;
}

/* Split "HOST:PORT" (HOST may be "[v6]" or empty) into its parts: 0; -1 for another shape; -2 for a
 * port outside `lowest`..65535 (getaddrinfo would take 70000 and wrap it to 4464). */
static int split_address(const char *address, char *host, size_t host_size, char *port, size_t port_size, long lowest)
{
    const char *colon = strrchr(address, ':');
    if (colon == NULL || colon[1] == '\0') {
        return -1;
    }
    const char *start = address;
    size_t length = (size_t)(colon - address);
    if (length >= 2 && start[0] == '[' && start[length - 1] == ']') {
        start += 1;
        length -= 2;
    }
    if (length >= host_size || strlen(colon + 1) >= port_size) {
        return -1;
    }
    memcpy(host, start, length);
    host[length] = '\0';
    strcpy(port, colon + 1);
    for (const char *c = port; *c; ++c) {
        if (*c < '0' || *c > '9') {
            return -1;
        }
    }
    const long number = strtol(port, NULL, 10);
    return number < lowest || number > 65535 || strlen(port) > 5 ? -2 : 0;
}

static int open_tcp(hg_channel *channel, const char *address, int timeout_ms)
{
    char host[256];
    char port[16];
    const int split = split_address(address, host, sizeof host, port, sizeof port, 1);
    if (split == -2) {
        return fail(channel, HG_TRANSPORT_CONNECT, "\"tcp:%s\": the port must be 1..65535", address);
    }
    if (split != 0 || host[0] == '\0') {
        return fail(channel, HG_TRANSPORT_CONNECT, "\"tcp:%s\" is not tcp:HOST:PORT", address);
    }
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo *found = NULL;
    const int lookup = getaddrinfo(host, port, &hints, &found);
    if (lookup != 0) {
        return fail(channel, HG_TRANSPORT_CONNECT, "cannot resolve %s: %s", host, gai_strerror(lookup));
    }
    int fd = -1;
    int last_errno = 0;
    for (struct addrinfo *ai = found; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        set_nonblocking(fd);
        int result = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (result != 0 && errno == EINPROGRESS) {
            if (wait_ready(fd, POLLOUT, deadline_after(timeout_ms)) == 0) {
                int error = 0;
                socklen_t size = sizeof error;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
                result = error == 0 ? 0 : -1;
                errno = error;
            } else {
                errno = ETIMEDOUT;
            }
        }
        if (result != 0) {
            last_errno = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(found);
    if (fd < 0) {
        return fail(channel, HG_TRANSPORT_CONNECT, "cannot connect to %s:%s: %s", host, port, strerror(last_errno));
    }
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    hg_channel_init(channel, fd, fd, 1, timeout_ms);
    return HG_TRANSPORT_OK;
}

int hg_channel_open(hg_channel *channel, const char *spec, int timeout_ms)
{
    memset(channel, 0, sizeof *channel);
    channel->read_fd = -1;
    channel->write_fd = -1;
    channel->timeout_ms = timeout_ms;
    if (strncmp(spec, "exec:", 5) == 0 && spec[5] != '\0') {
        return open_exec(channel, spec + 5, timeout_ms);
    }
    if (strncmp(spec, "tcp:", 4) == 0) {
        return open_tcp(channel, spec + 4, timeout_ms);
    }
    return fail(channel, HG_TRANSPORT_CONNECT, "\"%s\" is not a device endpoint; expected exec:COMMAND or tcp:HOST:PORT",
                spec);
}

static void sleep_ms(long ms)
{
    struct timespec delay = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&delay, &delay) != 0 && errno == EINTR) {
    }
}

void hg_channel_close(hg_channel *channel)
{
    if (channel->write_fd >= 0 && channel->write_fd != channel->read_fd) {
        close(channel->write_fd);
    }
    if (channel->read_fd >= 0) {
        close(channel->read_fd);
    }
    channel->read_fd = -1;
    channel->write_fd = -1;
    hg_wipe(channel->seal_key, sizeof channel->seal_key);
    channel->sealed = 0;
    if (channel->child_pid > 0) {
        /* The server sees end-of-file and exits; one that does not within the timeout is killed. */
        const pid_t pid = (pid_t)channel->child_pid;
        int waited = 0;
        const int limit = channel->timeout_ms > 0 ? channel->timeout_ms : HG_TRANSPORT_DEFAULT_TIMEOUT_MS;
        while (waitpid(pid, NULL, WNOHANG) == 0) {
            if (waited >= limit) {
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                break;
            }
            sleep_ms(5);
            waited += 5;
        }
        channel->child_pid = 0;
    }
}

/* Whether `address` is a loopback address: only this machine's processes can reach it. */
static int is_loopback(const struct sockaddr *address)
{
    if (address->sa_family == AF_INET) {
        return (ntohl(((const struct sockaddr_in *)(const void *)address)->sin_addr.s_addr) >> 24) == 127u;
    }
    if (address->sa_family == AF_INET6) {
        const struct in6_addr *v6 = &((const struct sockaddr_in6 *)(const void *)address)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(v6) || (IN6_IS_ADDR_V4MAPPED(v6) && v6->s6_addr[12] == 127u);
    }
    return 0;
}

int hg_listen(const char *address, int allow_remote, int *listen_fd, int *port, int *is_remote, char *error,
              size_t error_size)
{
    char host[256];
    char port_text[16];
    const int split = split_address(address, host, sizeof host, port_text, sizeof port_text, 0);
    if (split == -2) {
        snprintf(error, error_size, "--listen %s: the port must be 0..65535 (0: any free port)", address);
        return HG_TRANSPORT_CONNECT;
    }
    if (split != 0) {
        snprintf(error, error_size, "--listen %s: expected ADDR:PORT (e.g. 127.0.0.1:5000, or :0 for any free port)",
                 address);
        return HG_TRANSPORT_CONNECT;
    }
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    struct addrinfo *found = NULL;
    /* Loopback unless an address is given: a device server is not for the whole network by default. */
    const int lookup = getaddrinfo(host[0] != '\0' ? host : "127.0.0.1", port_text, &hints, &found);
    if (lookup != 0) {
        snprintf(error, error_size, "--listen %s: %s", address, gai_strerror(lookup));
        return HG_TRANSPORT_CONNECT;
    }
    *is_remote = !is_loopback(found->ai_addr);
    if (*is_remote && !allow_remote) {
        snprintf(error, error_size,
                 "--listen %s: not a loopback address, so other machines could reach the device; pass --allow-remote "
                 "to serve the network (authenticated by the key, not encrypted), or listen on 127.0.0.1",
                 address);
        freeaddrinfo(found);
        return HG_TRANSPORT_CONNECT;
    }
    int fd = socket(found->ai_family, found->ai_socktype, found->ai_protocol);
    const int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0
        || bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 16) != 0) {
        snprintf(error, error_size, "--listen %s: %s", address, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        freeaddrinfo(found);
        return HG_TRANSPORT_CONNECT;
    }
    freeaddrinfo(found);
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    struct sockaddr_storage bound;
    socklen_t size = sizeof bound;
    getsockname(fd, (struct sockaddr *)&bound, &size);
    *port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    *listen_fd = fd;
    return HG_TRANSPORT_OK;
}

#endif /* !HG_TRANSPORT_UART */

void hg_escape_text(const void *text, size_t bytes, char *out, size_t out_size)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)text;
    size_t used = 0;
    if (out_size == 0) {
        return;
    }
    for (size_t i = 0; i < bytes; ++i) {
        const int plain = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\';
        const size_t need = (plain ? 1 : 4) + (i + 1 < bytes ? 3 : 0);  /* and room for "..." unless the last */
        if (used + need + 1 > out_size) {
            if (used + 4 <= out_size) {
                memcpy(out + used, "...", 3);
                used += 3;
            }
            break;
        }
        if (plain) {
            out[used++] = (char)p[i];
        } else {
            out[used++] = '\\';
            out[used++] = 'x';
            out[used++] = digits[p[i] >> 4];
            out[used++] = digits[p[i] & 0xfu];
        }
    }
    out[used] = '\0';
}

#if defined(HG_TRANSPORT_UART)
/* After a refusal: drop what the peer still sends (at most 1 MiB) until the line has been quiet for
 * HG_UART_QUIET_MS, so that the rest of a refused frame is not read as the next one's header. Not
 * `ms`: on a line the next peer's hello may follow soon after, and must not be dropped with it. */
#define HG_UART_QUIET_MS 20
void hg_channel_linger(hg_channel *channel, int ms)
{
    (void)channel;
    (void)ms;
    int64_t quiet_until = hg_uart_now_ms() + HG_UART_QUIET_MS;
    for (size_t dropped = 0; dropped < ((size_t)1 << 20);) {
        if (hg_uart_read_byte(quiet_until) < 0) {
            return;
        }
        dropped += 1;
        quiet_until = hg_uart_now_ms() + HG_UART_QUIET_MS;
    }
}
#else
void hg_channel_linger(hg_channel *channel, int ms)
{
    if (!channel->is_socket || channel->read_fd < 0) {
        return;
    }
    (void)shutdown(channel->write_fd, SHUT_WR);
    const int64_t deadline = deadline_after(ms);
    unsigned char sink[4096];
    for (size_t dropped = 0; dropped < ((size_t)1 << 20);) {
        if (wait_ready(channel->read_fd, POLLIN, deadline) != 0) {
            return;
        }
        const ssize_t got = read(channel->read_fd, sink, sizeof sink);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
            return;
        }
        dropped += got > 0 ? (size_t)got : 0u;
    }
}

void hg_channel_kill(hg_channel *channel)
{
    if (channel->child_pid > 0) {
        kill(-(pid_t)channel->child_pid, SIGKILL);
        kill((pid_t)channel->child_pid, SIGKILL);
    }
    hg_channel_close(channel);
}
#endif /* HG_TRANSPORT_UART */
