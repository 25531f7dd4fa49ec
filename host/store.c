/* store.c - Redis access over hiredis 0.14.
 *
 * Threads: a `store` (one synchronous redisContext) is created, used and freed
 * by one thread. The script table (name -> SHA1, source) is process-wide and
 * guarded by store_mu; SHAs are learned from SCRIPT LOAD, so the same embedded
 * bytes give the same SHA on every connection. (The wake-up subscribers, on
 * the main thread's event loop, are sub.c's.)
 *
 * Failure model: an I/O error or timeout marks the store broken and is reported
 * to the caller, who decides on backoff and calls store_reconnect. A command
 * that timed out may have run on the server; callers treat the outcome as
 * unknown (the queue scripts are built so that a retry is safe under a lease). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <hiredis/hiredis.h>
#include "cluster.h"
#include "embed.h"
#include "store.h"
#include "url.h"

struct store {
    redisContext *c;    /* one Redis (or Sentinel's master); NULL on a cluster */
    /* Redis Cluster: the slot map and a connection per map node (index for
     * index), each made when a command first goes there. NULL map: one Redis. */
    struct cluster_map *map;
    redisContext *nodes[CLUSTER_MAX_NODES];
    double refreshed;   /* when the map was last read whole (store_now) */
    int stale;          /* a MOVED was met: read the map again (rate-limited) */
    int next_seed;      /* where the next map read starts (rotates) */
    int node_only;      /* store_open_node: this one node, never routed */
    char url[1024];
    struct url u; /* url parsed once, at open (as given: before Sentinel resolves it) */
    char shown[600];    /* the URL without its password, for messages and logs */
    double timeout_s;
    double io_s;        /* the I/O bound in force (store_bound_io) */
    int broken;
    int pending;        /* replies of store_send not read yet (store_recv) */
};

/* --- connections -------------------------------------------------------- */

static struct timeval store_tv(double s) {
    struct timeval tv = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    return tv;
}

/* Asks the sentinels of u (in order, the first that answers) where u's
 * master is, into u->host and u->port. Blocks up to timeout_s per sentinel
 * (at most 2 s each). Any thread (a context of its own per call). */
int store_resolve_master(struct url *u, double timeout_s, char *err, size_t errlen) {
    char list[sizeof u->sentinels], last[200] = "no sentinel listed";
    snprintf(list, sizeof list, "%s", u->sentinels);
    struct timeval tv = store_tv(timeout_s < 2 ? timeout_s : 2);
    for (char *save = NULL, *hp = strtok_r(list, ",", &save); hp; hp = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(hp, ':');
        *colon = 0;
        redisContext *c = redisConnectWithTimeout(hp, atoi(colon + 1), tv);
        if (!c || c->err) {
            snprintf(last, sizeof last, "%s:%s: %s", hp, colon + 1, c ? c->errstr : "out of memory");
            if (c) redisFree(c);
            continue;
        }
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", u->master);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len < sizeof u->host) {
            snprintf(u->host, sizeof u->host, "%s", r->element[0]->str);
            u->port = atoi(r->element[1]->str);
            freeReplyObject(r);
            redisFree(c);
            return 0;
        }
        snprintf(last, sizeof last, "%s:%s: %s", hp, colon + 1,
                 !r ? c->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "does not know that master");
        if (r) freeReplyObject(r);
        redisFree(c);
    }
    snprintf(err, errlen, "no Sentinel told where master '%s' is (%s)", u->master, last);
    return -1;
}

/* SELECT db on c (nothing for db 0). On failure c is freed, err says why. */
static int store_select(redisContext *c, int db, const char *shown, char *err, size_t errlen) {
    if (!db) return 0;
    redisReply *r = redisCommand(c, "SELECT %d", db);
    if (r && r->type != REDIS_REPLY_ERROR) {
        freeReplyObject(r);
        return 0;
    }
    snprintf(err, errlen, "Redis at %s refused set-up: %s", shown, r ? r->str : c->errstr);
    if (r) freeReplyObject(r);
    redisFree(c);
    return -1;
}

/* One connection to host:port (or u's unix socket), authenticated as u says
 * and, with select_db, on u's db. NULL and a one-line reason in err on
 * failure. shown names the server in messages. */
