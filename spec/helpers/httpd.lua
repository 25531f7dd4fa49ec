-- A real HTTP(S) server for specs and benchmarks (spec/helpers/httpd.py,
-- python3's http.server): started on a free port the kernel picks, stopped
-- by its pid (spec/run.lua stops one a failing test left running).
--   local srv = httpd.start { tls = true, delay_ms = 100 }
--   srv.url -> "http://127.0.0.1:PORT" (https:// with tls), srv:stop()
-- With tls the server presents a self-signed certificate made for the run
-- (openssl), which luakiq.http must refuse unless insecure = true.
local host = require "helpers.host"
local q = host.quote

local M = {}
local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "spec/helpers"

local function selfsigned(dir)
  local cert, key = dir .. "/cert.pem", dir .. "/key.pem"
  assert(host.sh(("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 " ..
    "-addext subjectAltName=IP:127.0.0.1 -keyout %s -out %s >/dev/null 2>&1"):format(q(key), q(cert))),
    "openssl could not make a certificate")
  return cert, key
end

function M.start(opts)
  opts = opts or {}
  local dir = host.tmpdir()
  local portfile = dir .. "/port"
  local args = { "python3", q(HERE .. "/httpd.py"), q(portfile) }
  if opts.tls then
    local cert, key = selfsigned(dir)
    args[#args + 1] = "--tls " .. q(cert) .. " " .. q(key)
  end
  if opts.delay_ms then args[#args + 1] = "--delay-ms " .. math.floor(opts.delay_ms) end
  local proc = host.spawn_cmd(table.concat(args, " "))
  local port = host.eventually(function()
    if not proc:alive() then error("httpd exited: " .. proc:log(), 0) end
    return tonumber(host.read(portfile))
  end, 10, "httpd port")
  local srv = { proc = proc, port = port, dir = dir,
                url = (opts.tls and "https" or "http") .. "://127.0.0.1:" .. port }
  function srv.stop()
    proc:kill()
    host.sh("rm -rf " .. q(dir))
  end
  return srv
end

return M
