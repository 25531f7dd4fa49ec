#!/usr/bin/env python3
"""The "Kafka" consumer of examples/callback: reads reply messages from a
Redis list (standing in for a topic) and hands each to the job that waits
for it, by its correlation key, through luakiq's own Redis scripts, as
docs/redis.md ("Reply from another language") describes: waitkey.lua lookup
on the queue's slot, then reply.lua on the job's shard.

    REDIS_URL=... python3 consumer.py SCRIPTS QUEUE LOG

SCRIPTS: a directory written by `luakiq scripts SCRIPTS reply waitkey` (the
scripts expanded as the binary loads them, and manifest.json with their
SHA-1s). QUEUE: the worker's queue. A message is {"key": K, "reply": {...}};
the reply's bytes are its canonical JSON (keys sorted), so a message
delivered twice is the same reply twice. One JSON line per message on LOG:
{"t", "key", "id", "attempt", "answer"}: accepted, duplicate, or the code
word of the refusal (STALE, UNKNOWN, ...). Stops at SIGTERM.
"""
import json
import os
import signal
import sys
import time
import zlib

import redis

NS = os.environ.get("LUAKIQ_NAMESPACE", "luakiq")
TOPIC = os.environ.get("TOPIC", "example:callback:topic")
CHANNEL = f"{NS}:wake"     # "!" on a Redis Cluster
r = redis.Redis.from_url(os.environ["REDIS_URL"])


def load(scripts, name):
    """A script of the manifest, registered with redis-py (EVALSHA, loaded
    again on NOSCRIPT); its SHA-1 checked against the manifest's."""
    manifest = json.load(open(os.path.join(scripts, "manifest.json")))
    entry = manifest["scripts"][name]
    script = r.register_script(open(os.path.join(scripts, entry["file"]), "rb").read())
    assert script.sha == entry["sha1"], f"{name}: SHA-1 differs from the manifest's"
    return script


def shard(queue, job_id):
    shards = r.hget(f"{NS}:queues", queue)
    return f"{NS}:{{{queue}:{zlib.crc32(job_id) % int(shards)}}}:", shards


def reply_by_key(reply, waitkey, queue, key, body):
    """docs/redis.md's reply_by_key: (answer, id, attempt)."""
    try:
        job_id, attempt = waitkey(keys=[f"{NS}:{{{queue}}}:"], args=["lookup", key])
    except redis.ResponseError as e:
        return str(e).split()[0], None, None
    for _ in range(10):
        P, shards = shard(queue, job_id)
        try:
            answer = reply(keys=[P], args=["reply", repr(time.time()), CHANNEL, shards, "key", key, job_id,
                                           attempt, body])
            return answer.decode(), job_id.decode(), int(attempt)
        except redis.ResponseError as e:
            code = str(e).split()[0]
            if code == "STALE":   # the wait is over: forget the key
                waitkey(keys=[f"{NS}:{{{queue}}}:"], args=["drop", key, attempt, job_id])
            if code == "RESHARD":
                time.sleep(1)
            elif code != "RESHARDED":
                return code, job_id.decode(), int(attempt)
    return "RESHARD", job_id.decode(), int(attempt)


def main():
    scripts, queue, log = sys.argv[1], sys.argv[2], open(sys.argv[3], "a")
    reply, waitkey = load(scripts, "reply"), load(scripts, "waitkey")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        item = r.brpop(TOPIC, timeout=0.2)
        if not item:
            continue
        msg = json.loads(item[1])
        body = json.dumps(msg["reply"], sort_keys=True, separators=(",", ":"))
        answer, job_id, attempt = reply_by_key(reply, waitkey, queue, msg["key"], body)
        log.write(json.dumps({"t": time.time(), "key": msg["key"], "id": job_id, "attempt": attempt,
                              "answer": answer}, sort_keys=True) + "\n")
        log.flush()


if __name__ == "__main__":
    main()
