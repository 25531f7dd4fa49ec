# ruby push_http.rb N BASE_URL: enqueues N HttpWorker jobs (one push_bulk),
# job i requesting BASE_URL/job/s<i>.0.
require "sidekiq"
require "hiredis"

Sidekiq.configure_client do |config|
  config.redis = { url: ENV.fetch("REDIS_URL"), driver: :hiredis, size: 1 }
end

class HttpWorker
  include Sidekiq::Worker
end

n = Integer(ARGV.fetch(0))
base = ARGV.fetch(1)
Sidekiq::Client.push_bulk("class" => HttpWorker, "args" => Array.new(n) { |i| ["#{base}/job/s#{i + 1}.0"] })
