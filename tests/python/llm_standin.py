#!/usr/bin/env python3
"""A stand-in for an LLM serving engine's Prometheus endpoint (no model, no GPU): the metric names and types each
engine documents (vLLM's Production Metrics, Text Generation Inference's reference/metrics, SGLang's production
metrics, llama.cpp's llama-server --metrics), with counters that rise at a known rate on the machine's monotonic clock,
so a test knows the truth at any instant.

    llm_standin.py --engine vllm --port 8123 --rate 400 [--running 8] [--ramp 2] [--restart-at 5]
                   [--lie huge|slow|malformed] [--seconds 10]

--rate output tokens per second (prompt tokens at a quarter of it, a request per 100 output tokens); --running the
requests running, half of it during the first --ramp seconds; --restart-at S: the counters start again from 0 at S
(an engine restarted); --lie: an endpoint that answers 5 MB, answers after 5 s, or answers garbage. Exits after
--seconds."""

import argparse
import http.server
import threading
import time

T0 = time.monotonic()
ARGS = None

# Series every engine's Python or Rust client exports beside its own: a scrape reads past them.
PROCESS = "".join(f"# TYPE python_gc_objects_collected_total counter\npython_gc_objects_collected_total"
                  f"{{generation=\"{g}\"}} {1000 + g}.0\n" for g in range(3)) + \
    "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n" \
    "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n"


def state():
    t = time.monotonic() - T0
    since = t
    if ARGS.restart_at is not None and t >= ARGS.restart_at:
        since = t - ARGS.restart_at
    out = ARGS.rate * since
    running = ARGS.running / 2 if t < ARGS.ramp else ARGS.running
    return out, out / 4, out / 100, running, since


def histogram(name, total, count, labels=""):
    sep = "," if labels else ""
    return (f"# TYPE {name} histogram\n"
            f"{name}_bucket{{{labels}{sep}le=\"1.0\"}} {count}\n{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}\n"
            f"{name}_sum{{{labels}}} {total}\n{name}_count{{{labels}}} {count}\n").replace("{}", "")


def vllm():
    out, prompt, req, running, since = state()
    m = 'model_name="tiny"'
    return (PROCESS + f"# HELP vllm:num_requests_running Number of requests currently running on GPU.\n"
            f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{m}}} {running}\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{m}}} 0.0\n"
            f"# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{{m}}} {prompt!r}\n"
            f"# TYPE vllm:prompt_tokens_created gauge\nvllm:prompt_tokens_created{{{m}}} 1.7e9\n"
            f"# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{{m}}} {out!r}\n"
            f"# TYPE vllm:request_success_total counter\n"
            f"vllm:request_success_total{{finished_reason=\"stop\",{m}}} {req * 0.75!r}\n"
            f"vllm:request_success_total{{finished_reason=\"length\",{m}}} {req * 0.25!r}\n"
            + histogram("vllm:request_prefill_time_seconds", since * 0.1, int(req), m)
            + histogram("vllm:request_decode_time_seconds", since * 0.9, int(req), m))


def tgi():
    out, prompt, req, running, since = state()
    return (f"# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size {running}\n"
            f"# TYPE tgi_queue_size gauge\ntgi_queue_size 0\n"
            f"# TYPE tgi_request_success counter\ntgi_request_success {int(req)}\n"
            + histogram("tgi_request_generated_tokens", out, int(req))
            + histogram("tgi_request_input_length", prompt, int(req))
            + histogram("tgi_batch_forward_duration", since * 0.1, int(req), 'method="prefill"')
            + histogram("tgi_batch_forward_duration", since * 0.9, int(req), 'method="decode"'))


def sglang():
    out, prompt, req, running, since = state()
    m = 'model_name="tiny"'
    return (f"# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{{{m}}} {prompt:e}\n"
            f"# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total{{{m}}} {out:e}\n"
            f"# TYPE sglang:num_requests_total counter\nsglang:num_requests_total{{{m}}} {req:e}\n"
            f"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{{{m}}} {running}\n"
            f"# TYPE sglang:token_usage gauge\nsglang:token_usage{{{m}}} 0.28\n")


def llamacpp():
    out, prompt, req, running, since = state()
    return (f"# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
            f"# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total {int(prompt)}\n"
            f"# TYPE llamacpp:prompt_seconds_total counter\nllamacpp:prompt_seconds_total {since * 0.1:.3f}\n"
            f"# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total {int(out)}\n"
            f"# TYPE llamacpp:tokens_predicted_seconds_total counter\n"
            f"llamacpp:tokens_predicted_seconds_total {since * 0.9:.3f}\n"
            f"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing {int(running)}\n"
            f"# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 0\n")


ENGINES = {"vllm": vllm, "tgi": tgi, "sglang": sglang, "llama.cpp": llamacpp}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        body = ENGINES[ARGS.engine]()
        if ARGS.lie == "huge":
            body += "".join(f"padding_series_{i} {i}\n" for i in range(300000))
        elif ARGS.lie == "malformed":
            body = body.replace("} ", "} not-a-number ", 1) + "}}}{{{ garbage\n"
        elif ARGS.lie == "slow":
            time.sleep(5)
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:
            pass

    def log_message(self, *args):
        pass


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=sorted(ENGINES), required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rate", type=float, default=400)
    ap.add_argument("--running", type=float, default=8)
    ap.add_argument("--ramp", type=float, default=0)
    ap.add_argument("--restart-at", type=float)
    ap.add_argument("--lie", choices=["huge", "slow", "malformed"])
    ap.add_argument("--seconds", type=float, default=10)
    ARGS = ap.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    time.sleep(max(0.0, ARGS.seconds - (time.monotonic() - T0)))


if __name__ == "__main__":
    main()
