"""luakiq.Client: enqueue jobs into luakiq's queues, and read them, from Python
(redis-py), through the Redis scripts the luakiq binary embeds
(luakiq/scripts/, written by `luakiq scripts` at build time)."""
import json
import os
import re
import time
from urllib.parse import unquote, urlsplit, parse_qsl

import redis
from redis.cluster import ClusterNode, RedisCluster

from . import contract

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
USED = ("push", "register", "layout", "stats", "job", "reply", "waitkey")
# reply.lua's and waitkey.lua's answers that are outcomes (the others raise)
OUTCOMES = {"CONFLICT": "conflict", "STALE": "stale", "UNKNOWN": "unknown"}
RESHARD_TRIES, RESHARD_PAUSE = 10, 0.1  # a frozen shard is asked again every 0.1 s, 1 s in all


class LayoutError(redis.RedisError):
    """The namespace in Redis has a layout this client does not know."""


def _load_scripts():
    try:
        with open(os.path.join(SCRIPTS, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
    except OSError:
        raise RuntimeError("luakiq: %s/manifest.json is missing: the package was not built from a luakiq "
                           "build (cmake --build build writes it with `luakiq scripts`)" % SCRIPTS) from None
    scripts = {}
    for name in USED:
        entry = manifest["scripts"][name]
        with open(os.path.join(SCRIPTS, entry["file"]), "rb") as f:
            scripts[name] = (entry["sha1"], f.read())
    return manifest["layout"], scripts


def _connect(url):
    """A redis-py client for a luakiq Redis URL (docs/configuration.md, 'Redis
    URLs'): redis://[[user]:password@]host[:port][,host[:port]...][/db] (a
    Redis Cluster is found by asking the first host) or
    unix:///path[?db=N][&user=U][&password=P]."""
    u = urlsplit(url)
    q = dict(parse_qsl(u.query))
    if u.scheme == "unix":
        r = redis.Redis(unix_socket_path=u.path, db=int(q.get("db", 0)), username=q.get("user"),
                        password=q.get("password"))
        r.ping()  # (a wrong password or socket fails here, as for redis://)
        return r, False
    if u.scheme != "redis":
        raise ValueError("luakiq: bad Redis URL '%s': say redis://HOST:PORT/DB or unix:///PATH" % url)
    userinfo, _, hosts = u.netloc.rpartition("@")
    username = password = None
    if userinfo:
        user, colon, pw = userinfo.partition(":")
        username, password = (unquote(user) or None, unquote(pw)) if colon else (None, unquote(user))
    nodes = []
    for h in hosts.split(","):
        host, _, port = h.partition(":")
        nodes.append((host or "127.0.0.1", int(port or 6379)))
    db = int(u.path.strip("/") or 0)
    first = redis.Redis(host=nodes[0][0], port=nodes[0][1], db=db, username=username, password=password)
    if first.info("cluster").get("cluster_enabled") != 1:
        return first, False
    first.close()
    return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes], username=username,
                        password=password), True


def _error_text(e):
    """An error reply's text without Redis's ' script: ...' tail."""
    return re.sub(r" script: \w+, on @user_script:\d+\.$", "", str(e))


def _error_code(e):
    """An error reply's code word and its message without 'luakiq NAME: '."""
    m = re.match(r"^(?:ERR )?([A-Z]+) (?:[^:]*?luakiq \w+: )?(.*)$", _error_text(e), re.S)
    return (m.group(1), m.group(2)) if m else (None, str(e))


