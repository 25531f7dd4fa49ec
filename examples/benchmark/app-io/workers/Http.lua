-- One GET per payload to BENCH_HTTP_URL/job/ID.SEQ, in the payloads' order
-- (the server records the order requests arrive in: bench.lua checks each
-- id's sequence afterwards). The call parks while it waits, so each thread
-- has up to as many requests in flight as it serves shards.
local luakiq = require "luakiq"
local base = os.getenv("BENCH_HTTP_URL") -- unset when bench.lua itself loads the directory

return {
  shards_count = tonumber(os.getenv("BENCH_SHARDS") or "200"),
  batch_size = 1,
  timeout = 30,
  perform = function(batch)
    if not base then error("BENCH_HTTP_URL is not set") end
    for id, payloads in pairs(batch) do
      for _, p in ipairs(payloads) do
        local seq = type(p) == "table" and p.seq or 0
        local r = luakiq.http.request { url = base .. "/job/" .. id .. "." .. seq }
        if r.status ~= 200 then error("status " .. r.status) end
      end
    end
  end,
}
