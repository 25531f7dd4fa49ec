-- The benchmark's script directory. bench.lua starts `luakiq run` on it with
-- the shape in environment variables (the defaults are Lowkiq's benchmark).
local env = os.getenv
return {
  namespace = "bench",
  threads_per_node = tonumber(env("BENCH_THREADS") or "5"),
  scheduler = env("BENCH_SCHEDULER") or "lag",
}
