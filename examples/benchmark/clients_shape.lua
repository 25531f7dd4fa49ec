-- The clients' benchmark (bench.lua --clients; docs/benchmarks.md, "The
-- clients"): each client in clients/ enqueues N blank jobs ({id = i}, in
-- calls of ENQUEUE_CALL) beside its ecosystem's nearest peer, in the same
-- process on the same Redis (clients/bench.py, bench.js, bench.rb): Python
-- against redis-py's pipelined LPUSH of Sidekiq-format jobs, Node.js
-- against ioredis's, Ruby against Sidekiq's push_bulk; and `luakiq enqueue`
-- of the same jobs. --rounds rounds, each client and the CLI back to back;
-- a ratio is judged on the median of its rounds (target: >= 1.5x).
local M = {}

local function langs(B)
  local q, root, dir = B.q, B.ROOT, B.BENCH_DIR .. "/clients"
  return {
    { name = "Python", peer = "redis-py pipelined LPUSH",
      cmd = "PYTHONPATH=" .. q(root .. "/clients/python") .. " /usr/bin/python3 " .. q(dir .. "/bench.py"),
      needs = "/usr/bin/python3 -c 'import redis'" },
    { name = "Node.js", peer = "ioredis pipelined LPUSH",
      cmd = "NODE_PATH=" .. q(root .. "/clients/node/node_modules") .. " node " .. q(dir .. "/bench.js"),
      needs = "test -d " .. q(root .. "/clients/node/node_modules/ioredis") },
    { name = "Ruby", peer = "Sidekiq push_bulk",
      cmd = "ruby -W0 -I " .. q(root .. "/clients/ruby/lib") .. " " .. q(dir .. "/bench.rb"),
      needs = "ruby -e 'require \"sidekiq\"; require \"hiredis\"; require \"redis\"' 2>/dev/null" },
  }
end

local function median(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  if #t == 0 then return nil end
  return #t % 2 == 1 and t[(#t + 1) / 2] or (t[#t / 2] + t[#t / 2 + 1]) / 2
end

-- Returns {langs = {{name, peer, luakiq = {jobs/s...}, peer_rate = {...}} | skipped}, cli = {jobs/s...}}.
function M.run(B, n, rounds)
  local res = { langs = langs(B), cli = {}, n = n }
  for _, l in ipairs(res.langs) do
    l.luakiq, l.peer_rate = {}, {}
    if not B.ok(l.needs .. " >/dev/null 2>&1") then l.skipped = "not installed" end
  end
  for r = 1, rounds do
    for _, l in ipairs(res.langs) do
      if not l.skipped then
        io.stderr:write("  round " .. r .. ": " .. l.name .. " client and " .. l.peer .. " ...\n")
        B.fresh_db()
        local log = B.TMP .. "/clients-" .. l.name .. ".log"
        local out = B.capture(l.cmd .. " " .. B.q(B.REDIS_URL) .. " " .. n .. " " .. B.ENQUEUE_CALL .. " 2>>" .. B.q(log))
        local mine, peer = out:match("luakiq ([%d.]+)"), out:match("peer ([%d.]+)")
        if not mine or not peer then error(l.name .. " client benchmark failed, see " .. log, 0) end
        l.luakiq[r], l.peer_rate[r] = n / tonumber(mine), n / tonumber(peer)
      end
    end
    io.stderr:write("  round " .. r .. ": luakiq enqueue FILE ...\n")
    res.cli[r] = B.cli_enqueue(n)
  end
  B.fresh_db()
  return res
end

-- Prints the table (medians), every round's ratios, and the targets.
function M.print(B, res)
  print()
  print(string.format("clients: %d blank jobs in calls of %d (medians of %d rounds); `luakiq enqueue FILE` of the same: %s jobs/s",
    res.n, B.ENQUEUE_CALL, #res.cli, B.fmt_int(median(res.cli))))
  local rows, rounds, trows = {}, {}, {}
  for _, l in ipairs(res.langs) do
    if l.skipped then
      rows[#rows + 1] = { l.name, "-", l.peer, "-", l.skipped }
    else
      local ratios = {}
      for r = 1, #l.luakiq do ratios[r] = l.luakiq[r] / l.peer_rate[r] end
      local m = median(ratios)
      rows[#rows + 1] = { l.name, B.fmt_int(median(l.luakiq)), l.peer, B.fmt_int(median(l.peer_rate)),
                          string.format("%.2fx", m) }
      for r, x in ipairs(ratios) do
        rounds[r] = rounds[r] or { tostring(r) }
        rounds[r][#rounds[r] + 1] = string.format("%.2fx", x)
      end
      trows[#trows + 1] = { "enqueue, " .. l.name .. " client", string.format("%.2fx %s", m, l.peer), ">= 1.5x",
                            m >= 1.5 and "met" or "NOT MET" }
    end
  end
  B.print_table({ "client", "enqueue jobs/s", "peer", "peer jobs/s", "client / peer" }, rows)
  if #rounds > 1 then
    print()
    local head = { "round" }
    for _, l in ipairs(res.langs) do if not l.skipped then head[#head + 1] = l.name end end
    B.print_table(head, rounds)
  end
  print()
  B.print_table({ "target", "measured", "goal", "" }, trows)
end

return M
