/* hetgen remote device: the client side of the transport. See hg_remote.h. */
#define _POSIX_C_SOURCE 200809L
#include "hg_remote.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hg_runtime.h"
#include "hg_threads.h"

static const char *const call_names[] = { "?",    "hello", "alloc", "copy_in", "copy_out",
                                          "invoke", "wait", "reset", "auth" };

static const char *call_name(uint16_t type)
{
    return type < sizeof call_names / sizeof call_names[0] ? call_names[type] : "?";
}

static hg_remote *remote_of(struct hg_device *device)
{
    /* hg_device.config is const for in-process devices; a remote device's connection is process state. */
    return (hg_remote *)(uintptr_t)device->config;
}

static int failed(hg_remote *remote, const char *call, const char *what)
{
    fprintf(stderr, "hetgen: device %s (%s): %s: %s\n", remote->name, remote->endpoint ? remote->endpoint : "no endpoint",
            call, what);
    remote->state = -1;
    hg_channel_kill(&remote->channel);
    return HG_ERR_DEVICE;
}

static void at_exit(void)
{
    hg_remote_close_all();
}

/* Send one request and read its reply: the status, then up to `reply_length` result bytes. */
static int call(hg_remote *remote, uint16_t type, const void *args, uint32_t args_length, const void *data,
                uint32_t data_length, void *reply, uint32_t reply_length);
static int send_request(hg_remote *remote, uint16_t type, const void *args, uint32_t args_length, const void *data,
                        uint32_t data_length);
static int read_reply(hg_remote *remote, uint16_t type, void *reply, uint32_t reply_length);

/* The key named by --key (or HG_TRANSPORT_KEY), read once for every remote device. */
static const char *key_option;
static hg_key transport_key;
static int key_loaded;

static int load_key(hg_remote *remote)
{
    if (key_loaded) {
        return HG_OK;
    }
    const char *path = hg_key_path(key_option);
    if (path == NULL) {
        return failed(remote, "connect",
                      "no transport key: pass --key FILE (the board build writes board/transport.key) or set "
                      "HG_TRANSPORT_KEY");
    }
    char error[512];
    if (hg_key_load(&transport_key, path, error, sizeof error) != 0) {
        return failed(remote, "connect", error);
    }
    key_loaded = 1;
    return HG_OK;
}

/* The handshake of hg_auth.h: the hello and the server's proof, then this side's proof. */
static int handshake(hg_remote *remote)
{
    enum { FIXED = 4 + HG_NONCE_SIZE + HG_PLAN_HASH_SIZE };
    unsigned char hello[FIXED + HG_DEVICE_NAME_MAX];
    const size_t name_length = strnlen(remote->name, HG_DEVICE_NAME_MAX);
    const unsigned char *client_nonce = hello + 4;
    hg_put_u32(hello, HG_TRANSPORT_VERSION);
    if (hg_random_bytes(hello + 4, HG_NONCE_SIZE) != 0) {
        return failed(remote, "hello", "no random numbers for a nonce");
    }
    memcpy(hello + 4 + HG_NONCE_SIZE, remote->plan_hash, HG_PLAN_HASH_SIZE);
    memcpy(hello + FIXED, remote->name, name_length);
    unsigned char challenge[4 + HG_NONCE_SIZE + HG_SHA256_SIZE];
    int status = call(remote, HG_MSG_HELLO, hello, (uint32_t)(FIXED + name_length), NULL, 0, challenge, sizeof challenge);
    if (status != HG_OK) {
        return remote->state < 0 ? status : failed(remote, "hello", "the server refused the hello");
    }
    const uint32_t version = hg_get_u32(challenge);
    if (version != HG_TRANSPORT_VERSION) {
        char message[160];
        snprintf(message, sizeof message, "protocol version mismatch: the server speaks version %u, this program %u",
                 version, HG_TRANSPORT_VERSION);
        return failed(remote, "hello", message);
    }
    const unsigned char *server_nonce = challenge + 4;
    unsigned char proof[HG_SHA256_SIZE];
    hg_handshake_proof(&transport_key, HG_PROOF_SERVER, client_nonce, server_nonce, remote->plan_hash, version,
                       remote->name, name_length, proof);
    if (!hg_equal_secret(proof, challenge + 4 + HG_NONCE_SIZE, HG_SHA256_SIZE)) {
        return failed(remote, "hello",
                      "the server did not prove that it holds the transport key (another build's key, or not a "
                      "server of this build): pass both programs the same --key");
    }
    hg_handshake_proof(&transport_key, HG_PROOF_CLIENT, client_nonce, server_nonce, remote->plan_hash, version,
                       remote->name, name_length, proof);
    unsigned char session_key[HG_SHA256_SIZE];
    hg_handshake_proof(&transport_key, HG_SESSION_KEY, client_nonce, server_nonce, remote->plan_hash, version,
                       remote->name, name_length, session_key);
    unsigned char opened[8 + 4];
    status = send_request(remote, HG_MSG_AUTH, proof, sizeof proof, NULL, 0);
    if (status == HG_OK) {
        hg_channel_seal(&remote->channel, session_key, 0);  /* the auth's reply is the first sealed frame */
        status = read_reply(remote, HG_MSG_AUTH, opened, sizeof opened);
    }
    hg_wipe(session_key, sizeof session_key);
    if (status != HG_OK) {
        return remote->state < 0 ? status : failed(remote, "auth", "the server refused the proof");
    }
    const uint64_t memory_size = hg_get_u64(opened);
    const uint32_t num_programs = hg_get_u32(opened + 8);
    if (memory_size != remote->memory_size || num_programs != remote->num_programs) {
        char message[256];
        snprintf(message, sizeof message,
                 "the server was built for another model (%llu bytes of device memory and %u programs; this program "
                 "expects %llu and %u): rebuild both from one generated project",
                 (unsigned long long)memory_size, num_programs, (unsigned long long)remote->memory_size,
                 remote->num_programs);
        return failed(remote, "auth", message);
    }
    return HG_OK;
}

