-- Orders: payloads are order snapshots {version=, status=, ...}, scored by
-- version, so they arrive sorted oldest first. Only the newest is applied, and
-- an older snapshot never overwrites a newer one.
local luakiq = require "luakiq"
local store = require "lib.store"

return {
  shards_count = 6,
  batch_size = 10,
  max_retry_count = 5,
  retry_in = function(count) return 2 * (count + 1) end,

  perform = function(payloads_by_id)
    for id, snapshots in pairs(payloads_by_id) do
      local newest = snapshots[#snapshots]
      if newest.status == "broken" then error("order " .. id .. ": cannot apply a broken snapshot") end
      if newest.version > store.applied_version(id) then
        store.apply(id, newest)
        luakiq.log.info(string.format("order %s -> version %d (%s), %d snapshot(s) merged",
          id, newest.version, newest.status, #snapshots))
      end
    end
  end,
}
