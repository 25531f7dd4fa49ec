-- clients/node: installed with npm into a project of its own (copied, not
-- linked: what the package ships), then its test suite (clients/node/test: the
-- contract's vectors, the API; node --test) against real redis-servers, and
-- its README's example as written.
local host = require "helpers.host"
local producers = require "helpers.producers"
local q = host.quote

describe("clients/node", function()
  local servers, project
  setup(function()
    servers = producers.servers()
    project = host.tmpdir()
  end)
  teardown(function() host.sh("rm -rf " .. q(project)) end)

  it("installs with npm install", function()
    local cwd = host.capture("pwd"):gsub("\n$", "")
    local rc, out, err = host.sh_out("cd " .. q(project) .. " && npm init -y >/dev/null && npm install --install-links " ..
      "--prefer-offline --no-audit --no-fund --loglevel=error " .. q(cwd .. "/clients/node") ..
      " && ls node_modules/luakiq/scripts node_modules/ioredis/package.json")
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("manifest.json\npush.lua", 1, true), out)
  end)

  it("passes its test suite against a plain Redis, a unix socket, a password, an ACL user and a Redis Cluster", function()
    local rc, out, err = host.sh_out(servers.env .. " timeout 240 node --test --test-timeout=60000 clients/node/test/*.test.js 2>&1")
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("\n# fail 0\n", 1, true), out)
    assert.truthy(out:find("\n# skipped 0\n", 1, true), out)
  end)

  it("runs its README's example as written", function()
    host.write(project .. "/example.js", producers.example("clients/node/README.md", "js", "# luakiq for Node.js"))
    servers.plain.conn:call("FLUSHALL")
    local rc, out, err = host.sh_out("cd " .. q(project) .. " && REDIS_URL=" .. q(servers.plain.url) .. " node example.js")
    assert.are.equal(0, rc, out .. err)
    assert.are.equal("2 queued\n2\n", out)
  end)
end)
