-- The I/O-bound shape of the benchmark (bench.lua --io N): each job makes one
-- HTTP request to a local server (spec/helpers/httpd.py, a separate python3
-- process) that answers after 100 ms. luakiq: 5 threads, 200 shards,
-- batch_size 1, each call parked while its request is in flight; Sidekiq:
-- concurrency 5, the same GET with Net::HTTP, in the same run.
--
-- While luakiq drains N unique jobs, the driver also pushes an order stream:
-- 20 ids, each with payloads seq = 1..50 pushed one every 10 ms (they merge
-- while they wait, and run over several calls). The server records the order
-- requests arrive in; afterwards every unique job must have arrived exactly
-- once and every stream id's seqs in order. jobs/s is the unique jobs' rate
-- (a stream id's requests run one at a time, by design: 50 x 100 ms).
--
-- run(B, n) with B the driver's helpers; returns the result rows.
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local runtime = require "luakiq.lib.runtime"
local client = require "luakiq.client"

local SHARDS, DELAY_MS = 200, 100
local STREAM_IDS, STREAM_SEQS, STREAM_EVERY = 20, 50, 0.01

local M = {}

local function get(B, url)
  return B.capture("curl -s --max-time 10 " .. B.q(url))
end

-- Polls the server's count of requests for ids starting with prefix until it
-- reaches total; returns the rate from the first poll that saw one to the
-- last (requests/s). during(), if given, runs between polls.
local function wait_requests(B, base, prefix, total, limit, during)
  local t_first, c_first
  local deadline = core.now() + limit
  while true do
    if during then during() end
    core.sleep(0.05)
    local c = tonumber(get(B, base .. "/count/" .. prefix)) or 0
    local now = core.now()
    if c > 0 and not t_first then t_first, c_first = now, c end
    if c >= total then
      return (c - c_first) / math.max(now - t_first, 1e-3), now
    end
    if now > deadline then error(("requests did not finish within %d s (%d of %d)"):format(limit, c, total), 0) end
  end
end

local function start_server(B)
  local portfile = B.TMP .. "/httpd.port"
  local pid = B.spawn(nil, "python3 " .. B.q(B.ROOT .. "/spec/helpers/httpd.py") .. " " .. B.q(portfile)
    .. " --delay-ms " .. DELAY_MS, B.TMP .. "/httpd.log")
  local deadline = core.now() + 10
  while core.now() < deadline do
    local f = io.open(portfile)
    if f then
      local port = tonumber(f:read("*a"))
      f:close()
      if port then return pid, "http://127.0.0.1:" .. port end
    end
    core.sleep(0.05)
  end
  error("the HTTP server did not start; see " .. B.TMP .. "/httpd.log", 0)
end

local function run_luakiq(B, base, n)
  B.fresh_db()
  get(B, base .. "/reset")
  local app = B.BENCH_DIR .. "/app-io"
  local env = { BENCH_SHARDS = SHARDS, BENCH_THREADS = B.THREADS, REDIS_URL = B.REDIS_URL, BENCH_HTTP_URL = base }
  local cfg = runtime.load(app)
  cfg.by_name.Http.shards_count = SHARDS
  cfg.redis = B.REDIS_URL
  local conn = assert(runtime.connect(cfg, 5))
  assert(runtime.register(conn, cfg))
  local jobs = {}
  for i = 1, n do jobs[i] = { id = "u" .. i } end
  client.push(conn, cfg, "Http", jobs)
  local total = n + STREAM_IDS * STREAM_SEQS
  local seq, next_push = 0, 0
  local function stream() -- one payload for every stream id, every STREAM_EVERY s
    local now = core.now()
    while seq < STREAM_SEQS and now >= next_push do
      seq = seq + 1
      local batch = {}
      for k = 1, STREAM_IDS do batch[k] = { id = "o" .. k, payload = { seq = seq } } end
      client.push(conn, cfg, "Http", batch)
      next_push = (next_push == 0 and now or next_push) + STREAM_EVERY
    end
  end
  local pid = B.spawn(env, B.q(B.LUAKIQ) .. " run " .. B.q(app), B.TMP .. "/host-io.log")
  -- the rate is the unique jobs' (the stream's ids run one request at a
  -- time each, by design); then the stream's tail is waited for
  local ok, rate = pcall(wait_requests, B, base, "u", n, 300, stream)
  if ok then ok, rate = pcall(function() wait_requests(B, base, "", total, 300, stream) return rate end) end
  local rss, cpu = B.peak_rss(pid), B.cpu_secs(pid)
  B.stop(pid)
  if not ok then error(rate .. "; host log: " .. B.TMP .. "/host-io.log", 0) end
  -- correctness: every unique job once, every stream id in order, nothing left
  local seen, last, lost, dup, order = {}, {}, 0, 0, 0
  for _, r in ipairs(json.decode(get(B, base .. "/jobs"))) do
    local id, s = r:match("^(.-)%.(%d+)$")
    s = tonumber(s)
    if id:sub(1, 1) == "u" then
      if seen[id] then dup = dup + 1 end
      seen[id] = true
    else
      if s <= (last[id] or 0) then order = order + 1 end
      last[id] = s
    end
  end
  for i = 1, n do if not seen["u" .. i] then lost = lost + 1 end end
  for k = 1, STREAM_IDS do if last["o" .. k] ~= STREAM_SEQS then lost = lost + 1 end end
  local left = 0
  for sh = 0, SHARDS - 1 do
    local p = keys.prefix(cfg.namespace, "Http", sh)
    left = left + conn:call("ZCARD", p .. "jobs") + conn:call("HLEN", p .. "busy")
  end
  conn:close()
  return { name = ("luakiq, %d threads, %d shards, batch 1"):format(B.THREADS, SHARDS), jobs = total, rate = rate,
           rss = rss, cpu = cpu / total, lost = lost, dup = dup, order = order, left = left }
