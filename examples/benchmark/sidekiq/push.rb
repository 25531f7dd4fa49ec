# ruby push.rb N: enqueues N blank BlankWorker jobs with one push_bulk and
# prints the seconds push_bulk took (the args array is built before timing).
# ruby push.rb N IDS CALL (bench.lua --merge): N jobs with args
# [id, {"seq" => round}], round by round over ids 1..IDS, in push_bulk calls
# of CALL jobs; prints the seconds of the push_bulk calls.
require "sidekiq"
require "hiredis"

Sidekiq.configure_client do |config|
  config.redis = { url: ENV.fetch("REDIS_URL"), driver: :hiredis, size: 1 }
end

class BlankWorker
  include Sidekiq::Worker
end

n = Integer(ARGV.fetch(0))
if ARGV[1]
  ids, call = Integer(ARGV.fetch(1)), Integer(ARGV.fetch(2))
  calls = Array.new(n) { |k| [k % ids + 1, { "seq" => k / ids + 1 }] }.each_slice(call).to_a
else
  calls = [Array.new(n) { [] }]
end
Sidekiq.redis { |c| c.ping } # connect outside the timing
secs = 0.0
calls.each do |args|
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  Sidekiq::Client.push_bulk("class" => BlankWorker, "args" => args)
  secs += Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
end
puts format("%.6f", secs)
