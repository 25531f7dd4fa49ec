-- Makes docs/dashboard.png: a private redis-server, a demo script directory
-- under load (a steady flow of jobs, some failing into the morgue), a host
-- with --web on a free port, and screenshot.js in headless Chromium.
--   LUAKIQ_BIN=build/luakiq build/luakiq lua tools/web-test/screenshot.lua [OUT.png] [SECONDS]
-- Run from the repository root (after `npm ci` in tools/web-test); LUAKIQ_BIN
-- is the binary the host runs from (default build/luakiq).
package.path = "spec/?.lua;" .. package.path
local core = require "luakiq.core"
local json = require "luakiq.json"
local redis = require "helpers.redis"
local host = require "helpers.host"
local web = require "web.support"

local out, seconds = arg[1] or "docs/dashboard.png", tonumber(arg[2]) or 60

local dir = host.scriptdir {
  ["config.lua"] = "return { threads_per_node = 4, poll_interval = 0.5 }",
  ["workers/Orders.lua"] = [[
local core = require "luakiq.core"
return { shards_count = 8, batch_size = 10, max_retry_count = 1, retry_in = function() return 1 end,
  perform = function(batch)
    core.sleep(0.02)
    for id, ps in pairs(batch) do if ps[#ps].broken then error("order " .. id .. ": broken snapshot") end end
  end }]],
  ["workers/Mailer.lua"] = [[
local core = require "luakiq.core"
return { shards_count = 4, perform = function() core.sleep(0.01) end }]],
  ["workers/Invoices.lua"] = [[
local core = require "luakiq.core"
return { shards_count = 2, perform = function() core.sleep(0.2) end }]],
}
local srv = redis.start()
local started, proc, base = pcall(web.start, dir, "REDIS_URL=" .. srv.url)
if not started then
  srv:stop()
  error(proc, 0)
end
local conn = assert(core.connect(srv.url, 5))
local cfg = require("luakiq.lib.runtime").load(dir)
local client = require "luakiq.client"

-- screenshot.js runs in the background while this loop feeds the host: a
-- batch of jobs every 0.2 s, about 2% of the orders broken (retried, then dead).
local shot = io.popen("cd tools/web-test && node screenshot.js " .. host.quote(base) .. " " ..
  host.quote((out:sub(1, 1) == "/" and out or "../../" .. out)) .. " " .. seconds .. " 2>&1", "r")
local deadline, n = core.now() + seconds + 10, 0
local ok, err = pcall(function()
  while core.now() < deadline do
    local orders, mails = {}, {}
    for i = 1, 8 + math.random(0, 12) do
      n = n + 1
      orders[i] = { id = tostring(math.random(1, 500)), payload = { v = n, broken = math.random() < 0.02 or nil }, score = n }
    end
    for i = 1, math.random(0, 6) do mails[i] = { id = "m" .. (n + i) } end
    client.push(conn, cfg, "Orders", orders)
    client.push(conn, cfg, "Mailer", mails)
    if math.random() < 0.3 then client.push(conn, cfg, "Invoices", { { id = "i" .. n } }) end
    core.sleep(0.2)
  end
end)
io.stdout:write(shot:read("*a"))
shot:close()
proc:signal("TERM")
proc:wait(10)
srv:stop()
host.sh("rm -rf " .. host.quote(dir))
assert(ok, err)
