-- Runs busted inside the host binary: `luakiq lua spec/run.lua SPEC...`
-- (ctest does this for every spec file). Specs exercise the real embedded runtime.
package.path = "spec/?.lua;" .. package.path
require "busted.runner" { standalone = false }
