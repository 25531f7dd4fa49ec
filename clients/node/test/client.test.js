'use strict';
// The Client against real redis-servers, which spec/clients/node_spec.lua
// starts (each on a free port) and names in the environment:
//   LUAKIQ_TEST_REDIS     redis://127.0.0.1:PORT/0 (a plain server)
//   LUAKIQ_TEST_URLS      more URLs of one server, space-separated: a unix
//                         socket, a password, an ACL user (each its own db)
//   LUAKIQ_TEST_CLUSTER   a Redis Cluster's URL (optional)
// Each test flushes the databases it uses.
const test = require('node:test');
const assert = require('node:assert');
const { Client, InputError, LayoutError } = require('..');
const c = require('../lib/contract');

const URL = process.env.LUAKIQ_TEST_REDIS;
const URLS = (process.env.LUAKIQ_TEST_URLS || '').split(' ').filter(Boolean);
const CLUSTER = process.env.LUAKIQ_TEST_CLUSTER;

// A client whose databases were flushed before its first call.
async function flushed(url, opts) {
  const client = new Client(url, opts);
  try {
    await client._open();
    const nodes = client.cluster ? client.redis.nodes('master') : [client.redis];
    await Promise.all(nodes.map((n) => (client.cluster ? n.flushall() : n.flushdb())));
    return client;
  } catch (e) {
    await client.close();
    throw e;
  }
}

