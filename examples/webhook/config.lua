-- examples/webhook: jobs delivered to an HTTP receiver (see README.md).
return {
  threads_per_node = 2,
  poll_interval = 0.5,
}
