#!/usr/bin/env python3
"""What a marker from the Python helper costs the training loop (issue 15: goal < 50 µs, never blocking).

    python3 bench/marker_cost.py [N]

Times N calls of wattscope.work() three ways: with a listening socket read by a thread (as under wattscope run),
with WATTSCOPE_SOCKET naming a socket nobody listens on (wattscope gone), and with no WATTSCOPE_SOCKET (no-op).
Prints the median of five rounds in µs per call."""

import os
import socket
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import wattscope  # noqa: E402


def per_call_us(n):
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            wattscope.work(64)
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(rounds)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.sock")
        rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        rx.bind(path)
        stop = False

        def drain():
            rx.settimeout(0.2)
            while not stop:
                try:
                    rx.recv(65536)
                except OSError:
                    pass

        t = threading.Thread(target=drain)
        t.start()
        os.environ["WATTSCOPE_SOCKET"] = path
        listening = per_call_us(n)
        stop = True
        t.join()
        rx.close()
        os.environ["WATTSCOPE_SOCKET"] = os.path.join(d, "gone.sock")
        gone = per_call_us(n)
    del os.environ["WATTSCOPE_SOCKET"]
    noop = per_call_us(n)
    print(f"wattscope.work(): {listening:.2f} µs/call listening · {gone:.2f} µs/call wattscope gone · "
          f"{noop:.2f} µs/call not under wattscope  (median of 5 rounds of {n})")


if __name__ == "__main__":
    main()