class Client:
    """A producer and reader of one luakiq namespace.

    Client(url="redis://127.0.0.1:6379/0", namespace=None): namespace is the
    script directory's `namespace` (default "luakiq"); a worker is named by its
    queue (the worker's name unless its file sets queue_name)."""

    def __init__(self, url=None, namespace=None):
        self.url = url or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
        self.namespace = namespace or "luakiq"
        self.redis, self.cluster = _connect(self.url)
        self._layout, self._scripts = _load_scripts()
        self._checked = False
        self._channel = None
        self._counts = {}  # queue -> shards_count known to match the registry

    def close(self):
        self.redis.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Redis ------------------------------------------------------------------

    def _keys(self, key):
        # on a cluster, the guard key in the shard's slot (docs/redis.md,
        # 'The guard key'): a call during a slot's migration waits for it
        if self.cluster and "{" in key:
            return [key, key + "~guard"]
        return [key]

    def _evalsha(self, target, name, key, args):
        sha = self._scripts[name][0]
        keys = self._keys(key)
        return target.execute_command("EVALSHA", sha, len(keys), *keys, *args)

    def _load(self, name):
        self.redis.script_load(self._scripts[name][1])  # (on a cluster: every master)

    def _script(self, name, key, *args):
        try:
            return self._evalsha(self.redis, name, key, args)
        except redis.exceptions.NoScriptError:
            self._load(name)
            return self._evalsha(self.redis, name, key, args)

    def _pipeline(self, calls):
        """Replies (or exceptions) of [(script, key, args)], pipelined; a
        call Redis did not know the script of (NOSCRIPT) is sent again."""
        pipe = self.redis.pipeline(transaction=False) if not self.cluster else self.redis.pipeline()
        for name, key, args in calls:
            self._evalsha(pipe, name, key, args)
        return self._noscript_again(calls, pipe.execute(raise_on_error=False))

    def _noscript_again(self, calls, replies):
        """replies, those of the calls Redis did not know the script of
        (NOSCRIPT) replaced by the replies of the calls sent again."""
        missing = [i for i, r in enumerate(replies) if isinstance(r, redis.exceptions.NoScriptError)]
        for name in {calls[i][0] for i in missing}:
            self._load(name)
        for i in missing:
            try:
                replies[i] = self._evalsha(self.redis, *calls[i])
            except redis.RedisError as e:
                replies[i] = e
        return replies

    def _stream(self, calls):
        """Replies (or exceptions) of calls, an iterable of (script, key,
        args) on a single Redis: each call is written as soon as it is made,
        so Redis runs the first while the next are made, then every reply is
        read (a pipeline of redis-py's writes nothing before the last is
        made). A call Redis did not know the script of (NOSCRIPT) is sent
        again."""
        pool = self.redis.connection_pool
        conn = pool.get_connection("EVALSHA")
        sent, replies = [], []
        try:
            for name, key, args in calls:
                keys = self._keys(key)
                conn.send_packed_command(conn.pack_command("EVALSHA", self._scripts[name][0], len(keys), *keys, *args),
                                         check_health=not sent)
                sent.append((name, key, args))
            for _ in sent:
                try:
                    replies.append(self.redis.parse_response(conn, "EVALSHA"))
                except redis.ResponseError as e:
                    replies.append(e)
        except BaseException:
            conn.disconnect()  # (replies may be left unread on it)
            raise
        finally:
            pool.release(conn)
        return self._noscript_again(sent, replies)

    def _check_layout(self):
        """Refuses a namespace whose layout this client does not know, once
        (layout.lua: a new namespace is marked as this layout). Loads the
        scripts first (SCRIPT LOAD: every master of a cluster), so that the
        usual call is an EVALSHA that Redis knows."""
        if self._checked:
            return
        for name in USED:
            self._load(name)
        v = self._script("layout", self.namespace + ":queues", "check")
        v = v.decode() if isinstance(v, bytes) else str(v)
        if v != self._layout:
            if v == "1":
                why = ("is in layout 1 (written by an older luakiq) and this client reads layout %s: "
                       "convert it with `luakiq migrate DIR`" % self._layout)
            elif v == "1>2":
                why = "is being converted to layout 2 (a migration is running or was interrupted)"
            else:
                why = "has layout '%s'; this client reads layout %s" % (v, self._layout)
            raise LayoutError("luakiq: namespace '%s' in Redis %s" % (self.namespace, why))
        self._checked = True

    def _wake_channel(self):
        # on a Redis Cluster of Redis >= 7 the push SPUBLISHes in the shard's slot
        if self._channel is None:
            self._channel = self.namespace + ":wake"
            if self.cluster:
                info = self.redis.info("server", target_nodes=RedisCluster.RANDOM)
                if int(str(info.get("redis_version", "0")).split(".")[0]) >= 7:
                    self._channel = "!"
        return self._channel

    def _registry(self, queue):
        v = self.redis.hget(self.namespace + ":queues", queue)
        return int(v) if v is not None else None

    def _shards_count(self, queue, given):
        """The queue's shards_count: the registry's; a queue no host
        registered yet is registered with the given one (register.lua)."""
        known = self._counts.get(queue)
        if known is not None and given in (None, known):
            return known
        stored = self._registry(queue)
        if stored is None:
            if given is None:
                raise contract.InputError("queue '%s' is not registered in %s:queues: no luakiq host or "
                                          "producer has used it yet; pass shards_count" % (queue, self.namespace))
            if not isinstance(given, int) or isinstance(given, bool) or given < 1:
                raise contract.InputError("shards_count must be an integer >= 1, got %r" % (given,))
            r = self._script("register", self.namespace + ":queues", queue, given)
            if isinstance(r, list):
                raise LayoutError("luakiq: namespace '%s' in Redis has layout '%s'" % (self.namespace, r[1].decode()))
            stored = int(r)
        if given is not None and given != stored:
            raise contract.InputError("shards_count is %d but queue '%s' has %d shards in Redis; nothing enqueued "
                                      "(see luakiq's docs/configuration.md, 'Changing shards_count')"
                                      % (given, queue, stored))
        self._counts[queue] = stored
        return stored

    # the API ----------------------------------------------------------------

    def enqueue(self, worker, jobs, shards_count=None):
        """Enqueues jobs (a list of dicts with the fields of `luakiq enqueue`:
        id, payload, score, perform_in, retry_count, expires_at, priority,
        windows, timezone, tags) into the queue `worker`; returns how many.
        Every job is checked first (InputError, luakiq's message; nothing
        sent). shards_count: the queue's, for a queue no host registered yet."""
        now = time.time()
        checked = contract.check_jobs(jobs, now)
        if not checked:
            return 0
        self._check_layout()
        count = self._shards_count(worker, shards_count)
        stored, failed, refused = self._push(worker, count, checked, now)
        if refused and not failed:
            # resharded since the registry was read: those calls wrote
            # nothing; sent again once with the count the shard named
            self._counts.pop(worker, None)
            count = refused[1] or self._registry(worker)
            more, failed, again = self._push(worker, count, refused[0], now)
            stored += more
            if again and not failed:
                failed = "luakiq push: resharded again while pushing"
        if failed:
            raise redis.RedisError("luakiq: push failed: %s (%d of the %d jobs were stored)"
                                   % (failed, stored, len(checked)))
        return len(checked)

    def _push(self, queue, count, checked, now):
        made = contract.each_push_call(self.namespace, queue, count, checked, now, self._wake_channel())
        if self.cluster:
            made = list(made)
            parts = [chunk for _, _, _, chunk in made]
            replies = self._pipeline([("push", key, args) for _, key, args, _ in made])
        else:
            parts = []

            def calls():
                for _, key, args, chunk in made:
                    parts.append(chunk)
                    yield "push", key, args
            replies = self._stream(calls())
        stored, failed, refused, have = 0, None, [], None
        for part, r in zip(parts, replies):
            if isinstance(r, Exception):
                text = _error_text(r)
                m = re.search(r"^RESHARDED (\d+)|resharded: queue has (\d+) shards", text)
                if m:
                    refused += part
                    have = have or int(m.group(1) or m.group(2))
                else:
                    failed = failed or text
            else:
                stored += len(part)
        return stored, failed, (refused, have) if refused else None

    def job(self, worker, id):
        """Where job `id` of the queue `worker` is: a dict as `luakiq job`
        prints it (state "queued", "in_flight" or "dead"), or None."""
        jid = contract.id_string(id, "id")
        self._check_layout()
        count = self._registry(worker)
        if count is None:
            return None
        key = contract.prefix(self.namespace, worker, contract.shard(jid, count))
        return _job_record(jid, self._script("job", key, jid), self.redis.hget(key + "tags", jid), time.time())

    def stats(self):
        """Every registered queue's numbers, as `luakiq stats` prints them:
        {"total": {length, morgue_length, lag, expired}, "by_worker": {QUEUE:
        {length, morgue_length, lag, expired[, paused]}}}."""
        self._check_layout()
        queues = {k.decode(): int(v) for k, v in self.redis.hgetall(self.namespace + ":queues").items()}
        calls, owners = [], []
        for q, n in sorted(queues.items()):
            for s in range(n):
                calls.append(("stats", contract.prefix(self.namespace, q, s), []))
                owners.append(q)
        replies = self._pipeline(calls) if calls else []
        paused = {k.decode() for k in self.redis.hgetall(self.namespace + ":paused")}
        now = time.time()
        by = {q: {"length": 0, "morgue_length": 0, "lag": 0, "expired": 0} for q in queues}
        for q, r in zip(owners, replies):
            if isinstance(r, Exception):
                raise r
            s = by[q]
            s["length"] += int(r[0]) + int(r[1])
            s["morgue_length"] += int(r[2])
            if r[3]:
                s["lag"] = max(s["lag"], now - float(r[3]))
            s["expired"] += int(r[7] or 0)
        total = {"length": 0, "morgue_length": 0, "lag": 0, "expired": 0}
        for q, s in by.items():
            if q in paused:
                s["paused"] = True
            for k in ("length", "morgue_length", "expired"):
                total[k] += s[k]
            total["lag"] = max(total["lag"], s["lag"])
        return {"total": total, "by_worker": by}


    def reply(self, worker, token=None, key=None, body=None):
        """Replies to a job of the queue `worker` that waits for one
        (luakiq.await), by its reply token or by the correlation key its
        await named, as `luakiq reply` does (docs/redis.md, 'Jobs that wait
        for a reply'). body: JSON text (str or bytes, sent as given but for
        white space around it) or a value (sent as its canonical JSON).
        Returns "accepted", "duplicate" (the same bytes again), "conflict"
        (another reply was accepted), "stale" (the wait is over) or
        "unknown" (no such token, key or queue). Bad input raises
        InputError with the CLI's message (nothing sent)."""
        if (token is None) == (key is None):
            raise contract.InputError("reply: give a token or a key (one of them)")
        data = contract.reply_body(body)
        kb = contract.reply_key(key) if key is not None else None
        self._check_layout()
        if kb is None:
            parts = contract.split_token(token)
            if parts is None or parts[0] != worker:
                return "unknown"
            return self._reply(worker, parts[1], [b"token", contract.utf8(token)], data)
        qkey = "%s:{%s}:" % (self.namespace, worker)
        try:
            jid, attempt = self._script("waitkey", qkey, "lookup", kb)
        except redis.ResponseError as e:
            if _error_code(e)[0] == "UNKNOWN":
                return "unknown"
            raise
        outcome = self._reply(worker, jid, [b"key", kb, jid, attempt], data)
        if outcome == "stale":  # (cleanup: the entry names a wait that is over)
            self._script("waitkey", qkey, "drop", kb, attempt, jid)
        return outcome

    def _reply(self, queue, jid, refs, data):
        """reply.lua on the id's shard (routed as a push): a shard resharded
        since the registry was read is asked again with the new count, a
        frozen one again after a pause."""
        fresh, frozen = False, 0
        while True:
            count = self._counts.get(queue) if not fresh else None
            count = count or self._registry(queue)
            if count is None:
                return "unknown"
            self._counts[queue] = count
            args = contract.reply_args(time.time(), self._wake_channel(), count, refs, data)
            try:
                r = self._script("reply", contract.prefix(self.namespace, queue, contract.shard(jid, count)), *args)
                return r.decode() if isinstance(r, bytes) else r
            except redis.ResponseError as e:
                code, msg = _error_code(e)
                if code == "RESHARDED" and not fresh:
                    fresh = True
                elif code == "RESHARD" and frozen < RESHARD_TRIES:
                    frozen += 1
                    time.sleep(RESHARD_PAUSE)
                elif code in OUTCOMES:
                    return OUTCOMES[code]
                elif code in ("BADREPLY", "BADJSON", "TOOBIG"):
                    raise contract.InputError("%s: %s" % (code, msg)) from None
                else:
                    raise