static int connect_remote(hg_remote *remote)
{
    if (remote->state == 1) {
        return HG_OK;
    }
    if (remote->state < 0) {
        return HG_ERR_DEVICE;  /* reported when it failed */
    }
    static int exit_hook;
    if (!exit_hook) {
        exit_hook = 1;
        atexit(at_exit);
    }
    if (remote->endpoint == NULL) {
        remote->endpoint = getenv(remote->env_name);
    }
    if (remote->endpoint == NULL || remote->endpoint[0] == '\0') {
        char message[512];
        snprintf(message, sizeof message,
                 "no endpoint: pass --device %s=exec:SERVER_COMMAND (or =tcp:HOST:PORT) or set %s", remote->name,
                 remote->env_name);
        remote->endpoint = NULL;
        return failed(remote, "connect", message);
    }
    if (load_key(remote) != HG_OK) {
        return HG_ERR_DEVICE;
    }
    if (hg_channel_open(&remote->channel, remote->endpoint, hg_transport_timeout_from_env()) != HG_TRANSPORT_OK) {
        return failed(remote, "connect", remote->channel.error);
    }
    remote->state = 1;
    return handshake(remote);
}

static int send_request(hg_remote *remote, uint16_t type, const void *args, uint32_t args_length, const void *data,
                        uint32_t data_length)
{
    hg_channel *channel = &remote->channel;
    if (hg_send_frame(channel, type, ++remote->sequence, args, args_length, data, data_length) != HG_TRANSPORT_OK) {
        return failed(remote, call_name(type), channel->error);
    }
    return HG_OK;
}

/* A request and its reply. The run's worker pool sleeps meanwhile: the device works, or the link
   carries bytes, for hundreds of microseconds at least (a UART's frame: 794 us), and cores spinning
   for the next kernel would only burn power (hg_threads.h). */
static int call(hg_remote *remote, uint16_t type, const void *args, uint32_t args_length, const void *data,
                uint32_t data_length, void *reply, uint32_t reply_length)
{
    hg_threads_wait_begin();
    const int sent = send_request(remote, type, args, args_length, data, data_length);
    const int status = sent != HG_OK ? sent : read_reply(remote, type, reply, reply_length);
    hg_threads_wait_end();
    return status;
}

