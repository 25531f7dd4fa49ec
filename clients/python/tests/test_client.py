"""luakiq.Client against real redis-servers, which spec/clients/python_spec.lua
starts (each on a free port) and names in the environment:
  LUAKIQ_TEST_REDIS     redis://127.0.0.1:PORT/0 (a plain server)
  LUAKIQ_TEST_URLS      more URLs of one server, space-separated: a unix socket,
                        a password, an ACL user (each its own db)
  LUAKIQ_TEST_CLUSTER   a Redis Cluster's URL (optional)
Each test flushes the databases it uses."""
import os
import unittest

import redis

import luakiq
from luakiq import contract

URL = os.environ.get("LUAKIQ_TEST_REDIS")
URLS = (os.environ.get("LUAKIQ_TEST_URLS") or "").split()
CLUSTER = os.environ.get("LUAKIQ_TEST_CLUSTER")


def flushed(url, namespace=None):
    c = luakiq.Client(url, namespace=namespace)
    if c.cluster:
        c.redis.flushall(target_nodes=c.redis.PRIMARIES)
    else:
        c.redis.flushdb()
    return c


@unittest.skipUnless(URL, "LUAKIQ_TEST_REDIS is not set")
class Enqueue(unittest.TestCase):
    url = URL

    def setUp(self):
        self.c = flushed(self.url)
        self.addCleanup(self.c.close)

    def test_registers_a_new_queue_then_finds_its_jobs(self):
        jobs = [{"id": 1, "payload": {"b": 1, "a": [1, 2.5]}, "tags": ["x"]},
                {"id": "é-2", "payload": "p", "perform_in": 4102444800, "priority": 5},
                {"id": "w", "windows": ["00:00-24:00"], "timezone": "Europe/Berlin", "expires_at": 4102444800.5}]
        self.assertEqual(3, self.c.enqueue("Orders", jobs, shards_count=4))
        self.assertEqual(b"4", self.c.redis.hget("luakiq:queues", "Orders"))
        self.assertEqual(b"2", self.c.redis.get("luakiq:{luakiq:queues}:layout"))
        one = self.c.job("Orders", 1)
        self.assertEqual("queued", one["state"])
        self.assertEqual(["x"], one["tags"])
        self.assertEqual(100, one["priority"])
        self.assertEqual(-1, one["retry_count"])
        self.assertEqual({"a": [1, 2.5], "b": 1}, one["payloads"][0][0])
        two = self.c.job("Orders", "é-2")
        self.assertEqual((5, 4102444800.0), (two["priority"], two["perform_in"]))
        w = self.c.job("Orders", "w")
        self.assertEqual(("Europe/Berlin", ["00:00-24:00"]), (w["timezone"], w["windows"]))
        self.assertIsNone(self.c.job("Orders", "nope"))
        self.assertIsNone(self.c.job("Unknown", 1))
        st = self.c.stats()
        self.assertEqual(3, st["total"]["length"])
        self.assertEqual(3, st["by_worker"]["Orders"]["length"])
        self.assertEqual(0, st["by_worker"]["Orders"]["morgue_length"])
        self.assertGreaterEqual(st["total"]["lag"], 0)
        # the registry's count from now on: given or not
        self.assertEqual(1, self.c.enqueue("Orders", [{"id": 7}]))
        other = luakiq.Client(self.url)
        self.addCleanup(other.close)
        self.assertEqual(1, other.enqueue("Orders", [{"id": 8}]))
        self.assertEqual(5, other.stats()["total"]["length"])

    def test_refuses_a_queue_without_shards_count_and_another_count(self):
        with self.assertRaises(luakiq.InputError) as e:
            self.c.enqueue("New", [{"id": 1}])
        self.assertEqual("queue 'New' is not registered in luakiq:queues: no luakiq host or producer has used it "
                         "yet; pass shards_count", str(e.exception))
        self.c.enqueue("New", [{"id": 1}], shards_count=3)
        fresh = luakiq.Client(self.url)
        self.addCleanup(fresh.close)
        with self.assertRaises(luakiq.InputError) as e:
            fresh.enqueue("New", [{"id": 2}], shards_count=5)
        self.assertTrue(str(e.exception).startswith("shards_count is 5 but queue 'New' has 3 shards in Redis; "
                                                    "nothing enqueued"), str(e.exception))

    def test_all_or_nothing(self):
        self.c.enqueue("A", [{"id": 0}], shards_count=2)
        before = self.c.redis.dbsize()
        with self.assertRaises(luakiq.InputError) as e:
            self.c.enqueue("A", [{"id": i} for i in range(1, 50)] + [{"id": "x", "score": "soon"}])
        self.assertEqual("job 50 (id x): score must be a finite number", str(e.exception))
        self.assertEqual(before, self.c.redis.dbsize())
        self.assertEqual(1, self.c.stats()["total"]["length"])

    def test_noscript_loads_the_script_again(self):
        self.c.enqueue("A", [{"id": 1}], shards_count=2)
        if self.c.cluster:
            self.c.redis.execute_command("SCRIPT", "FLUSH", target_nodes=self.c.redis.PRIMARIES)
        else:
            self.c.redis.script_flush()
        self.assertEqual(2, self.c.enqueue("A", [{"id": 2}, {"id": 3, "payload": 1}]))
        self.assertEqual("queued", self.c.job("A", 3)["state"])
        self.assertEqual(3, self.c.stats()["total"]["length"])

    def test_refuses_a_layout_it_does_not_know_with_one_line(self):
        key = "luakiq:{luakiq:queues}:layout"
        for value, want in (("1>2", "is being converted to layout 2"), ("3", "has layout '3'")):
            self.c.redis.set(key, value)
            c = luakiq.Client(self.url)
            self.addCleanup(c.close)
            with self.assertRaises(luakiq.LayoutError) as e:
                c.enqueue("A", [{"id": 1}], shards_count=2)
            self.assertIn(want, str(e.exception))
            self.assertNotIn("\n", str(e.exception))
        self.c.redis.delete(key)
        self.c.redis.hset("luakiq:queues", "Old", "5")  # queues but no layout: layout 1
        c = luakiq.Client(self.url)
        self.addCleanup(c.close)
        with self.assertRaises(luakiq.LayoutError) as e:
            c.enqueue("Old", [{"id": 1}])
        self.assertIn("is in layout 1", str(e.exception))

    def test_follows_a_reshard(self):
        self.c.enqueue("R", [{"id": 1}], shards_count=2)
        # a reshard to 3 shards (luakiq reshard): the registry and each shard's count
        self.c.redis.hset("luakiq:queues", "R", "3")
        for s in range(3):
            self.c.redis.set(contract.prefix("luakiq", "R", s) + "shards", "3")
        ids = list(range(2, 30))
        self.assertEqual(len(ids), self.c.enqueue("R", [{"id": i} for i in ids]))
        for i in ids:
            key = contract.prefix("luakiq", "R", contract.shard(str(i), 3)) + "jobs"
            self.assertTrue(self.c.redis.zrangebylex(key, b"[" + str(i).encode() + b"\0\0", b"+", 0, 1), i)

    def test_reply_without_a_wait_is_unknown_and_bad_input_raises(self):
        # (replies to real waits: spec/clients/replies_spec.lua, with a host)
        self.c.enqueue("R", [{"id": "a"}], shards_count=3)
        token = "1.Ug.YQ.3." + "0" * 32  # queue R, id a: a forged mac
        self.assertEqual("unknown", self.c.reply("R", token=token, body={"answer": 1}))
        self.assertEqual("unknown", self.c.reply("Other", token=token, body="{}"))
        self.assertEqual("unknown", self.c.reply("R", token="nonsense", body="{}"))
        self.assertEqual("unknown", self.c.reply("R", key="corr-1", body="{}"))
        self.assertEqual("unknown", self.c.reply("Unregistered", key="corr-1", body="{}"))
        s = contract.shard("a", 3)
        self.assertEqual(b"1", self.c.redis.hget(contract.prefix("luakiq", "R", s) + "counters", "replies_unknown"))
        for kw, msg in ((dict(token=token), "give the reply's JSON as an argument or on stdin"),
                        (dict(token=token, body=" \n"), "give the reply's JSON as an argument or on stdin"),
                        (dict(token=token, body="{"), "invalid JSON: "),
                        (dict(token=token, body="\"" + "x" * 262143 + "\""), "TOOBIG: the reply is 262145 bytes, at most 262144"),
                        (dict(key="", body="{}"), "BADREPLY: key must be a string of 1 to 1024 bytes"),
                        (dict(key="k" * 1025, body="{}"), "BADREPLY: key must be a string of 1 to 1024 bytes"),
                        (dict(token=token, key="k", body="{}"), "reply: give a token or a key (one of them)"),
                        (dict(body="{}"), "reply: give a token or a key (one of them)")):
            with self.subTest(msg=msg):
                with self.assertRaises(luakiq.InputError) as e:
                    self.c.reply("R", **kw)
                self.assertTrue(str(e.exception).startswith(msg), str(e.exception))

    def test_namespace(self):
        c = flushed(self.url, namespace="myapp")
        self.addCleanup(c.close)
        c.enqueue("A", [{"id": "a", "payload": "p"}], shards_count=1)
        self.assertEqual(b"1", c.redis.hget("myapp:queues", "A"))
        self.assertEqual(1, c.redis.zcard("myapp:{A:0}:jobs"))
        self.assertEqual("queued", c.job("A", "a")["state"])