static redisContext *store_dial(const struct url *u, const char *host, int port, const char *shown,
                                double timeout_s, int select_db, char *err, size_t errlen) {
    struct timeval tv = store_tv(timeout_s);
    redisContext *c = u->path[0] ? redisConnectUnixWithTimeout(u->path, tv) : redisConnectWithTimeout(host, port, tv);
    if (!c || c->err) {
        snprintf(err, errlen, "cannot connect to Redis at %s: %s", shown, c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    redisReply *r = NULL;
    if (u->user[0]) {
        r = redisCommand(c, "AUTH %s %s", u->user, u->password);
        if (!r || r->type == REDIS_REPLY_ERROR) goto fail;
        freeReplyObject(r);
    } else if (u->password[0]) {
        r = redisCommand(c, "AUTH %s", u->password);
        if (!r || r->type == REDIS_REPLY_ERROR) goto fail;
        freeReplyObject(r);
    }
    if (select_db && store_select(c, u->db, shown, err, errlen) < 0) return NULL;
    return c;
fail:
    snprintf(err, errlen, "Redis at %s refused set-up: %s", shown, r ? r->str : c->errstr);
    if (r) freeReplyObject(r);
    redisFree(c);
    return NULL;
}

static double store_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void store_drop_nodes(store *s) {
    for (int i = 0; i < CLUSTER_MAX_NODES; i++)
        if (s->nodes[i]) { redisFree(s->nodes[i]); s->nodes[i] = NULL; }
}

/* Asks the node behind c for the cluster's slot map (CLUSTER SLOTS) and, when
 * it is one, fills s->map from it (the node list kept, so s->nodes stays
 * valid; cleared with the connections when it would overflow). asked: the
 * node's host, for entries that give an empty one. 1: a cluster (map read),
 * 0: not a cluster node (cluster support disabled, or not allowed to ask),
 * -1: an I/O error (err set). */
static int store_read_map(store *s, redisContext *c, const char *asked, char *err, size_t errlen) {
    redisReply *r = redisCommand(c, "CLUSTER SLOTS");
    if (!r) { snprintf(err, errlen, "Redis I/O error: %s", c->errstr); return -1; }
    if (r->type != REDIS_REPLY_ARRAY) { freeReplyObject(r); return 0; }
    if (!s->map) {
        if (!(s->map = malloc(sizeof *s->map))) { freeReplyObject(r); snprintf(err, errlen, "out of memory"); return -1; }
        cluster_map_reset(s->map);
    }
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { store_drop_nodes(s); cluster_map_reset(s->map); }
        else for (int i = 0; i < CLUSTER_SLOTS; i++) s->map->slot_node[i] = -1;
        int full = 0;
        for (size_t i = 0; i < r->elements && !full; i++) {
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
                e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
                e->element[2]->elements < 2 || e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
                e->element[2]->element[1]->type != REDIS_REPLY_INTEGER) continue;
            const redisReply *m = e->element[2];
            const char *host = m->element[0]->len ? m->element[0]->str : asked;
            int node = cluster_map_node(s->map, host, (int)m->element[1]->integer);
            if (node < 0) full = 1;
            else cluster_map_assign(s->map, (int)e->element[0]->integer, (int)e->element[1]->integer, node);
        }
        if (!full) break;
    }
    freeReplyObject(r);
    s->refreshed = store_now();
    s->stale = 0;
    return 1;
}

/* Reads the slot map again from the first node that answers: the URL's seeds
 * and every node the map knows, starting one further on each time (a dead
 * node is not asked first twice in a row). Cluster stores only. */
int store_refresh(store *s, char *err, size_t errlen) {
    const struct url *u = &s->u;
    char host[256], shown[300];
    int port, nseeds = url_seed(u, 0, host, sizeof host, &port);
    int total = nseeds + s->map->nnodes, start = s->next_seed++;
    for (int k = 0; k < total; k++) {
        int i = (start + k) % total, node = i - nseeds;
        if (node < 0) {
            url_seed(u, i, host, sizeof host, &port);
        } else {
            snprintf(host, sizeof host, "%s", s->map->nodes[node].host);
            port = s->map->nodes[node].port;
        }
        snprintf(shown, sizeof shown, "%s:%d", host, port);
        redisContext *c = store_dial(u, host, port, shown, s->timeout_s < 2 ? s->timeout_s : 2, 0, err, errlen);
        if (!c) continue;
        int rc = store_read_map(s, c, host, err, errlen);
        redisFree(c);
        if (rc == 1) return 0;
        if (rc == 0) snprintf(err, errlen, "Redis at %s is no longer a cluster node", shown);
    }
    return -1;
}

/* Connects s from s->url; on failure leaves it unconnected and fills err.
 * A redis+sentinel:// URL is resolved again at every (re)connection, so a
 * connection made after a failover goes to the new master. A TCP URL's node
 * is asked whether it is part of a Redis Cluster (CLUSTER SLOTS): then s
 * routes by slot over a connection per node, made when first used. */
static int store_connect(store *s, char *err, size_t errlen) {
    struct url u = s->u;
    if (u.master[0] && store_resolve_master(&u, s->timeout_s, err, errlen) < 0) return -1;
    if (u.path[0]) snprintf(s->shown, sizeof s->shown, "unix://%s", u.path);
    else if (u.master[0]) snprintf(s->shown, sizeof s->shown, "%s:%d (master '%s')", u.host, u.port, u.master);
    else if (u.seeds[0]) snprintf(s->shown, sizeof s->shown, "%s (cluster seeds)", u.seeds);
    else snprintf(s->shown, sizeof s->shown, "%s:%d", u.host, u.port);
    if (s->map) {
        /* a cluster store reconnecting: any node that answers tells the map */
        if (store_refresh(s, err, errlen) < 0) return -1;
        s->broken = 0;
        return 0;
    }
    if (u.path[0] || u.master[0]) {
        redisContext *c = store_dial(&u, u.host, u.port, s->shown, s->timeout_s, 1, err, errlen);
        if (!c) return -1;
        if (u.master[0]) {
            /* mid-failover a sentinel may still name a demoted master */
            redisReply *r = redisCommand(c, "ROLE");
            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_STRING ||
                strcmp(r->element[0]->str, "master") != 0) {
                snprintf(err, errlen, "Redis at %s is not a master yet (a failover in progress?)", s->shown);
                if (r) freeReplyObject(r);
                redisFree(c);
                return -1;
            }
            freeReplyObject(r);
        }
        s->c = c;
        s->broken = 0;
        return 0;
    }
    char host[256], shown[300];
    int port, nseeds = url_seed(&u, 0, host, sizeof host, &port);
    for (int k = 0; k < nseeds; k++) {
        url_seed(&u, k, host, sizeof host, &port);
        snprintf(shown, sizeof shown, "%s:%d", host, port);
        redisContext *c = store_dial(&u, host, port, shown, s->timeout_s, 0, err, errlen);
        if (!c) continue;
        int rc = s->node_only ? 0 : store_read_map(s, c, host, err, errlen);
        if (rc == 1 && u.db) {
            char url[600];
            url_redact(s->url, url, sizeof url);
            snprintf(err, errlen, "bad Redis URL '%s': %s is a Redis Cluster node, and a cluster has only db 0", url, shown);
            redisFree(c);
            free(s->map);
            s->map = NULL;
            return -1;
        }
        if (rc == 1) {
            redisFree(c); /* node connections are made per map entry, when used */
            s->broken = 0;
            return 0;
        }
        if (rc == 0 && u.seeds[0]) {
            char url[600];
            url_redact(s->url, url, sizeof url);
            snprintf(err, errlen, "bad Redis URL '%s': several hosts name the seed nodes of a Redis Cluster, "
                     "but %s is not in cluster mode", url, shown);
            redisFree(c);
            return -1;
        }
        if (rc == 0) {
            if (store_select(c, u.db, shown, err, errlen) < 0) return -1;
            s->c = c;
            s->broken = 0;
            return 0;
        }
        redisFree(c);
    }
    return -1;
}

