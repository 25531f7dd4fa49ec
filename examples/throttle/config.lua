-- examples/throttle: hipq's throttle, 100 slots shared 40/30/30 by region
-- (see README.md). Calls wait in luakiq.sleep, so each thread has many in
-- flight: 2 threads serve 100 calls at once.
return {
  threads_per_node = 2,
  poll_interval = 0.5,
}
