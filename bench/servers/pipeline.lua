-- SPDX-License-Identifier: MIT
-- wrk script: send N requests per write (HTTP/1.1 pipelining), default 16.
--   wrk -t1 -c256 -d3s -s bench/servers/pipeline.lua http://127.0.0.1:PORT/plaintext -- 16
-- wrk counts every response in Requests/sec; it records one latency per batch.
init = function(args)
   local depth = tonumber(args[1]) or 16
   local r = {}
   for i = 1, depth do
      r[i] = wrk.format(nil)
   end
   req = table.concat(r)
end

request = function()
   return req
end
