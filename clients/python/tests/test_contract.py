"""The producer contract's test vectors (spec/contract/*.json, written by the
host: tools/contract-vectors.lua) against this client's own functions."""
import json
import os
import unittest

from luakiq import contract

VECTORS = os.environ.get("LUAKIQ_CONTRACT") or os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                            "spec", "contract")


def vectors(name):
    with open(os.path.join(VECTORS, name), encoding="utf-8") as f:
        return json.load(f)["vectors"]


class Vectors(unittest.TestCase):
    def test_shard(self):
        vs = vectors("shard.json")
        self.assertGreater(len(vs), 100)
        for v in vs:
            with self.subTest(id=v["id"], shards_count=v["shards_count"]):
                got = contract.id_string(json.loads(v["id"]))
                self.assertEqual(v["id_string"], got)
                self.assertEqual(v["shard"], contract.shard(got, v["shards_count"]))

    def test_canonical(self):
        vs = vectors("canonical.json")
        self.assertGreater(len(vs), 50)
        for v in vs:
            with self.subTest(value=v["value"]):
                value = json.loads(v["value"])
                if "error" in v:
                    with self.assertRaises(contract.JSONError) as e:
                        contract.canonical(value)
                    self.assertEqual(v["error"], str(e.exception))
                else:
                    self.assertEqual(v["canonical"].encode("utf-8"), contract.canonical(value))

    def test_push(self):
        vs = vectors("push.json")
        self.assertGreater(len(vs), 10)
        for v in vs:
            with self.subTest(name=v["name"]):
                jobs = contract.check_jobs(json.loads(v["jobs"]), v["now"])
                channel = "!" if v["cluster"] else v["namespace"] + ":wake"
                calls, _ = contract.push_calls(v["namespace"], v["worker"], v["shards_count"], jobs, v["now"],
                                               channel)
                got = [{"key": key, "args": [a.decode("utf-8") for a in args]} for _, key, args in calls]
                self.assertEqual(v["calls"], got)

    def test_errors(self):
        vs = vectors("errors.json")
        self.assertGreater(len(vs), 50)
        for v in vs:
            with self.subTest(jobs=v["jobs"][:80]):
                with self.assertRaises(contract.InputError) as e:
                    contract.check_jobs(json.loads(v["jobs"]), 1700000000.25)
                self.assertEqual(v["error"], str(e.exception))


class Values(unittest.TestCase):
    """What JSON text cannot carry: Python's own values."""

    def test_not_finite(self):
        for bad in (float("nan"), float("inf"), -float("inf"), 10 ** 400):
            with self.assertRaises(contract.JSONError):
                contract.canonical({"x": bad})
        with self.assertRaises(contract.InputError) as e:
            contract.check_jobs([{"id": "a", "payload": {"x": [float("nan")]}}], 1.0)
        self.assertEqual("job 1 (id a): cannot dump payload: json: cannot encode NaN/inf at $.x[1]", str(e.exception))
        with self.assertRaises(contract.InputError) as e:
            contract.check_jobs([{"id": "a", "score": float("nan")}], 1.0)
        self.assertEqual("job 1 (id a): score must be a finite number", str(e.exception))

    def test_text_that_is_not_utf8(self):
        with self.assertRaises(contract.InputError) as e:
            contract.check_jobs([{"id": "a", "payload": {"k": "x\ud800"}}], 1.0)
        self.assertEqual("job 1 (id a): payload: a string is not valid UTF-8", str(e.exception))
        with self.assertRaises(contract.InputError) as e:
            contract.check_jobs([{"id": "a\ud800"}], 1.0)
        self.assertEqual("job 1: id must be valid UTF-8 (got a\\xed\\xa0\\x80)", str(e.exception))

    def test_python_shapes(self):
        # a tuple is an array, bytes are text, bool is no number, an empty list is {}
        self.assertEqual(b'{"a":[1,2],"b":"x","c":true,"d":{}}',
                         contract.canonical({"b": b"x", "a": (1, 2), "c": True, "d": []}))
        with self.assertRaises(contract.InputError) as e:
            contract.check_jobs([{"id": "a", "priority": True}], 1.0)
        self.assertIn("priority must be an integer", str(e.exception))
        with self.assertRaises(contract.JSONError) as e:
            contract.canonical({1: "x"})
        self.assertIn("cannot encode a table key of type int", str(e.exception))

    def test_payload_size(self):
        with self.assertRaises(contract.InputError) as e:
            contract.check_jobs([{"id": 1, "payload": "x" * 1048575}], 1.0)
        self.assertEqual("job 1 (id 1): payload is 1048577 bytes, over max_payload_bytes (1048576)", str(e.exception))


if __name__ == "__main__":
    unittest.main()

    def test_reply(self):
        vs = vectors("reply.json")
        self.assertGreater(len(vs), 20)
        for v in vs:
            with self.subTest(v=v.get("name") or v["body"]):
                if "name" not in v:  # a body as JSON text
                    if "error" in v:
                        with self.assertRaises(contract.InputError) as e:
                            contract.reply_body(v["body"])
                        self.assertTrue(str(e.exception).startswith(v["error"]), str(e.exception))
                    else:
                        self.assertEqual(v["sent"].encode("utf-8"), contract.reply_body(v["body"]))
                    continue
                body = contract.reply_body(v["body"])
                channel = "luakiq:wake"
                got = []
                if "token" in v:
                    parts = contract.split_token(v["token"])
                    if parts is None or parts[0] != v["worker"]:
                        self.assertEqual("UNKNOWN", v["outcome"])
                    else:
                        jid, refs = parts[1], [b"token", v["token"]]
                else:
                    try:
                        kb = contract.reply_key(v["key"])
                    except contract.InputError as e:
                        self.assertEqual(v["outcome"] + ": " + v["message"], str(e))
                    else:
                        got.append({"script": "waitkey", "key": "luakiq:{%s}:" % v["worker"],
                                    "args": ["lookup", kb.decode("utf-8")]})
                        jid, refs = b"a", [b"key", kb, b"a", b"3"]
                if v["calls"] and v["calls"][-1]["script"] == "reply":
                    key = contract.prefix("luakiq", v["worker"], contract.shard(jid, v["shards_count"]))
                    args = contract.reply_args(v["now"], channel, v["shards_count"], refs, body)
                    got.append({"script": "reply", "key": key, "args": [a.decode("utf-8") for a in args]})
                self.assertEqual(v["calls"], got)
