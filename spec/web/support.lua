-- Shared by the web specs: a script directory, a host started with --web on a
-- free loopback port, and an HTTP client (curl, run through io.popen).
local core = require "luakiq.core"
local host = require "helpers.host"
local json = require "luakiq.json"
local q = host.quote

local M = {}

-- Three workers:
--   Parked: never processed by this host (the splitter leaves it out), so its
--           queue and morgue only change through the API: deterministic listings.
--   Flaky:  dies at once (max_retry_count 0) while web:fail is "1"; otherwise
--           records each performed id in the list web:done.
--   Slow:   holds its batch while web:hold is "1" (jobs in flight).
-- The client middleware appends ":mw" to string payloads starting with "tag:"
-- (shows that HTTP enqueues run the chain) and raises a plain runtime error for
-- the payload "explode" (a 500).
M.FILES = {
  ["config.lua"] = [[
local splitters = require "luakiq.splitters"
return {
  threads_per_node = 2, poll_interval = 0.2,
  -- a recurring job that never fires during a spec (Parked, Jan 1 00:00 UTC)
  schedules = { { name = "yearly", worker = "Parked", id = "y", cron = "0 0 1 1 *" } },
  splitter = function(handlers, n)
    local keep = {}
    for _, h in ipairs(handlers) do if h.worker ~= "Parked" then keep[#keep + 1] = h end end
    return splitters.default(keep, n)
  end,
  client_middlewares = {
    function(worker, jobs, nxt)
      for _, j in ipairs(jobs) do
        if j.payload == "explode" then error("middleware exploded") end
        if type(j.payload) == "string" and j.payload:sub(1, 4) == "tag:" then j.payload = j.payload .. ":mw" end
      end
      return nxt()
    end,
  },
}]],
  ["workers/Parked.lua"] = [[return { shards_count = 3, perform = function() end }]],
  ["workers/Flaky.lua"] = [[
local luakiq = require "luakiq"
return {
  shards_count = 2, max_retry_count = 0,
  perform = function(batch)
    if luakiq.redis.call("GET", "web:fail") == "1" then error("flaky failed") end
    for id in pairs(batch) do luakiq.redis.call("RPUSH", "web:done", id) end
  end,
}]],
  ["workers/Slow.lua"] = [[
local luakiq = require "luakiq"
local core = require "luakiq.core"
return {
  shards_count = 1,
  perform = function(batch)
    while luakiq.redis.call("GET", "web:hold") == "1" do core.sleep(0.02) end
  end,
}]],
}

function M.scriptdir() return host.scriptdir(M.FILES) end

-- Runs curl; returns status, body, decoded JSON (nil if not JSON), headers.
-- opts: body (string), headers ({"Name: value"}), head (HEAD request).
function M.request(base, method, path, opts)
  opts = opts or {}
  local d = host.tmpdir()
  local args = { "curl", "-s", "-S", "--max-time", "20", "-o", q(d .. "/body"), "-D", q(d .. "/headers"),
                 "-w", "'%{http_code}'" }
  if opts.head then args[#args + 1] = "-I" else args[#args + 1] = "-X " .. method end
  for _, h in ipairs(opts.headers or {}) do args[#args + 1] = "-H " .. q(h) end
  if opts.body then
    host.write(d .. "/in", opts.body)
    args[#args + 1] = "-H 'Content-Type: application/json' --data-binary @" .. q(d .. "/in")
  end
  args[#args + 1] = q(base .. path)
  local p = assert(io.popen(table.concat(args, " ") .. " 2>" .. q(d .. "/err")))
  local status = tonumber(p:read("*a"))
  p:close()
  local body, headers, err = host.read(d .. "/body") or "", host.read(d .. "/headers") or "", host.read(d .. "/err")
  host.sh("rm -rf " .. q(d))
  assert(status and status > 0, "curl failed: " .. tostring(err))
  local ok, v = pcall(json.decode, body)
  return status, body, ok and v or nil, headers
end

-- Starts `luakiq run DIR --web 127.0.0.1:PORT`; returns proc, base URL. A
-- free port can be taken by someone else before the host binds it: then the
-- host exits at once ("cannot listen") and another port is tried. nofile:
-- run it under `ulimit -n nofile`.
function M.start(dir, env, extra, nofile)
  for _ = 1, 5 do
    local port = core.free_port()
    local args = "run " .. q(dir) .. " --web 127.0.0.1:" .. port .. " " .. (extra or "")
    local p
    if nofile then
      p = host.spawn_cmd("sh -c " .. q("ulimit -n " .. nofile .. " && exec env " .. (env or "") .. " " ..
                                       host.bin .. " " .. args))
    else
      p = host.spawn(args, env)
    end
    local base = "http://127.0.0.1:" .. port
    local ready = host.eventually(function()
      if not p:alive() then return "exited" end
      local ok, st = pcall(M.request, base, "GET", "/api/v1/stats")
      return ok and (st == 200 or st == 401) and "ready" -- 401: a token is set
    end, 15, "the web listener")
    if ready == "ready" then return p, base end
    p:wait(5)
    if not p:log():find("cannot listen", 1, true) then error("host exited: " .. p:log(), 0) end
  end
  error("no free port for the web listener", 0)
end

-- Runs tools/web-test/NAME.test.js ARGS... in headless Chromium and asserts
-- it passed ("NAME: all checks passed"). Does nothing where Chromium, node or
-- playwright-core are missing (tools/install-deps.sh --test installs them;
-- spec/web/dashboard_spec.lua reports them as pending).
function M.browser_test(name, ...)
  if not host.sh("test -x /usr/bin/chromium && command -v node >/dev/null && " ..
                 "test -d tools/web-test/node_modules/playwright-core") then return end
  local args = {}
  for i, a in ipairs { ... } do args[i] = q(tostring(a)) end
  local p = io.popen("cd tools/web-test && node " .. name .. ".test.js " .. table.concat(args, " ") .. " 2>&1")
  local said = p:read("*a")
  p:close()
  assert(said:find(name .. ": all checks passed", 1, true), said)
end

-- Asserts that promtool (PATH, or build-deps/bin from tools/install-deps.sh
-- --test) takes text as a /metrics page.
function M.promtool_check(text)
  local tool = host.sh("command -v promtool >/dev/null 2>&1") and "promtool" or
    host.sh("test -x build-deps/bin/promtool") and "build-deps/bin/promtool"
  assert(tool, "promtool is missing: tools/install-deps.sh --test puts it in build-deps/bin")
  local f = os.tmpname()
  host.write(f, text)
  local ok = host.sh(tool .. " check metrics <" .. q(f) .. " >" .. q(f .. ".out") .. " 2>&1")
  local said = host.read(f .. ".out")
  os.remove(f)
  os.remove(f .. ".out")
  assert(ok, "promtool check metrics: " .. tostring(said))
end

-- JSON lines -> array of decoded values.
-- Stops a host started by M.start (TERM, then KILL after 10 s) and removes
-- its script directory.
function M.stop(proc, dir)
  if proc then
    proc:signal("TERM")
    if proc:wait(10) == nil then proc:kill() end
  end
  if dir then host.sh("rm -rf " .. host.quote(dir)) end
end

function M.lines(text)
  local out = {}
  for line in (text or ""):gmatch("[^\n]+") do out[#out + 1] = json.decode(line) end
  return out
end

return M
