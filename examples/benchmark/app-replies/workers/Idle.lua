-- Never has a job (app-replies/config.lua).
return { shards_count = 1, perform = function() end }
