-- wrk has no rate option: each connection waits `delay` ms between requests, so rate = connections * 1000 / delay.
-- bench/serve.sh runs 10 connections with 20 ms: 500 requests per second.
function delay()
  return tonumber(os.getenv("WRK_DELAY_MS") or "20")
end
