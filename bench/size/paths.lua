-- wrk script: GET a uniformly random path per request, among the lines of a file (one
-- request path per line, e.g. /api/v1/orgs/default/runs/run-…), as bench/size.sh writes
-- them from the seeder's sample of ids.
-- Usage: wrk ... -s bench/size/paths.lua http://HOST:PORT -- <paths file>
-- Headers (the bearer token, the console's session cookie) come from wrk's -H options.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "../report.lua")

local paths = {}
local threads_made = 0

function setup(thread)  -- runs in the main Lua state, once per wrk thread
  threads_made = threads_made + 1
  thread:set("thread_index", threads_made)  -- a global in that thread's own state
end

function init(args)
  local file = assert(io.open(args[1], "r"), "cannot open " .. tostring(args[1]))
  for line in file:lines() do
    if line ~= "" then
      paths[#paths + 1] = line
    end
  end
  file:close()
  assert(#paths > 0, "no paths in " .. args[1])
  -- Each wrk thread has its own Lua state; seed each one differently.
  math.randomseed(os.time() * 1000 + (thread_index or 0))
end

function request()
  return wrk.format("GET", paths[math.random(1, #paths)])
end
