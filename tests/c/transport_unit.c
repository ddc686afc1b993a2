/* Unit checks of templates/runtime/hg_transport.c, hg_auth.c and hg_server.c, built with
 * -fsanitize=address,undefined by tests/test_transport.py. `transport_unit crc TEXT` prints the
 * CRC-32 of TEXT, `transport_unit sha256 HEX` the SHA-256 of the bytes HEX, `transport_unit hmac KEYHEX
 * HEX` their HMAC-SHA256, `transport_unit escape HEX` the bytes as hg_escape_text prints them;
 * `transport_unit` alone runs the checks below and prints "ok" (or the first failure, exit 1). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hg_auth.h"
#include "hg_runtime.h"
#include "hg_server.h"
#include "hg_transport.h"

#include "unit_check.h"

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
    int is_remote = 1;
    CHECK(hg_listen(":0", 0, &listen_fd, &port, &is_remote, error, sizeof error) == HG_TRANSPORT_OK && port > 0);
    CHECK(!is_remote);
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

/* Ports outside 1..65535 (0..65535 to listen) and non-loopback listeners are refused by name. */
static int ports_and_addresses(void)
{
    hg_channel channel;
    CHECK(hg_channel_open(&channel, "tcp:127.0.0.1:70000", 100) == HG_TRANSPORT_CONNECT);
    CHECK(strstr(channel.error, "the port must be 1..65535") != NULL);
    CHECK(hg_channel_open(&channel, "tcp:127.0.0.1:0", 100) == HG_TRANSPORT_CONNECT);
    CHECK(strstr(channel.error, "the port must be 1..65535") != NULL);
    CHECK(hg_channel_open(&channel, "tcp:127.0.0.1:0000004464", 100) == HG_TRANSPORT_CONNECT);
    int fd, port, is_remote;
    char error[256];
    CHECK(hg_listen("127.0.0.1:65536", 0, &fd, &port, &is_remote, error, sizeof error) == HG_TRANSPORT_CONNECT);
    CHECK(strstr(error, "the port must be 0..65535") != NULL);
    CHECK(hg_listen("0.0.0.0:0", 0, &fd, &port, &is_remote, error, sizeof error) == HG_TRANSPORT_CONNECT);
    CHECK(strstr(error, "--allow-remote") != NULL);
    CHECK(hg_listen("0.0.0.0:0", 1, &fd, &port, &is_remote, error, sizeof error) == HG_TRANSPORT_OK && is_remote);
    close(fd);
    CHECK(hg_listen("127.0.0.2:0", 0, &fd, &port, &is_remote, error, sizeof error) == HG_TRANSPORT_OK && !is_remote);
    close(fd);
    return 0;
}

/* A frame trickled a byte every 40 ms fails when its deadline passes (150 ms), not after
 * 20 x 40 ms: the deadline is the frame's, not each read's. */
static int trickle_meets_the_frame_deadline(void)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    const pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        close(fds[0]);
        const unsigned char bytes[HG_TRANSPORT_HEADER_SIZE] = { 'H', 'G', 'T', 'P' };
        for (size_t i = 0; i < sizeof bytes; ++i) {
            if (write(fds[1], bytes + i, 1) != 1) {
                _exit(1);
            }
            struct timespec pause = { 0, 40000000L };
            nanosleep(&pause, NULL);
        }
        _exit(0);
    }
    close(fds[1]);
    hg_channel reader;
    hg_channel_init(&reader, fds[0], -1, 0, 150);
    hg_frame_header header;
    const double start = now_ms();
    CHECK(hg_read_header(&reader, &header, 150) == HG_TRANSPORT_TIMEOUT);
    const double took = now_ms() - start;
    CHECK(took >= 140 && took < 400);
    CHECK(strstr(reader.error, "no whole frame within 150 ms") != NULL);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(fds[0]);
    return 0;
}

/* A fake device for hg_serve: its whole memory is its state block. */
static unsigned char fake_block[256];
static struct hg_device fake_bind(void *state);

static int fake_alloc(struct hg_device *device, uint64_t bytes)
{
    (void)device;
    return bytes <= sizeof fake_block ? HG_OK : HG_ERR_CAPACITY;
}

static int fake_copy_in(struct hg_device *device, uint64_t offset, const void *src, uint64_t bytes)
{
    memcpy((unsigned char *)device->state + offset, src, (size_t)bytes);
    return HG_OK;
}

