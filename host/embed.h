/* embed.h - the Lua files of scripts/, compiled into the binary at build time
 * (see cmake/embed.lua). Read-only data: safe to use from any thread. */
#ifndef LUAKIQ_EMBED_H
#define LUAKIQ_EMBED_H
#include <stddef.h>

enum { EMBED_HOST_MODULE = 0, EMBED_REDIS_SCRIPT = 1 };

struct embed_file {
    const char *name;           /* "luakiq.runner" or, for Redis scripts, "fetch" */
    const char *path;           /* path in the source tree, "scripts/luakiq/runner/init.lua" */
    int kind;                   /* EMBED_HOST_MODULE or EMBED_REDIS_SCRIPT */
    const unsigned char *bytes; /* bytecode or source; NUL-terminated */
    size_t len;                 /* without the terminating NUL */
};

extern const struct embed_file embed_files[]; /* ends with a {0} entry */

/* Looks a file up by kind and name; NULL when there is none. */
const struct embed_file *embed_find(int kind, const char *name);

#endif
