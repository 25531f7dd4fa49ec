/* sub.c - the wake-up subscribers: a push that makes a shard due publishes
 * its prefix, and the main thread routes it to the thread that serves the
 * shard (host.c). Two implementations behind one callback type:
 *  - struct sub: SUBSCRIBE to the namespace's channel on one Redis (or on
 *    any seed node of a Redis Cluster, where a PUBLISH reaches every node),
 *    over hiredis's async API on the main loop;
 *  - struct sub_sharded: on a Redis Cluster, SSUBSCRIBE to each shard's own
 *    channel on the master of its slot (sharded Pub/Sub), following slots
 *    that move.
 *
 * Threads: main thread only. Everything here (contexts, bufferevents,
 * timers) lives on the main thread's event_base, and the callback runs there.
 * The one blocking step is the sharded subscriber's re-read of the slot map
 * (store_refresh: at most a second per node asked) and a redis+sentinel://
 * URL's resolution at each (re)connect (store_resolve_master, up to a second
 * per sentinel): both only when Redis changed or went away.
 *
 * Failure model: a lost connection is logged once and retried every second
 * until it is back; then every thread is woken (cb(NULL, 0)), since pushes
 * may have been published meanwhile. poll_interval stays the safety net. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include "cluster.h"
#include "log.h"
#include "store.h"
#include "sub.h"
#include "url.h"

/* --- the plain subscriber ------------------------------------------------- */

struct sub {
    struct event_base *base;
    redisAsyncContext *ac;
    struct event *retry;
    char url[1024], channel[256];
    sub_message_cb cb;
    void *arg;
    int down_logged;
    int attempt; /* a cluster's seeds are tried in turn */
};

static void sub_connect(struct sub *sub);

/* Every reply on the subscription: a message is handed to cb; the
 * confirmation of a SUBSCRIBE after a loss wakes every thread (cb(NULL, 0)). */