static int fake_copy_out(struct hg_device *device, void *dst, uint64_t offset, uint64_t bytes)
{
    memcpy(dst, (unsigned char *)device->state + offset, (size_t)bytes);
    return HG_OK;
}

static int fake_invoke(struct hg_device *device, uint32_t program)
{
    (void)device;
    (void)program;
    return HG_OK;
}

static int fake_wait(struct hg_device *device)
{
    (void)device;
    return HG_OK;
}

static const hg_device_ops fake_ops = { fake_alloc, fake_copy_in, fake_copy_out, fake_invoke, fake_wait };

static struct hg_device fake_bind(void *state)
{
    struct hg_device device = { &fake_ops, NULL, state };
    return device;
}

static void fake_reset(void *state)
{
    (void)state;
}

/* Talk to hg_serve on a socket pair: the handshake, a copy_in and a copy_out of `bytes` at 0. */
static int client_session(int fd, const hg_key *key, const hg_served_device *device, const unsigned char *write_bytes,
                          unsigned char *read_back, size_t bytes)
{
    hg_channel channel;
    hg_channel_init(&channel, fd, fd, 1, 1000);
    unsigned char hello[4 + HG_NONCE_SIZE + HG_PLAN_HASH_SIZE + 8];
    const size_t name_length = strlen(device->device_name);
    hg_put_u32(hello, HG_TRANSPORT_VERSION);
    CHECK(hg_random_bytes(hello + 4, HG_NONCE_SIZE) == 0);
    memcpy(hello + 4 + HG_NONCE_SIZE, device->plan_hash, HG_PLAN_HASH_SIZE);
    memcpy(hello + 4 + HG_NONCE_SIZE + HG_PLAN_HASH_SIZE, device->device_name, name_length);
    const uint32_t hello_length = (uint32_t)(4 + HG_NONCE_SIZE + HG_PLAN_HASH_SIZE + name_length);
    CHECK(hg_send_frame(&channel, HG_MSG_HELLO, 1, hello, hello_length, NULL, 0) == HG_TRANSPORT_OK);
    hg_frame_header header;
    unsigned char reply[4 + 4 + HG_NONCE_SIZE + HG_SHA256_SIZE];
    CHECK(hg_read_header(&channel, &header, 1000) == HG_TRANSPORT_OK && header.length == sizeof reply);
    CHECK(hg_read_payload(&channel, &header, reply, sizeof reply, NULL) == HG_TRANSPORT_OK);
    unsigned char proof[HG_SHA256_SIZE];
    hg_handshake_proof(key, HG_PROOF_SERVER, hello + 4, reply + 8, device->plan_hash, HG_TRANSPORT_VERSION,
                       device->device_name, name_length, proof);
    CHECK(memcmp(proof, reply + 8 + HG_NONCE_SIZE, HG_SHA256_SIZE) == 0);
    hg_handshake_proof(key, HG_PROOF_CLIENT, hello + 4, reply + 8, device->plan_hash, HG_TRANSPORT_VERSION,
                       device->device_name, name_length, proof);
    CHECK(hg_send_frame(&channel, HG_MSG_AUTH, 2, proof, sizeof proof, NULL, 0) == HG_TRANSPORT_OK);
    unsigned char session_key[HG_SHA256_SIZE];
    hg_handshake_proof(key, HG_SESSION_KEY, hello + 4, reply + 8, device->plan_hash, HG_TRANSPORT_VERSION,
                       device->device_name, name_length, session_key);
    hg_channel_seal(&channel, session_key, 0);
    unsigned char opened[4 + 12];
    CHECK(hg_read_header(&channel, &header, 1000) == HG_TRANSPORT_OK && header.type == (HG_MSG_AUTH | HG_MSG_REPLY));
    CHECK(hg_read_payload(&channel, &header, opened, sizeof opened, NULL) == HG_TRANSPORT_OK);
    CHECK(hg_get_u32(opened) == 0 && hg_get_u64(opened + 4) == device->memory_size);
    unsigned char args[16];
    hg_put_u64(args, 0);
    hg_put_u64(args + 8, bytes);
    unsigned char status[4];
    if (write_bytes != NULL) {
        CHECK(hg_send_frame(&channel, HG_MSG_COPY_IN, 3, args, 16, write_bytes, (uint32_t)bytes) == HG_TRANSPORT_OK);
        CHECK(hg_read_header(&channel, &header, 1000) == HG_TRANSPORT_OK && header.length == 4);
        CHECK(hg_read_payload(&channel, &header, status, 4, NULL) == HG_TRANSPORT_OK && hg_get_u32(status) == 0);
    }
    CHECK(hg_send_frame(&channel, HG_MSG_COPY_OUT, 4, args, 16, NULL, 0) == HG_TRANSPORT_OK);
    CHECK(hg_read_header(&channel, &header, 1000) == HG_TRANSPORT_OK && header.length == 4 + bytes);
    CHECK(hg_read_payload(&channel, &header, status, 4, read_back) == HG_TRANSPORT_OK && hg_get_u32(status) == 0);
    return 0;
}

