# The Sidekiq side of the benchmark's I/O-bound shape: `sidekiq -r
# ./http_worker.rb -c 5`. One GET per job with Net::HTTP over a keep-alive
# connection per Sidekiq thread (kinder to Sidekiq than a connection per job).
require "sidekiq"
require "hiredis"
require "net/http"

Sidekiq.configure_server do |config|
  config.redis = { url: ENV.fetch("REDIS_URL"), driver: :hiredis }
  config.logger.level = Logger::WARN
end

class HttpWorker
  include Sidekiq::Worker
  def perform(url)
    uri = URI(url)
    http = (Thread.current[:bench_http] ||= Net::HTTP.start(uri.host, uri.port))
    res = http.request(Net::HTTP::Get.new(uri.request_uri))
    raise "status #{res.code}" unless res.code == "200"
  end
end