static int read_reply(hg_remote *remote, uint16_t type, void *reply, uint32_t reply_length)
{
    const char *name = call_name(type);
    hg_channel *channel = &remote->channel;
    const uint32_t sequence = remote->sequence;
    hg_frame_header header;
    if (hg_read_header(channel, &header, channel->timeout_ms) != HG_TRANSPORT_OK) {
        return failed(remote, name, channel->error);
    }
    char message[320];
    if (header.version != HG_TRANSPORT_VERSION) {
        snprintf(message, sizeof message, "protocol version mismatch: the server speaks version %u, this program %u",
                 header.version, HG_TRANSPORT_VERSION);
        return failed(remote, name, message);
    }
    if (header.type == HG_MSG_ERROR) {
        unsigned char text[4 + 256];
        memset(text, 0, sizeof text);
        if (header.length > sizeof text - 1) {
            return failed(remote, name, "the server refused the request and sent an oversized error");
        }
        if (hg_read_payload(channel, &header, text, header.length, NULL) != HG_TRANSPORT_OK) {
            return failed(remote, name, channel->error);
        }
        char escaped[4 * 64 + 4];
        hg_escape_text(text + 4, strnlen((const char *)text + 4, header.length > 4 ? header.length - 4 : 0), escaped,
                       sizeof escaped);
        snprintf(message, sizeof message, "the server refused the request: %s", escaped);
        return failed(remote, name, message);
    }
    if (header.type != (HG_MSG_REPLY | type) || header.sequence != sequence) {
        snprintf(message, sizeof message, "protocol error: expected the reply to %s #%u, got message type 0x%x #%u", name,
                 sequence, header.type, header.sequence);
        return failed(remote, name, message);
    }
    if (header.length < 4 || header.length > 4 + 256 + (uint64_t)reply_length) {
        snprintf(message, sizeof message, "protocol error: a %u-byte reply to %s", header.length, name);
        return failed(remote, name, message);
    }
    unsigned char status_bytes[4];
    /* A success carries exactly the results; a refusal carries a message instead. */
    unsigned char text[257];
    memset(text, 0, sizeof text);
    const uint32_t rest = header.length - 4;
    int read_status;
    if (rest == reply_length) {
        read_status = hg_read_payload(channel, &header, status_bytes, 4, reply);
    } else if (rest <= 256) {
        read_status = hg_read_payload(channel, &header, status_bytes, 4, text);
    } else {
        snprintf(message, sizeof message, "protocol error: a %u-byte reply to %s", header.length, name);
        return failed(remote, name, message);
    }
    if (read_status != HG_TRANSPORT_OK) {
        return failed(remote, name, channel->error);
    }
    const int32_t status = (int32_t)hg_get_u32(status_bytes);
    if (status != HG_OK) {
        /* The device refused the call (memory, program index): the connection stays usable. */
        char escaped[4 * 64 + 4];
        hg_escape_text(text, strnlen((const char *)text, rest), escaped, sizeof escaped);
        fprintf(stderr, "hetgen: device %s (%s): %s refused: %s (status %d)\n", remote->name, remote->endpoint, name,
                text[0] ? escaped : "no reason given", (int)status);
        return status;
    }
    if (rest != reply_length) {
        snprintf(message, sizeof message, "protocol error: a %u-byte reply to %s, expected %u", header.length, name,
                 4 + reply_length);
        return failed(remote, name, message);
    }
    return HG_OK;
}

static int remote_alloc(struct hg_device *device, uint64_t bytes)
{
    hg_remote *remote = remote_of(device);
    int status = connect_remote(remote);
    if (status != HG_OK) {
        return status;
    }
    unsigned char args[8];
    hg_put_u64(args, bytes);
    return call(remote, HG_MSG_ALLOC, args, sizeof args, NULL, 0, NULL, 0);
}

static int remote_copy_in(struct hg_device *device, uint64_t dst_offset, const void *src, uint64_t bytes)
{
    hg_remote *remote = remote_of(device);
    int status = connect_remote(remote);
    if (status != HG_OK) {
        return status;
    }
    if (src == NULL || bytes > HG_TRANSPORT_MAX_PAYLOAD - 16) {
        return HG_ERR_ARGUMENT;
    }
    unsigned char args[16];
    hg_put_u64(args, dst_offset);
    hg_put_u64(args + 8, bytes);
    return call(remote, HG_MSG_COPY_IN, args, sizeof args, src, (uint32_t)bytes, NULL, 0);
}

static int remote_copy_out(struct hg_device *device, void *dst, uint64_t src_offset, uint64_t bytes)
{
    hg_remote *remote = remote_of(device);
    int status = connect_remote(remote);
    if (status != HG_OK) {
        return status;
    }
    if (dst == NULL || bytes > HG_TRANSPORT_MAX_PAYLOAD - 4) {
        return HG_ERR_ARGUMENT;
    }
    unsigned char args[16];
    hg_put_u64(args, src_offset);
    hg_put_u64(args + 8, bytes);
    return call(remote, HG_MSG_COPY_OUT, args, sizeof args, NULL, 0, dst, (uint32_t)bytes);
}

