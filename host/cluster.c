/* cluster.c - Redis Cluster's routing rules (cluster.h). Pure functions and a
 * map owned by one store (so by one thread): no locks, no I/O. The rules are
 * Redis's own (cluster spec, "Keys distribution model" and "Redirection and
 * resharding"); spec/unit/cluster_spec.lua checks them against a real
 * cluster's CLUSTER KEYSLOT. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "cluster.h"

/* CRC16-XMODEM (poly 0x1021, init 0, no reflection), bit by bit: the part
 * hashed is a hash tag or a short key, and a command costs a round trip. */
static uint16_t cluster_crc16(const char *p, size_t len) {
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint16_t)(unsigned char)p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

/* The hash tag of a key: its text and length, or NULL when it has none. */
static const char *cluster_tag(const char *key, size_t len, size_t *taglen) {
    const char *open = memchr(key, '{', len);
    if (!open) return NULL;
    size_t rest = len - (size_t)(open - key) - 1;
    const char *close = memchr(open + 1, '}', rest);
    if (!close || close == open + 1) return NULL;
    *taglen = (size_t)(close - open - 1);
    return open + 1;
}

int cluster_key_slot(const char *key, size_t len) {
    size_t taglen;
    const char *tag = cluster_tag(key, len, &taglen);
    if (tag) return cluster_crc16(tag, taglen) & (CLUSTER_SLOTS - 1);
    return cluster_crc16(key, len) & (CLUSTER_SLOTS - 1);
}

int cluster_has_tag(const char *key, size_t len) {
    size_t taglen;
    return cluster_tag(key, len, &taglen) != NULL;
}

void cluster_map_reset(struct cluster_map *m) {
    for (int i = 0; i < CLUSTER_SLOTS; i++) m->slot_node[i] = -1;
    m->nnodes = 0;
}

int cluster_map_node(struct cluster_map *m, const char *host, int port) {
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0) return i;
    if (m->nnodes == CLUSTER_MAX_NODES || strlen(host) >= sizeof m->nodes[0].host) return -1;
    struct cluster_node *n = &m->nodes[m->nnodes];
    strcpy(n->host, host);
    n->port = port;
    return m->nnodes++;
}

int cluster_map_assign(struct cluster_map *m, int start, int end, int node) {
    if (start < 0 || end >= CLUSTER_SLOTS || start > end || node < 0 || node >= m->nnodes) return -1;
    for (int s = start; s <= end; s++) m->slot_node[s] = (int16_t)node;
    return 0;
}

int cluster_map_lookup(const struct cluster_map *m, int slot) {
    return slot >= 0 && slot < CLUSTER_SLOTS ? m->slot_node[slot] : -1;
}

static int cluster_starts(const char *s, size_t len, const char *word) {
    size_t n = strlen(word);
    return len >= n && strncmp(s, word, n) == 0 && (len == n || s[n] == ' ');
}

int cluster_redirect(const char *err, size_t len, int *slot, char *host, size_t hostlen, int *port) {
    if (cluster_starts(err, len, "TRYAGAIN") || cluster_starts(err, len, "CLUSTERDOWN")) return CLUSTER_RETRY;
    int kind = cluster_starts(err, len, "MOVED") ? CLUSTER_MOVED : cluster_starts(err, len, "ASK") ? CLUSTER_ASK : 0;
    if (!kind) return CLUSTER_NONE;
    /* "MOVED <slot> <host>:<port>"; the host may be empty, or an IPv6
     * address (the port follows the last ':') */
    char buf[320];
    if (len >= sizeof buf) return CLUSTER_NONE;
    memcpy(buf, err, len);
    buf[len] = 0;
    char *p = strchr(buf, ' '), *end;
    if (!p) return CLUSTER_NONE;
    long s = strtol(p + 1, &end, 10);
    if (end == p + 1 || *end != ' ' || s < 0 || s >= CLUSTER_SLOTS) return CLUSTER_NONE;
    char *addr = end + 1, *colon = strrchr(addr, ':');
    if (!colon) return CLUSTER_NONE;
    long pt = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || pt <= 0 || pt > 65535 || (size_t)(colon - addr) >= hostlen) return CLUSTER_NONE;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    *slot = (int)s;
    *port = (int)pt;
    return kind;
}

static int cluster_is(const char *arg, size_t len, const char *name) {
    return strlen(name) == len && strncasecmp(arg, name, len) == 0;
}

/* Commands that name no key: sent to any node. */
static const char *const cluster_keyless[] = {
    "INFO", "PING", "ECHO", "TIME", "PUBLISH", "PUBSUB", "SCRIPT", "CLUSTER", "CONFIG", "CLIENT", "ROLE",
    "DBSIZE", "FLUSHDB", "FLUSHALL", "KEYS", "SCAN", "RANDOMKEY", "COMMAND", "SLOWLOG", "LASTSAVE", "WAIT",
    "READONLY", "READWRITE", "AUTH", "SELECT", "HELLO", "LATENCY", "MULTI", "EXEC", "DISCARD", "SAVE",
    "BGSAVE", "BGREWRITEAOF", "SHUTDOWN", "DEBUG", "MONITOR", "FUNCTION", "ACL", "MODULE", "SWAPDB", "QUIT",
    "RESET", NULL};

int cluster_key_arg(int argc, const char **argv, const size_t *lens) {
    if (argc < 1) return -1;
    const char *c = argv[0];
    size_t n = lens[0];
    for (int i = 0; cluster_keyless[i]; i++)
        if (cluster_is(c, n, cluster_keyless[i])) return -1;
    if (cluster_is(c, n, "EVAL") || cluster_is(c, n, "EVALSHA") || cluster_is(c, n, "EVAL_RO") ||
        cluster_is(c, n, "EVALSHA_RO") || cluster_is(c, n, "FCALL") || cluster_is(c, n, "FCALL_RO")) {
        if (argc < 4) return -1;
        char num[16];
        if (lens[2] == 0 || lens[2] >= sizeof num) return -1;
        memcpy(num, argv[2], lens[2]);
        num[lens[2]] = 0;
        return atoi(num) > 0 ? 3 : -1;
    }
    if (cluster_is(c, n, "MEMORY") || cluster_is(c, n, "OBJECT")) return argc > 2 ? 2 : -1;
    if (cluster_is(c, n, "XREAD") || cluster_is(c, n, "XREADGROUP")) {
        for (int i = 1; i + 1 < argc; i++)
            if (cluster_is(argv[i], lens[i], "STREAMS")) return i + 1;
        return -1;
    }
    return argc > 1 ? 1 : -1;
}
