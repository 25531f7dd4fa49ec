# frozen_string_literal: true

# Luakiq::Client against real redis-servers, which spec/clients/ruby_spec.lua
# starts (each on a free port) and names in the environment:
#   LUAKIQ_TEST_REDIS     redis://127.0.0.1:PORT/0 (a plain server)
#   LUAKIQ_TEST_URLS      more URLs of one server, space-separated: a unix
#                         socket, a password, an ACL user (each its own db)
#   LUAKIQ_TEST_CLUSTER   a Redis Cluster's URL (optional)
# Each test flushes the databases it uses.
require 'minitest/autorun'
require 'luakiq'

module ClientTests
  C = Luakiq::Contract

  # a client whose databases were flushed
  def flushed(url, namespace: nil)
    c = Luakiq::Client.new(url, namespace: namespace)
    c.cluster? ? c.redis.flushall : c.redis.flushdb
    (@open ||= []) << c
    c
  end

  def setup
    skip "#{self.class::VAR} is not set" unless url
    @c = flushed(url)
  end

  def teardown
    (@open || []).each(&:close)
  end

  def url = ENV.fetch(self.class::VAR, nil)

  def test_registers_a_new_queue_then_finds_its_jobs
    jobs = [{ id: 1, payload: { b: 1, a: [1, 2.5] }, tags: ['x'] },
            { 'id' => 'é-2', 'payload' => 'p', 'perform_in' => 4_102_444_800, 'priority' => 5 },
            { id: 'w', windows: ['00:00-24:00'], timezone: 'Europe/Berlin', expires_at: 4_102_444_800.5 }]
    assert_equal 3, @c.enqueue('Orders', jobs, shards_count: 4)
    assert_equal '4', @c.redis.hget('luakiq:queues', 'Orders')
    assert_equal '2', @c.redis.get('luakiq:{luakiq:queues}:layout')
    one = @c.job('Orders', 1)
    assert_equal 'queued', one['state']
    assert_equal ['x'], one['tags']
    assert_equal 100, one['priority']
    assert_equal(-1, one['retry_count'])
    assert_equal({ 'a' => [1, 2.5], 'b' => 1 }, one['payloads'][0][0])
    two = @c.job('Orders', 'é-2')
    assert_equal [5, 4_102_444_800.0], [two['priority'], two['perform_in']]
    w = @c.job('Orders', 'w')
    assert_equal ['Europe/Berlin', ['00:00-24:00']], [w['timezone'], w['windows']]
    assert_nil @c.job('Orders', 'nope')
    assert_nil @c.job('Unknown', 1)
    st = @c.stats
    assert_equal 3, st['total']['length']
    assert_equal 3, st['by_worker']['Orders']['length']
    assert_equal 0, st['by_worker']['Orders']['morgue_length']
    assert_equal 1, @c.enqueue('Orders', [{ id: 7 }])
    other = Luakiq::Client.new(url)
    @open << other
    assert_equal 1, other.enqueue('Orders', [{ id: 8 }])
    assert_equal 5, other.stats['total']['length']
  end

  def test_refuses_a_queue_without_shards_count_and_another_count
    e = assert_raises(Luakiq::InputError) { @c.enqueue('New', [{ id: 1 }]) }
    assert_equal "queue 'New' is not registered in luakiq:queues: no luakiq host or producer has used it yet; " \
                 'pass shards_count', e.message
    @c.enqueue('New', [{ id: 1 }], shards_count: 3)
    fresh = Luakiq::Client.new(url)
    @open << fresh
    e = assert_raises(Luakiq::InputError) { fresh.enqueue('New', [{ id: 2 }], shards_count: 5) }
    assert e.message.start_with?("shards_count is 5 but queue 'New' has 3 shards in Redis; nothing enqueued"), e.message
  end

  def test_all_or_nothing
    @c.enqueue('A', [{ id: 0 }], shards_count: 2)
    e = assert_raises(Luakiq::InputError) { @c.enqueue('A', (1..49).map { |i| { id: i } } + [{ id: 'x', score: 'soon' }]) }
    assert_equal 'job 50 (id x): score must be a finite number', e.message
    assert_equal 1, @c.stats['total']['length']
  end

  def test_noscript_loads_the_script_again
    @c.enqueue('A', [{ id: 1 }], shards_count: 2)
    @c.redis.script(:flush)
    assert_equal 2, @c.enqueue('A', [{ id: 2 }, { id: 3, payload: 1 }])
    assert_equal 'queued', @c.job('A', 3)['state']
    assert_equal 3, @c.stats['total']['length']
  end

  def test_refuses_a_layout_it_does_not_know_with_one_line
    key = 'luakiq:{luakiq:queues}:layout'
    [['1>2', 'is being converted to layout 2'], ['3', "has layout '3'"]].each do |value, want|
      @c.redis.set(key, value)
      c = Luakiq::Client.new(url)
      @open << c
      e = assert_raises(Luakiq::LayoutError) { c.enqueue('A', [{ id: 1 }], shards_count: 2) }
      assert_includes e.message, want
      refute_includes e.message, "\n"
    end
    @c.redis.del(key)
    @c.redis.hset('luakiq:queues', 'Old', '5')
    c = Luakiq::Client.new(url)
    @open << c
    e = assert_raises(Luakiq::LayoutError) { c.enqueue('Old', [{ id: 1 }]) }
    assert_includes e.message, 'is in layout 1'
  end

  def test_follows_a_reshard
    @c.enqueue('R', [{ id: 1 }], shards_count: 2)
    @c.redis.hset('luakiq:queues', 'R', '3')
    3.times { |s| @c.redis.set("#{C.prefix('luakiq', 'R', s)}shards", '3') }
    ids = (2...30).to_a
    assert_equal ids.size, @c.enqueue('R', ids.map { |i| { id: i } })
    ids.each do |i|
      key = "#{C.prefix('luakiq', 'R', C.shard(i.to_s, 3))}jobs"
      assert_equal 1, @c.redis.zrangebylex(key, "[#{i}\0\0", '+', limit: [0, 1]).size, i
    end
  end

  def test_a_reply_without_a_wait_is_unknown_and_bad_input_raises
    # (replies to real waits: spec/clients/replies_spec.lua, with a host)
    @c.enqueue('R', [{ id: 'a' }], shards_count: 3)
    token = "1.Ug.YQ.3.#{'0' * 32}" # queue R, id a: a forged mac
    assert_equal :unknown, @c.reply('R', token: token, body: { answer: 1 })
    assert_equal :unknown, @c.reply('Other', token: token, body: '{}')
    assert_equal :unknown, @c.reply('R', token: 'nonsense', body: '{}')
    assert_equal :unknown, @c.reply('R', key: 'corr-1', body: '{}')
    assert_equal :unknown, @c.reply('Unregistered', key: 'corr-1', body: '{}')
    assert_equal '1', @c.redis.hget("#{C.prefix('luakiq', 'R', C.shard('a', 3))}counters", 'replies_unknown')
    none = "give the reply's JSON as an argument or on stdin"
    key = 'BADREPLY: key must be a string of 1 to 1024 bytes'
    one = 'reply: give a token or a key (one of them)'
    [[{ token: token }, none], [{ token: token, body: " \n" }, none], [{ token: token, body: '{' }, 'invalid JSON: '],
     [{ token: token, body: "\"#{'x' * 262_143}\"" }, 'TOOBIG: the reply is 262145 bytes, at most 262144'],
     [{ key: '', body: '{}' }, key], [{ key: 'k' * 1025, body: '{}' }, key],
     [{ token: token, key: 'k', body: '{}' }, one], [{ body: '{}' }, one]].each do |opts, msg|
      e = assert_raises(Luakiq::InputError, msg) { @c.reply('R', **opts) }
      assert e.message.start_with?(msg), e.message
    end
  end

  def test_namespace
    c = flushed(url, namespace: 'myapp')
    c.enqueue('A', [{ id: 'a', payload: 'p' }], shards_count: 1)
    assert_equal '1', c.redis.hget('myapp:queues', 'A')
    assert_equal 1, c.redis.zcard('myapp:{A:0}:jobs')
    assert_equal 'queued', c.job('A', 'a')['state']
  end