static int remote_invoke(struct hg_device *device, uint32_t program)
{
    hg_remote *remote = remote_of(device);
    int status = connect_remote(remote);
    if (status != HG_OK) {
        return status;
    }
    unsigned char args[4];
    hg_put_u32(args, program);
    return call(remote, HG_MSG_INVOKE, args, sizeof args, NULL, 0, NULL, 0);
}

static int remote_wait(struct hg_device *device)
{
    hg_remote *remote = remote_of(device);
    int status = connect_remote(remote);
    if (status != HG_OK) {
        return status;
    }
    return call(remote, HG_MSG_WAIT, NULL, 0, NULL, 0, NULL, 0);
}

const hg_device_ops hg_remote_ops = { remote_alloc, remote_copy_in, remote_copy_out, remote_invoke, remote_wait };

struct hg_device hg_remote_device(hg_remote *remote, void *state)
{
    struct hg_device device = { &hg_remote_ops, remote, state };
    return device;
}

void hg_remote_reset(hg_remote *remote)
{
    if (connect_remote(remote) == HG_OK) {
        remote->runs += 1;
        (void)call(remote, HG_MSG_RESET, NULL, 0, NULL, 0, NULL, 0);
    }
}

int hg_remote_options(int *argc, char **argv)
{
    int kept = 1;
    for (int i = 1; i < *argc; ++i) {
        const char *value = NULL;
        if (strcmp(argv[i], "--key") == 0 || strncmp(argv[i], "--key=", 6) == 0) {
            if (argv[i][5] == '=') {
                key_option = argv[i] + 6;
            } else if (i + 1 < *argc) {
                key_option = argv[++i];
            } else {
                fprintf(stderr, "--key needs FILE, the transport key (the board build writes board/transport.key)\n");
                return -1;
            }
            continue;
        }
        if (strcmp(argv[i], "--device") == 0) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "--device needs NAME=ENDPOINT (exec:COMMAND or tcp:HOST:PORT)\n");
                return -1;
            }
            value = argv[++i];
        } else if (strncmp(argv[i], "--device=", 9) == 0) {
            value = argv[i] + 9;
        } else {
            argv[kept++] = argv[i];
            continue;
        }
        const char *equals = strchr(value, '=');
        hg_remote *found = NULL;
        for (size_t d = 0; equals != NULL && d < hg_remote_num_devices; ++d) {
            const char *name = hg_remote_devices[d]->name;
            if (strlen(name) == (size_t)(equals - value) && strncmp(name, value, (size_t)(equals - value)) == 0) {
                found = hg_remote_devices[d];
            }
        }
        if (found == NULL) {
            fprintf(stderr, "--device %s: expected NAME=ENDPOINT with NAME one of:", value);
            for (size_t d = 0; d < hg_remote_num_devices; ++d) {
                fprintf(stderr, " %s", hg_remote_devices[d]->name);
            }
            fprintf(stderr, "\n");
            return -1;
        }
        found->endpoint = equals + 1;
    }
    argv[kept] = NULL;
    *argc = kept;
    return 0;
}

void hg_remote_close_all(void)
{
    const char *stats_path = getenv("HG_TRANSPORT_STATS");
    FILE *stats = stats_path != NULL && stats_path[0] != '\0' ? fopen(stats_path, "a") : NULL;
    for (size_t d = 0; d < hg_remote_num_devices; ++d) {
        hg_remote *remote = hg_remote_devices[d];
        if (stats != NULL && remote->state != 0) {
            const hg_transport_stats *s = &remote->channel.stats;
            fprintf(stats,
                    "{\"device\": \"%s\", \"runs\": %llu, \"bytes_sent\": %llu, \"bytes_received\": %llu, "
                    "\"messages_sent\": %llu, \"messages_received\": %llu, \"ok\": %s}\n",
                    remote->name, (unsigned long long)remote->runs, (unsigned long long)s->bytes_sent,
                    (unsigned long long)s->bytes_received, (unsigned long long)s->messages_sent,
                    (unsigned long long)s->messages_received, remote->state == 1 ? "true" : "false");
        }
        if (remote->state == 1) {
            hg_channel_close(&remote->channel);
            remote->state = 0;
        }
    }
    hg_wipe(&transport_key, sizeof transport_key);
    key_loaded = 0;
    if (stats != NULL) {
        fclose(stats);
    }
}
