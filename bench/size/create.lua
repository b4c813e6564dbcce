-- wrk script: POST /api/v1/orgs/<org>/stacks, a new stack per request with an id no
-- other request uses (`load-<tag><thread>-<n>`), so every create is a real insert; a
-- second wrk on another replica passes a tag of its own.
-- Usage: wrk ... -s bench/size/create.lua http://HOST:PORT -- [org] [tag]
-- The bearer token comes from wrk's -H "Authorization: Bearer ..." option.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "../report.lua")

local path
local tag = ""
local made = 0
local threads_made = 0

function setup(thread)
  threads_made = threads_made + 1
  thread:set("thread_index", threads_made)
end

function init(args)
  path = "/api/v1/orgs/" .. (args[1] or "default") .. "/stacks"
  tag = args[2] or ""
  -- wrk.format uses wrk.headers (the -H options) when given no headers of its own.
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  made = made + 1
  local body = string.format(
    '{"id":"load-%s%d-%07d","repository":"github:acme/infra","path":"envs/dev/load-%d"}',
    tag, thread_index or 0, made, made % 50)
  return wrk.format("POST", path, nil, body)
end
