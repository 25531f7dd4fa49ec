-- luakiq.lib.include: the one expander of "-- luakiq:include NAME" lines in the
-- Redis scripts (docs/redis.md, "Loading the scripts from another language").
-- Redis scripts cannot require each other, so a line "-- luakiq:include NAME"
-- (at the start of a line) stands for the text of scripts/redis/lib/NAME.lua.
--
-- Plain Lua, no luakiq.core: three callers share this file.
--   cmake/embed.lua               at build time (dofile), for the embedded scripts;
--   luakiq with LUAKIQ_SCRIPTS    development mode: M.define_tree expands the
--                                 tree's scripts into the host's script table;
--   tools/redis-scripts-test.sh   through `luajit scripts/luakiq/lib/include.lua FILE`.
local M = {}

-- Reads a whole file; nil, err when it cannot.
local function read(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local text = f:read("*a")
  f:close()
  return text
end

-- src with every include line replaced by the library's text, read from
-- lib_dir/NAME.lua. A library's own text is not expanded again. Raises
-- naming the missing library.
function M.expand(src, lib_dir)
  return (src:gsub("%-%- luakiq:include (%w+)\n", function(lib)
    return assert(read(lib_dir .. "/" .. lib .. ".lua"))
  end))
end

-- The expanded text of the Redis script at path (scripts/redis/x.lua; its
-- libraries in the lib/ folder beside it). Raises when a file is missing.
function M.expand_file(path)
  local src = assert(read(path))
  return M.expand(src, (path:match("^(.*)/[^/]*$") or ".") .. "/lib")
end

-- Development mode (LUAKIQ_SCRIPTS=DIR): hands every DIR/redis/NAME.lua,
-- expanded, to define(NAME, text) (core.script_define: the host's table of
-- Redis scripts). A script that cannot be expanded is left out, so the host
-- reports it unknown when it is used (as it does for any missing script).
function M.define_tree(dir, list_dir, define)
  for _, file in ipairs(list_dir(dir .. "/redis") or {}) do
    local name = file:match("^(.+)%.lua$")
    if name then
      local ok, text = pcall(M.expand_file, dir .. "/redis/" .. file)
      if ok then define(name, text) end
    end
  end
end

-- `luajit scripts/luakiq/lib/include.lua FILE` writes FILE expanded to stdout
-- (tools/redis-scripts-test.sh). Required as a module, `...` is its name.
if select("#", ...) == 1 and (...):match("%.lua$") then
  io.stdout:write(M.expand_file((...)))
end

return M
