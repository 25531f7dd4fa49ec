/* sub.h - the wake-up subscribers on the main thread's event loop: plain
 * Pub/Sub on one Redis, sharded Pub/Sub on a Redis Cluster. Main thread only. */
#ifndef LUAKIQ_SUB_H
#define LUAKIQ_SUB_H
#include <stddef.h>

struct event_base;

/* A message (msg, len: a shard prefix), or NULL after subscribing again:
 * messages may have been missed, wake everyone. */
typedef void (*sub_message_cb)(const char *msg, size_t len, void *arg);

/* Subscribes to channel on the event loop, calling cb for every message,
 * and reconnects every second while Redis is away. NULL with err when the
 * URL does not parse. */
struct sub;
struct sub *sub_open(struct event_base *base, const char *url, const char *channel, sub_message_cb cb,
                     void *arg, char *err, size_t errlen);
void sub_free(struct sub *sub);

/* Redis Cluster only: SSUBSCRIBEs each of the n channels (sharded Pub/Sub)
 * on the master of its slot, calling cb for every message, and follows
 * slots that move and nodes that go away (cb(NULL, 0) after subscribing
 * again: wake everyone). NULL with err when url is not a cluster or cannot
 * be reached now. */
struct sub_sharded;
struct sub_sharded *sub_sharded_open(struct event_base *base, const char *url, int n, const char *const *channels,
                                     sub_message_cb cb, void *arg, char *err, size_t errlen);
/* One more channel (a shard created by a reshard while the host runs),
 * subscribed on its slot's master; 0 when known already or added. */
int sub_sharded_add(struct sub_sharded *ss, const char *channel);
void sub_sharded_free(struct sub_sharded *ss);

#endif
