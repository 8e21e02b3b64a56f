"""Energy per token through the real binary (`--scrape`): stand-in engine endpoints (llm_standin.py, from each engine's
documented metric names) beside two stand-in GPUs at a constant 200 W and 100 W, so J per output token is 300 W over
the token rate. Each engine, a restart, a ramp before steady batches, and endpoints that lie."""

import os
import socket
import sqlite3

import pytest

from conftest import BINARY, PYTHON

STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llm_standin.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(w, engine, *standin, scrape_args=(), seconds=7, extra_urls=()):
    """`wattscope run --scrape` of a stand-in engine as the run's command; the run's phases by name and its units."""
    port = free_port()
    w.env["WATTSCOPE_STEADY_HOLD_S"] = "2"  # steady 2 s before a window (20 s in use), to keep the test short
    r = w.wattscope("run", "--interval", "500ms", "--task", f"serve-{engine}", "--sysfs-root",
                    os.path.join(w.path, "sys"), "--scrape", f"http://127.0.0.1:{port}/metrics",
                    *[a for u in extra_urls for a in ("--scrape", u)], *scrape_args, "--",
                    PYTHON, STANDIN, "--engine", engine, "--port", str(port), "--seconds", str(seconds), *standin)
    db = sqlite3.connect(os.path.join(w.path, "wattscope.db"))
    run_id = db.execute("SELECT run_id FROM runs ORDER BY start_ms DESC LIMIT 1").fetchone()[0]
    shown = w.show(run_id)
    return shown, r


def phase(shown, name):
    got = [p for p in shown["phases"] if p["name"] == name]
    assert len(got) == 1, (name, [p["name"] for p in shown["phases"]])
    return got[0]


def per_token(p):
    return p["energy_j"] / p["work"]["amount"]["output_tokens"]


@pytest.mark.parametrize("engine", ["vllm", "tgi", "sglang", "llama.cpp"])
def test_each_engine_gives_joules_per_output_token(steady_world, engine):
    shown, _ = serve(steady_world, engine, "--rate", "400")
    serving = phase(shown, "serving")
    assert per_token(serving) == pytest.approx(300 / 400, rel=0.03)
    assert serving["work"]["amount"]["prompt_tokens"] == pytest.approx(serving["work"]["amount"]["output_tokens"] / 4,
                                                                       rel=0.02)
    if engine != "llama.cpp":  # its server counts no requests
        assert serving["work"]["amount"]["requests"] == pytest.approx(
            serving["work"]["amount"]["output_tokens"] / 100, rel=0.05)
    # the whole run's figure is the serving span's (the time before the engine answered made no counted tokens)
    if engine != "sglang":  # the stand-ins spend 10 % of their time in prefill; SGLang exposes no such times
        split = shown["work"]["prefill_decode"]
        assert split["method"] == "estimated"
        assert split["prefill_time_share"] == pytest.approx(0.1, rel=0.03)
        assert split["decode_energy_per_output_token_j"] == pytest.approx(0.9 * 300 / 400, rel=0.03)
        assert split["prefill_energy_per_prompt_token_j"] == pytest.approx(0.1 * 300 / 100, rel=0.03)
        assert serving["work"]["prefill_decode"]["prefill_time_share"] == pytest.approx(0.1, rel=0.03)
    else:
        assert "prefill_decode" not in shown["work"]
    assert shown["work"]["covers"]["output_tokens"]["phases"] == [serving["phase_id"]]
    if engine == "vllm":  # the report's energy per token over time: the GPUs' energy in each slice over its tokens
        import json
        import re
        w = steady_world
        w.wattscope("report", shown["run_id"], "-o", os.path.join(w.path, "r.html"))
        html = open(os.path.join(w.path, "r.html")).read()
        data = json.loads(re.search(r'<script id="ws-data" type="application/json">(.*?)</script>', html, re.S)[1])
        ept = (data["runs"][0] if "runs" in data else data)["energy_per_token"]
        assert ept["unit"] == "output_tokens" and len(ept["t"]) == len(ept["y"]) >= 3
        inner = [y for y in ept["y"] if y is not None]
        assert inner and all(y == pytest.approx(300 / 400, rel=0.05) for y in inner), ept
    assert shown["work"]["energy_per_unit_j"]["output_tokens"] == pytest.approx(300 / 400, rel=0.03)


def test_a_ramp_then_steady_batches_make_a_steady_window_and_a_restart_is_no_negative_work(steady_world):
    shown, r = serve(steady_world, "vllm", "--rate", "600", "--ramp", "2", "--restart-at", "5", seconds=9)
    steady = [p for p in shown["phases"] if p["name"] == "steady-state"]
    assert steady, [p["name"] for p in shown["phases"]]
    serving = [p for p in shown["phases"] if p["name"] == "serving"][0]
    for p in steady:
        # begun once the full batch held for 2 s (the ramp's half size is not steady)
        assert p["start_ms"] - serving["start_ms"] >= 2000, (p, serving)
        assert per_token(p) == pytest.approx(300 / 600, rel=0.03)
    # every token counted once: 600/s over the span, the restart's fall from ~3000 to 0 not subtracted
    assert per_token(serving) == pytest.approx(300 / 600, rel=0.03)
    assert "restart" in r.stderr