const suites = [['a plain Redis', URL], ['a Redis Cluster', CLUSTER]];
for (const [what, url] of suites) {
  test('on ' + what, { skip: !url && 'not given' }, async (t) => {
    const open = [];
    const client = async (opts) => {
      const cl = await flushed(url, opts);
      open.push(cl);
      return cl;
    };
    t.after(() => Promise.all(open.map((cl) => cl.close())));

    await t.test('registers a new queue, then finds its jobs', async () => {
      const cl = await client();
      const jobs = [{ id: 1, payload: { b: 1, a: [1, 2.5] }, tags: ['x'] },
        { id: 'é-2', payload: 'p', perform_in: 4102444800, priority: 5 },
        { id: 'w', windows: ['00:00-24:00'], timezone: 'Europe/Berlin', expires_at: 4102444800.5 }];
      assert.strictEqual(await cl.enqueue('Orders', jobs, { shardsCount: 4 }), 3);
      assert.strictEqual(await cl.redis.hget('luakiq:queues', 'Orders'), '4');
      assert.strictEqual(await cl.redis.get('luakiq:{luakiq:queues}:layout'), '2');
      const one = await cl.job('Orders', 1);
      assert.strictEqual(one.state, 'queued');
      assert.deepStrictEqual(one.tags, ['x']);
      assert.strictEqual(one.priority, 100);
      assert.strictEqual(one.retry_count, -1);
      assert.deepStrictEqual(one.payloads[0][0], { a: [1, 2.5], b: 1 });
      const two = await cl.job('Orders', 'é-2');
      assert.deepStrictEqual([two.priority, two.perform_in], [5, 4102444800]);
      const w = await cl.job('Orders', 'w');
      assert.deepStrictEqual([w.timezone, w.windows], ['Europe/Berlin', ['00:00-24:00']]);
      assert.strictEqual(await cl.job('Orders', 'nope'), null);
      assert.strictEqual(await cl.job('Unknown', 1), null);
      const st = await cl.stats();
      assert.strictEqual(st.total.length, 3);
      assert.strictEqual(st.by_worker.Orders.length, 3);
      assert.strictEqual(st.by_worker.Orders.morgue_length, 0);
      assert.strictEqual(await cl.enqueue('Orders', [{ id: 7 }]), 1);
      const other = new Client(url);
      open.push(other);
      assert.strictEqual(await other.enqueue('Orders', [{ id: 8 }]), 1);
      assert.strictEqual((await other.stats()).total.length, 5);
    });

    await t.test('refuses a queue without shardsCount, and another count', async () => {
      const cl = await client();
      await assert.rejects(cl.enqueue('New', [{ id: 1 }]), (e) => e instanceof InputError && e.message ===
        "queue 'New' is not registered in luakiq:queues: no luakiq host or producer has used it yet; pass shardsCount");
      await cl.enqueue('New', [{ id: 1 }], { shardsCount: 3 });
      const fresh = new Client(url);
      open.push(fresh);
      await assert.rejects(fresh.enqueue('New', [{ id: 2 }], { shardsCount: 5 }),
        (e) => e instanceof InputError && e.message.startsWith("shards_count is 5 but queue 'New' has 3 shards in Redis; nothing enqueued"));
    });

    await t.test('all or nothing', async () => {
      const cl = await client();
      await cl.enqueue('A', [{ id: 0 }], { shardsCount: 2 });
      const jobs = [];
      for (let i = 1; i < 50; i++) jobs.push({ id: i });
      jobs.push({ id: 'x', score: 'soon' });
      await assert.rejects(cl.enqueue('A', jobs), { message: 'job 50 (id x): score must be a finite number' });
      assert.strictEqual((await cl.stats()).total.length, 1);
    });

    await t.test('loads the scripts again after NOSCRIPT', async () => {
      const cl = await client();
      await cl.enqueue('A', [{ id: 1 }], { shardsCount: 2 });
      const nodes = cl.cluster ? cl.redis.nodes('master') : [cl.redis];
      await Promise.all(nodes.map((n) => n.script('FLUSH')));
      assert.strictEqual(await cl.enqueue('A', [{ id: 2 }, { id: 3, payload: 1 }]), 2);
      assert.strictEqual((await cl.job('A', 3)).state, 'queued');
      assert.strictEqual((await cl.stats()).total.length, 3);
    });

    await t.test('refuses a layout it does not know, with one line', async () => {
      const cl = await client();
      await cl.connect();
      const key = 'luakiq:{luakiq:queues}:layout';
      for (const [value, want] of [['1>2', 'is being converted to layout 2'], ['3', "has layout '3'"]]) {
        await cl.redis.set(key, value);
        const other = new Client(url);
        open.push(other);
        await assert.rejects(other.enqueue('A', [{ id: 1 }], { shardsCount: 2 }),
          (e) => e instanceof LayoutError && e.message.includes(want) && !e.message.includes('\n'));
      }
      await cl.redis.del(key);
      await cl.redis.hset('luakiq:queues', 'Old', '5');
      const old = new Client(url);
      open.push(old);
      await assert.rejects(old.enqueue('Old', [{ id: 1 }]), (e) => e instanceof LayoutError && e.message.includes('is in layout 1'));
    });

    await t.test('follows a reshard', async () => {
      const cl = await client();
      await cl.enqueue('R', [{ id: 1 }], { shardsCount: 2 });
      await cl.redis.hset('luakiq:queues', 'R', '3');
      for (let s = 0; s < 3; s++) await cl.redis.set(c.prefix('luakiq', 'R', s) + 'shards', '3');
      const ids = [];
      for (let i = 2; i < 30; i++) ids.push(i);
      assert.strictEqual(await cl.enqueue('R', ids.map((id) => ({ id }))), ids.length);
      for (const i of ids) {
        const key = c.prefix('luakiq', 'R', c.shard(String(i), 3)) + 'jobs';
        assert.strictEqual((await cl.redis.zrangebylex(key, '[' + i + '\0\0', '+', 'LIMIT', 0, 1)).length, 1, String(i));
      }
    });

    await t.test('a reply without a wait is unknown; bad input throws', async () => {
      // (replies to real waits: spec/clients/replies_spec.lua, with a host)
      const cl = await client();
      await cl.enqueue('R', [{ id: 'a' }], { shardsCount: 3 });
      const token = '1.Ug.YQ.3.' + '0'.repeat(32); // queue R, id a: a forged mac
      assert.strictEqual(await cl.reply('R', { token, body: { answer: 1 } }), 'unknown');
      assert.strictEqual(await cl.reply('Other', { token, body: '{}' }), 'unknown');
      assert.strictEqual(await cl.reply('R', { token: 'nonsense', body: '{}' }), 'unknown');
      assert.strictEqual(await cl.reply('R', { key: 'corr-1', body: '{}' }), 'unknown');
      assert.strictEqual(await cl.reply('Unregistered', { key: 'corr-1', body: '{}' }), 'unknown');
      const counters = c.prefix('luakiq', 'R', c.shard('a', 3)) + 'counters';
      assert.strictEqual(await cl.redis.hget(counters, 'replies_unknown'), '1');
      const none = "give the reply's JSON as an argument or on stdin";
      const key = 'BADREPLY: key must be a string of 1 to 1024 bytes';
      const one = 'reply: give a token or a key (one of them)';
      for (const [opts, msg] of [[{ token }, none], [{ token, body: ' \n' }, none], [{ token, body: '{' }, 'invalid JSON: '],
        [{ token, body: '"' + 'x'.repeat(262143) + '"' }, 'TOOBIG: the reply is 262145 bytes, at most 262144'],
        [{ key: '', body: '{}' }, key], [{ key: 'k'.repeat(1025), body: '{}' }, key],
        [{ token, key: 'k', body: '{}' }, one], [{ body: '{}' }, one]]) {
        await assert.rejects(cl.reply('R', opts), (e) => e instanceof InputError && e.message.startsWith(msg), msg);
      }
    });

    await t.test('a namespace of its own', async () => {
      const cl = await client({ namespace: 'myapp' });
      await cl.enqueue('A', [{ id: 'a', payload: 'p' }], { shardsCount: 1 });
      assert.strictEqual(await cl.redis.hget('myapp:queues', 'A'), '1');
      assert.strictEqual(await cl.redis.zcard('myapp:{A:0}:jobs'), 1);
      assert.strictEqual((await cl.job('A', 'a')).state, 'queued');
    });

    if (url === CLUSTER) {
      await t.test('routes each shard to its slot', async () => {
        const cl = await client();
        const jobs = [];
        for (let i = 0; i < 200; i++) jobs.push({ id: i, payload: i });
        assert.strictEqual(await cl.enqueue('C', jobs, { shardsCount: 16 }), 200);
        assert.ok(cl.cluster);
        assert.strictEqual(cl._channel, '!');
        assert.strictEqual((await cl.stats()).by_worker.C.length, 200);
        for (const i of [0, 77, 199]) assert.strictEqual((await cl.job('C', i)).payloads[0][0], i);
      });
    }
  });
}

test('by a unix socket, a password, an ACL user', { skip: URLS.length === 0 && 'not given' }, async () => {
  for (const url of URLS) {
    const cl = await flushed(url);
    try {
      assert.strictEqual(await cl.enqueue('U', [{ id: 1 }, { id: 2 }], { shardsCount: 2 }), 2, url);
      assert.strictEqual((await cl.stats()).total.length, 2, url);
    } finally {
      await cl.close();
    }
  }
  const bad = URLS.find((u) => u.includes('@')).replace('@', 'x@');
  const cl = new Client(bad);
  try {
    await assert.rejects(cl.enqueue('U', [{ id: 1 }], { shardsCount: 2 }), /WRONGPASS|invalid password|invalid username/);
  } finally {
    await cl.close();
  }
});
