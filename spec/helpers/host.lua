-- Helpers to run the real binary as a separate process (luakiq run, enqueue,
-- ...) and to build script directories in temp dirs.
local core = require "luakiq.core"

local M = {}

M.bin = os.getenv("LUAKIQ_BIN") or "build/luakiq"

-- The set-up of a spec file that runs luakiq against a private Redis:
-- `local srv, env = host.fixture()` gives helpers.redis's fixture (one
-- redis-server for the file, flushed before each test) and env(), the
-- environment of a luakiq command against it ("REDIS_URL=...").
function M.fixture(opts)
  local srv = require("helpers.redis").fixture(opts, getfenv(2))
  return srv, function() return "REDIS_URL=" .. srv.url end
end

-- Whether s (a command's stderr) is one line, its newline at the end.
function M.one_line(s) return tostring(s):gsub("\n$", ""):find("\n") == nil end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == 0 or ok == true
end
M.sh = sh

-- The stdout of a shell command.
function M.capture(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  p:close()
  return out
end

-- Runs a shell command line: exit code, stdout, stderr.
function M.sh_out(cmd)
  local d = M.tmpdir()
  os.execute("(" .. cmd .. ") >" .. d .. "/out 2>" .. d .. "/err </dev/null; echo $? >" .. d .. "/rc")
  local rc, out, err = tonumber(M.read(d .. "/rc")), M.read(d .. "/out") or "", M.read(d .. "/err") or ""
  sh("rm -rf " .. d)
  return rc, out, err
end

-- How many times the Lua pattern occurs in text (log lines, mostly).
function M.count(text, pattern)
  local n = 0
  for _ in text:gmatch(pattern) do n = n + 1 end
  return n
end

-- The stdout of a shell command as an array of lines.
function M.lines(cmd)
  local t = {}
  for l in M.capture(cmd):gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

function M.quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

function M.tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(sh("mkdir -p " .. d))
  return d
end

function M.write(path, text)
  sh("mkdir -p " .. M.quote(path:match("^(.*)/[^/]*$")))
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

function M.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- A script directory: files = {["config.lua"] = "...", ["workers/A.lua"] = "..."}.
function M.scriptdir(files)
  local d = M.tmpdir()
  for name, text in pairs(files) do M.write(d .. "/" .. name, text) end
  return d
end

-- Runs the binary to completion: returns exit code, stdout, stderr.
function M.exec(args, stdin, env)
  local cmd = (env or "") .. " " .. M.bin .. " " .. args
  local d
  if stdin then
    d = M.tmpdir()
    M.write(d .. "/in", stdin)
    cmd = cmd .. " <" .. d .. "/in"
  end
  local rc, out, err = M.sh_out(cmd)
  if d then sh("rm -rf " .. d) end
  return rc, out, err
end

-- `luakiq jobs DIR WORKER queue|morgue|busy` as {id = record}; asserts success.
function M.jobs(dir, worker, what, env)
  local rc, out, err = M.exec("jobs " .. M.quote(dir) .. " " .. worker .. " " .. what, nil, env)
  assert(rc == 0, "luakiq jobs failed: " .. tostring(err))
  local by_id = {}
  for line in out:gmatch("[^\n]+") do
    local j = require("luakiq.json").decode(line)
    by_id[j.id] = j
  end
  return by_id
end

-- Asserts that a worker file W.lua of body `src` (the table's fields, before
-- `perform`) is refused at load: `luakiq plan` exits 2 and its error has `want`.
function M.refuses_worker(src, want)
  local d = M.scriptdir { ["workers/W.lua"] = "return { " .. src .. " perform = function() end }" }
  local rc, _, err = M.exec("plan " .. M.quote(d))
  M.sh("rm -rf " .. M.quote(d))
  assert(rc == 2, "exit " .. tostring(rc) .. " for " .. src .. ": " .. tostring(err))
  assert(err:find(want, 1, true), "want '" .. want .. "' in: " .. tostring(err))
end

-- `luakiq stats DIR`, decoded; asserts success.
function M.stats(dir, env)
  local rc, out, err = M.exec("stats " .. M.quote(dir), nil, env)
  assert(rc == 0, "luakiq stats failed: " .. tostring(err))
  return require("luakiq.json").decode(out)
end

-- `luakiq enqueue DIR WORKER` of jobs (tables, sent as JSON lines); asserts
-- that it succeeded.
function M.enqueue(dir, worker, jobs, env)
  local lines = {}
  for i, j in ipairs(jobs) do lines[i] = require("luakiq.json").encode(j) end
  local rc, _, err = M.exec("enqueue " .. M.quote(dir) .. " " .. worker, table.concat(lines, "\n"), env)
  assert(rc == 0, "enqueue failed: " .. tostring(err))
end

-- Starts `luakiq ARGS` in the background; returns a process handle.
function M.spawn(args, env)
  return M.spawn_cmd(string.format("env %s %s %s", env or "", M.bin, args))
end

-- Starts a shell command line in the background (its stdout and stderr go to
-- files of the handle's dir); returns a process handle whose pid is the
-- command's own (it is exec'd), stopped by spec/run.lua if a test leaves it.
function M.spawn_cmd(cmdline)
  local d = M.tmpdir()
  -- The inner sh records its pid and execs the command (so the pid is the
  -- command's); the outer subshell waits for it and records the exit code.
  local inner = string.format("echo $$ >%s/pid; exec %s >%s/out 2>%s/err </dev/null", d, cmdline, d, d)
  assert(sh("( sh -c " .. M.quote(inner) .. "; echo $? >" .. d .. "/rc ) >/dev/null 2>&1 &"))
  local p = setmetatable({ dir = d }, { __index = M.proc })
  M.eventually(function() p.pid = tonumber(M.read(d .. "/pid")) return p.pid end, 5, "spawned pid")
  M.spawned[#M.spawned + 1] = p
  return p
end

-- Every process spawned by this spec file, so that spec/run.lua can kill
-- what a failing test left running.
M.spawned = {}

function M.cleanup()
  for _, p in ipairs(M.spawned) do
    if p.pid and p:alive() then p:signal("KILL") end
  end
  M.spawned = {}
end

M.proc = {}
function M.proc:alive() return self.pid ~= nil and sh("kill -0 " .. self.pid .. " 2>/dev/null") end
function M.proc:signal(sig) return sh("kill -" .. sig .. " " .. self.pid .. " 2>/dev/null") end
function M.proc:log() return (M.read(self.dir .. "/err") or "") .. (M.read(self.dir .. "/out") or "") end
-- Waits up to timeout seconds for exit; returns the exit code or nil.
function M.proc:wait(timeout)
  local deadline = core.now() + (timeout or 10)
  while core.now() < deadline do
    local rc = tonumber(M.read(self.dir .. "/rc"))
    if rc then return rc end
    core.sleep(0.02)
  end
  return nil
end
function M.proc:kill()
  if self:alive() then self:signal("KILL") end
  self:wait(5)
  self.pid = nil -- never signalled again: its pid may be reused
end

-- Registers, in the busted environment env, an after_each that kills the
-- host processes get() returns first (a handle, or a list of them that it
-- empties; nil: none) and removes the paths after them (nil: none).
local function stop_after_each(env, get)
  env.after_each(function()
    local r = { n = 0 }
    local function pack(...) r = { n = select("#", ...), ... } end
    pack(get())
    local procs = r[1]
    if procs and procs.pid == nil and procs.dir == nil then
      for i = #procs, 1, -1 do
        procs[i]:kill()
        procs[i] = nil -- the list is empty for the next test
      end
    elseif procs then
      procs:kill()
    end
    for i = 2, r.n do
      if r[i] then sh("rm -rf " .. M.quote(r[i])) end
    end
  end)
end

-- After each test of the calling describe block (or file): kills the host
-- processes and removes the paths get() returns, e.g.
-- host.stop_after_each(function() return proc, dir end) (procs: a list).
function M.stop_after_each(get) stop_after_each(getfenv(2), get) end

-- A fresh script directory of `files` for each test of the calling
-- describe block, and at most one host process in it: box.dir, box.proc
-- (set it when spawning); both go after each test. prepare(), when given,
-- runs before each test first.
function M.dir_per_test(files, prepare)
  local env = getfenv(2) -- busted's hooks live in the calling spec's environment
  local box = {}
  env.before_each(function()
    if prepare then prepare() end
    box.dir = M.scriptdir(files)
  end)
  stop_after_each(env, function() return box.proc, box.dir end)
  return box
end

-- How many times pattern occurs in text (a log's lines of one kind).
function M.count(text, pattern)
  local n = 0
  for _ in text:gmatch(pattern) do n = n + 1 end
  return n
end

-- Waits until fn() is truthy (polling), up to timeout seconds.
-- explain (optional): a function whose text the error adds (logs, state).
function M.eventually(fn, timeout, what, explain)
  local deadline = core.now() + (timeout or 10)
  while core.now() < deadline do
    local v = fn()
    if v then return v end
    core.sleep(0.02)
  end
  error("timed out waiting for " .. (what or "condition") .. (explain and (":\n" .. explain()) or ""), 2)
end

return M
