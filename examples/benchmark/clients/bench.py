"""bench.lua --clients: the Python client's enqueue of N blank jobs against
redis-py's pipelined LPUSH of the same jobs in Sidekiq's format, both in
calls of CALL jobs, each on an empty database; prints "luakiq SECS" and
"peer SECS". usage: python3 bench.py URL N CALL"""
import json
import secrets
import sys
import time

import redis

import luakiq

url, n, call = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
jobs = [{"id": i} for i in range(1, n + 1)]  # (built before the timing, as push.rb's args)
client = luakiq.Client(url)
client.redis.flushdb()
client.enqueue("Blank", jobs[:1], shards_count=5)  # connect, load the scripts, register: outside the timing
client.redis.flushdb()
client.enqueue("Blank", jobs[:1], shards_count=5)
t0 = time.perf_counter()
for at in range(0, n, call):
    client.enqueue("Blank", jobs[at:at + call])
print("luakiq %.6f" % (time.perf_counter() - t0))
client.close()

r = redis.Redis.from_url(url)
r.flushdb()
t0 = time.perf_counter()
for at in range(0, n, call):
    now = time.time()
    pipe = r.pipeline(transaction=False)
    for i in range(at, min(at + call, n)):
        pipe.lpush("queue:default", json.dumps({"class": "BlankWorker", "args": [], "retry": True, "queue": "default",
                                                "jid": secrets.token_hex(12), "created_at": now, "enqueued_at": now}))
    pipe.sadd("queues", "default")
    pipe.execute()
print("peer %.6f" % (time.perf_counter() - t0))
assert r.llen("queue:default") == n
