# The Sidekiq side of the benchmark: `sidekiq -r ./worker.rb -c 5`.
# hiredis driver, a blank job, job logging off (Sidekiq logs two lines per job
# at INFO; luakiq logs nothing per job at its default level).
require "sidekiq"
require "hiredis"

Sidekiq.configure_server do |config|
  config.redis = { url: ENV.fetch("REDIS_URL"), driver: :hiredis }
  config.logger.level = Logger::WARN
end

class BlankWorker
  include Sidekiq::Worker
  def perform(*) end
end
