-- One Redis, several hosts (Lowkiq's by_node splitter). Start every node with
-- the same LUAKIQ_NODES and its own LUAKIQ_NODE (0-based):
--   LUAKIQ_NODES=2 LUAKIQ_NODE=0 luakiq run examples/by_node
--   LUAKIQ_NODES=2 LUAKIQ_NODE=1 luakiq run examples/by_node
-- Node k takes every LUAKIQ_NODES-th shard starting at k, then deals its part
-- over its own threads_per_node threads. Without the variables it is node 0 of 1
-- (all shards). A wrong number (e.g. LUAKIQ_NODE=2 of 2) stops start-up with a
-- one-line error; two nodes with the same number are fenced by the shard leases.
local luakiq = require "luakiq"

local nodes = os.getenv("LUAKIQ_NODES") or "1"
local node = os.getenv("LUAKIQ_NODE") or "0"

return {
  threads_per_node = 2,
  splitter = luakiq.splitters.by_node(nodes, node),
}