def _payload(raw):
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return raw.decode("utf-8", "replace")


def _job_record(jid, r, tags, now):
    """job.lua's reply as luakiq.ops.admin's job record."""
    r = [x.decode("utf-8", "surrogateescape") if isinstance(x, bytes) and i == 0 else x for i, x in enumerate(r)]
    state = r[0]
    if state == "":
        return None

    def text(x):
        return x.decode("utf-8", "replace") if isinstance(x, bytes) else x

    def payloads(i):
        n = int(r[i])
        return [[_payload(r[i + 2 * k - 1]), float(r[i + 2 * k])] for k in range(1, n + 1)], i + 2 * n + 1

    rec = {"id": jid, "state": state}
    if tags:
        rec["tags"] = text(tags).split("\n")
    if state == "dead":
        rec["updated_at"] = float(r[1])
        if r[2]:
            rec["error"] = text(r[2])
        rec["payloads"] = payloads(3)[0]
        return rec
    rec["perform_in"], rec["retry_count"] = float(r[1]), int(float(r[2]))
    if r[3]:
        rec["error"] = text(r[3])

    def fields(k):
        rec["priority"] = int(r[k]) if r[k] else 100
        zone, bar, spans = text(r[k + 1]).partition("|")
        if bar:
            rec["timezone"], rec["windows"] = zone, [s for s in spans.split(",") if s]

    if state == "queued":
        fields(4)
        rec["payloads"] = payloads(6)[0]
        return rec
    holder = text(r[4])
    rec["host"] = holder.rpartition(":")[0] if ":" in holder else (holder or None)
    if r[5]:
        rec["fetched_at"] = float(r[5])
        rec["running"] = max(0, int(now - rec["fetched_at"]))
    fields(6)
    rec["payloads"], i = payloads(8)
    if i < len(r):
        rec["queued_payloads"] = payloads(i)[0]
    return {k: v for k, v in rec.items() if v is not None}
