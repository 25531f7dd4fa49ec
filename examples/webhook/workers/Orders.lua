-- Each call's jobs go to the receiver as one signed POST (docs/workers.md).
-- 5xx: retried after retry_in (or the receiver's Retry-After); 4xx: the
-- morgue at once.
return require("luakiq.workers.webhook") {
  url = (os.getenv("WEBHOOK_URL") or "http://127.0.0.1:8099") .. "/orders",
  secret = os.getenv("WEBHOOK_SECRET"),
  shards_count = 4,
  batch_size = 1, -- one job per POST: a rejected job fails alone
  max_retry_count = 5,
  retry_in = function(count) return count end,
  timeout = 10,
}
