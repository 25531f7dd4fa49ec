'use strict';
// The producer contract's test vectors (spec/contract/*.json, written by the
// host: tools/contract-vectors.lua) against this client's own functions.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const path = require('path');
const c = require('../lib/contract');

const DIR = process.env.LUAKIQ_CONTRACT || path.join(__dirname, '..', '..', '..', 'spec', 'contract');
const vectors = (name) => JSON.parse(fs.readFileSync(path.join(DIR, name), 'utf8')).vectors;

test('shard.json', () => {
  const vs = vectors('shard.json');
  assert.ok(vs.length > 100);
  for (const v of vs) {
    const id = c.idString(JSON.parse(v.id));
    assert.strictEqual(id, v.id_string, v.id);
    assert.strictEqual(c.shard(id, v.shards_count), v.shard, v.id + ' % ' + v.shards_count);
  }
});

test('canonical.json', () => {
  const vs = vectors('canonical.json');
  assert.ok(vs.length > 50);
  for (const v of vs) {
    const value = JSON.parse(v.value);
    if (v.error !== undefined) {
      assert.throws(() => c.canonical(value), (e) => e instanceof c.JSONError && e.message === v.error, v.value);
    } else {
      assert.strictEqual(c.canonical(value).toString('utf8'), v.canonical, v.value);
    }
  }
});

test('push.json', () => {
  const vs = vectors('push.json');
  assert.ok(vs.length > 10);
  for (const v of vs) {
    const jobs = c.checkJobs(JSON.parse(v.jobs), v.now);
    const channel = v.cluster ? '!' : v.namespace + ':wake';
    const calls = c.pushCalls(v.namespace, v.worker, v.shards_count, jobs, v.now, channel)
      .map(({ key, args }) => ({ args: args.map((a) => a.toString()), key }));
    assert.deepStrictEqual(calls, v.calls, v.name);
  }
});

test('errors.json', () => {
  const vs = vectors('errors.json');
  assert.ok(vs.length > 50);
  for (const v of vs) {
    assert.throws(() => c.checkJobs(JSON.parse(v.jobs), 1700000000.25),
      (e) => {
        assert.ok(e instanceof c.InputError, String(e));
        assert.strictEqual(e.message, v.error, v.jobs.slice(0, 80));
        return true;
      });
  }
});

test('what JSON text cannot carry: JavaScript values', () => {
  for (const bad of [NaN, Infinity, -Infinity, 10n ** 400n]) {
    assert.throws(() => c.canonical({ x: bad }), c.JSONError);
  }
  assert.throws(() => c.checkJobs([{ id: 'a', payload: { x: [NaN] } }], 1),
    { message: 'job 1 (id a): cannot dump payload: json: cannot encode NaN/inf at $.x[1]' });
  assert.throws(() => c.checkJobs([{ id: 'a', payload: { k: 'x\ud800' } }], 1),
    { message: 'job 1 (id a): payload: a string is not valid UTF-8' });
  assert.throws(() => c.checkJobs([{ id: 'a\ud800' }], 1),
    { message: 'job 1: id must be valid UTF-8 (got a\\xed\\xa0\\x80)' });
  // BigInt is a number, Buffer is text, a Map is an object, undefined is not given
  assert.strictEqual(c.canonical(new Map([['b', Buffer.from('x')], ['a', 12345678901234567890n], ['c', undefined]]))
    .toString(), '{"a":1.2345678901234567e+19,"b":"x","c":null}');
  assert.strictEqual(c.canonical({ b: 1, a: undefined, c: [] }).toString(), '{"b":1,"c":{}}');
  assert.deepStrictEqual(c.checkJobs([{ id: 1n, score: undefined }], 5)[0].score, 5);
  assert.throws(() => c.checkJobs([{ id: 1, payload: 'x'.repeat(1048575) }], 1),
    { message: 'job 1 (id 1): payload is 1048577 bytes, over max_payload_bytes (1048576)' });
});

test('reply.json', () => {
  const vs = vectors('reply.json');
  assert.ok(vs.length > 20);
  for (const v of vs) {
    if (v.name === undefined) { // a body as JSON text
      if (v.error !== undefined) {
        assert.throws(() => c.replyBody(v.body), (e) => e instanceof c.InputError && e.message.startsWith(v.error), v.body);
      } else {
        assert.strictEqual(c.replyBody(v.body).toString('utf8'), v.sent, v.body);
      }
      continue;
    }
    const body = c.replyBody(v.body);
    const got = [];
    let id, refs;
    if (v.token !== undefined) {
      const t = c.splitToken(v.token);
      if (!t || t.queue !== v.worker) assert.strictEqual(v.outcome, 'UNKNOWN', v.name);
      else [id, refs] = [t.id, ['token', v.token]];
    } else {
      let kb;
      try {
        kb = c.replyKey(v.key);
      } catch (e) {
        assert.strictEqual(e.message, v.outcome + ': ' + v.message, v.name);
      }
      if (kb) {
        got.push({ args: ['lookup', kb.toString('utf8')], key: 'luakiq:{' + v.worker + '}:', script: 'waitkey' });
        [id, refs] = ['a', ['key', kb, 'a', '3']];
      }
    }
    if (v.calls.length > 0 && v.calls[v.calls.length - 1].script === 'reply') {
      got.push({ args: c.replyArgs(v.now, 'luakiq:wake', v.shards_count, refs, body).map((a) => a.toString()),
        key: c.prefix('luakiq', v.worker, c.shard(id, v.shards_count)), script: 'reply' });
    }
    assert.deepStrictEqual(got, v.calls, v.name);
  }
});
