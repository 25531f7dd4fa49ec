# frozen_string_literal: true

# The producer contract's test vectors (spec/contract/*.json, written by the
# host: tools/contract-vectors.lua) against this client's own functions.
require 'json'
require 'minitest/autorun'
require 'luakiq'

class TestContract < Minitest::Test
  C = Luakiq::Contract
  DIR = ENV['LUAKIQ_CONTRACT'] || File.expand_path('../../../spec/contract', __dir__)

  def vectors(name) = JSON.parse(File.read(File.join(DIR, name), encoding: 'UTF-8'))['vectors']

  # a vector's JSON text as Ruby's parser reads it (a bare value too)
  def parse(text) = JSON.parse(text, quirks_mode: true, max_nesting: false)

  def test_shard
    vs = vectors('shard.json')
    assert vs.size > 100
    vs.each do |v|
      id = C.id_string(parse(v['id']))
      assert_equal v['id_string'], id, v['id']
      assert_equal v['shard'], C.shard(id, v['shards_count']), "#{v['id']} % #{v['shards_count']}"
    end
  end

  def test_canonical
    vs = vectors('canonical.json')
    assert vs.size > 50
    vs.each do |v|
      value = parse(v['value'])
      if v.key?('error')
        e = assert_raises(Luakiq::JSONError, v['value']) { C.canonical(value) }
        assert_equal v['error'], e.message
      else
        assert_equal v['canonical'].b, C.canonical(value), v['value']
      end
    end
  end

  def test_push
    vs = vectors('push.json')
    assert vs.size > 10
    vs.each do |v|
      jobs = C.check_jobs(parse(v['jobs']), v['now'])
      channel = v['cluster'] ? '!' : "#{v['namespace']}:wake"
      calls = C.push_calls(v['namespace'], v['worker'], v['shards_count'], jobs, v['now'], channel)
      got = calls.map { |_, key, args| { 'args' => args.map { |a| a.to_s.b }, 'key' => key } }
      want = v['calls'].map { |c| { 'args' => c['args'].map(&:b), 'key' => c['key'] } }
      assert_equal want, got, v['name']
    end
  end

  def test_errors
    vs = vectors('errors.json')
    assert vs.size > 50
    vs.each do |v|
      e = assert_raises(Luakiq::InputError, v['jobs'][0, 80]) { C.check_jobs(parse(v['jobs']), 1_700_000_000.25) }
      assert_equal v['error'], e.message, v['jobs'][0, 80]
    end
  end

  # what JSON text cannot carry: Ruby's own values
  def test_ruby_values
    [Float::NAN, Float::INFINITY, -Float::INFINITY, 10**400].each do |bad|
      assert_raises(Luakiq::JSONError) { C.canonical({ 'x' => bad }) }
    end
    e = assert_raises(Luakiq::InputError) { C.check_jobs([{ id: 'a', payload: { x: [Float::NAN] } }], 1.0) }
    assert_equal 'job 1 (id a): cannot dump payload: json: cannot encode NaN/inf at $.x[1]', e.message
    e = assert_raises(Luakiq::InputError) { C.check_jobs([{ id: 'a', payload: { k: "x\xff".b } }], 1.0) }
    assert_equal 'job 1 (id a): payload: a string is not valid UTF-8', e.message
    e = assert_raises(Luakiq::InputError) { C.check_jobs([{ id: "a\xed\xa0\x80".b }], 1.0) }
    assert_equal 'job 1: id must be valid UTF-8 (got a\\xed\\xa0\\x80)', e.message
    # Symbols are text (keys and values), an empty array is {}
    assert_equal '{"a":[1,2],"b":"x","c":true,"d":{}}'.b, C.canonical({ b: :x, 'a' => [1, 2], c: true, d: [] })
    e = assert_raises(Luakiq::InputError) { C.check_jobs([{ id: 'a', priority: true }], 1.0) }
    assert_includes e.message, 'priority must be an integer'
    e = assert_raises(Luakiq::InputError) { C.check_jobs([{ id: 1, payload: 'x' * 1_048_575 }], 1.0) }
    assert_equal 'job 1 (id 1): payload is 1048577 bytes, over max_payload_bytes (1048576)', e.message
  end

  def test_reply
    vs = vectors('reply.json')
    assert vs.size > 20
    vs.each do |v|
      unless v['name'] # a body as JSON text
        if v['error']
          e = assert_raises(Luakiq::InputError, v['body']) { C.reply_body(v['body']) }
          assert e.message.start_with?(v['error']), e.message
        else
          assert_equal v['sent'].b, C.reply_body(v['body']), v['body']
        end
        next
      end
      body = C.reply_body(v['body'])
      got = []
      id = refs = nil
      if v['token']
        queue, tid = C.split_token(v['token'])
        if queue.nil? || queue != v['worker'].b
          assert_equal 'UNKNOWN', v['outcome'], v['name']
        else
          id, refs = tid, ['token', v['token']]
        end
      else
        begin
          kb = C.reply_key(v['key'])
          got << { 'args' => ['lookup', C.utf8(kb)], 'key' => "luakiq:{#{v['worker']}}:", 'script' => 'waitkey' }
          id, refs = 'a', ['key', kb, 'a', '3']
        rescue Luakiq::InputError => e
          assert_equal "#{v['outcome']}: #{v['message']}", e.message, v['name']
        end
      end
      if !v['calls'].empty? && v['calls'][-1]['script'] == 'reply'
        args = C.reply_args(v['now'], 'luakiq:wake', v['shards_count'], refs, body).map { |a| C.utf8(a.to_s) }
        got << { 'args' => args, 'key' => C.prefix('luakiq', v['worker'], C.shard(id, v['shards_count'])), 'script' => 'reply' }
      end
      assert_equal v['calls'], got, v['name']
    end
  end
end
