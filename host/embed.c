/* embed.c - lookup over the generated table of embedded scripts. */
#include <string.h>
#include "embed.h"

const struct embed_file *embed_find(int kind, const char *name) {
    for (const struct embed_file *e = embed_files; e->name; e++)
        if (e->kind == kind && strcmp(e->name, name) == 0) return e;
    return NULL;
}
