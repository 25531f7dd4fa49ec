# frozen_string_literal: true

# bench.lua --clients: the Ruby client's enqueue of N blank jobs against
# Sidekiq's push_bulk of the same jobs (the peer examples/benchmark/sidekiq
# uses), both in calls of CALL jobs, each on an empty database; prints
# "luakiq SECS" and "peer SECS".
# usage: ruby -I clients/ruby/lib bench.rb URL N CALL
require 'luakiq'
require 'sidekiq'
require 'hiredis'

url, n, call = ARGV[0], Integer(ARGV[1]), Integer(ARGV[2])
def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

jobs = Array.new(n) { |i| { id: i + 1 } } # (built before the timing, as push.rb's args)
client = Luakiq::Client.new(url)
client.redis.flushdb
client.enqueue('Blank', jobs[0, 1], shards_count: 5) # register, load: outside the timing
t0 = clock
jobs.each_slice(call) { |slice| client.enqueue('Blank', slice) }
puts format('luakiq %.6f', clock - t0)
client.close

Sidekiq.configure_client { |config| config.redis = { url: url, driver: :hiredis, size: 1 } }
class BlankWorker
  include Sidekiq::Worker
end
Sidekiq.redis(&:flushdb)
args = Array.new(n) { [] }
t0 = clock
args.each_slice(call) { |slice| Sidekiq::Client.push_bulk('class' => BlankWorker, 'args' => slice) }
puts format('peer %.6f', clock - t0)
raise 'lost jobs' unless Sidekiq.redis { |c| c.llen('queue:default') } == n
