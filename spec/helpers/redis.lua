-- A private redis-server for a spec file: a free loopback port, a temp dir,
-- stopped by its pid. Never 6379 or any fixed port.
local core = require "luakiq.core"

local M = {}

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == 0 or ok == true
end

local function command(port, dir, appendonly, extra, env)
  return string.format(
    (env and env .. " " or "") .. "redis-server --port %d --bind 127.0.0.1 --dir %s --daemonize yes --pidfile %s/redis.pid " ..
    "--logfile %s/redis.log --save '' --appendonly %s%s >/dev/null 2>&1",
    port, dir, dir, dir, appendonly and "yes" or "no", extra or "")
end

-- Waits until the server on srv.url answers; sets srv.conn and srv.pid.
-- False when it does not, or when the one that answers is not the one
-- started in srv.dir: a free port can be taken by another spec file's
-- server between core.free_port and the bind (ctest runs two at once), and
-- a daemonized redis-server that cannot bind exits after its parent said
-- yes. (Its pid file is written before it serves anyone: no pid file, or
-- another pid in INFO, is someone else's server.)
local function await(srv)
  for _ = 1, 250 do
    local c = core.connect(srv.url, 2, "node") -- (a cluster node: this one)
    if c and c:pcall("PING") == "PONG" then
      local f = io.open(srv.dir .. "/redis.pid")
      local pid = f and tonumber(f:read("*l"))
      if f then f:close() end
      local info = c:pcall("INFO", "server")
      if not pid or type(info) ~= "string" or tonumber(info:match("process_id:(%d+)")) ~= pid then
        c:close()
        return false
      end
      srv.conn, srv.pid = c, pid
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
-- opts.env: variables for the server's environment ("LC_ALL=... LOCPATH=...").
-- With LUAKIQ_TEST_CLUSTER=1 in the environment (ctest's `cluster` label)
-- a plain start (no opts) makes a 3-master cluster with a replica each
-- instead, which looks like one server to the spec (M.cluster_server).
function M.start(opts)
  if not opts and M.on_cluster() then return M.cluster_server() end
  opts = opts or {}
  local dir = os.tmpname()
  os.remove(dir)
  assert(sh("mkdir -p " .. dir))
  for _ = 1, 20 do
    local port = core.free_port()
    -- a cluster node's bus port is port + 10000 unless told: a free one
    local extra = opts.extra and (opts.extra .. (opts.cluster_port and (" --cluster-port " .. core.free_port()) or ""))
    if sh(command(port, dir, opts.appendonly, extra, opts.env)) then
      local srv = setmetatable({ port = port, dir = dir, url = "redis://127.0.0.1:" .. port .. "/0",
                                 appendonly = opts.appendonly, extra = extra, env = opts.env }, { __index = M })
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

-- A Redis Cluster of `masters` masters with `replicas` replicas each, on
-- free loopback ports (one dir and redis-server per node), made as
-- `redis-cli --cluster create` makes one; returns {url=, seeds=, nodes=
-- {srv...}, conn=} (conn: a luakiq connection that routes by slot). Stop
-- with :stop(); :flush() flushes every master. node_timeout: ms
-- (cluster-node-timeout, default 1000: a failover within a few seconds).
function M.cluster(opts)
  opts = opts or {}
  local masters, replicas = opts.masters or 3, opts.replicas or 1
  local cl = setmetatable({ nodes = {} }, { __index = M.Cluster })
  local extra = " --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout " ..
    (opts.node_timeout or 1000) .. " --cluster-require-full-coverage no --shutdown-on-sigterm now --repl-diskless-sync-delay 0"
  for i = 1, masters * (1 + replicas) do cl.nodes[i] = M.start { extra = extra, cluster_port = true } end
  local addrs = {}
  for i, n in ipairs(cl.nodes) do addrs[i] = "127.0.0.1:" .. n.port end
  local log = cl.nodes[1].dir .. "/create.log"
  if not sh("redis-cli --cluster create " .. table.concat(addrs, " ") .. " --cluster-replicas " .. replicas ..
      " --cluster-yes >" .. log .. " 2>&1") then
    local f = io.open(log)
    local text = f and f:read("*a") or ""
    if f then f:close() end
    cl:stop()
    error("redis-cli --cluster create failed: " .. text)
  end
  cl.url = "redis://" .. addrs[1] .. "/0"
  cl.seeds = "redis://" .. table.concat(addrs, ",", 1, math.min(3, #addrs))
  cl:await_ok()
  return cl
end

M.Cluster = {}

-- What a node believes owns the slots: "id:slots" of every node with slots,
-- sorted (redis-cli --cluster check refuses to work while two nodes differ:
-- "Nodes don't agree about configuration").
local function slot_signature(conn)
  local text = conn:pcall("CLUSTER", "NODES")
  if type(text) ~= "string" then return nil end
  local out = {}
  for line in text:gmatch("[^\n]+") do
    local f = {}
    for w in line:gmatch("%S+") do f[#f + 1] = w end
    if #f > 8 then out[#out + 1] = f[1] .. ":" .. table.concat(f, ",", 9) end
  end
  table.sort(out)
  return table.concat(out, " ")
end

-- Waits until every running node says cluster_state:ok, agrees on who owns
-- which slots and every replica is in sync; (re)opens cl.conn.
function M.Cluster:await_ok(timeout)
  local deadline = core.now() + (timeout or 30)
  while core.now() < deadline do
    local ok, sig = true, nil
    for _, n in ipairs(self.nodes) do
      if n.conn then
        local info = n.conn:pcall("CLUSTER", "INFO")
        if not (type(info) == "string" and info:find("cluster_state:ok", 1, true)) then ok = false end
        local s = slot_signature(n.conn)
        if not s or (sig and s ~= sig) then ok = false end
        sig = sig or s
        -- and every replica in sync with its master
        local repl = n.conn:pcall("INFO", "replication")
        if type(repl) ~= "string" or (repl:find("role:slave", 1, true) and not repl:find("master_link_status:up", 1, true)) then
          ok = false
        end
      end
    end
    if ok then
      if self.conn then self.conn:close() end
      self.conn = assert(core.connect(self.url, 5))
      return
    end
    core.sleep(0.1)
  end
  error("the cluster did not become ok")
end

-- The nodes that are masters now (ROLE), in node order.
function M.Cluster:masters()
  local out = {}
  for _, n in ipairs(self.nodes) do
    local role = n.conn and n.conn:pcall("ROLE")
    if type(role) == "table" and role[1] == "master" then out[#out + 1] = n end
  end
  return out
end

-- The node serving key's slot now.
function M.Cluster:node_of(key)
  local slot = core.key_slot(key)
  for _, n in ipairs(self:masters()) do
    for _, r in ipairs(n.conn:call("CLUSTER", "SLOTS")) do
      if slot >= r[1] and slot <= r[2] then
        for _, m in ipairs(self.nodes) do
          if m.port == tonumber(r[3][2]) then return m end
        end
      end
    end
  end
end

function M.Cluster:flush()
  for _, n in ipairs(self:masters()) do n.conn:call("FLUSHALL") end
end

-- Stops every node at once (each takes a second or two to go: one by one
-- the cluster's stop would take ten).
function M.Cluster:stop()
  if self.conn then self.conn:close() self.conn = nil end
  for _, n in ipairs(self.nodes) do
    if n.pid then sh("kill " .. n.pid .. " 2>/dev/null") end
  end
  for _, n in ipairs(self.nodes) do pcall(M.stop, n) end
end

-- True when this spec run stands a cluster in for its server (the
-- `cluster` label): a test that needs one server's own view (its client
-- list, its password) is defined with (redis.on_cluster() and pending or it).
function M.on_cluster() return os.getenv("LUAKIQ_TEST_CLUSTER") == "1" end

-- Commands a spec sends to "the server" that name no key: on a cluster they
-- go to every master, and the replies that are lists are joined.
local FAN_OUT = { KEYS = true, FLUSHALL = true, FLUSHDB = true, CONFIG = true, SLOWLOG = true, DBSIZE = true }
-- Commands of many keys whose reply is a count.
local PER_KEY = { DEL = true, UNLINK = true, EXISTS = true, TOUCH = true }

-- A cluster that stands in for one server in the queue and host specs: url,
-- port (the first node's), conn (routes by slot; FAN_OUT commands go to
-- every master), flush and stop. No pid: the fault specs (which stop and
-- restart their server) are not run on a cluster.
function M.cluster_server()
  local cl = M.cluster()
  local routed = cl.conn
  local conn = {}
  local function fan(method, name, ...)
    local out, joined = nil, false
    for _, n in ipairs(cl:masters()) do
      local r, e = n.conn[method](n.conn, name, ...)
      if r == nil and method == "pcall" then return nil, e end
      if type(r) == "table" then
        out = out or {}
        joined = true
        for _, x in ipairs(r) do out[#out + 1] = x end
      elseif type(r) == "number" then
        out = (out or 0) + r
      elseif not joined then
        out = r
      end
    end
    return out
  end
  for _, m in ipairs { "call", "pcall" } do
    conn[m] = function(_, name, ...)
      if FAN_OUT[tostring(name):upper()] then return fan(m, name, ...) end
      if PER_KEY[tostring(name):upper()] and select("#", ...) > 1 then
        -- keys of many slots: one call per key, the counts summed
        local sum = 0
        for i = 1, select("#", ...) do sum = sum + routed[m](routed, name, (select(i, ...))) end
        return sum
      end
      return routed[m](routed, name, ...)
    end
  end
  for _, m in ipairs { "pipeline", "ppipeline", "script", "reconnect", "broken", "cluster", "each", "send", "recv" } do
    conn[m] = function(_, ...) return routed[m](routed, ...) end
  end
  conn.close = function() end
  local srv = setmetatable({ cluster = cl, url = cl.url, port = cl.nodes[1].port, dir = cl.nodes[1].dir, conn = conn },
    { __index = M })
  function srv.flush() cl:flush() end
  function srv.stop() cl:stop() end
  return srv
end

-- The usual set-up of a spec file: one private server for the whole file,
-- started now, flushed before each test (and started again first if a test
-- left it down), stopped after the file. spec/run.lua stops it too if the run dies.
-- spec: the spec file's environment, where busted's hooks live (default:
-- the caller's; helpers.host's fixture passes its caller's).
function M.fixture(opts, spec)
  spec = spec or getfenv(2)
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
    if sh(command(self.port, self.dir, self.appendonly, self.extra, self.env)) and await(self) then return end
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
