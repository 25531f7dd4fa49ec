-- luakiq.lib.retry: the default retry_in (Lowkiq's formula; docs/configuration.md, retry_in).
local M = {}

-- default(count) -> seconds until the next try of a job that has now failed
-- count + 1 times (count = its new retry_count: 0 after the first failure):
-- count^4 + 15 + random(0..29) * (count + 1). count 0 gives 15..44 s.
function M.default(count)
  return count ^ 4 + 15 + math.random(0, 29) * (count + 1)
end

return M