@unittest.skipUnless(CLUSTER, "LUAKIQ_TEST_CLUSTER is not set")
class OnACluster(Enqueue):
    url = CLUSTER

    def test_routes_each_shard_to_its_slot(self):
        self.assertTrue(self.c.cluster)
        self.assertEqual(200, self.c.enqueue("C", [{"id": i, "payload": i} for i in range(200)], shards_count=16))
        self.assertEqual(200, self.c.stats()["by_worker"]["C"]["length"])
        self.assertEqual("!", self.c._wake_channel())
        for i in (0, 77, 199):
            self.assertEqual([[i, self.c.job("C", i)["payloads"][0][1]]], self.c.job("C", i)["payloads"])


@unittest.skipUnless(URLS, "LUAKIQ_TEST_URLS is not set")
class Urls(unittest.TestCase):
    def test_unix_socket_password_and_acl_user(self):
        for url in URLS:
            with self.subTest(url=url):
                c = flushed(url)
                self.addCleanup(c.close)
                self.assertEqual(2, c.enqueue("U", [{"id": 1}, {"id": 2}], shards_count=2))
                self.assertEqual(2, c.stats()["total"]["length"])

    def test_a_wrong_password_is_refused(self):
        bad = [u for u in URLS if "password=" in u or "@" in u][0]
        bad = bad.replace("password=", "password=x") if "password=" in bad else bad.replace("@", "x@", 1)
        with self.assertRaises((redis.exceptions.AuthenticationError, redis.exceptions.ResponseError)) as e:
            luakiq.Client(bad)
        self.assertRegex(str(e.exception), "WRONGPASS|invalid password|invalid username")


if __name__ == "__main__":
    unittest.main()
