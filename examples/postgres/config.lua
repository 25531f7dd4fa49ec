-- examples/postgres: order snapshots written into PostgreSQL (see README.md).
return {
  threads_per_node = 5,
  poll_interval = 0.5,
}
