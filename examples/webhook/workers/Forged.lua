-- The same receiver with the wrong secret: it answers 401, a permanent
-- failure, so these jobs go to the morgue without a retry.
return require("luakiq.workers.webhook") {
  url = (os.getenv("WEBHOOK_URL") or "http://127.0.0.1:8099") .. "/orders",
  secret = "not-the-secret",
  shards_count = 1,
}