end

class TestOnARedis < Minitest::Test
  VAR = 'LUAKIQ_TEST_REDIS'
  include ClientTests
end

class TestOnACluster < Minitest::Test
  VAR = 'LUAKIQ_TEST_CLUSTER'
  include ClientTests

  def test_routes_each_shard_to_its_slot
    assert @c.cluster?
    assert_equal 200, @c.enqueue('C', (0...200).map { |i| { id: i, payload: i } }, shards_count: 16)
    assert_equal 200, @c.stats['by_worker']['C']['length']
    assert_equal '!', @c.send(:wake_channel)
    [0, 77, 199].each { |i| assert_equal i, @c.job('C', i)['payloads'][0][0] }
  end
end

class TestUrls < Minitest::Test
  URLS = ENV.fetch('LUAKIQ_TEST_URLS', '').split

  def test_unix_socket_password_and_acl_user
    skip 'LUAKIQ_TEST_URLS is not set' if URLS.empty?
    URLS.each do |url|
      c = Luakiq::Client.new(url)
      begin
        c.redis.flushdb
        assert_equal 2, c.enqueue('U', [{ id: 1 }, { id: 2 }], shards_count: 2), url
        assert_equal 2, c.stats['total']['length'], url
      ensure
        c.close
      end
    end
    bad = URLS.find { |u| u.include?('@') }.sub('@', 'x@')
    e = assert_raises(Redis::BaseError) { Luakiq::Client.new(bad) }
    assert_match(/WRONGPASS|invalid password|invalid username/, e.message)
  end
end
