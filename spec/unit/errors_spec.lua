-- luakiq.lib.errors.redis_code: the one reader of Redis errors, by their
-- code word (docs/redis.md, "Errors"), whatever Redis wrapped around a
-- script's error (Redis 7 appends the script's position, 6.2 puts it first).
local errors = require "luakiq.lib.errors"

describe("errors.redis_code", function()
  local SHA = "e263b6d05eb9f24dc561bbc59011dfcc886e40dc"
  it("reads a script's code word and details, as Redis >= 7 and 6.2 wrap them", function()
    assert.are.same({ "RESHARDED", "12 6" },
      { errors.redis_code("ERR RESHARDED 12 6 script: " .. SHA .. ", on @user_script:289.") })
    assert.are.same({ "RESHARDED", "12 6" },
      { errors.redis_code("ERR Error running script (call to f_" .. SHA .. "): @user_script:289: RESHARDED 12 6") })
    assert.are.same({ "BADARG", "luakiq push: job 2 perform_in must be a finite number, got 'nan'" },
      { errors.redis_code("ERR BADARG luakiq push: job 2 perform_in must be a finite number, got 'nan' script: " ..
        SHA .. ", on @user_script:69.") })
    -- what conn:call and conn:script raise
    assert.are.same({ "BYTEORDER", "luakiq: this Redis orders strings by a language" },
      { errors.redis_code("redis: ERR BYTEORDER luakiq: this Redis orders strings by a language script: " ..
        SHA .. ", on @user_script:17.") })
  end)

  it("reads Redis's own codes, and ERR of an error without one", function()
    assert.are.same({ "NOSCRIPT", "No matching script. Please use EVAL." },
      { errors.redis_code("NOSCRIPT No matching script. Please use EVAL.") })
    assert.are.same({ "OOM", "command not allowed when used memory > 'maxmemory'." },
      { errors.redis_code("OOM command not allowed when used memory > 'maxmemory'. script: " .. SHA ..
        ", on @user_script:400.") })
    assert.are.same({ "ERR", "min or max is not a float" },
      { errors.redis_code("ERR min or max is not a float script: " .. SHA .. ", on @user_script:9.") })
    -- a capital word after ERR outside a script's error is Redis's sentence
    assert.are.same({ "ERR", "EXEC without MULTI" }, { errors.redis_code("ERR EXEC without MULTI") })
    assert.are.same({ "LOADING", "" }, { errors.redis_code("LOADING") })
  end)

  it("says none for an error that has no code word (I/O), and never matches a sentence", function()
    assert.are.same({ nil, "redis: connection refused" }, { errors.redis_code("redis: connection refused") })
    assert.is_nil((errors.redis_code("luakiq push: resharded: queue has 3 shards")))
    assert.is_nil((errors.redis_code(nil)))
  end)

  it("gives the one line a person reads", function()
    assert.are.equal("BADARG luakiq fetch: token is empty",
      errors.redis_text("ERR BADARG luakiq fetch: token is empty script: " .. SHA .. ", on @user_script:27."))
    assert.are.equal("OOM command not allowed", errors.redis_text("OOM command not allowed"))
    assert.are.equal("redis: connection lost", errors.redis_text("redis: connection lost"))
  end)
end)
