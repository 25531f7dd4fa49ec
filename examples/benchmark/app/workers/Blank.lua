-- A blank job. In latency mode (BENCH_LATENCY_DIR set) each payload carries
-- its enqueue time {t = seconds}; perform writes now - t, one line per job, to
-- a file per worker thread (no Redis command, so nothing else is disturbed).
local env = os.getenv
local lat_dir = env("BENCH_LATENCY_DIR")

local perform
if lat_dir and lat_dir ~= "" then
  local core = require "luakiq.core"
  local out
  perform = function(payloads_by_id)
    local now = core.now()
    if not out then
      out = assert(io.open(lat_dir .. "/lat-" .. tostring(core.thread_index()) .. ".txt", "a"))
    end
    for _, payloads in pairs(payloads_by_id) do
      local p = payloads[1]
      if type(p) == "table" and p.t then out:write(string.format("%.7f\n", now - p.t)) end
    end
    out:flush()
  end
else
  perform = function() end
end

return {
  shards_count = tonumber(env("BENCH_SHARDS") or "5"),
  batch_size = tonumber(env("BENCH_BATCH") or "1"),
  fetch_size = tonumber(env("BENCH_FETCH") or ""), -- nil: the default (adapting: docs/configuration.md)
  -- BENCH_THROTTLE=1: a throttle that lets every job run (its cost alone)
  throttle = env("BENCH_THROTTLE") == "1" and function() return true end or nil,
  perform = perform,
}
