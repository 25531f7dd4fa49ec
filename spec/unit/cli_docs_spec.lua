-- docs/cli.md against the binary (issue 38, item 15): every command that
-- `luakiq --help` names is in the page's synopsis with the options its own
-- `--help` takes, and has a section; the job fields `luakiq enqueue` takes
-- are the ones its help texts and the page name. No Redis: enqueue refuses
-- a bad field before it connects.
local host = require "helpers.host"

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("*a")
  f:close()
  return s
end

local page = read("docs/cli.md")
local synopsis = assert(page:match("\n```\n(luakiq run .-)\n```\n"), "no synopsis block in docs/cli.md")

-- `luakiq CMD --help`'s usage lines (the first line and its continuations)
local function usage_of(cmd)
  local rc, out = host.exec(cmd .. " --help")
  assert.are.equal(0, rc, cmd .. " --help")
  local lines = {}
  for line in out:gmatch("[^\n]+") do
    if #lines > 0 and not line:match("^%s") then break end
    lines[#lines + 1] = line
  end
  return table.concat(lines, "\n")
end

describe("docs/cli.md", function()
  local rc, overview = host.exec("--help")
  local commands, seen = {}, {}
  for cmd in (overview:gsub(" / (%l+) DIR", "\n  %1 DIR")):gmatch("\n  (%l+) ") do -- ("pause DIR WORKER / resume DIR WORKER")
    if not seen[cmd] then seen[cmd] = true commands[#commands + 1] = cmd end
  end

  it("has every command of luakiq --help in its synopsis, with the options of its --help, and a section", function()
    assert.are.equal(0, rc)
    assert.is_true(#commands >= 19 and seen.resume and seen.hosts, overview)
    for _, cmd in ipairs(commands) do
      local lines = {}
      for line in synopsis:gmatch("[^\n]+") do
        if line:find("luakiq " .. cmd .. " ", 1, true) then lines[#lines + 1] = line end
      end
      assert.is_true(#lines > 0, "luakiq " .. cmd .. " is not in the synopsis")
      local mine = table.concat(lines, "\n")
      if cmd ~= "lua" then -- (lua passes --help on to the file)
        for opt in usage_of(cmd):gmatch("%-%-[%l-]+") do
          assert.truthy(mine:find(opt, 1, true), ("%s of luakiq %s --help is not in the synopsis"):format(opt, cmd))
        end
      end
      assert.truthy(page:find("\n## " .. cmd .. "\n", 1, true) or page:find("\n## [%l, ]*" .. cmd .. "[%l, ]*\n"),
        "no section for " .. cmd)
    end
  end)

  it("names every job field luakiq enqueue takes, as its help texts do", function()
    local dir = host.scriptdir { ["workers/W.lua"] = "return { perform = function() end }" }
    local erc, _, err = host.exec("enqueue " .. host.quote(dir) .. " W", '{"id":"1","nope":1}')
    host.sh("rm -rf " .. host.quote(dir))
    assert.are.equal(2, erc, err)
    local allowed = assert(err:match("%(allowed: ([%l_, ]+)%)"), err)
    local enqueue_help = select(2, host.exec("enqueue --help"))
    local section = assert(page:match("\n## enqueue\n(.-)\n## "))
    local n = 0
    for field in allowed:gmatch("[%l_]+") do
      n = n + 1
      assert.truthy(overview:find("[{ ]" .. field .. "%??[,}]"), field .. " is not in luakiq --help")
      assert.truthy(enqueue_help:find('"' .. field .. '"', 1, true), field .. " is not in luakiq enqueue --help")
      assert.truthy(section:find("| `" .. field .. "` |", 1, true), field .. " is not in docs/cli.md, enqueue")
    end
    assert.is_true(n >= 10, allowed)
  end)
end)