static void sub_on_message(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    struct sub *sub = priv;
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

/* The connection is gone (hiredis frees its context): logged once per
 * outage, tried again in a second. */
static void sub_lost(struct sub *sub, const char *why) {
    sub->ac = NULL;
    if (!sub->down_logged) log_fmt(LOG_WARN, "wake-up subscriber lost Redis (%s); retrying every second", why);
    sub->down_logged = 1;
    struct timeval tv = {1, 0};
    evtimer_add(sub->retry, &tv);
}

/* hiredis 0.14 calls only this one for a refused connect, never the
 * disconnect callback. */
static void sub_on_connect(const redisAsyncContext *ac, int status) {
    struct sub *sub = ac->data;
    if (status != REDIS_OK) sub_lost(sub, ac->errstr);
}

/* data is NULL when sub_free asked for the disconnect. */
static void sub_on_disconnect(const redisAsyncContext *ac, int status) {
    struct sub *sub = ac->data;
    (void)status;
    if (sub) sub_lost(sub, ac->errstr[0] ? ac->errstr : "disconnected");
}

static void sub_retry(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    sub_connect(arg);
}

/* One attempt: the URL parsed again (its Sentinel asked anew, a
 * cluster's next seed), AUTH and SUBSCRIBE queued behind the connect. */
static void sub_connect(struct sub *sub) {
    struct url u;
    char err[256];
    if (url_parse(sub->url, &u, err, sizeof err) < 0) return;
    if (u.master[0] && store_resolve_master(&u, 1, err, sizeof err) < 0) {
        sub_lost(sub, err);
        return;
    }
    /* on a Redis Cluster a PUBLISH reaches every node: any seed will do */
    if (u.seeds[0]) url_pick(u.seeds, sub->attempt++, u.host, sizeof u.host, &u.port);
    redisAsyncContext *ac = u.path[0] ? redisAsyncConnectUnix(u.path) : redisAsyncConnect(u.host, u.port);
    if (!ac || ac->err) {
        if (ac) redisAsyncFree(ac);
        sub_lost(sub, "connect failed");
        return;
    }
    ac->data = sub;
    sub->ac = ac;
    redisLibeventAttach(ac, sub->base);
    redisAsyncSetConnectCallback(ac, sub_on_connect);
    redisAsyncSetDisconnectCallback(ac, sub_on_disconnect);
    if (u.user[0]) redisAsyncCommand(ac, NULL, NULL, "AUTH %s %s", u.user, u.password);
    else if (u.password[0]) redisAsyncCommand(ac, NULL, NULL, "AUTH %s", u.password);
    redisAsyncCommand(ac, sub_on_message, sub, "SUBSCRIBE %s", sub->channel);
}

struct sub *sub_open(struct event_base *base, const char *url, const char *channel, sub_message_cb cb,
                     void *arg, char *err, size_t errlen) {
    struct url u;
    if (url_parse(url, &u, err, errlen) < 0) return NULL;
    struct sub *sub = calloc(1, sizeof *sub);
    if (!sub) return NULL;
    sub->base = base;
    snprintf(sub->url, sizeof sub->url, "%s", url);
    snprintf(sub->channel, sizeof sub->channel, "%s", channel);
    sub->cb = cb;
    sub->arg = arg;
    sub->retry = evtimer_new(base, sub_retry, sub);
    sub_connect(sub);
    return sub;
}

void sub_free(struct sub *sub) {
    if (!sub) return;
    if (sub->ac) {
        sub->ac->data = NULL;
        redisAsyncFree(sub->ac);
    }
    event_free(sub->retry);
    free(sub);
}

/* --- the sharded subscriber (Redis Cluster) ----------------------------- */

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
struct sub_node {
    struct sub_sharded *owner;
    struct bufferevent *bev;
    redisReader *reader;
    int node;           /* map index; -1: unused */
};

struct sub_sharded {
    struct event_base *base;
    store *cluster;     /* a cluster store: its slot map (store_map), read again when slots move */
    struct url u;       /* the URL's credentials, for each node's AUTH */
    struct event *retry;
    int nch;
    char **channels;
    int *slot;          /* per channel */
    int *on;            /* per channel: index into conns, -1: not subscribed */
    struct sub_node conns[CLUSTER_MAX_NODES];
    sub_message_cb cb;
    void *arg;
    int down_logged;
};

static void sub_node_drop(struct sub_node *c) {
    if (c->bev) bufferevent_free(c->bev);
    if (c->reader) redisReaderFree(c->reader);
    c->bev = NULL;
    c->reader = NULL;
    c->node = -1;
}

/* Some channel lost its subscription: drop that state and try again soon. */
static void sub_sharded_later(struct sub_sharded *ss, double seconds, const char *why) {
    if (why && !ss->down_logged) {
        log_fmt(LOG_WARN, "sharded wake-up subscriber: %s; subscribing again every second", why);
        ss->down_logged = 1;
    }
    struct timeval tv = {(time_t)seconds, (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6)};
    if (!evtimer_pending(ss->retry, NULL)) evtimer_add(ss->retry, &tv);
}

/* Bytes from a node, fed to hiredis's reply parser: an "smessage" goes to
 * cb; a "sunsubscribe" (the slot moved) or an error reply (a MOVED, AUTH
 * refused) has its channels subscribed again, where the map now says. */
static void sub_node_on_read(struct bufferevent *bev, void *arg) {
    struct sub_node *c = arg;
    struct sub_sharded *ss = c->owner;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t len = evbuffer_get_length(in);
    if (len && redisReaderFeed(c->reader, (const char *)evbuffer_pullup(in, -1), len) != REDIS_OK) {
        sub_node_drop(c);
        sub_sharded_later(ss, 1, "bad reply");
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
                sub_sharded_later(ss, 0.05, NULL);
            }
        } else if (r->type == REDIS_REPLY_ERROR) {
            /* a MOVED for a channel subscribed with a stale map, or AUTH refused */
            for (int i = 0; i < ss->nch; i++)
                if (ss->on[i] == (int)(c - ss->conns)) ss->on[i] = -1;
            sub_node_drop(c);
            sub_sharded_later(ss, 1, r->str);
            freeReplyObject(r);
            return;
        }
        freeReplyObject(r);
    }
}

/* A node's connection closed or failed: its channels are subscribed again
 * elsewhere after the map is read anew. */
static void sub_node_on_event(struct bufferevent *bev, short what, void *arg) {
    (void)bev;
    struct sub_node *c = arg;
    struct sub_sharded *ss = c->owner;
    if (what & BEV_EVENT_CONNECTED) return;
    for (int i = 0; i < ss->nch; i++)
        if (ss->on[i] == (int)(c - ss->conns)) ss->on[i] = -1;
    sub_node_drop(c);
    sub_sharded_later(ss, 1, (what & BEV_EVENT_EOF) ? "a node closed the connection" : "a node is unreachable");
}

