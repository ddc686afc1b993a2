/* hetgen transport authentication: SHA-256, HMAC-SHA256, key file, nonces. See hg_auth.h.
 *
 * A small implementation of its own rather than a library (OpenSSL, libsodium): the board programs
 * are linked statically for several cross toolchains, none of which ships a crypto library, and the
 * tests check this one against Python's hashlib and hmac (RFC 4231's vectors and random ones). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "hg_auth.h"

#include <string.h>

#if !defined(HG_TRANSPORT_UART)  /* a bare-metal server has its nonces and key from hg_uart.c */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif
#endif

static const uint32_t round_constants[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
};

static uint32_t rotate_right(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32u - n));
}

static void compress(uint32_t state[8], const unsigned char block[64])
{
    uint32_t w[64];
    for (unsigned i = 0; i < 16; ++i) {
        w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 | (uint32_t)block[4 * i + 2] << 8
             | (uint32_t)block[4 * i + 3];
    }
    for (unsigned i = 16; i < 64; ++i) {
        const uint32_t s0 = rotate_right(w[i - 15], 7) ^ rotate_right(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = rotate_right(w[i - 2], 17) ^ rotate_right(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (unsigned i = 0; i < 64; ++i) {
        const uint32_t t1 = h + (rotate_right(e, 6) ^ rotate_right(e, 11) ^ rotate_right(e, 25)) + ((e & f) ^ (~e & g))
                          + round_constants[i] + w[i];
        const uint32_t t2 = (rotate_right(a, 2) ^ rotate_right(a, 13) ^ rotate_right(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
}

void hg_sha256_init(hg_sha256 *sha)
{
    static const uint32_t initial[8] = { 0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                         0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u };
    memcpy(sha->state, initial, sizeof initial);
    sha->bytes = 0;
    sha->used = 0;
}

void hg_sha256_update(hg_sha256 *sha, const void *data, size_t bytes)
{
    const unsigned char *p = (const unsigned char *)data;
    sha->bytes += bytes;
    while (bytes > 0) {
        const size_t take = bytes < 64 - sha->used ? bytes : 64 - sha->used;
        memcpy(sha->block + sha->used, p, take);
        sha->used += take;
        p += take;
        bytes -= take;
        if (sha->used == 64) {
            compress(sha->state, sha->block);
            sha->used = 0;
        }
    }
}

void hg_sha256_final(hg_sha256 *sha, unsigned char digest[HG_SHA256_SIZE])
{
    const uint64_t bits = sha->bytes * 8u;
    const unsigned char one = 0x80;
    const unsigned char zero[64] = { 0 };
    hg_sha256_update(sha, &one, 1);
    hg_sha256_update(sha, zero, (120 - sha->used) % 64);  /* up to 56 bytes into the last block */
    unsigned char length[8];
    for (unsigned i = 0; i < 8; ++i) {
        length[i] = (unsigned char)(bits >> (56 - 8 * i));
    }
    hg_sha256_update(sha, length, 8);
    for (unsigned i = 0; i < 8; ++i) {
        digest[4 * i] = (unsigned char)(sha->state[i] >> 24);
        digest[4 * i + 1] = (unsigned char)(sha->state[i] >> 16);
        digest[4 * i + 2] = (unsigned char)(sha->state[i] >> 8);
        digest[4 * i + 3] = (unsigned char)sha->state[i];
    }
    hg_wipe(sha, sizeof *sha);
}

void hg_hmac_sha256(const unsigned char *key, size_t key_bytes, const hg_bytes *parts, size_t count,
                    unsigned char mac[HG_SHA256_SIZE])
{
    unsigned char block[64] = { 0 };
    hg_sha256 sha;
    if (key_bytes > sizeof block) {  /* RFC 2104: a key longer than a block is hashed first */
        hg_sha256_init(&sha);
        hg_sha256_update(&sha, key, key_bytes);
        hg_sha256_final(&sha, block);
    } else if (key_bytes > 0) {
        memcpy(block, key, key_bytes);
    }
    unsigned char pad[64];
    for (unsigned i = 0; i < 64; ++i) {
        pad[i] = block[i] ^ 0x36u;
    }
    unsigned char inner[HG_SHA256_SIZE];
    hg_sha256_init(&sha);
    hg_sha256_update(&sha, pad, sizeof pad);
    for (size_t i = 0; i < count; ++i) {
        hg_sha256_update(&sha, parts[i].data, parts[i].bytes);
    }
    hg_sha256_final(&sha, inner);
    for (unsigned i = 0; i < 64; ++i) {
        pad[i] = block[i] ^ 0x5cu;
    }
    hg_sha256_init(&sha);
    hg_sha256_update(&sha, pad, sizeof pad);
    hg_sha256_update(&sha, inner, sizeof inner);
    hg_sha256_final(&sha, mac);
    hg_wipe(block, sizeof block);
    hg_wipe(pad, sizeof pad);
}

int hg_equal_secret(const void *a, const void *b, size_t bytes)
{
    const unsigned char *x = (const unsigned char *)a;
    const unsigned char *y = (const unsigned char *)b;
    unsigned char difference = 0;
    for (size_t i = 0; i < bytes; ++i) {
        difference |= (unsigned char)(x[i] ^ y[i]);
    }
    return difference == 0;
}

void hg_wipe(void *buffer, size_t bytes)
{
    volatile unsigned char *p = (volatile unsigned char *)buffer;
    for (size_t i = 0; i < bytes; ++i) {
        p[i] = 0;
    }
}

#if !defined(HG_TRANSPORT_UART)
static int urandom_bytes(unsigned char *p, size_t bytes)
{
    const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    size_t done = 0;
    while (done < bytes) {
        const ssize_t got = read(fd, p + done, bytes - done);
        if (got > 0) {
            done += (size_t)got;
        } else if (got == 0 || errno != EINTR) {
            close(fd);
            errno = got == 0 ? EIO : errno;
            return -1;
        }
    }
    close(fd);
    return 0;
}

int hg_random_bytes(void *buffer, size_t bytes)
{
    unsigned char *p = (unsigned char *)buffer;
#if defined(__linux__)
    size_t done = 0;
    while (done < bytes) {
        const ssize_t got = getrandom(p + done, bytes - done, 0);
        if (got > 0) {
            done += (size_t)got;
        } else if (errno == ENOSYS) {
            return urandom_bytes(p + done, bytes - done);  /* a kernel (or emulator) older than getrandom */
        } else if (errno != EINTR) {
            return -1;
        }
    }
    return 0;
#else
    return urandom_bytes(p, bytes);
#endif
}

const char *hg_key_path(const char *option)
{
    if (option != NULL && option[0] != '\0') {
        return option;
    }
    const char *from_env = getenv("HG_TRANSPORT_KEY");
    return from_env != NULL && from_env[0] != '\0' ? from_env : NULL;
}

int hg_key_load(hg_key *key, const char *path, char *error, size_t error_size)
{
    memset(key, 0, sizeof *key);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(error, error_size, "cannot open the transport key %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        snprintf(error, error_size, "the transport key %s is not a regular file", path);
        close(fd);
        return -1;
    }
    if ((info.st_mode & 077) != 0) {
        snprintf(error, error_size,
                 "the transport key %s may be read or written by others (mode %03o): run chmod 600 on it", path,
                 (unsigned)(info.st_mode & 0777));
        close(fd);
        return -1;
    }
    size_t done = 0;
    for (;;) {
        /* One byte more than a key may hold, to tell a long file from a full one. */
        unsigned char extra;
        unsigned char *into = done < sizeof key->bytes ? key->bytes + done : &extra;
        const size_t room = done < sizeof key->bytes ? sizeof key->bytes - done : 1;
        const ssize_t got = read(fd, into, room);
        if (got == 0) {
            break;
        }
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0 || done >= sizeof key->bytes) {
            snprintf(error, error_size, got < 0 ? "cannot read the transport key %s" : "the transport key %s is longer than %u bytes",
                     path, HG_KEY_MAX);
            close(fd);
            hg_wipe(key, sizeof *key);
            return -1;
        }
        done += (size_t)got;
    }
    close(fd);
    if (done < HG_KEY_MIN) {
        snprintf(error, error_size, "the transport key %s holds %zu bytes; a key has at least %u", path, done, HG_KEY_MIN);
        hg_wipe(key, sizeof *key);
        return -1;
    }
    key->length = done;
    return 0;
}

#endif /* !HG_TRANSPORT_UART */

void hg_handshake_proof(const hg_key *key, enum hg_proof_role role, const unsigned char client_nonce[HG_NONCE_SIZE],
                        const unsigned char server_nonce[HG_NONCE_SIZE],
                        const unsigned char plan_hash[HG_PLAN_HASH_SIZE], uint32_t version, const char *name,
                        size_t name_length, unsigned char proof[HG_SHA256_SIZE])
{
    static const char *const labels[] = { "hgtp2 server", "hgtp2 client", "hgtp2 session" };
    const char *label = labels[role];
    unsigned char numbers[5] = { (unsigned char)version, (unsigned char)(version >> 8), (unsigned char)(version >> 16),
                                 (unsigned char)(version >> 24), (unsigned char)name_length };
    const hg_bytes parts[] = {
        { label, strlen(label) },
        { client_nonce, HG_NONCE_SIZE },
        { server_nonce, HG_NONCE_SIZE },
        { plan_hash, HG_PLAN_HASH_SIZE },
        { numbers, sizeof numbers },
        { name, name_length },
    };
    hg_hmac_sha256(key->bytes, key->length, parts, sizeof parts / sizeof parts[0], proof);
}
