-- wrk script: requests at an offered rate instead of as fast as the server answers.
-- Each connection waits a random time before each request (exponential, so the arrivals
-- of all connections together are close to a Poisson process at the rate asked), then
-- sends it; wrk times a request from its write, so the wait is never counted. With the
-- rate well below what the server can answer, few requests are ever outstanding at once
-- and a request's latency is the server's own time plus what queueing that rate causes:
-- the p99 a user sees at that load, where a closed loop measures only saturation.
-- Usage: wrk ... -s bench/size/paced.lua URL -- <mean wait per connection, ms> [<paths file>]
-- Without a paths file every request is URL's own path; with one, a random line of it per
-- request (as paths.lua).

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
-- paths.lua's setup, its reading of a paths file and its random request (and through it
-- report.lua's result line).
dofile(here .. "paths.lua")
local read_paths, random_request = init, request

local mean_ms = 0
local random_paths = false

function init(args)
  mean_ms = assert(tonumber(args[1]), "paced.lua: the first argument is the mean wait in ms")
  assert(mean_ms > 0, "paced.lua: the mean wait must be positive")
  if args[2] then
    read_paths({ args[2] })  -- also seeds this thread's random numbers
    random_paths = true
  else
    math.randomseed(os.time() * 1000 + (thread_index or 0))
  end
end

function delay()
  -- 1 - random() is in (0, 1], so the logarithm is finite.
  return math.floor(-math.log(1 - math.random()) * mean_ms + 0.5)
end

function request()
  if random_paths then
    return random_request()
  end
  return wrk.format()
end
