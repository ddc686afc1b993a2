/* hetgen transport authentication: SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104), the shared key
 * file, fresh nonces, and the handshake's two proofs. See docs/transport.md ("Authentication").
 *
 * A session starts with a challenge-response on a key both programs read from a file (the board
 * build writes board/transport.key, 32 random bytes, mode 0600):
 *
 *     client -> server   hello: version, client nonce, plan hash, device name
 *     server -> client   its nonce and HMAC(key, "hgtp2 server" | transcript): the server knows the key
 *     client -> server   auth: HMAC(key, "hgtp2 client" | transcript): the client knows the key
 *     server -> client   the device's memory size and program count: the session is open
 *
 * The transcript holds both nonces, so a recorded session replayed against a server (which draws a
 * new nonce) carries a stale proof and is refused; the labels differ, so a server's proof can never
 * stand for a client's. From the auth's reply on, every frame is sealed with a session key drawn
 * from the same transcript (hg_channel_seal in hg_transport.h), so a frame injected or altered
 * after the handshake is refused too. The key never crosses the wire.
 */
#ifndef HG_AUTH_H
#define HG_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define HG_SHA256_SIZE 32u
#define HG_NONCE_SIZE 32u
#define HG_PLAN_HASH_SIZE 32u
#define HG_KEY_MIN 16u
#define HG_KEY_MAX 256u

typedef struct {
    uint32_t state[8];
    uint64_t bytes;
    unsigned char block[64];
    size_t used;
} hg_sha256;

void hg_sha256_init(hg_sha256 *sha);
void hg_sha256_update(hg_sha256 *sha, const void *data, size_t bytes);
void hg_sha256_final(hg_sha256 *sha, unsigned char digest[HG_SHA256_SIZE]);

/* One HMAC-SHA256 over the concatenation of `count` parts (NULL parts of length 0 allowed). */
typedef struct {
    const void *data;
    size_t bytes;
} hg_bytes;

void hg_hmac_sha256(const unsigned char *key, size_t key_bytes, const hg_bytes *parts, size_t count,
                    unsigned char mac[HG_SHA256_SIZE]);

/* Equal in time that depends on `bytes` only, not on where the first difference lies. */
int hg_equal_secret(const void *a, const void *b, size_t bytes);

/* `bytes` from the kernel's random source (getrandom, else /dev/urandom): 0, or -1 with errno. */
int hg_random_bytes(void *buffer, size_t bytes);

typedef struct {
    unsigned char bytes[HG_KEY_MAX];
    size_t length;
} hg_key;

/* Read the key file at `path`: a regular file of HG_KEY_MIN..HG_KEY_MAX bytes that only its owner
 * may read or write (a key others can read is no secret). 0, or -1 with the reason in `error`. */
int hg_key_load(hg_key *key, const char *path, char *error, size_t error_size);

/* The key file from `--key`'s value, else HG_TRANSPORT_KEY; NULL when neither names one. */
const char *hg_key_path(const char *option);

/* Wipe a secret (a key, a buffer of device memory) so that the compiler cannot drop the stores. */
void hg_wipe(void *buffer, size_t bytes);

enum hg_proof_role { HG_PROOF_SERVER = 0, HG_PROOF_CLIENT = 1, HG_SESSION_KEY = 2 };

/* The handshake's proof of `role` (or, for HG_SESSION_KEY, the key that seals the session's frames:
 * hg_channel_seal): HMAC(key, label | client nonce | server nonce | plan hash | version | name
 * length | name), the labels "hgtp2 server", "hgtp2 client" and "hgtp2 session". */
void hg_handshake_proof(const hg_key *key, enum hg_proof_role role, const unsigned char client_nonce[HG_NONCE_SIZE],
                        const unsigned char server_nonce[HG_NONCE_SIZE],
                        const unsigned char plan_hash[HG_PLAN_HASH_SIZE], uint32_t version, const char *name,
                        size_t name_length, unsigned char proof[HG_SHA256_SIZE]);

#endif /* HG_AUTH_H */
