-- examples/callback: jobs that wait for a reply (see README.md). The reply
-- URLs luakiq.await returns are public_url (here LUAKIQ_PUBLIC_URL, set by
-- run.sh to the --replies listener) + /api/v1/replies/TOKEN.
return {
  threads_per_node = 2,
  poll_interval = 0.5,
}
