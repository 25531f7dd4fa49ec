-- A host that only takes replies (await_shape.lua): `luakiq run` of this
-- directory with --replies serves POST /api/v1/replies/TOKEN for the queues
-- of app-await's namespace (a token names its queue), while its one worker
-- thread serves a worker that never has a job. So the replies' intake is
-- measured apart from their handling (app-await's host, stopped meanwhile).
return { namespace = "benchawait", threads_per_node = 1 }