/* hg_serve zeroes the device's memory when a session opens and when it ends: two sessions in one
 * process (what pipe mode and a reused state block would do) never see each other's bytes. */
static int sessions_start_and_end_on_zeroed_memory(void)
{
    hg_key key = { { 0 }, 32 };
    CHECK(hg_random_bytes(key.bytes, key.length) == 0);
    hg_served_device device = { "unit/device", "unit", fake_bind, fake_reset, fake_block, sizeof fake_block,
                                sizeof fake_block, 1, { 0 } };
    memset(device.plan_hash, 0x5a, sizeof device.plan_hash);
    memset(fake_block, 0xee, sizeof fake_block);  /* what an earlier session left */
    unsigned char secret[64], back[64];
    memset(secret, 0xa5, sizeof secret);
    for (int round = 0; round < 2; ++round) {
        int pair[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
        const pid_t child = fork();
        CHECK(child >= 0);
        if (child == 0) {
            close(pair[0]);
            const int failed = client_session(pair[1], &key, &device, round == 0 ? secret : NULL, back, sizeof back);
            const unsigned char zeros[64] = { 0 };
            _exit(failed ? 2 : memcmp(back, round == 0 ? secret : zeros, sizeof back) == 0 ? 0 : 3);
        }
        close(pair[1]);
        hg_channel channel;
        hg_channel_init(&channel, pair[0], pair[0], 1, 1000);
        CHECK(hg_serve(&channel, &device, &key) == HG_SESSION_CLEAN);
        close(pair[0]);
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        for (size_t i = 0; i < sizeof fake_block; ++i) {
            CHECK(fake_block[i] == 0);  /* and nothing stays behind */
        }
    }
    return 0;
}

static size_t from_hex(const char *hex, unsigned char *out, size_t room)
{
    size_t n = 0;
    for (; hex[0] != '\0' && hex[1] != '\0' && n < room; hex += 2) {
        char pair[3] = { hex[0], hex[1], '\0' };
        out[n++] = (unsigned char)strtoul(pair, NULL, 16);
    }
    return n;
}

static void print_hex(const unsigned char *bytes, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        printf("%02x", bytes[i]);
    }
    printf("\n");
}

int main(int argc, char **argv)
{
    static unsigned char data[1 << 16];
    if (argc == 3 && strcmp(argv[1], "crc") == 0) {
        printf("%08x\n", hg_crc32(argv[2], strlen(argv[2])));
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "sha256") == 0) {
        hg_sha256 sha;
        unsigned char digest[HG_SHA256_SIZE];
        hg_sha256_init(&sha);
        hg_sha256_update(&sha, data, from_hex(argv[2], data, sizeof data));
        hg_sha256_final(&sha, digest);
        print_hex(digest, sizeof digest);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "hmac") == 0) {
        unsigned char key[512], mac[HG_SHA256_SIZE];
        const size_t key_bytes = from_hex(argv[2], key, sizeof key);
        const hg_bytes part = { data, from_hex(argv[3], data, sizeof data) };
        hg_hmac_sha256(key, key_bytes, &part, 1, mac);
        print_hex(mac, sizeof mac);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "escape") == 0) {
        char out[256];
        hg_escape_text(data, from_hex(argv[2], data, sizeof data), out, sizeof out);
        printf("%s\n", out);
        return 0;
    }
    CHECK(hg_crc32("123456789", 9) == 0xCBF43926u);
    CHECK(hg_crc32("", 0) == 0u);
    CHECK(hg_crc32_update(hg_crc32("1234", 4), "56789", 5) == 0xCBF43926u);
    if (round_trip() || corrupted_payload_fails_the_crc() || bad_magic_and_oversized_length() || silence_times_out()
        || end_of_stream() || endpoints() || ports_and_addresses() || trickle_meets_the_frame_deadline()
        || sessions_start_and_end_on_zeroed_memory()) {
        return 1;
    }
    printf("ok\n");
    return 0;
}
