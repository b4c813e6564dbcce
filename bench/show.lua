-- wrk script: GET /api/v1/orgs/<org>/stacks/<id> with a uniformly random id per request,
-- among the ids bench/seed.py creates (stack-00000 .. stack-<N-1>).
-- Usage: wrk ... -s bench/show.lua http://HOST:PORT -- <N> [org]
-- The bearer token comes from wrk's -H "Authorization: Bearer ..." option.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "report.lua")

local count, base
local threads_made = 0

function setup(thread)  -- runs in the main Lua state, once per wrk thread
  threads_made = threads_made + 1
  thread:set("thread_index", threads_made)  -- a global in that thread's own state
end

function init(args)
  count = tonumber(args[1] or "10000")
  base = "/api/v1/orgs/" .. (args[2] or "default") .. "/stacks/"
  -- Each wrk thread has its own Lua state; seed each one differently.
  math.randomseed(os.time() * 1000 + (thread_index or 0))
end

function request()
  return wrk.format("GET", base .. string.format("stack-%05d", math.random(0, count - 1)))
end
