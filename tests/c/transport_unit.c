/* Unit checks of templates/runtime/hg_transport.c, built with -fsanitize=address,undefined by
 * tests/test_transport.py. `transport_unit crc TEXT` prints the CRC-32 of TEXT; `transport_unit`
 * alone runs the checks below and prints "ok" (or the first failure, exit 1). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hg_transport.h"

#define CHECK(condition)                                                          \
    do {                                                                          \
        if (!(condition)) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
            return 1;                                                             \
        }                                                                         \
    } while (0)

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* A channel that reads what `writer` writes, in one process. */
static void pipe_channels(hg_channel *reader, hg_channel *writer, int timeout_ms)
{
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
    }
    hg_channel_init(reader, fds[0], -1, 0, timeout_ms);
    hg_channel_init(writer, -1, fds[1], 0, timeout_ms);
}

static void close_both(hg_channel *a, hg_channel *b)
{
    if (a->read_fd >= 0) {
        close(a->read_fd);
    }
    if (b->write_fd >= 0) {
        close(b->write_fd);
    }
}

static int round_trip(void)
{
    hg_channel reader, writer;
    pipe_channels(&reader, &writer, 1000);
    const char args[] = "args";
    const char data[] = "and the data";
    CHECK(hg_send_frame(&writer, HG_MSG_COPY_IN, 7u, args, 4, data, sizeof data) == HG_TRANSPORT_OK);
    hg_frame_header header;
    CHECK(hg_read_header(&reader, &header, 1000) == HG_TRANSPORT_OK);
    CHECK(header.version == HG_TRANSPORT_VERSION && header.type == HG_MSG_COPY_IN && header.sequence == 7u);
    CHECK(header.length == 4 + sizeof data);
    char head[4], tail[sizeof data];
    CHECK(hg_read_payload(&reader, &header, head, 4, tail) == HG_TRANSPORT_OK);
    CHECK(memcmp(head, args, 4) == 0 && memcmp(tail, data, sizeof data) == 0);
    CHECK(writer.stats.messages_sent == 1 && reader.stats.messages_received == 1);
    CHECK(writer.stats.bytes_sent == HG_TRANSPORT_HEADER_SIZE + 4 + sizeof data);
    CHECK(reader.stats.bytes_received == writer.stats.bytes_sent);
    close_both(&reader, &writer);
    return 0;
}

static int corrupted_payload_fails_the_crc(void)
{
    hg_channel reader, writer;
    pipe_channels(&reader, &writer, 1000);
    unsigned char bytes[HG_TRANSPORT_HEADER_SIZE + 3];
    /* A valid frame, with one payload bit flipped on the way. */
    hg_channel capture;
    int fds[2];
    CHECK(pipe(fds) == 0);
    hg_channel_init(&capture, -1, fds[1], 0, 1000);
    CHECK(hg_send_frame(&capture, HG_MSG_WAIT | HG_MSG_REPLY, 1u, "abc", 3, NULL, 0) == HG_TRANSPORT_OK);
    CHECK(read(fds[0], bytes, sizeof bytes) == (ssize_t)sizeof bytes);
    close(fds[0]);
    close(fds[1]);
    bytes[HG_TRANSPORT_HEADER_SIZE + 1] ^= 0x10;
    CHECK(write(writer.write_fd, bytes, sizeof bytes) == (ssize_t)sizeof bytes);
    hg_frame_header header;
    CHECK(hg_read_header(&reader, &header, 1000) == HG_TRANSPORT_OK);
    char payload[3];
    CHECK(hg_read_payload(&reader, &header, payload, 3, NULL) == HG_TRANSPORT_FRAME);
    CHECK(strstr(reader.error, "CRC-32") != NULL);
    close_both(&reader, &writer);
    return 0;
}

