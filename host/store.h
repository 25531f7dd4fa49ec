/* store.h - Redis access: one synchronous connection per thread, the embedded
 * queue scripts (EVALSHA, reloaded on NOSCRIPT), pipelines; on a Redis
 * Cluster, routing by slot. Callers see opaque replies through accessors
 * (the wake-up subscribers are sub.c's, REDIS_URL's parsing url.c's). */
#ifndef LUAKIQ_STORE_H
#define LUAKIQ_STORE_H
#include <stddef.h>

struct cluster_map;
struct url;
typedef struct store store;
typedef struct store_reply store_reply;

enum store_type { STORE_STRING, STORE_ARRAY, STORE_INTEGER, STORE_NIL, STORE_STATUS, STORE_ERROR };

/* Connects (AUTH, SELECT); NULL and a one-line reason in err on failure.
 * timeout_s bounds connect and every command. The store belongs to the caller's thread. */
store *store_open(const char *url, double timeout_s, char *err, size_t errlen);
/* Like store_open, but talks to the URL's one node even when it is part of
 * a Redis Cluster (no routing; for tests and tools that inspect a node). */
store *store_open_node(const char *url, double timeout_s, char *err, size_t errlen);
void store_close(store *s);
/* Drops the connection and connects again; 0 on success. */
int store_reconnect(store *s, char *err, size_t errlen);
int store_broken(const store *s); /* 1 after an I/O error, until a reconnect */
int store_is_cluster(const store *s); /* 1 when connected to a Redis Cluster */
/* Bounds the next commands' I/O by seconds (a perform call's time left),
 * when that is shorter than the connection's own timeout; 0 restores it. */
void store_bound_io(store *s, double seconds);

/* One command of a pipeline. For a script: name is the embedded script's name
 * ("fetch") and argv holds numkeys keys then the arguments. */
struct store_cmd {
    const char *script; /* NULL for a plain command */
    int numkeys;
    int argc;
    const char **argv;
    const size_t *lens;
};
/* Sends cmds in one round trip and reads n replies into out (caller frees each
 * with store_reply_free). A script that got NOSCRIPT is loaded and sent again
 * (NOSCRIPT means it did not run). Returns 0, or -1 on an I/O error with err set
 * (then no reply is returned and the connection is marked broken). */
int store_pipeline(store *s, int n, const struct store_cmd *cmds, store_reply **out, char *err, size_t errlen);

/* A pipeline in two halves, so that the caller prepares more while Redis
 * works: store_send writes cmds out (1: nothing sent, on a cluster or when a
 * script would need loading behind unread replies: use store_pipeline),
 * store_recv reads the oldest n replies. A NOSCRIPT comes back as an error
 * reply (the caller sends that command again). Replies left unread are
 * discarded by the next store_pipeline. 0, or -1 with err (I/O: broken). */
int store_send(store *s, int n, const struct store_cmd *cmds, char *err, size_t errlen);
int store_recv(store *s, int n, store_reply **out, char *err, size_t errlen);
int store_pending(const store *s);

/* One plain command to every master of a cluster (or to the one Redis):
 * out[i] and names[i] ("host:port") per server, up to max; the count, or
 * -1 with err. For commands about a server (INFO), not a key. */
int store_each(store *s, const struct store_cmd *cmd, int max, store_reply **out, char (*names)[64],
               char *err, size_t errlen);

void store_reply_free(store_reply *r);
int store_reply_type(const store_reply *r);
const char *store_reply_str(const store_reply *r, size_t *len); /* string, status, error */
long long store_reply_int(const store_reply *r);
size_t store_reply_count(const store_reply *r);
const store_reply *store_reply_elem(const store_reply *r, size_t i);

/* Source of an embedded (or, with LUAKIQ_SCRIPTS set, defined) Redis script;
 * NULL when unknown. The returned string is owned by the store module. */
const char *store_script_source(const char *name, size_t *len);

/* Development mode: sets the source of the Redis script name (a copy is
 * kept), replacing the embedded one; luakiq.ops.cli defines the tree's scripts,
 * expanded by luakiq.lib.include, before any worker thread starts. 0 on success,
 * -1 when the table is full or the name too long. */
int store_script_define(const char *name, const char *src, size_t len);

/* The parts sub.c's subscribers share with a store. store_resolve_master:
 * asks the sentinels of a redis+sentinel:// URL (in order, the first that
 * answers) where its master is, into u->host and u->port; blocks up to
 * timeout_s per sentinel (at most 2 s each). store_map: a cluster store's
 * slot map (NULL: one Redis), valid until store_refresh, which reads it
 * again from the first node that answers. Any thread, for its own store. */
int store_resolve_master(struct url *u, double timeout_s, char *err, size_t errlen);
const struct cluster_map *store_map(const store *s);
int store_refresh(store *s, char *err, size_t errlen);

#endif
