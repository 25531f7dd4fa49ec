/* store.c - Redis access over hiredis 0.14.
 *
 * Threads: a `store` (one synchronous redisContext) is created, used and freed
 * by one thread. The script table (name -> SHA1, source) is process-wide and
 * guarded by store_mu; SHAs are learned from SCRIPT LOAD, so the same embedded
 * bytes give the same SHA on every connection. The subscriber (store_sub) lives
 * on the main thread's event_base only.
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
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <sys/socket.h>
#include "cluster.h"
#include "embed.h"
#include "log.h"
#include "store.h"

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
    struct store_url u; /* url parsed once, at open (as given: before Sentinel resolves it) */
    char shown[600];    /* the URL without its password, for messages and logs */
    double timeout_s;
    double io_s;        /* the I/O bound in force (store_bound_io) */
    int broken;
    int pending;        /* replies of store_send not read yet (store_recv) */
};

/* --- URLs --------------------------------------------------------------- */

static void url_decode(char *s) {
    char *o = s;
    for (; *s; s++) {
        if (*s == '%' && s[1] && s[2]) {
            char hex[3] = {s[1], s[2], 0};
            *o++ = (char)strtol(hex, NULL, 16);
            s += 2;
        } else *o++ = *s;
    }
    *o = 0;
}

/* The end of a URL's userinfo: its last '@' before the query or fragment
 * (a password may hold an unencoded '@' or '/'), or NULL without one.
 * auth: the first byte after "scheme://". */
static const char *store_userinfo_end(const char *auth) {
    const char *stop = auth + strcspn(auth, "?#"), *at = NULL;
    for (const char *c = auth; c < stop; c++) if (*c == '@') at = c;
    return at;
}

size_t store_redact_url(const char *url, char *out, size_t outlen) {
    size_t o = 0;
#define PUT(ch) do { if (o + 1 < outlen) out[o] = (ch); o++; } while (0)
    const char *auth = strstr(url, "://"), *at = NULL;
    if (auth && auth + 3 <= url + strcspn(url, "?#")) {
        auth += 3;
        at = store_userinfo_end(auth);
    } else auth = NULL;
    for (const char *c = url; *c; ) {
        if (auth && at && c == auth) {         /* the whole userinfo */
            PUT('*'); PUT('*'); PUT('*');
            c = at;
            continue;
        }
        if ((*c == '?' || *c == '&') && strncmp(c + 1, "password=", 9) == 0) {
            for (int k = 0; k < 10; k++) PUT(c[k]);
            PUT('*'); PUT('*'); PUT('*');
            c += 10;
            while (*c && *c != '&' && *c != '#') c++;
            continue;
        }
        PUT(*c);
        c++;
    }
    if (outlen) out[o < outlen ? o : outlen - 1] = 0;
#undef PUT
    return o;
}

static void store_bad_url(const char *url, char *err, size_t errlen) {
    char shown[600]; /* never echo a password */
    store_redact_url(url, shown, sizeof shown);
    snprintf(err, errlen, "bad Redis URL '%s' (want redis://[[user]:password@]host[:port][,host[:port]...][/db], "
             "redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTER[/db] or unix:///path[?db=N])",
             shown);
}

/* A host list "h1[:p1][,h2[:p2]...]" ending at end (an empty list is
 * 127.0.0.1) into out as "host:port,host:port" (port defport when not
 * given). Sentinels and a cluster's seed nodes. */
static int store_parse_hosts(const char *p, const char *end, long defport, char *out, size_t outlen) {
    size_t o = 0;
    for (const char *h = p; h < end || (h == p && h == end); ) {
        const char *e = memchr(h, ',', (size_t)(end - h));
        if (!e) e = end;
        const char *colon = memchr(h, ':', (size_t)(e - h));
        size_t hl = (size_t)((colon ? colon : e) - h);
        long port = defport;
        if (colon) {
            char *pe;
            port = strtol(colon + 1, &pe, 10);
            if (pe != e || port <= 0 || port > 65535) return -1;
        }
        int w = snprintf(out + o, outlen - o, "%s%.*s:%ld", o ? "," : "", (int)hl, hl ? h : "127.0.0.1", port);
        if (w < 0 || (size_t)w >= outlen - o) return -1;
        o += (size_t)w;
        if (e == end) break;
        h = e + 1;
    }
    return 0;
}

/* The n-th "host:port" of a list made by store_parse_hosts (wrapping
 * around) into host and port; the count of entries. */
