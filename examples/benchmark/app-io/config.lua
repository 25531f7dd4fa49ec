-- The I/O-bound shape of the benchmark (bench.lua --io): one HTTP request per
-- payload to a local server that answers after 100 ms. bench.lua starts
-- `luakiq run` on this directory with the shape in environment variables.
local env = os.getenv
return {
  namespace = "benchio",
  threads_per_node = tonumber(env("BENCH_THREADS") or "5"),
}