static int bad_magic_and_oversized_length(void)
{
    hg_channel reader, writer;
    pipe_channels(&reader, &writer, 1000);
    unsigned char bytes[HG_TRANSPORT_HEADER_SIZE] = { 'n', 'o', 'p', 'e' };
    CHECK(write(writer.write_fd, bytes, sizeof bytes) == (ssize_t)sizeof bytes);
    hg_frame_header header;
    CHECK(hg_read_header(&reader, &header, 1000) == HG_TRANSPORT_FRAME && strstr(reader.error, "magic") != NULL);
    hg_put_u32(bytes, HG_TRANSPORT_MAGIC);
    bytes[4] = HG_TRANSPORT_VERSION;
    hg_put_u32(bytes + 12, 0xffffffffu);
    CHECK(write(writer.write_fd, bytes, sizeof bytes) == (ssize_t)sizeof bytes);
    CHECK(hg_read_header(&reader, &header, 1000) == HG_TRANSPORT_FRAME && strstr(reader.error, "limit") != NULL);
    close_both(&reader, &writer);
    return 0;
}

static int silence_times_out(void)
{
    hg_channel reader, writer;
    pipe_channels(&reader, &writer, 150);
    hg_frame_header header;
    const double start = now_ms();
    CHECK(hg_read_header(&reader, &header, 150) == HG_TRANSPORT_TIMEOUT);
    const double took = now_ms() - start;
    CHECK(took >= 140 && took < 1000);
    /* Half a header, then silence: the rest is waited for with the channel's timeout too. */
    CHECK(write(writer.write_fd, "HGTP", 4) == 4);
    CHECK(hg_read_header(&reader, &header, 150) == HG_TRANSPORT_TIMEOUT);
    close_both(&reader, &writer);
    return 0;
}

static int end_of_stream(void)
{
    hg_channel reader, writer;
    pipe_channels(&reader, &writer, 1000);
    hg_frame_header header;
    CHECK(write(writer.write_fd, "HGTP", 4) == 4);
    close(writer.write_fd);
    CHECK(hg_read_header(&reader, &header, 1000) == HG_TRANSPORT_FRAME && strstr(reader.error, "truncated") != NULL);
    close(reader.read_fd);
    pipe_channels(&reader, &writer, 1000);
    close(writer.write_fd);
    CHECK(hg_read_header(&reader, &header, 1000) == HG_TRANSPORT_CLOSED);
    close(reader.read_fd);
    return 0;
}

static int endpoints(void)
{
    hg_channel channel;
    CHECK(hg_channel_open(&channel, "serial:/dev/ttyS0", 100) == HG_TRANSPORT_CONNECT);
    CHECK(strstr(channel.error, "exec:COMMAND or tcp:HOST:PORT") != NULL);
    CHECK(hg_channel_open(&channel, "tcp:localhost", 100) == HG_TRANSPORT_CONNECT);
    /* Nothing listens on the port just released by a listener. */
    int listen_fd, port;
    char error[256], spec[64];
    CHECK(hg_listen(":0", &listen_fd, &port, error, sizeof error) == HG_TRANSPORT_OK && port > 0);
    close(listen_fd);
    snprintf(spec, sizeof spec, "tcp:127.0.0.1:%d", port);
    CHECK(hg_channel_open(&channel, spec, 1000) == HG_TRANSPORT_CONNECT && strstr(channel.error, "cannot connect"));
    /* exec: a child that exits at once is a closed stream, and is reaped. */
    CHECK(hg_channel_open(&channel, "exec:exit 3", 1000) == HG_TRANSPORT_OK);
    hg_frame_header header;
    CHECK(hg_read_header(&channel, &header, 1000) == HG_TRANSPORT_CLOSED);
    hg_channel_close(&channel);
    CHECK(channel.child_pid == 0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "crc") == 0) {
        printf("%08x\n", hg_crc32(argv[2], strlen(argv[2])));
        return 0;
    }
    CHECK(hg_crc32("123456789", 9) == 0xCBF43926u);
    CHECK(hg_crc32("", 0) == 0u);
    CHECK(hg_crc32_update(hg_crc32("1234", 4), "56789", 5) == 0xCBF43926u);
    if (round_trip() || corrupted_payload_fails_the_crc() || bad_magic_and_oversized_length() || silence_times_out()
        || end_of_stream() || endpoints()) {
        return 1;
    }
    printf("ok\n");
    return 0;
}