static int store_list_pick(const char *list, int n, char *host, size_t hostlen, int *port) {
    int count = 1;
    for (const char *c = list; *c; c++) count += *c == ',';
    n %= count;
    const char *h = list;
    for (int i = 0; i < n; i++) h = strchr(h, ',') + 1;
    const char *e = strchr(h, ','), *colon;
    if (!e) e = h + strlen(h);
    for (colon = e; colon > h && *colon != ':'; colon--) {}
    snprintf(host, hostlen, "%.*s", (int)(colon - h), h);
    *port = atoi(colon + 1);
    return count;
}

/* The k-th seed node of u (wrapping around) into host and port: its seed
 * list, or its one host. Returns how many seeds u names. */
static int store_seed(const struct store_url *u, int k, char *host, size_t hostlen, int *port) {
    if (u->seeds[0]) return store_list_pick(u->seeds, k, host, hostlen, port);
    snprintf(host, hostlen, "%s", u->host);
    *port = u->port;
    return 1;
}

/* The rest of a redis+sentinel:// URL after its userinfo:
 * "h1[:p1][,h2[:p2]...]/MASTER[/db]" (port 26379 by default, an empty list
 * is 127.0.0.1). Fills u->sentinels ("host:port,..."), u->master, u->db. */
static int store_parse_sentinel(const char *p, struct store_url *u) {
    const char *slash = strchr(p, '/');
    if (!slash || store_parse_hosts(p, slash, 26379, u->sentinels, sizeof u->sentinels) < 0) return -1;
    const char *name = slash + 1, *next = strchr(name, '/');
    size_t nl = next ? (size_t)(next - name) : strlen(name);
    if (nl == 0 || nl >= sizeof u->master) return -1;
    memcpy(u->master, name, nl);
    if (next && next[1]) {
        char *end;
        long db = strtol(next + 1, &end, 10);
        if (*end || next[1] < '0' || next[1] > '9' || db > 1000000) return -1;
        u->db = (int)db;
    }
    return 0;
}

int store_parse_url(const char *url, struct store_url *u, char *err, size_t errlen) {
    memset(u, 0, sizeof *u);
    u->port = 6379;
    if (strncmp(url, "unix://", 7) == 0) {
        const char *p = url + 7, *q = strchr(p, '?');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 0 || n >= sizeof u->path) goto bad;
        memcpy(u->path, p, n);
        for (; q && *q; ) {
            q++;
            if (strncmp(q, "db=", 3) == 0) {
                /* digits only, up to '&' or the end (atoi took "-3" and "x") */
                char *end;
                long db = strtol(q + 3, &end, 10);
                if (q[3] < '0' || q[3] > '9' || (*end && *end != '&') || db > 1000000) goto bad;
                u->db = (int)db;
            }
            else if (strncmp(q, "password=", 9) == 0) {
                const char *e = strchr(q, '&');
                size_t m = e ? (size_t)(e - q - 9) : strlen(q + 9);
                if (m >= sizeof u->password) goto bad;
                memcpy(u->password, q + 9, m);
                url_decode(u->password);
            } else if (strncmp(q, "user=", 5) == 0) {
                const char *e = strchr(q, '&');
                size_t m = e ? (size_t)(e - q - 5) : strlen(q + 5);
                if (m >= sizeof u->user) goto bad;
                memcpy(u->user, q + 5, m);
                url_decode(u->user);
            } else goto bad;
            q = strchr(q, '&');
        }
        return 0;
    }
    int sentinel = strncmp(url, "redis+sentinel://", 17) == 0;
    if (!sentinel && strncmp(url, "redis://", 8) != 0) goto bad;
    const char *p = url + (sentinel ? 17 : 8), *at = store_userinfo_end(p), *slash;
    if (at) {
        /* user:password (an ACL user), :password, or password alone */
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *pw = colon ? colon + 1 : p;
        size_t m = (size_t)(at - pw);
        if (m >= sizeof u->password) goto bad;
        memcpy(u->password, pw, m);
        url_decode(u->password);
        if (colon) {
            size_t un = (size_t)(colon - p);
            if (un >= sizeof u->user) goto bad;
            memcpy(u->user, p, un);
            url_decode(u->user);
        }
        p = at + 1;
    }
    if (sentinel) return store_parse_sentinel(p, u) < 0 ? (store_bad_url(url, err, errlen), -1) : 0;
    slash = strchr(p, '/');
    size_t hl = slash ? (size_t)(slash - p) : strlen(p);
    if (memchr(p, ',', hl)) {
        /* several seed nodes of a Redis Cluster: the first is host:port */
        if (store_parse_hosts(p, p + hl, 6379, u->seeds, sizeof u->seeds) < 0) goto bad;
        store_list_pick(u->seeds, 0, u->host, sizeof u->host, &u->port);
        hl = 0;
    }
    const char *colon = hl ? memchr(p, ':', hl) : NULL;
    if (colon) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (end != p + hl || port <= 0 || port > 65535) goto bad;
        u->port = (int)port;
        hl = (size_t)(colon - p);
    }
    if (hl >= sizeof u->host) goto bad;
    if (!u->seeds[0]) {
        memcpy(u->host, p, hl);
        if (hl == 0) strcpy(u->host, "127.0.0.1");
    }
    if (slash && slash[1]) {
        char *end;
        long db = strtol(slash + 1, &end, 10);
        if (*end || slash[1] < '0' || slash[1] > '9' || db > 1000000) goto bad;
        u->db = (int)db;
    }
    return 0;
