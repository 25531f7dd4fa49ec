-- error_group (scripts/redis/lib/groups.lua): the one rule that says which
-- failures are the same error. It runs inside Redis (failures.lua); here the
-- same file is loaded in LuaJIT, whose string library is Lua 5.1's.
local host = require "helpers.host"

local group = assert(loadstring(host.read("scripts/redis/lib/groups.lua") .. "\nreturn error_group",
  "@scripts/redis/lib/groups.lua"))()

describe("error_group", function()
  it("masks numbers, decimals and exponents, keeps short digits after a letter", function()
    assert.are.equal("timeout after <n> s (order <n>)", group("timeout after 3.25 s (order 123)"))
    assert.are.equal("took <n> ms, limit <n>", group("took 1e-3 ms, limit 1.5E+10"))
    assert.are.equal("workers/Orders.lua:<n>: boom", group("workers/Orders.lua:17: boom"))
    assert.are.equal("utf8 t0 Orders2 md5 ORD<n> sha<n>", group("utf8 t0 Orders2 md5 ORD12345 sha256"))
    assert.are.equal("retry -<n>", group("retry -7"))
  end)

  it("masks UUIDs, hex literals and hashes", function()
    assert.are.equal("user <uuid> gone", group("user 550e8400-e29b-41d4-A716-446655440000 gone"))
    assert.are.equal("flags <hex> at <hex>", group("flags 0x1F at 0XdeadBEEF"))
    assert.are.equal("commit <hex> id=<hex>", group("commit 9f86d081884c7d659a2feaa0c55ad015 id=5f3a9c2e1b"))
    -- a word of hex letters only is a word ("deadbeef", "accede")
    assert.are.equal("deadbeef accede", group("deadbeef accede"))
  end)

  it("masks IPv4 and IPv6 addresses, with their ports", function()
    assert.are.equal("talking to <ip> (order <n>)", group("talking to 10.0.0.7:5432 (order 1)"))
    assert.are.equal("from <ip>", group("from 192.168.1.20"))
    assert.are.equal("to <ip> and <ip>", group("to [::1]:8080 and [2001:db8::7]"))
    assert.are.equal("via <ip> or <ip>", group("via fe80::1 or 2001:db8:0:0:0:0:0:1"))
    assert.are.equal("a:b c:d", group("a:b c:d")) -- one colon: not an address
  end)

  it("masks the job's own id (the hash field the error is stored under): one group whatever the id", function()
    assert.are.equal("boom <n> for id <id>", group("boom 1 for id X1", "X1"))
    assert.are.equal(group("boom 1 for id X1", "X1"), group("boom 1 for id X2", "X2"))
    assert.are.equal("order <id>: refused (<id>.)", group("order ord-7a: refused (ord-7a.)", "ord-7a"))
    -- only as a word of its own; an id of digits is a number; no id: as before
    assert.are.equal("<id> X1", group("X1b X1", "X1b"))
    assert.are.equal("job <n> failed", group("job 42 failed", "42"))
    assert.are.equal("for id X1", group("for id X1"))
    assert.are.equal("for id X1", group("for id X1", ""))
  end)

  it("keeps the first line, collapses white space, caps the length", function()
    assert.are.equal("bad thing <n>", group("  bad \t thing   42  \nstack traceback:\n\t[C]: in ?"))
    assert.are.equal("x", group("x\r\nmore"))
    assert.are.equal(200, #group(("a"):rep(5000)))
    local cut = group(("é"):rep(500))
    assert.is_true(#cut <= 200 and #cut % 2 == 0, cut) -- whole characters only
    assert.are.equal("", group(""))
  end)

  it("keeps quoted text: it names code, not data", function()
    assert.are.equal("attempt to index field 'x' (a nil value)", group("attempt to index field 'x' (a nil value)"))
  end)

  it("groups errors that differ only in data, and no others", function()
    local a = {
      "timeout after 3.2 s talking to 10.0.0.7:5432 (order 123)",
      "timeout after 12 s talking to 10.0.0.9:5433 (order 9)",
      "timeout after 0.5 s talking to [fe80::2]:5432 (order 77)",
    }
    for _, e in ipairs(a) do assert.are.equal(group(a[1]), group(e), e) end
    local b = { "order 77 not found", "order 123456 not found", "order 550e8400-e29b-41d4-a716-446655440000 not found" }
    assert.are.equal(group(b[1]), group(b[2]))
    assert.are.equal("order <uuid> not found", group(b[3]))
    assert.are_not.equal(group(a[1]), group(b[1]))
    assert.are_not.equal(group("connection refused"), group("connection reset"))
    assert.are_not.equal(group("field 'a' is nil"), group("field 'b' is nil"))
  end)
end)
