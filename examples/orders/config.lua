-- The orders example (Lowkiq's rationale): a side system sends a snapshot of
-- an order on every change. Snapshots of one order must never be applied in
-- parallel or out of order, and when several wait, only the newest matters.
local luakiq = require "luakiq"

return {
  threads_per_node = 3,
  poll_interval = 1,
  middlewares = {
    -- log every batch with its duration
    function(worker, batch, nxt)
      local t0 = luakiq.now()
      nxt()
      local n = 0
      for _ in pairs(batch) do n = n + 1 end
      luakiq.log.info(string.format("%s: %d orders in %.1f ms", worker.name, n, (luakiq.now() - t0) * 1000))
    end,
  },
}
