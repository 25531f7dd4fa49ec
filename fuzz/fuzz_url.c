/* fuzz_url.c - libFuzzer harness for url_parse (REDIS_URL, --redis):
 * C string handling under ASan/UBSan. Properties: never crashes, and a URL
 * that parses gives NUL-terminated fields within bounds and a sane port/db. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *url = malloc(size + 1);
    if (!url) return 0;
    memcpy(url, data, size);
    url[size] = 0;
    struct url u;
    char err[256];
    if (url_parse(url, &u, err, sizeof err) == 0) {
        if (strnlen(u.host, sizeof u.host) == sizeof u.host) abort();
        if (strnlen(u.path, sizeof u.path) == sizeof u.path) abort();
        if (strnlen(u.password, sizeof u.password) == sizeof u.password) abort();
        if (!u.path[0] && (u.port <= 0 || u.port > 65535)) abort();
        if (u.db < 0) abort();
    } else if (strnlen(err, sizeof err) == sizeof err) {
        abort();
    }
    free(url);
    return 0;
}
