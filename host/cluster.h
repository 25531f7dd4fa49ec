/* cluster.h - Redis Cluster's routing rules as plain data: key -> hash slot
 * (CRC16), the slot -> node map, where each command's key is, and the
 * redirections (MOVED, ASK) a node answers. No I/O and no hiredis here:
 * store.c owns the connections and feeds this module what the nodes say. */
#ifndef LUAKIQ_CLUSTER_H
#define LUAKIQ_CLUSTER_H
#include <stddef.h>
#include <stdint.h>

#define CLUSTER_SLOTS 16384
#define CLUSTER_MAX_NODES 128

/* The hash slot of a key: CRC16-XMODEM of the text between the first '{'
 * and the next '}' when that is non-empty, else of the whole key; & 16383. */
int cluster_key_slot(const char *key, size_t len);

/* Whether the key has a hash tag (a non-empty {...}): then any text appended
 * to it stays in its slot. */
int cluster_has_tag(const char *key, size_t len);

/* The guard key of a script call on a cluster: its first key followed by
 * this suffix, a key nobody writes, declared as one more key. While the
 * slot migrates, a node counts declared keys it lacks: with the guard
 * always missing, the source answers ASK and the target TRYAGAIN, so a
 * script never runs while the slot's keys are split between two nodes
 * (docs/redis.md, "Redis Cluster"). Only for a first key with a hash tag
 * (else the guard would hash elsewhere). */
#define CLUSTER_GUARD "~guard"

struct cluster_node {
    char host[256];
    int port;
};

/* Which node serves each slot. Nodes are only ever appended (an index stays
 * valid for the map's life, so store.c keeps a connection per index); a map
 * that would outgrow CLUSTER_MAX_NODES is cleared by cluster_map_reset. */
struct cluster_map {
    int16_t slot_node[CLUSTER_SLOTS]; /* node index, -1: no node known */
    int nnodes;
    struct cluster_node nodes[CLUSTER_MAX_NODES];
};

void cluster_map_reset(struct cluster_map *m);
/* The index of host:port, added when new; -1 when the table is full. */
int cluster_map_node(struct cluster_map *m, const char *host, int port);
/* Slots start..end (inclusive) are served by node; -1 when out of range. */
int cluster_map_assign(struct cluster_map *m, int start, int end, int node);
/* The node of a slot, -1 when none is known. */
int cluster_map_lookup(const struct cluster_map *m, int slot);

/* A redirection in an error reply: CLUSTER_MOVED or CLUSTER_ASK with the slot
 * and the node ("MOVED 3999 127.0.0.1:6381"; an empty host means the node
 * that answered: host is then ""), CLUSTER_RETRY for TRYAGAIN and
 * CLUSTERDOWN (back off, send again), 0 for anything else. */
enum { CLUSTER_NONE = 0, CLUSTER_MOVED, CLUSTER_ASK, CLUSTER_RETRY };
int cluster_redirect(const char *err, size_t len, int *slot, char *host, size_t hostlen, int *port);

/* The argument that names the key a command routes by: 0-based index into
 * argv (the command name is argv[0]), or -1 for a command without a key
 * (INFO, PING, PUBLISH, SCRIPT ...: any node will do). EVAL/EVALSHA/FCALL
 * route by their first key (none with numkeys 0). */
int cluster_key_arg(int argc, const char **argv, const size_t *lens);

#endif