/* Writes a command (argv of n strings) in RESP to a bufferevent. */
static void sub_send(struct bufferevent *bev, int n, const char **argv) {
    struct evbuffer *out = bufferevent_get_output(bev);
    evbuffer_add_printf(out, "*%d\r\n", n);
    for (int i = 0; i < n; i++) evbuffer_add_printf(out, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
}

/* The connection to map node k, opened (and authenticated) when needed. */
static struct sub_node *sub_node(struct sub_sharded *ss, int k) {
    struct sub_node *c = &ss->conns[k];
    if (c->bev) return c;
    const struct url *u = &ss->u;
    const struct cluster_node *nd = &store_map(ss->cluster)->nodes[k];
    c->owner = ss;
    c->bev = bufferevent_socket_new(ss->base, -1, BEV_OPT_CLOSE_ON_FREE);
    c->reader = redisReaderCreate();
    if (!c->bev || !c->reader || bufferevent_socket_connect_hostname(c->bev, NULL, AF_UNSPEC, nd->host, nd->port) < 0) {
        sub_node_drop(c);
        return NULL;
    }
    c->node = k;
    bufferevent_setcb(c->bev, sub_node_on_read, NULL, sub_node_on_event, c);
    bufferevent_enable(c->bev, EV_READ);
    if (u->user[0]) sub_send(c->bev, 3, (const char *[]){"AUTH", u->user, u->password});
    else if (u->password[0]) sub_send(c->bev, 2, (const char *[]){"AUTH", u->password});
    return c;
}

/* Subscribes every channel that is not, each on the master of its slot;
 * reads the map first when some slot's master is unknown or a retry asked. */
static void sub_sharded_fill(struct sub_sharded *ss, int reread) {
    char err[256];
    if (reread || store_broken(ss->cluster)) {
        if (store_refresh(ss->cluster, err, sizeof err) < 0) {
            sub_sharded_later(ss, 1, err);
            return;
        }
    }
    int missing = 0, any = 0;
    for (int i = 0; i < ss->nch; i++) {
        if (ss->on[i] >= 0) continue;
        int k = cluster_map_lookup(store_map(ss->cluster), ss->slot[i]);
        struct sub_node *c = k < 0 ? NULL : sub_node(ss, k);
        if (!c) { missing = 1; continue; }
        sub_send(c->bev, 2, (const char *[]){"SSUBSCRIBE", ss->channels[i]});
        ss->on[i] = k;
        any = 1;
    }
    if (missing) sub_sharded_later(ss, 1, "a shard's master is unknown or unreachable");
    else if (any && ss->down_logged) {
        log_fmt(LOG_INFO, "sharded wake-up subscriber subscribed again");
        ss->down_logged = 0;
    }
    if (any) ss->cb(NULL, 0, ss->arg); /* messages may have been missed meanwhile */
}

static void sub_sharded_retry(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    sub_sharded_fill(arg, 1);
}

struct sub_sharded *sub_sharded_open(struct event_base *base, const char *url, int n, const char *const *channels,
                                     sub_message_cb cb, void *arg, char *err, size_t errlen) {
    store *s = store_open(url, 1, err, errlen);
    if (!s) return NULL;
    if (!store_map(s)) {
        snprintf(err, errlen, "not a Redis Cluster");
        store_close(s);
        return NULL;
    }
    struct sub_sharded *ss = calloc(1, sizeof *ss);
    if (!ss) { store_close(s); snprintf(err, errlen, "out of memory"); return NULL; }
    ss->base = base;
    ss->cluster = s;
    url_parse(url, &ss->u, err, errlen); /* (store_open parsed it: cannot fail) */
    ss->cb = cb;
    ss->arg = arg;
    ss->nch = n;
    ss->channels = calloc((size_t)n + 1, sizeof *ss->channels);
    ss->slot = calloc((size_t)n + 1, sizeof *ss->slot);
    ss->on = calloc((size_t)n + 1, sizeof *ss->on);
    ss->retry = evtimer_new(base, sub_sharded_retry, ss);
    for (int k = 0; k < CLUSTER_MAX_NODES; k++) ss->conns[k].node = -1;
    if (!ss->channels || !ss->slot || !ss->on || !ss->retry) {
        snprintf(err, errlen, "out of memory");
        sub_sharded_free(ss);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!(ss->channels[i] = strdup(channels[i]))) { snprintf(err, errlen, "out of memory"); sub_sharded_free(ss); return NULL; }
        ss->slot[i] = cluster_key_slot(channels[i], strlen(channels[i]));
        ss->on[i] = -1;
    }
    sub_sharded_fill(ss, 0);
    return ss;
}

int sub_sharded_add(struct sub_sharded *ss, const char *channel) {
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
    sub_sharded_fill(ss, 0);
    return 0;
}

void sub_sharded_free(struct sub_sharded *ss) {
    if (!ss) return;
    for (int k = 0; k < CLUSTER_MAX_NODES; k++) sub_node_drop(&ss->conns[k]);
    for (int i = 0; ss->channels && i < ss->nch; i++) free(ss->channels[i]);
    free(ss->channels);
    free(ss->slot);
    free(ss->on);
    if (ss->retry) event_free(ss->retry);
    store_close(ss->cluster);
    free(ss);
}