end

local function run_sidekiq(B, base, n)
  B.fresh_db()
  get(B, base .. "/reset")
  local sk = B.BENCH_DIR .. "/sidekiq"
  assert(B.ok("cd " .. B.q(sk) .. " && REDIS_URL=" .. B.q(B.REDIS_URL) .. " ruby push_http.rb " .. n .. " "
    .. B.q(base) .. " 2>" .. B.q(B.TMP .. "/sidekiq-push-io.log")), "sidekiq push failed")
  local pid = B.spawn({ REDIS_URL = B.REDIS_URL }, "sidekiq -r " .. B.q(sk .. "/http_worker.rb") .. " -c " .. B.THREADS
    .. " -t 2 -C /dev/null", B.TMP .. "/sidekiq-io.log")
  local ok, rate = pcall(wait_requests, B, base, "s", n, 300)
  local rss, cpu = B.peak_rss(pid), B.cpu_secs(pid)
  B.stop(pid)
  if not ok then error(rate .. "; sidekiq log: " .. B.TMP .. "/sidekiq-io.log", 0) end
  return { name = "Sidekiq " .. B.SIDEKIQ_VERSION .. " (concurrency 5, Net::HTTP keep-alive)", jobs = n, rate = rate,
           rss = rss, cpu = cpu / n }
end

-- Runs both sides; prints the table; returns luakiq's row and Sidekiq's (or nil).
function M.run(B, n)
  local srv_pid, base = start_server(B)
  local ok, lk, sk = pcall(function()
    io.stderr:write(("  I/O shape: luakiq, %d jobs + %d streamed, 100 ms HTTP ...\n"):format(n, STREAM_IDS * STREAM_SEQS))
    local l = run_luakiq(B, base, n)
    local s
    if B.SIDEKIQ_VERSION then
      local m = math.max(100, math.floor(n / 10))
      io.stderr:write(("  I/O shape: Sidekiq, %d jobs ...\n"):format(m))
      s = run_sidekiq(B, base, m)
    end
    return l, s
  end)
  B.stop(srv_pid)
  if not ok then error(lk, 0) end
  return lk, sk
end

-- The table of the shape (B.print_table), with the ratio when Sidekiq ran.
function M.print(B, lk, sk)
  local function ms(x) return string.format("%.3f ms", x * 1000) end
  local rows = { { lk.name, B.fmt_int(lk.jobs), B.fmt_int(lk.rate), sk and string.format("%.1fx", lk.rate / sk.rate) or "-",
                   B.mb(lk.rss), ms(lk.cpu), ("%d / %d / %d / %d"):format(lk.lost, lk.dup, lk.order, lk.left) } }
  if sk then
    rows[2] = { sk.name, B.fmt_int(sk.jobs), B.fmt_int(sk.rate), "1.0x", B.mb(sk.rss), ms(sk.cpu), "-" }
  end
  B.print_table({ "I/O-bound: one 100 ms HTTP request per job", "jobs", "jobs/s", "vs Sidekiq", "peak RSS",
                  "CPU/job", "lost / dup / order / left" }, rows)
  print("jobs/s: the unique jobs' requests the server received per second, first to last; CPU/job: user+system time")
  print("of the worker process per job; order: a stream id's request arriving after a later one of the same id.")
end

return M
