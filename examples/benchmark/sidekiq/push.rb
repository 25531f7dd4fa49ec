# ruby push.rb N: enqueues N blank BlankWorker jobs with one push_bulk and
# prints the seconds push_bulk took (the args array is built before timing).
require "sidekiq"
require "hiredis"

Sidekiq.configure_client do |config|
  config.redis = { url: ENV.fetch("REDIS_URL"), driver: :hiredis, size: 1 }
end

class BlankWorker
  include Sidekiq::Worker
end

n = Integer(ARGV.fetch(0))
args = Array.new(n) { [] }
Sidekiq.redis { |c| c.ping } # connect outside the timing
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
Sidekiq::Client.push_bulk("class" => BlankWorker, "args" => args)
t1 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
puts format("%.6f", t1 - t0)
