/* sha256.h - SHA-256 (FIPS 180-4), for lock ids of long paths
 *
 * A small self-contained implementation so that the lock id of a path does
 * not depend on which TLS library libcurl was built with. Thread-safe, no
 * allocation.
 */
#ifndef TREELOCKFS_SHA256_H
#define TREELOCKFS_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_LEN 32
#define SHA256_HEX_LEN 64

/* Writes the digest of LEN bytes at DATA to OUT. This function can't fail. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_DIGEST_LEN]);

/* Writes the lowercase hex digest and a NUL to HEX. This function can't fail. */
void sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_LEN + 1]);

#endif /* TREELOCKFS_SHA256_H */