static store *store_open_as(const char *url, double timeout_s, int node_only, char *err, size_t errlen) {
    store *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "out of memory"); return NULL; }
    s->node_only = node_only;
    snprintf(s->url, sizeof s->url, "%s", url);
    if (url_parse(url, &s->u, err, errlen) < 0) { free(s); return NULL; }
    s->timeout_s = s->io_s = timeout_s > 0 ? timeout_s : 10;
    if (store_connect(s, err, errlen) < 0) { free(s->map); free(s); return NULL; }
    return s;
}

store *store_open(const char *url, double timeout_s, char *err, size_t errlen) {
    return store_open_as(url, timeout_s, 0, err, errlen);
}

store *store_open_node(const char *url, double timeout_s, char *err, size_t errlen) {
    return store_open_as(url, timeout_s, 1, err, errlen);
}

void store_close(store *s) {
    if (!s) return;
    if (s->c) redisFree(s->c);
    store_drop_nodes(s);
    free(s->map);
    free(s);
}

int store_reconnect(store *s, char *err, size_t errlen) {
    if (s->c) redisFree(s->c);
    s->c = NULL;
    s->pending = 0;
    store_drop_nodes(s);
    s->broken = 1;
    return store_connect(s, err, errlen);
}

int store_broken(const store *s) { return s->broken || (!s->c && !s->map); }

int store_pending(const store *s) { return s->pending; }

int store_is_cluster(const store *s) { return s->map != NULL; }

const struct cluster_map *store_map(const store *s) { return s->map; }

void store_bound_io(store *s, double seconds) {
    double t = seconds > 0 && seconds < s->timeout_s ? seconds : s->timeout_s;
    s->io_s = t;
    if (s->c) redisSetTimeout(s->c, store_tv(t));
    for (int i = 0; i < CLUSTER_MAX_NODES; i++)
        if (s->nodes[i]) redisSetTimeout(s->nodes[i], store_tv(t));
}

/* The connection to map node i, made now when there is none (on a cluster,
 * at most one per node per store). NULL and err when it cannot be made. */
static redisContext *store_node(store *s, int i, char *err, size_t errlen) {
    if (s->nodes[i]) return s->nodes[i];
    char shown[300];
    snprintf(shown, sizeof shown, "%s:%d", s->map->nodes[i].host, s->map->nodes[i].port);
    redisContext *c = store_dial(&s->u, s->map->nodes[i].host, s->map->nodes[i].port, shown, s->timeout_s, 0, err, errlen);
    if (c && s->io_s != s->timeout_s) redisSetTimeout(c, store_tv(s->io_s));
    return s->nodes[i] = c;
}

/* --- scripts ------------------------------------------------------------ */

#define STORE_MAX_SCRIPTS 64
static pthread_mutex_t store_mu = PTHREAD_MUTEX_INITIALIZER;
/* src: the embedded text, or (owned) a copy given to store_script_define */
static struct { char name[64]; char sha[41]; char *src; size_t len; int owned; } store_scripts[STORE_MAX_SCRIPTS];
static int store_nscripts;

/* Finds or creates the table entry of a script (caller holds store_mu). In
 * development mode (LUAKIQ_SCRIPTS set) the table holds what luakiq.lib.include
 * defined from the tree at start (store_script_define) and nothing else: a
 * script missing there is unknown, never the embedded copy. */
static int store_script_slot(const char *name) {
    for (int i = 0; i < store_nscripts; i++)
        if (strcmp(store_scripts[i].name, name) == 0) return i;
    const char *dir = getenv("LUAKIQ_SCRIPTS");
    if (dir && *dir) return -1;
    const struct embed_file *e = embed_find(EMBED_REDIS_SCRIPT, name);
    if (!e || store_nscripts == STORE_MAX_SCRIPTS || strlen(name) >= sizeof store_scripts[0].name) return -1;
    int i = store_nscripts++;
    snprintf(store_scripts[i].name, sizeof store_scripts[i].name, "%s", name);
    store_scripts[i].src = (char *)e->bytes;
    store_scripts[i].len = e->len;
    store_scripts[i].sha[0] = 0;
    return i;
}

