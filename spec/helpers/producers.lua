-- Redis servers for the test suites of the clients in other languages
-- (spec/clients/*_spec.lua), each on free ports, and the environment that
-- names them to a suite: LUAKIQ_TEST_REDIS (a plain server), LUAKIQ_TEST_URLS
-- (one server by a unix socket, a password and an ACL user, each its own db),
-- LUAKIQ_TEST_CLUSTER (a 3-master Redis Cluster), LUAKIQ_BIN, LUAKIQ_CONTRACT.
local redis = require "helpers.redis"
local host = require "helpers.host"

local M = {}

-- Starts the servers; returns {plain, auth, cluster, env}. spec/run.lua
-- stops them all when the spec file ends.
function M.servers()
  local plain = redis.start({})
  local sock = host.tmpdir() .. "/redis.sock"
  local auth = redis.start({ extra = " --unixsocket " .. sock .. " --unixsocketperm 700" })
  -- (set after the start, which the helper checks without a password)
  auth.conn:call("ACL", "SETUSER", "app", "on", ">apppw", "~luakiq:*", "~myapp:*", "&*", "+@all")
  auth.conn:call("CONFIG", "SET", "requirepass", "s3cret")
  local urls = { "unix://" .. sock .. "?db=1&password=s3cret", "redis://:s3cret@127.0.0.1:" .. auth.port .. "/2",
                 "redis://app:apppw@127.0.0.1:" .. auth.port .. "/3" }
  local cluster = redis.cluster { replicas = 0 }
  local cwd = host.capture("pwd"):gsub("\n$", "")
  local env = table.concat({
    "LUAKIQ_TEST_REDIS=" .. host.quote(plain.url),
    "LUAKIQ_TEST_URLS=" .. host.quote(table.concat(urls, " ")),
    "LUAKIQ_TEST_CLUSTER=" .. host.quote(cluster.url),
    "LUAKIQ_BIN=" .. host.quote(host.bin:sub(1, 1) == "/" and host.bin or cwd .. "/" .. host.bin),
    "LUAKIQ_CONTRACT=" .. host.quote(cwd .. "/spec/contract"),
  }, " ")
  return { plain = plain, auth = auth, cluster = cluster, env = env, urls = urls }
end

-- The fenced code block of `lang` that follows the line `after` in a README
-- (the examples run as written).
function M.example(path, lang, after)
  local text = assert(host.read(path), path)
  local at = assert(text:find(after, 1, true), path .. ": no '" .. after .. "'")
  return assert(text:match("```" .. lang .. "\n(.-)```", at), path .. ": no " .. lang .. " block after '" .. after .. "'")
end

return M
