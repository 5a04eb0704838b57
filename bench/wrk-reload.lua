-- bench/reload.py: the line of wrk-report.lua, plus what the bodies say.
-- The script (reload.py's sleep.php) answers "slept 50 ms (measured N ms)":
-- a 2xx whose measured sleep is under 49.5 ms was cut short (its child was
-- signalled: usleep returns early on a signal); a 2xx without that line is
-- a bad body (nginx sends 200 with a truncated body when the child dies
-- after its headers). Every request carries its own id (&id=wT-N), which
-- the script logs: the bench counts the requests PHP ran more than once.
-- Latencies are in microseconds.
local threads = {}
local next_tid = 1

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
  table.insert(threads, thread)
end

function init(args)
  short = 0
  bad_body = 0
  min_ms = -1
  n = 0
  sep = string.find(wrk.path, "?", 1, true) and "&" or "?"
end

function request()
  n = n + 1
  return wrk.format(nil, wrk.path .. sep .. "id=w" .. tid .. "-" .. n)
end

function response(status, headers, body)
  if status >= 200 and status < 300 then
    local ms = body and tonumber(body:match("measured ([%d%.]+) ms"))
    if ms == nil then
      bad_body = bad_body + 1
    else
      if ms < 49.5 then
        short = short + 1
      end
      if min_ms < 0 or ms < min_ms then
        min_ms = ms
      end
    end
  end
end

done = function(summary, latency, requests)
  local s, b, m = 0, 0, -1
  for _, t in ipairs(threads) do
    s = s + t:get("short")
    b = b + t:get("bad_body")
    local tm = t:get("min_ms")
    if tm >= 0 and (m < 0 or tm < m) then
      m = tm
    end
  end
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"connect_errors": %d, "read_errors": %d, "write_errors": %d, ' ..
    '"status_errors": %d, "timeouts": %d, ' ..
    '"p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d, "mean_us": %.1f, ' ..
    '"short_sleeps": %d, "bad_bodies": %d, "min_sleep_ms": %.3f}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean, s, b, m))
end
