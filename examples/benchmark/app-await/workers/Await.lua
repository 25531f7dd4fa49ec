-- The worker of the benchmark's waits (await_shape.lua). A job whose id
-- starts with "w" waits for a reply: perform calls luakiq.await and writes
-- "ID TOKEN" to a file per worker thread (BENCH_AWAIT_DIR/tokens-T.txt), from
-- which the driver sends the replies; with BENCH_PROVIDER_URL set it also
-- asks that service to call the reply URL back (the I/O-bound shape with a
-- callback: one POST per job, answered at once). Every other job is blank.
-- on_reply writes the id to done-T.txt and, when the reply carries its send
-- time {t = seconds}, now - t to lat-T.txt. Files, not Redis: nothing else
-- is disturbed.
local luakiq = require "luakiq"
local core = require "luakiq.core"
local env = os.getenv
local dir = env("BENCH_AWAIT_DIR") or ""
local provider = env("BENCH_PROVIDER_URL") or ""
local timeout = tonumber(env("BENCH_REPLY_TIMEOUT") or "") or 86400

local files = {}
local function file(name)
  local f = files[name]
  if not f then
    f = assert(io.open(dir .. "/" .. name .. "-" .. tostring(core.thread_index()) .. ".txt", "a"))
    files[name] = f
  end
  return f
end

return {
  shards_count = tonumber(env("BENCH_SHARDS") or "24"),
  batch_size = tonumber(env("BENCH_BATCH") or "1"),
  timeout = 30,
  perform = function(batch)
    local out
    for id in pairs(batch) do
      if id:byte(1) == 119 then -- "w"
        if dir == "" then error("BENCH_AWAIT_DIR is not set") end
        local w = luakiq.await(id, { timeout = timeout })
        out = out or file("tokens")
        out:write(id, " ", w.token, "\n")
        if provider ~= "" then
          local r = luakiq.http.request { method = "POST", url = provider .. "/call", body = w.url,
                                          headers = { ["Content-Type"] = "text/plain" } }
          if r.status ~= 202 then error("provider: status " .. r.status) end
        end
      end
    end
    if out then out:flush() end
  end,
  on_reply = function(id, reply)
    local now = core.now()
    if type(reply) == "table" and reply.t then
      local lat = file("lat")
      lat:write(string.format("%.7f\n", now - reply.t))
      lat:flush()
    end
    local done = file("done")
    done:write(id, "\n")
    done:flush()
  end,
}
