-- OrdersMigration: drains the old queue "Orders" (still 5 shards, as registered
-- in Redis) into the new worker Orders (queue Orders_V2). Delete this file once
-- `luakiq stats` shows OrdersMigration with length 0 and morgue_length 0 on every
-- node (see README.md).
local luakiq = require "luakiq"

return {
  queue_name = "Orders",
  shards_count = 5,
  batch_size = 100,

  perform = function(payloads_by_id)
    local jobs = {}
    for id, payloads in pairs(payloads_by_id) do
      for _, payload in ipairs(payloads) do
        -- perform gets the payloads oldest first but not their scores: give each
        -- the score its producer used (here the snapshot's version), so merging
        -- with jobs already in Orders_V2 keeps the order.
        jobs[#jobs + 1] = { id = id, payload = payload, score = payload.version }
      end
    end
    -- One pipelined push. If it fails, the batch fails and is retried; pushing
    -- a payload twice is harmless (equal payloads merge into one).
    luakiq.perform_async("Orders", jobs)
  end,
}
