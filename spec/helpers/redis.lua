-- A private redis-server for a spec file: a free loopback port, a temp dir,
-- stopped by its pid. Never 6379 or any fixed port.
local core = require "luakiq.core"

local M = {}

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == 0 or ok == true
end

-- Starts a server; returns {url=, port=, dir=, pid=, conn=}.
function M.start(opts)
  opts = opts or {}
  local dir = os.tmpname()
  os.remove(dir)
  assert(sh("mkdir -p " .. dir))
  for _ = 1, 20 do
    local port = core.free_port()
    local cmd = string.format(
      "redis-server --port %d --bind 127.0.0.1 --dir %s --daemonize yes --pidfile %s/redis.pid " ..
      "--logfile %s/redis.log --save '' --appendonly %s >/dev/null 2>&1",
      port, dir, dir, dir, opts.appendonly and "yes" or "no")
    if sh(cmd) then
      local srv = { port = port, dir = dir, url = "redis://127.0.0.1:" .. port .. "/0" }
      for _ = 1, 200 do
        local c = core.connect(srv.url, 2)
        if c and c:pcall("PING") == "PONG" then
          srv.conn = c
          local f = io.open(dir .. "/redis.pid")
          srv.pid = f and tonumber(f:read("*l"))
          if f then f:close() end
          setmetatable(srv, { __index = M })
          return srv
        end
        core.sleep(0.02)
      end
    end
  end
  error("cannot start redis-server")
end

function M:flush()
  self.conn:call("FLUSHALL")
end

-- Stops the server by its pid and removes its dir.
function M:stop()
  if self.conn then self.conn:close() self.conn = nil end
  if self.pid then
    sh("kill " .. self.pid .. " 2>/dev/null")
    for _ = 1, 200 do
      if not sh("kill -0 " .. self.pid .. " 2>/dev/null") then break end
      core.sleep(0.02)
    end
    self.pid = nil
  end
  sh("rm -rf " .. self.dir)
end

-- Restarts on the same port (for fault tests): data is lost unless appendonly.
function M:restart()
  if self.conn then self.conn:close() self.conn = nil end
  sh("kill " .. self.pid)
  for _ = 1, 200 do
    if not sh("kill -0 " .. self.pid .. " 2>/dev/null") then break end
    core.sleep(0.02)
  end
  local cmd = string.format(
    "redis-server --port %d --bind 127.0.0.1 --dir %s --daemonize yes --pidfile %s/redis.pid " ..
    "--logfile %s/redis.log --save '' --appendonly no >/dev/null 2>&1", self.port, self.dir, self.dir, self.dir)
  assert(sh(cmd))
  for _ = 1, 200 do
    local c = core.connect(self.url, 2)
    if c and c:pcall("PING") == "PONG" then
      self.conn = c
      local f = io.open(self.dir .. "/redis.pid")
      self.pid = tonumber(f:read("*l"))
      f:close()
      return
    end
    core.sleep(0.02)
  end
  error("cannot restart redis-server")
end

return M