int store_script_define(const char *name, const char *src, size_t len) {
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, src, len);
    copy[len] = 0;
    pthread_mutex_lock(&store_mu);
    int i = 0;
    while (i < store_nscripts && strcmp(store_scripts[i].name, name) != 0) i++;
    if (i == store_nscripts) {
        if (i == STORE_MAX_SCRIPTS || strlen(name) >= sizeof store_scripts[0].name) {
            pthread_mutex_unlock(&store_mu);
            free(copy);
            return -1;
        }
        store_nscripts++;
        snprintf(store_scripts[i].name, sizeof store_scripts[i].name, "%s", name);
    } else if (store_scripts[i].owned) {
        free(store_scripts[i].src);
    }
    store_scripts[i].src = copy;
    store_scripts[i].len = len;
    store_scripts[i].owned = 1;
    store_scripts[i].sha[0] = 0;
    pthread_mutex_unlock(&store_mu);
    return 0;
}

const char *store_script_source(const char *name, size_t *len) {
    pthread_mutex_lock(&store_mu);
    int i = store_script_slot(name);
    const char *src = i < 0 ? NULL : store_scripts[i].src;
    if (i >= 0 && len) *len = store_scripts[i].len;
    pthread_mutex_unlock(&store_mu);
    return src;
}

/* SCRIPT LOADs a script on connection c (of s) and records its SHA. 0 on success. */
static int store_load_script(store *s, redisContext *c, const char *name, char *sha, char *err, size_t errlen) {
    size_t len;
    const char *src = store_script_source(name, &len);
    if (!src) { snprintf(err, errlen, "unknown Redis script '%s'", name); return -1; }
    const char *argv[] = {"SCRIPT", "LOAD", src};
    size_t lens[] = {6, 4, len};
    redisReply *r = redisCommandArgv(c, 3, argv, lens);
    if (!r) { s->broken = 1; snprintf(err, errlen, "Redis I/O error: %s", c->errstr); return -1; }
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        snprintf(err, errlen, "SCRIPT LOAD %s failed: %s", name, r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
        freeReplyObject(r);
        return -1;
    }
    pthread_mutex_lock(&store_mu);
    int i = store_script_slot(name);
    memcpy(store_scripts[i].sha, r->str, 41);
    memcpy(sha, r->str, 41);
    pthread_mutex_unlock(&store_mu);
    freeReplyObject(r);
    return 0;
}

/* The SHA of a script, loading it on c when this process has not yet. */
static int store_script_sha(store *s, redisContext *c, const char *name, char *sha, char *err, size_t errlen) {
    pthread_mutex_lock(&store_mu);
    int i = store_script_slot(name);
    int known = i >= 0 && store_scripts[i].sha[0];
    if (known) memcpy(sha, store_scripts[i].sha, 41);
    pthread_mutex_unlock(&store_mu);
    if (i < 0) { snprintf(err, errlen, "unknown Redis script '%s'", name); return -1; }
    return known ? 0 : store_load_script(s, c, name, sha, err, errlen);
}

/* Writes "<prefix><n>\r\n" at o; returns the end. */
static char *store_put_len(char *o, char prefix, size_t n) {
    char tmp[24];
    int k = 0;
    *o++ = prefix;
    do { tmp[k++] = (char)('0' + n % 10); n /= 10; } while (n);
    while (k) *o++ = tmp[--k];
    *o++ = '\r';
    *o++ = '\n';
    return o;
}

/* redisAppendCommandArgv's job, without its per-argument printf-like
 * formatting (that cost ~0.1 us an argument: an enqueue of blank jobs
 * sends five a job): the RESP bytes written here, in one buffer, then
 * appended as they are. */
static int store_append_argv(redisContext *c, int argc, const char **argv, const size_t *lens) {
    size_t total = 1 + 20 + 2;
    for (int i = 0; i < argc; i++) total += 1 + 20 + 2 + lens[i] + 2;
    char stack[4096];
    char *buf = total <= sizeof stack ? stack : malloc(total);
    if (!buf) return REDIS_ERR;
    char *o = store_put_len(buf, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        o = store_put_len(o, '$', lens[i]);
        if (lens[i]) memcpy(o, argv[i], lens[i]);
        o += lens[i];
        *o++ = '\r';
        *o++ = '\n';
    }
    int rc = redisAppendFormattedCommand(c, buf, (size_t)(o - buf));
    if (buf != stack) free(buf);
    return rc;
}

/* Appends one command (plain or EVALSHA) to c's output buffer. guard: a
 * script call on a cluster, whose first key has a hash tag, declares one
 * more key, that key followed by CLUSTER_GUARD (cluster.h: never run on a
 * slot while it migrates). */
