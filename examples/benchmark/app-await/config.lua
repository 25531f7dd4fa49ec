-- The script directory of the benchmark's waits (await_shape.lua, `bench.lua
-- --await N`): jobs that wait for a reply. bench.lua starts `luakiq run` on
-- it with the shape in environment variables; the reply URLs luakiq.await
-- returns come from LUAKIQ_PUBLIC_URL (the host's --replies listener).
local env = os.getenv
return {
  namespace = "benchawait",
  threads_per_node = tonumber(env("BENCH_THREADS") or "5"),
  scheduler = "lag",
}