bad:
    store_bad_url(url, err, errlen);
    return -1;
}

/* --- connections -------------------------------------------------------- */

static struct timeval store_tv(double s) {
    struct timeval tv = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    return tv;
}

/* Asks the sentinels of u (in order, the first that answers) where u's
 * master is, into u->host and u->port. Blocks up to timeout_s per sentinel
 * (at most 2 s each). Any thread (a context of its own per call). */
static int store_resolve_master(struct store_url *u, double timeout_s, char *err, size_t errlen) {
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
static redisContext *store_dial(const struct store_url *u, const char *host, int port, const char *shown,
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
static int store_refresh(store *s, char *err, size_t errlen) {
    const struct store_url *u = &s->u;
    char host[256], shown[300];
    int port, nseeds = store_seed(u, 0, host, sizeof host, &port);
    int total = nseeds + s->map->nnodes, start = s->next_seed++;
    for (int k = 0; k < total; k++) {
        int i = (start + k) % total, node = i - nseeds;
        if (node < 0) {
            store_seed(u, i, host, sizeof host, &port);
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
    struct store_url u = s->u;
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
    int port, nseeds = store_seed(&u, 0, host, sizeof host, &port);
    for (int k = 0; k < nseeds; k++) {
        store_seed(&u, k, host, sizeof host, &port);
        snprintf(shown, sizeof shown, "%s:%d", host, port);
        redisContext *c = store_dial(&u, host, port, shown, s->timeout_s, 0, err, errlen);
        if (!c) continue;
        int rc = s->node_only ? 0 : store_read_map(s, c, host, err, errlen);
        if (rc == 1 && u.db) {
            char url[600];
            store_redact_url(s->url, url, sizeof url);
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
            store_redact_url(s->url, url, sizeof url);
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
    if (store_parse_url(url, &s->u, err, errlen) < 0) { free(s); return NULL; }
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

/* --- subscriber (main thread) ------------------------------------------- */

struct store_sub {
    struct event_base *base;
    redisAsyncContext *ac;
    struct event *retry;
    char url[1024], channel[256];
    store_message_cb cb;
    void *arg;
    int down_logged;
    int attempt; /* a cluster's seeds are tried in turn */
};

static void store_sub_connect(struct store_sub *sub);

static void store_sub_on_message(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    struct store_sub *sub = priv;
    redisReply *r = reply;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3) return;
    if (r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "message") == 0 &&
        r->element[2]->type == REDIS_REPLY_STRING)
        sub->cb(r->element[2]->str, r->element[2]->len, sub->arg);
    else if (strcmp(r->element[0]->str, "subscribe") == 0 && sub->down_logged) {
        log_fmt(LOG_INFO, "wake-up subscriber connected again");
        sub->down_logged = 0;
        sub->cb(NULL, 0, sub->arg); /* (re)subscribed: wake everyone, pushes may have been missed */
    }
}

static void store_sub_lost(struct store_sub *sub, const char *why) {
    sub->ac = NULL;
    if (!sub->down_logged) log_fmt(LOG_WARN, "wake-up subscriber lost Redis (%s); retrying every second", why);
    sub->down_logged = 1;
    struct timeval tv = {1, 0};
    evtimer_add(sub->retry, &tv);
}

static void store_sub_on_connect(const redisAsyncContext *ac, int status) {
    struct store_sub *sub = ac->data;
    if (status != REDIS_OK) store_sub_lost(sub, ac->errstr);
}

static void store_sub_on_disconnect(const redisAsyncContext *ac, int status) {
    struct store_sub *sub = ac->data;
    (void)status;
    if (sub) store_sub_lost(sub, ac->errstr[0] ? ac->errstr : "disconnected");
}

static void store_sub_retry(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    store_sub_connect(arg);
}

static void store_sub_connect(struct store_sub *sub) {
    struct store_url u;
    char err[256];
    if (store_parse_url(sub->url, &u, err, sizeof err) < 0) return;
    if (u.master[0] && store_resolve_master(&u, 1, err, sizeof err) < 0) {
        store_sub_lost(sub, err);
        return;
    }
    /* on a Redis Cluster a PUBLISH reaches every node: any seed will do */
    if (u.seeds[0]) store_list_pick(u.seeds, sub->attempt++, u.host, sizeof u.host, &u.port);
    redisAsyncContext *ac = u.path[0] ? redisAsyncConnectUnix(u.path) : redisAsyncConnect(u.host, u.port);
    if (!ac || ac->err) {
        if (ac) redisAsyncFree(ac);
        store_sub_lost(sub, "connect failed");
        return;
    }
    ac->data = sub;
    sub->ac = ac;
    redisLibeventAttach(ac, sub->base);
    redisAsyncSetConnectCallback(ac, store_sub_on_connect);
    redisAsyncSetDisconnectCallback(ac, store_sub_on_disconnect);
    if (u.user[0]) redisAsyncCommand(ac, NULL, NULL, "AUTH %s %s", u.user, u.password);
    else if (u.password[0]) redisAsyncCommand(ac, NULL, NULL, "AUTH %s", u.password);
    redisAsyncCommand(ac, store_sub_on_message, sub, "SUBSCRIBE %s", sub->channel);
}

struct store_sub *store_subscribe(struct event_base *base, const char *url, const char *channel,
                                  store_message_cb cb, void *arg, char *err, size_t errlen) {
    struct store_url u;
    if (store_parse_url(url, &u, err, errlen) < 0) return NULL;
    struct store_sub *sub = calloc(1, sizeof *sub);
    if (!sub) return NULL;
    sub->base = base;
    snprintf(sub->url, sizeof sub->url, "%s", url);
    snprintf(sub->channel, sizeof sub->channel, "%s", channel);
    sub->cb = cb;
    sub->arg = arg;
    sub->retry = evtimer_new(base, store_sub_retry, sub);
    store_sub_connect(sub);
    return sub;
}

void store_sub_free(struct store_sub *sub) {
    if (!sub) return;
    if (sub->ac) {
        sub->ac->data = NULL;
        redisAsyncFree(sub->ac);
    }
    event_free(sub->retry);
    free(sub);
}

/* --- sharded subscriber (main thread, Redis Cluster) -------------------- */

/* SSUBSCRIBE to one channel per shard on the master of its slot, one
 * connection per master. hiredis 0.14's async API does not know sharded
 * Pub/Sub's replies ("smessage"), so each connection is a bufferevent read
 * with hiredis's reply parser directly. A channel whose slot moves gets a
 * "sunsubscribe" from its old node; a connection lost is retried every
 * second; either way the map is read again (store_refresh, blocking the
 * main thread for at most a second per node asked) and every channel of the
 * affected node subscribed again where its slot now is, then every thread
 * woken (messages may have been missed). Everything here belongs to the
 * main thread. */
struct store_ssub_conn {
    struct store_ssub *owner;
    struct bufferevent *bev;
    redisReader *reader;
    int node;           /* map index; -1: unused */
};

struct store_ssub {
    struct event_base *base;
    store *map;         /* a cluster store, for its slot map */
    struct event *retry;
    int nch;
    char **channels;
    int *slot;          /* per channel */
    int *on;            /* per channel: index into conns, -1: not subscribed */
    struct store_ssub_conn conns[CLUSTER_MAX_NODES];
    store_message_cb cb;
    void *arg;
    int down_logged;
};

static void store_ssub_drop(struct store_ssub_conn *c) {
    if (c->bev) bufferevent_free(c->bev);
    if (c->reader) redisReaderFree(c->reader);
    c->bev = NULL;
    c->reader = NULL;
    c->node = -1;
}

/* Some channel lost its subscription: drop that state and try again soon. */
static void store_ssub_later(struct store_ssub *ss, double seconds, const char *why) {
    if (why && !ss->down_logged) {
        log_fmt(LOG_WARN, "sharded wake-up subscriber: %s; subscribing again every second", why);
        ss->down_logged = 1;
    }
    struct timeval tv = {(time_t)seconds, (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6)};
    if (!evtimer_pending(ss->retry, NULL)) evtimer_add(ss->retry, &tv);
}

static void store_ssub_on_read(struct bufferevent *bev, void *arg) {
    struct store_ssub_conn *c = arg;
    struct store_ssub *ss = c->owner;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t len = evbuffer_get_length(in);
    if (len && redisReaderFeed(c->reader, (const char *)evbuffer_pullup(in, -1), len) != REDIS_OK) {
        store_ssub_drop(c);
        store_ssub_later(ss, 1, "bad reply");
        return;
    }
    evbuffer_drain(in, len);
    void *reply;
    while (c->reader && redisReaderGetReply(c->reader, &reply) == REDIS_OK && reply) {
        redisReply *r = reply;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == REDIS_REPLY_STRING) {
            const char *kind = r->element[0]->str;
            if (strcmp(kind, "smessage") == 0 && r->element[2]->type == REDIS_REPLY_STRING) {
                ss->cb(r->element[2]->str, r->element[2]->len, ss->arg);
            } else if (strcmp(kind, "sunsubscribe") == 0 && r->element[1]->type == REDIS_REPLY_STRING) {
                /* the slot moved away (a reshard or failover): subscribe there */
                for (int i = 0; i < ss->nch; i++)
                    if (strcmp(ss->channels[i], r->element[1]->str) == 0) ss->on[i] = -1;
                store_ssub_later(ss, 0.05, NULL);
            }
        } else if (r->type == REDIS_REPLY_ERROR) {
            /* a MOVED for a channel subscribed with a stale map, or AUTH refused */
            for (int i = 0; i < ss->nch; i++)
                if (ss->on[i] == (int)(c - ss->conns)) ss->on[i] = -1;
            store_ssub_drop(c);
            store_ssub_later(ss, 1, r->str);
            freeReplyObject(r);
            return;
        }
        freeReplyObject(r);
    }
}

static void store_ssub_on_event(struct bufferevent *bev, short what, void *arg) {
    (void)bev;
    struct store_ssub_conn *c = arg;
    struct store_ssub *ss = c->owner;
    if (what & BEV_EVENT_CONNECTED) return;
    for (int i = 0; i < ss->nch; i++)
        if (ss->on[i] == (int)(c - ss->conns)) ss->on[i] = -1;
    store_ssub_drop(c);
    store_ssub_later(ss, 1, (what & BEV_EVENT_EOF) ? "a node closed the connection" : "a node is unreachable");
}

/* Writes a command (argv of n strings) in RESP to a bufferevent. */
static void store_ssub_send(struct bufferevent *bev, int n, const char **argv) {
    struct evbuffer *out = bufferevent_get_output(bev);
    evbuffer_add_printf(out, "*%d\r\n", n);
    for (int i = 0; i < n; i++) evbuffer_add_printf(out, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
}

/* The connection to map node k, opened (and authenticated) when needed. */
static struct store_ssub_conn *store_ssub_conn(struct store_ssub *ss, int k) {
    struct store_ssub_conn *c = &ss->conns[k];
    if (c->bev) return c;
    const struct store_url *u = &ss->map->u;
    const struct cluster_node *nd = &ss->map->map->nodes[k];
    c->owner = ss;
    c->bev = bufferevent_socket_new(ss->base, -1, BEV_OPT_CLOSE_ON_FREE);
    c->reader = redisReaderCreate();
    if (!c->bev || !c->reader || bufferevent_socket_connect_hostname(c->bev, NULL, AF_UNSPEC, nd->host, nd->port) < 0) {
        store_ssub_drop(c);
        return NULL;
    }
    c->node = k;
    bufferevent_setcb(c->bev, store_ssub_on_read, NULL, store_ssub_on_event, c);
    bufferevent_enable(c->bev, EV_READ);
    if (u->user[0]) store_ssub_send(c->bev, 3, (const char *[]){"AUTH", u->user, u->password});
    else if (u->password[0]) store_ssub_send(c->bev, 2, (const char *[]){"AUTH", u->password});
    return c;
}

/* Subscribes every channel that is not, each on the master of its slot;
 * reads the map first when some slot's master is unknown or a retry asked. */
static void store_ssub_fill(struct store_ssub *ss, int reread) {
    char err[256];
    if (reread || store_broken(ss->map)) {
        if (store_refresh(ss->map, err, sizeof err) < 0) {
            store_ssub_later(ss, 1, err);
            return;
        }
    }
    int missing = 0, any = 0;
    for (int i = 0; i < ss->nch; i++) {
        if (ss->on[i] >= 0) continue;
        int k = cluster_map_lookup(ss->map->map, ss->slot[i]);
        struct store_ssub_conn *c = k < 0 ? NULL : store_ssub_conn(ss, k);
        if (!c) { missing = 1; continue; }
        store_ssub_send(c->bev, 2, (const char *[]){"SSUBSCRIBE", ss->channels[i]});
        ss->on[i] = k;
        any = 1;
    }
    if (missing) store_ssub_later(ss, 1, "a shard's master is unknown or unreachable");
    else if (any && ss->down_logged) {
        log_fmt(LOG_INFO, "sharded wake-up subscriber subscribed again");
        ss->down_logged = 0;
    }
    if (any) ss->cb(NULL, 0, ss->arg); /* messages may have been missed meanwhile */
}

static void store_ssub_retry(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    store_ssub_fill(arg, 1);
}

struct store_ssub *store_ssubscribe(struct event_base *base, const char *url, int n, const char *const *channels,
                                    store_message_cb cb, void *arg, char *err, size_t errlen) {
    store *s = store_open(url, 1, err, errlen);
    if (!s) return NULL;
    if (!s->map) {
        snprintf(err, errlen, "not a Redis Cluster");
        store_close(s);
        return NULL;
    }
    struct store_ssub *ss = calloc(1, sizeof *ss);
    if (!ss) { store_close(s); snprintf(err, errlen, "out of memory"); return NULL; }
    ss->base = base;
    ss->map = s;
    ss->cb = cb;
    ss->arg = arg;
    ss->nch = n;
    ss->channels = calloc((size_t)n + 1, sizeof *ss->channels);
    ss->slot = calloc((size_t)n + 1, sizeof *ss->slot);
    ss->on = calloc((size_t)n + 1, sizeof *ss->on);
    ss->retry = evtimer_new(base, store_ssub_retry, ss);
    for (int k = 0; k < CLUSTER_MAX_NODES; k++) ss->conns[k].node = -1;
    if (!ss->channels || !ss->slot || !ss->on || !ss->retry) {
        snprintf(err, errlen, "out of memory");
        store_ssub_free(ss);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!(ss->channels[i] = strdup(channels[i]))) { snprintf(err, errlen, "out of memory"); store_ssub_free(ss); return NULL; }
        ss->slot[i] = cluster_key_slot(channels[i], strlen(channels[i]));
        ss->on[i] = -1;
    }
    store_ssub_fill(ss, 0);
    return ss;
}

int store_ssub_add(struct store_ssub *ss, const char *channel) {
    for (int i = 0; i < ss->nch; i++)
        if (strcmp(ss->channels[i], channel) == 0) return 0;
    size_t n = (size_t)ss->nch + 1;
    char **ch = realloc(ss->channels, (n + 1) * sizeof *ch);
    if (ch) ss->channels = ch;
    int *slot = ch ? realloc(ss->slot, (n + 1) * sizeof *slot) : NULL;
    if (slot) ss->slot = slot;
    int *on = slot ? realloc(ss->on, (n + 1) * sizeof *on) : NULL;
    if (on) ss->on = on;
    char *copy = on ? strdup(channel) : NULL;
    if (!copy) return -1;
    ss->channels[ss->nch] = copy;
    ss->slot[ss->nch] = cluster_key_slot(channel, strlen(channel));
    ss->on[ss->nch] = -1;
    ss->nch++;
    store_ssub_fill(ss, 0);
    return 0;
}

void store_ssub_free(struct store_ssub *ss) {
    if (!ss) return;
    for (int k = 0; k < CLUSTER_MAX_NODES; k++) store_ssub_drop(&ss->conns[k]);
    for (int i = 0; ss->channels && i < ss->nch; i++) free(ss->channels[i]);
    free(ss->channels);
    free(ss->slot);
    free(ss->on);
    if (ss->retry) event_free(ss->retry);
    store_close(ss->map);
    free(ss);
}