def test_an_endpoint_that_lies_gives_nothing(steady_world):
    w = steady_world
    liars = []
    import subprocess
    procs = []
    try:
        for lie in ("huge", "slow", "malformed"):
            port = free_port()
            procs.append(subprocess.Popen([PYTHON, STANDIN, "--engine", "sglang", "--port", str(port), "--lie", lie,
                                           "--seconds", "30"]))
            liars.append(f"http://127.0.0.1:{port}/metrics")
        shown, r = serve(w, "vllm", "--rate", "400", extra_urls=liars)
    finally:
        for p in procs:
            p.kill()
    serving = phase(shown, "serving")  # the honest endpoint alone: one span, its tokens only
    assert per_token(serving) == pytest.approx(300 / 400, rel=0.03)
    for said in ("larger than", "bad line", "timed out"):
        assert said.lower() in r.stderr.lower(), r.stderr


def test_serve_exports_the_scraped_work_as_a_counter(steady_world):
    import subprocess
    import time
    import urllib.request

    w = steady_world
    engine_port, serve_port = free_port(), free_port()
    engine = subprocess.Popen([PYTHON, STANDIN, "--engine", "tgi", "--port", str(engine_port), "--rate", "400",
                               "--seconds", "60"])
    serve = subprocess.Popen([BINARY, "serve", "--listen", f"127.0.0.1:{serve_port}", "--interval", "500ms",
                              "--sysfs-root", os.path.join(w.path, "sys"), "--scrape",
                              f"http://127.0.0.1:{engine_port}/metrics"], cwd=w.path, env=w.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, seen = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{serve_port}/metrics", timeout=5).read().decode()
            except OSError:
                continue
            line = [x for x in text.splitlines() if x.startswith("wattscope_work_total{") and
                    'unit="output_tokens"' in x]
            if line:
                seen.append((time.monotonic(), float(line[0].rsplit(" ", 1)[1])))
            if len(seen) >= 2 and seen[-1][0] - seen[0][0] >= 3:
                break
        assert len(seen) >= 2, "no wattscope_work_total{unit=\"output_tokens\"} in /metrics"
        assert "# TYPE wattscope_work_total counter" in text
        # a counter that rises at the engine's rate (400 tokens a second, give or take a scrape)
        rate = (seen[-1][1] - seen[0][1]) / (seen[-1][0] - seen[0][0])
        assert 250 < rate < 550, rate
        # the dashboard's figure: energy per output token over the last minute (/api/v1/current "work")
        import json
        cur = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{serve_port}/api/v1/current", timeout=5).read())
        ot = cur["work"]["output_tokens"]
        assert ot["total"] > 0 and ot["over_s"] >= 2, ot
        assert ot["energy_per_unit_j"] == pytest.approx(300 / 400, rel=0.1), ot
    finally:
        serve.terminate()
        serve.wait(timeout=60)
        engine.kill()


GENERATE = r"""
import json, sys, time
import torch
import wattscope

# A real small model, trained and then served here (no downloaded weights): a character-level bigram language model
# over a short text; generation marks its output tokens as an engine without an endpoint would.
torch.manual_seed(0)
torch.set_num_threads(1)
text = "the energy of a token is the energy of the window over the tokens it made. " * 20
chars = sorted(set(text))
idx = torch.tensor([chars.index(c) for c in text])
model = torch.nn.Embedding(len(chars), len(chars))
opt = torch.optim.Adam(model.parameters(), lr=0.1)
with wattscope.phase("train"):
    for step in range(200):
        loss = torch.nn.functional.cross_entropy(model(idx[:-1]), idx[1:])
        opt.zero_grad(); loss.backward(); opt.step()
out_tokens = 0
with torch.no_grad(), wattscope.measure("generate") as m:
    seq = torch.zeros(16, dtype=torch.long)  # 16 requests served together
    t_end = time.monotonic() + 2.0
    while time.monotonic() < t_end:
        probs = torch.softmax(model(seq), dim=-1)
        seq = torch.multinomial(probs, 1).squeeze(1)
        wattscope.work(len(seq), unit="output_tokens")
        out_tokens += len(seq)
        time.sleep(0.002)
    wattscope.flush()
json.dump({"tokens": out_tokens, "loss": loss.item(), "window": m.as_dict()}, open(sys.argv[1], "w"))
"""


def test_a_real_model_served_in_python_marks_its_output_tokens(steady_world):
    pytest.importorskip("torch", reason="python3-torch is not installed (scripts/setup.sh installs it)")
    w = steady_world
    prog = w.file("generate.py", GENERATE)
    result = os.path.join(w.path, "generate.json")
    w.wattscope("run", "--interval", "500ms", "--task", "generate", "--sysfs-root", os.path.join(w.path, "sys"), "--",
                PYTHON, prog, result)
    import json
    mine = json.load(open(result))
    assert mine["loss"] < 3.0  # it learnt something
    shown = w.show(mine["window"]["run_id"])
    gen = phase(shown, "generate")
    assert gen["work"]["amount"]["output_tokens"] == mine["tokens"]  # every token, once
    # J per output token: the window's energy (300 W over its time) over the tokens it made
    assert gen["energy_j"] == pytest.approx(mine["window"]["energy_j"], abs=1e-6)
    assert per_token(gen) == pytest.approx(300 * gen["duration_s"] / mine["tokens"], rel=0.03)
    assert shown["work"]["energy_per_unit_j"]["output_tokens"] == pytest.approx(per_token(gen), rel=1e-9)