static int store_append(redisContext *c, const struct store_cmd *cmd, const char *sha, int guard) {
    if (!cmd->script) return store_append_argv(c, cmd->argc, cmd->argv, cmd->lens);
    guard = guard && cmd->numkeys > 0 && cmd->argc >= cmd->numkeys && cluster_has_tag(cmd->argv[0], cmd->lens[0]);
    int n = cmd->argc + 3 + guard;
    const char *stackv[32];
    size_t stackl[32];
    char gstack[256], *g = NULL;
    size_t glen = guard ? cmd->lens[0] + strlen(CLUSTER_GUARD) : 0;
    const char **argv = n <= 32 ? stackv : malloc(sizeof *argv * (size_t)n);
    size_t *lens = n <= 32 ? stackl : malloc(sizeof *lens * (size_t)n);
    if (guard) g = glen < sizeof gstack ? gstack : malloc(glen + 1);
    if (!argv || !lens || (guard && !g)) {
        if (argv != stackv) free(argv);
        if (lens != stackl) free(lens);
        if (g != gstack) free(g);
        return REDIS_ERR;
    }
    char nk[16];
    snprintf(nk, sizeof nk, "%d", cmd->numkeys + guard);
    argv[0] = "EVALSHA"; lens[0] = 7;
    argv[1] = sha; lens[1] = 40;
    argv[2] = nk; lens[2] = strlen(nk);
    /* the keys, the guard, the other arguments */
    int k = guard ? cmd->numkeys : cmd->argc;
    memcpy(argv + 3, cmd->argv, sizeof *argv * (size_t)k);
    memcpy(lens + 3, cmd->lens, sizeof *lens * (size_t)k);
    if (guard) {
        memcpy(g, cmd->argv[0], cmd->lens[0]);
        memcpy(g + cmd->lens[0], CLUSTER_GUARD, strlen(CLUSTER_GUARD));
        argv[3 + k] = g; lens[3 + k] = glen;
        memcpy(argv + 4 + k, cmd->argv + k, sizeof *argv * (size_t)(cmd->argc - k));
        memcpy(lens + 4 + k, cmd->lens + k, sizeof *lens * (size_t)(cmd->argc - k));
    }
    int rc = store_append_argv(c, n, argv, lens);
    if (argv != stackv) free(argv);
    if (lens != stackl) free(lens);
    if (g != gstack) free(g);
    return rc;
}

/* Writes the output buffer out once it holds STORE_FLUSH_AT bytes, so that
 * Redis starts on the first commands of a big pipeline (an enqueue of many
 * shard groups) while this thread formats the next ones. Blocking socket:
 * returns when all is written. Caller's thread. */
#define STORE_FLUSH_AT (256 * 1024)
static int store_flush(redisContext *c) {
    int done = 0;
    do {
        if (redisBufferWrite(c, &done) != REDIS_OK) return REDIS_ERR;
    } while (!done);
    return REDIS_OK;
}
static int store_flush_big(redisContext *c) {
    if (sdslen(c->obuf) < STORE_FLUSH_AT) return REDIS_OK;
    return store_flush(c);
}

