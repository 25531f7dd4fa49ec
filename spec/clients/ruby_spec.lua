-- clients/ruby: the gem built (gem build) and installed (gem install, its
-- dependency redis-rb being Debian's ruby-redis), then its test suite
-- (clients/ruby/test: the contract's vectors, the API; minitest) against real
-- redis-servers with the installed gem's files, and its README's example as
-- written.
local host = require "helpers.host"
local producers = require "helpers.producers"
local q = host.quote

describe("clients/ruby", function()
  local servers, dir, lib
  setup(function()
    servers = producers.servers()
    dir = host.tmpdir()
    lib = dir .. "/gems/gems/luakiq-0.1.0/lib"
  end)
  teardown(function() host.sh("rm -rf " .. q(dir)) end)

  it("builds with gem build and installs with gem install", function()
    local rc, out, err = host.sh_out("cd clients/ruby && gem build luakiq.gemspec -o " .. q(dir .. "/luakiq.gem") ..
      " && gem install --local --no-document --ignore-dependencies --install-dir " .. q(dir .. "/gems") .. " " ..
      q(dir .. "/luakiq.gem") .. " && ls " .. q(lib .. "/luakiq/scripts"))
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("Successfully installed luakiq-0.1.0", 1, true), out)
    assert.truthy(out:find("manifest.json\npush.lua", 1, true), out)
  end)

  it("passes its test suite against a plain Redis, a unix socket, a password, an ACL user and a Redis Cluster", function()
    for _, t in ipairs { "test_contract.rb", "test_client.rb" } do
      local rc, out, err = host.sh_out(servers.env .. " ruby -I" .. q(lib) .. " clients/ruby/test/" .. t .. " -v 2>&1")
      assert.are.equal(0, rc, out .. err)
      assert.truthy(out:find(" 0 failures, 0 errors, 0 skips", 1, true), out)
    end
  end)

  it("runs its README's example as written", function()
    host.write(dir .. "/example.rb", producers.example("clients/ruby/README.md", "ruby", "# luakiq for Ruby"))
    servers.plain.conn:call("FLUSHALL")
    local rc, out, err = host.sh_out("REDIS_URL=" .. q(servers.plain.url) .. " ruby -I" .. q(lib) .. " " .. q(dir .. "/example.rb"))
    assert.are.equal(0, rc, out .. err)
    assert.are.equal("2 queued\n2\n", out)
  end)
end)
