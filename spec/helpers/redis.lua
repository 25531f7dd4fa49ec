-- A private redis-server for a spec file: a free loopback port, a temp dir,
-- stopped by its pid. Never 6379 or any fixed port.
local core = require "luakiq.core"

local M = {}

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == 0 or ok == true
end

local function command(port, dir, appendonly)
  return string.format(
    "redis-server --port %d --bind 127.0.0.1 --dir %s --daemonize yes --pidfile %s/redis.pid " ..
    "--logfile %s/redis.log --save '' --appendonly %s >/dev/null 2>&1",
    port, dir, dir, dir, appendonly and "yes" or "no")
end

-- Waits until the server on srv.url answers; sets srv.conn and srv.pid.
local function await(srv)
  for _ = 1, 250 do
    local c = core.connect(srv.url, 2)
    if c and c:pcall("PING") == "PONG" then
      srv.conn = c
      local f = io.open(srv.dir .. "/redis.pid")
      srv.pid = f and tonumber(f:read("*l"))
      if f then f:close() end
      return true
    end
    if c then c:close() end
    core.sleep(0.02)
  end
  return false
end

-- Every server started by this spec file (spec/run.lua stops the ones a
-- failing test left running).
M.started = {}

function M.cleanup()
  for _, srv in ipairs(M.started) do
    if srv.pid then pcall(M.stop, srv) end
  end
  M.started = {}
end

-- Starts a server; returns {url=, port=, dir=, pid=, conn=}.
-- opts.appendonly: keep data across :restart() (AOF, fsync on clean shutdown).
function M.start(opts)
  opts = opts or {}
  local dir = os.tmpname()
  os.remove(dir)
  assert(sh("mkdir -p " .. dir))
  for _ = 1, 20 do
    local port = core.free_port()
    if sh(command(port, dir, opts.appendonly)) then
      local srv = setmetatable({ port = port, dir = dir, url = "redis://127.0.0.1:" .. port .. "/0",
                                 appendonly = opts.appendonly }, { __index = M })
      if await(srv) then
        M.started[#M.started + 1] = srv
        return srv
      end
      -- it started but never answered: end it before trying another port
      local f = io.open(dir .. "/redis.pid")
      local pid = f and tonumber(f:read("*l"))
      if f then f:close() end
      if pid then sh("kill " .. pid .. " 2>/dev/null") end
    end
  end
  error("cannot start redis-server")
end

-- Starts a Sentinel (redis-server --sentinel) on a free port, watching the
-- master `name` at 127.0.0.1:master_port (quorum 2, down after 1 s); returns
-- {port=, dir=, pid=, conn=} like start (stop with :stop()).
function M.sentinel(master_port, name)
  local dir = os.tmpname()
  os.remove(dir)
  assert(sh("mkdir -p " .. dir))
  for _ = 1, 20 do
    local port = core.free_port()
    local f = assert(io.open(dir .. "/sentinel.conf", "w"))
    f:write(("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\n" ..
      "sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n"):format(
      port, dir, name, master_port, name, name))
    f:close()
    if sh(("redis-server %s/sentinel.conf --sentinel --daemonize yes --pidfile %s/redis.pid " ..
        "--logfile %s/redis.log >/dev/null 2>&1"):format(dir, dir, dir)) then
      local srv = setmetatable({ port = port, dir = dir, url = "redis://127.0.0.1:" .. port .. "/0" }, { __index = M })
      if await(srv) then
        M.started[#M.started + 1] = srv
        return srv
      end
    end
  end
  error("cannot start a sentinel")
end

-- The usual set-up of a spec file: one private server for the whole file,
-- started now, flushed before each test (and started again first if a test
-- left it down), stopped after the file. spec/run.lua stops it too if the run dies.
function M.fixture(opts)
  local spec = getfenv(2) -- busted's hooks live in the spec file's environment
  local srv = M.start(opts)
  spec.before_each(function()
    if not srv.conn then srv:up() end
    srv:flush()
  end)
  spec.teardown(function() srv:stop() end)
  return srv
end

-- The list at key, each entry decoded from JSON (what specs' workers record).
function M:json_list(key)
  local json = require "luakiq.json"
  local list = {}
  for i, e in ipairs(self.conn:call("LRANGE", key, 0, -1)) do list[i] = json.decode(e) end
  return list
end

function M:flush()
  self.conn:call("FLUSHALL")
end

-- Stops the server process (TERM: a clean shutdown, the AOF is flushed) and
-- waits until it is gone. The directory stays, so :up() can start it again.
function M:down()
  if self.conn then self.conn:close() self.conn = nil end
  if self.pid then
    sh("kill " .. self.pid .. " 2>/dev/null")
    for _ = 1, 500 do
      if not sh("kill -0 " .. self.pid .. " 2>/dev/null") then break end
      core.sleep(0.02)
    end
    self.pid = nil
  end
end

-- Starts the server again on the same port and directory (data survives
-- only with appendonly).
function M:up()
  for _ = 1, 50 do
    if sh(command(self.port, self.dir, self.appendonly)) and await(self) then return end
    core.sleep(0.1)
  end
  error("cannot restart redis-server on port " .. self.port)
end

-- Stops the server by its pid and removes its dir.
function M:stop()
  self:down()
  sh("rm -rf " .. self.dir)
end

-- Restarts on the same port (for fault tests): data is lost unless appendonly.
-- down_for: seconds to stay down in between (default 0).
function M:restart(down_for)
  self:down()
  if down_for and down_for > 0 then core.sleep(down_for) end
  self:up()
end

return M