static int store_is_noscript(const redisReply *r) {
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* An error reply made here (freed by freeReplyObject, like hiredis's own). */
static redisReply *store_error_reply(const char *msg) {
    redisReply *r = calloc(1, sizeof *r);
    size_t n = strlen(msg);
    if (!r || !(r->str = malloc(n + 1))) { free(r); return NULL; }
    memcpy(r->str, msg, n + 1);
    r->len = n;
    r->type = REDIS_REPLY_ERROR;
    return r;
}

/* The hash slot a command goes to: a script's first key, a plain command's
 * key (cluster_key_arg); -1 when it names none (any node will do). */
static int store_cmd_slot(const struct store_cmd *cmd) {
    if (cmd->script) return cmd->numkeys > 0 && cmd->argc > 0 ? cluster_key_slot(cmd->argv[0], cmd->lens[0]) : -1;
    int k = cluster_key_arg(cmd->argc, cmd->argv, cmd->lens);
    return k < 0 ? -1 : cluster_key_slot(cmd->argv[k], cmd->lens[k]);
}

/* The node of a slot (slot -1: the first node that serves any), reading
 * the map again once per pipeline when the slot has no node. -1: none. */
static int store_route(store *s, int slot, int *reread) {
    for (int pass = 0; pass < 2; pass++) {
        if (slot >= 0) {
            int n = cluster_map_lookup(s->map, slot);
            if (n >= 0) return n;
        } else {
            for (int i = 0; i < CLUSTER_SLOTS; i++) if (s->map->slot_node[i] >= 0) return s->map->slot_node[i];
        }
        if (pass == 0 && !*reread) {
            char err[256];
            *reread = 1;
            if (store_refresh(s, err, sizeof err) < 0) return -1;
        }
    }
    return -1;
}

/* store_pipeline on a Redis Cluster. Each command goes to the node of its
 * slot; each node gets its commands in their order, in one write, and all
 * nodes work at once. Replies that say the command did not run are handled
 * here and the command sent again: MOVED (the slot has a new master: the
 * map learns it, and is read whole again at most once a second), ASK (a
 * slot migrating: ASKING then the command, at the node named, map
 * untouched), TRYAGAIN / CLUSTERDOWN (backs off 50, 100, ... 500 ms, for
 * up to STORE_RETRY_SECS: a slot migrating answers a script TRYAGAIN until
 * all its keys moved, a failover takes seconds), NOSCRIPT (loads the script
 * on that node). After STORE_TRIES rounds (or that time, once a TRYAGAIN
 * or CLUSTERDOWN was seen) the last reply stands. An I/O error on any node
 * fails the whole pipeline (the store is then broken: the caller
 * reconnects, which reads the map again). */
#define STORE_TRIES 6
#define STORE_RETRY_SECS 10.0
static int store_cluster_pipeline(store *s, int n, const struct store_cmd *cmds, store_reply **outp,
                                  char *err, size_t errlen) {
    redisReply **out = (redisReply **)outp;
    /* per command: its node, whether it goes with ASKING, whether it was
     * sent in this round */
    int stack[3 * 8];
    int *node = n <= 8 ? stack : malloc(sizeof *node * 3 * (size_t)n);
    int reread = 0, used[CLUSTER_MAX_NODES];
    char sha[41], where[300] = "";
    if (!node) { snprintf(err, errlen, "out of memory"); return -1; }
    int *ask = node + n, *sent = node + 2 * n;
    for (int i = 0; i < n; i++) { out[i] = NULL; ask[i] = 0; }
    double t0 = store_now();
    int retried = 0; /* a TRYAGAIN or CLUSTERDOWN seen: rounds limited by time */
    for (int round = 0;; round++) {
        int pending = 0;
        memset(used, 0, sizeof used);
        for (int i = 0; i < n; i++) {
            sent[i] = 0;
            if (out[i]) continue;
            if (!ask[i]) node[i] = store_route(s, store_cmd_slot(&cmds[i]), &reread);
            if (node[i] < 0) {
                char msg[96];
                snprintf(msg, sizeof msg, "CLUSTERDOWN Hash slot %d is not served by any node known", store_cmd_slot(&cmds[i]));
                if (!(out[i] = store_error_reply(msg))) { snprintf(err, errlen, "out of memory"); goto fail; }
                continue;
            }
            used[node[i]] = sent[i] = 1;
            pending++;
        }
        if (!pending) break;
        /* scripts this process has not loaded yet, before anything is appended
         * (a SCRIPT LOAD sent behind appended commands would read their replies) */
        for (int k = 0; k < s->map->nnodes; k++) {
            if (!used[k]) continue;
            redisContext *c = store_node(s, k, err, errlen);
            snprintf(where, sizeof where, "%s:%d", s->map->nodes[k].host, s->map->nodes[k].port);
            if (!c) goto fail;
            for (int i = 0; i < n; i++)
                if (!out[i] && node[i] == k && cmds[i].script && store_script_sha(s, c, cmds[i].script, sha, err, errlen) < 0) goto fail;
            for (int i = 0; i < n; i++) {
                if (out[i] || node[i] != k) continue;
                if (cmds[i].script) store_script_sha(s, c, cmds[i].script, sha, err, errlen); /* known: no I/O */
                if ((ask[i] && redisAppendCommand(c, "ASKING") != REDIS_OK) ||
                    store_append(c, &cmds[i], sha, 1) != REDIS_OK || store_flush_big(c) != REDIS_OK) goto io;
            }
            if (store_flush(c) != REDIS_OK) goto io;
        }
        for (int k = 0; k < s->map->nnodes; k++) {
            if (!used[k]) continue;
            redisContext *c = s->nodes[k];
            snprintf(where, sizeof where, "%s:%d", s->map->nodes[k].host, s->map->nodes[k].port);
            for (int i = 0; i < n; i++) {
                if (out[i] || node[i] != k) continue;
                void *r = NULL;
                if (ask[i]) {
                    if (redisGetReply(c, &r) != REDIS_OK || !r) goto io;
                    freeReplyObject(r);
                    r = NULL;
                }
                if (redisGetReply(c, &r) != REDIS_OK || !r) goto io;
                out[i] = r;
            }
        }
        for (int i = 0; i < n && !retried; i++)
            if (sent[i] && out[i]->type == REDIS_REPLY_ERROR &&
                cluster_redirect(out[i]->str, out[i]->len, NULL, NULL, 0, NULL) == CLUSTER_RETRY) retried = 1;
        /* the last replies stand, whatever they say */
        if (round >= STORE_TRIES - 1 && !(retried && store_now() - t0 < STORE_RETRY_SECS)) break;
        int backoff = 0;
        for (int i = 0; i < n; i++) {
            redisReply *r = out[i];
            if (!sent[i] || r->type != REDIS_REPLY_ERROR) continue;
            char host[256];
            int slot, port, kind = cluster_redirect(r->str, r->len, &slot, host, sizeof host, &port);
            if (kind == CLUSTER_MOVED || kind == CLUSTER_ASK) {
                int to = cluster_map_node(s->map, host[0] ? host : s->map->nodes[node[i]].host, port);
                if (to < 0) continue;
                if (kind == CLUSTER_MOVED) { cluster_map_assign(s->map, slot, slot, to); s->stale = 1; }
                node[i] = to;
                ask[i] = kind == CLUSTER_ASK;
            } else if (kind == CLUSTER_RETRY) {
                ask[i] = 0;
                backoff = 1;
            } else if (cmds[i].script && store_is_noscript(r)) {
                redisContext *c = s->nodes[node[i]];
                snprintf(where, sizeof where, "%s:%d", s->map->nodes[node[i]].host, s->map->nodes[node[i]].port);
                if (store_load_script(s, c, cmds[i].script, sha, err, errlen) < 0) {
                    if (s->broken) goto fail;
                    continue; /* the NOSCRIPT stands */
                }
            } else {
                /* a demoted master answers writes with READONLY: read the map again */
                if (strncmp(r->str, "READONLY", 8) == 0) s->stale = 1;
                continue;
            }
            freeReplyObject(r);
            out[i] = NULL;
        }
        if (backoff) {
            long ms = round < 9 ? (long)(round + 1) * 50 : 500;
            struct timespec ts = {ms / 1000, ms % 1000 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    if (s->stale && store_now() - s->refreshed > 1.0 + (double)(rand() % 500) / 1000) {
        char e2[256];
        store_refresh(s, e2, sizeof e2);
    }
    if (node != stack) free(node);
    return 0;
io:
    for (int k = 0; k < s->map->nnodes; k++)
        if (s->nodes[k] && s->nodes[k]->err) {
            snprintf(err, errlen, "Redis I/O error at %s:%d: %s", s->map->nodes[k].host, s->map->nodes[k].port,
                     s->nodes[k]->errstr);
            goto fail;
        }
    snprintf(err, errlen, "Redis I/O error at %s: %s", where, strerror(errno));
fail:
    for (int i = 0; i < n; i++) if (out[i]) { freeReplyObject(out[i]); out[i] = NULL; }
    s->broken = 1;
    if (node != stack) free(node);
    return -1;
}

/* The one-Redis connection is lost (an I/O error): marked broken, with
 * whatever was pending; err says where. Returns -1. */
static int store_lost(store *s, char *err, size_t errlen) {
    s->broken = 1;
    s->pending = 0;
    snprintf(err, errlen, "Redis I/O error at %s: %s", s->shown, s->c->errstr[0] ? s->c->errstr : strerror(errno));
    return -1;
}

/* Reads and frees the replies a store_send left unread (its caller raised
 * before store_recv), so the next command reads its own. */
static int store_discard(store *s, char *err, size_t errlen) {
    while (s->pending > 0) {
        void *r = NULL;
        if (redisGetReply(s->c, &r) != REDIS_OK || !r) return store_lost(s, err, errlen);
        freeReplyObject(r);
        s->pending--;
    }
    return 0;
}

/* Whether this process knows the SHA of every script of cmds. */
static int store_scripts_known(int n, const struct store_cmd *cmds) {
    int known = 1;
    pthread_mutex_lock(&store_mu);
    for (int i = 0; i < n && known; i++) {
        if (!cmds[i].script) continue;
        int k = store_script_slot(cmds[i].script);
        known = k >= 0 && store_scripts[k].sha[0];
    }
    pthread_mutex_unlock(&store_mu);
    return known;
}

/* The first half of a pipeline, for a caller that has more to prepare:
 * cmds written out now (Redis starts on them), their replies left for
 * store_recv, in order, behind those of earlier sends. Returns 1 and sends
 * nothing on a cluster (the caller uses store_pipeline), or when a script
 * would have to be loaded (a round trip) behind replies not read yet. 0
 * when sent; -1 with err on an I/O error (the connection is marked
 * broken). A NOSCRIPT is not handled here: store_recv gives it back like any
 * error reply, and the caller sends that command again. Caller's thread. */
int store_send(store *s, int n, const struct store_cmd *cmds, char *err, size_t errlen) {
    char sha[41];
    if (store_broken(s)) { snprintf(err, errlen, "Redis connection is down"); return -1; }
    if (s->map || (s->pending && !store_scripts_known(n, cmds))) return 1;
    /* Scripts not loaded yet are loaded before anything is appended (a
     * SCRIPT LOAD is a round trip of its own; only with nothing pending,
     * above), so the appends below need no Redis. */
    for (int i = 0; i < n; i++)
        if (cmds[i].script && store_script_sha(s, s->c, cmds[i].script, sha, err, errlen) < 0) return -1;
    for (int i = 0; i < n; i++) {
        if (cmds[i].script && store_script_sha(s, s->c, cmds[i].script, sha, err, errlen) < 0) return -1;
        if (store_append(s->c, &cmds[i], sha, 0) != REDIS_OK) goto io;
    }
    if (store_flush(s->c) != REDIS_OK) goto io;
    s->pending += n;
    return 0;
io:
    return store_lost(s, err, errlen);
}

/* The second half: the replies of the oldest n commands store_send sent
 * (n at most those pending) into out (caller frees each). A master demoted
 * under us (READONLY) marks the connection broken, as store_pipeline does.
 * 0, or -1 with err on an I/O error (no reply returned; those still pending
 * are lost with the connection). Caller's thread. */
int store_recv(store *s, int n, store_reply **out, char *err, size_t errlen) {
    if (n > s->pending) { snprintf(err, errlen, "redis: %d replies asked, %d pending", n, s->pending); return -1; }
    for (int got = 0; got < n; got++) {
        void *r = NULL;
        if (redisGetReply(s->c, &r) != REDIS_OK || !r) {
            for (int j = 0; j < got; j++) freeReplyObject(out[j]);
            return store_lost(s, err, errlen);
        }
        s->pending--;
        out[got] = r;
        const redisReply *rr = r;
        if (rr->type == REDIS_REPLY_ERROR && strncmp(rr->str, "READONLY", 8) == 0) s->broken = 1;
    }
    return 0;
}

/* The one round trip: every command of cmds sent at once, scripts by
 * EVALSHA; the replies read in order. A NOSCRIPT (Redis restarted or
 * flushed its scripts) reloads the scripts and resends only those commands,
 * so a caller never sees it. */
int store_pipeline(store *s, int n, const struct store_cmd *cmds, store_reply **out, char *err, size_t errlen) {
    char sha[41];
    if (store_broken(s)) { snprintf(err, errlen, "Redis connection is down"); return -1; }
    if (s->pending && store_discard(s, err, errlen) < 0) return -1;
    /* Every script this process has not loaded yet is loaded first, before
     * anything is appended: a SCRIPT LOAD is a round trip of its own, and
     * one sent behind appended commands would read their replies. */
    if (s->map) return store_cluster_pipeline(s, n, cmds, out, err, errlen);
    for (int i = 0; i < n; i++)
        if (cmds[i].script && store_script_sha(s, s->c, cmds[i].script, sha, err, errlen) < 0) return -1;
    for (int i = 0; i < n; i++) {
        if (cmds[i].script && store_script_sha(s, s->c, cmds[i].script, sha, err, errlen) < 0) return -1;
        if (store_append(s->c, &cmds[i], sha, 0) != REDIS_OK || store_flush_big(s->c) != REDIS_OK) goto io;
    }
    int got = 0;
    for (; got < n; got++) {
        void *r = NULL;
        if (redisGetReply(s->c, &r) != REDIS_OK || !r) { for (int j = 0; j < got; j++) freeReplyObject(out[j]); goto io; }
        out[got] = r;
    }
    /* A master demoted under us (a Sentinel failover) answers writes with
     * READONLY: the connection must be made again, to the new master. */
    for (int i = 0; i < n; i++) {
        const redisReply *r = (const redisReply *)out[i];
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0) s->broken = 1;
    }
    /* A script flushed from Redis (restart, SCRIPT FLUSH) did not run: load it
     * and send that one command again, in order. */
    for (int i = 0; i < n; i++) {
        redisReply *r = (redisReply *)out[i];
        if (!cmds[i].script || !store_is_noscript(r)) continue;
        freeReplyObject(r);
        out[i] = NULL;
        void *again = NULL;
        if (store_load_script(s, s->c, cmds[i].script, sha, err, errlen) < 0 ||
            store_append(s->c, &cmds[i], sha, 0) != REDIS_OK || redisGetReply(s->c, &again) != REDIS_OK || !again) {
            for (int j = 0; j < n; j++) if (out[j]) freeReplyObject(out[j]);
            if (!s->broken && s->c->err) goto io;
            s->broken = s->broken || s->c->err;
            return -1;
        }
        out[i] = again;
    }
    return 0;
io:
    return store_lost(s, err, errlen);
}

/* One plain command to every master of a cluster (every node that serves a
 * slot now), one after another: out[i] its reply, names[i] "host:port"; on
 * one Redis, to it. Returns how many replies (at most max), or -1 with err
 * (an I/O error marks the store broken). For INFO-like commands that
 * describe a server, not a key. Caller's thread. */
int store_each(store *s, const struct store_cmd *cmd, int max, store_reply **out, char (*names)[64],
               char *err, size_t errlen) {
    if (store_broken(s)) { snprintf(err, errlen, "Redis connection is down"); return -1; }
    if (!s->map) {
        if (max < 1) return 0;
        snprintf(names[0], 64, "%.63s", s->shown);
        return store_pipeline(s, 1, cmd, out, err, errlen) < 0 ? -1 : 1;
    }
    int n = 0, serves[CLUSTER_MAX_NODES] = {0};
    for (int i = 0; i < CLUSTER_SLOTS; i++) if (s->map->slot_node[i] >= 0) serves[s->map->slot_node[i]] = 1;
    for (int k = 0; k < s->map->nnodes && n < max; k++) {
        if (!serves[k]) continue;
        redisContext *c = store_node(s, k, err, errlen);
        void *r = NULL;
        if (!c || redisAppendCommandArgv(c, cmd->argc, cmd->argv, cmd->lens) != REDIS_OK ||
            redisGetReply(c, &r) != REDIS_OK || !r) {
            if (c) snprintf(err, errlen, "Redis I/O error at %s:%d: %s", s->map->nodes[k].host, s->map->nodes[k].port,
                            c->errstr);
            for (int j = 0; j < n; j++) freeReplyObject(out[j]);
            s->broken = 1;
            return -1;
        }
        snprintf(names[n], 64, "%.40s:%d", s->map->nodes[k].host, s->map->nodes[k].port);
        out[n++] = r;
    }
    return n;
}

/* --- replies ------------------------------------------------------------ */

void store_reply_free(store_reply *r) { if (r) freeReplyObject(r); }

int store_reply_type(const store_reply *p) {
    const redisReply *r = (const redisReply *)p;
    switch (r->type) {
    case REDIS_REPLY_STRING: return STORE_STRING;
    case REDIS_REPLY_ARRAY: return STORE_ARRAY;
    case REDIS_REPLY_INTEGER: return STORE_INTEGER;
    case REDIS_REPLY_STATUS: return STORE_STATUS;
    case REDIS_REPLY_ERROR: return STORE_ERROR;
    default: return STORE_NIL;
    }
}
const char *store_reply_str(const store_reply *p, size_t *len) {
    const redisReply *r = (const redisReply *)p;
    *len = r->len;
    return r->str;
}
long long store_reply_int(const store_reply *p) { return ((const redisReply *)p)->integer; }
size_t store_reply_count(const store_reply *p) { return ((const redisReply *)p)->elements; }
const store_reply *store_reply_elem(const store_reply *p, size_t i) {
    return (const store_reply *)((const redisReply *)p)->element[i];
}
