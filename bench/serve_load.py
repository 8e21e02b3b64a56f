#!/usr/bin/env python3
"""Hostile load against `wattscope serve` while an authenticated /metrics is timed.

One child process holds the misbehaving clients, all at once, from one address (the worst case for a per-address
cap): SLOW connections that send a request header one byte every 2 s without a token, IDLE connections that send
nothing, and SSE event-stream clients that never read. Whatever the server closes is reopened after --reopen-after
seconds (default 1), so the pressure stays on for the whole run. READERS well-behaved event-stream clients count the frames they receive.

Meanwhile the parent times GET /metrics (a fresh connection each time, as a scraper after an idle timeout would) at
RATE requests per second and prints p50/p90/p99/max, failures and what the misbehaving clients saw. Loopback only,
bounded in count (at most 5,000 clients) and time (--seconds, at most 600); stops by itself. Standard library only.
"""
import argparse
import multiprocessing as mp
import os
import resource
import select
import selectors
import socket
import sys
import time
import urllib.parse

SLOW_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: load\r\nUser-Agent: slow-header\r\nAccept: */*\r\n\r\n"


def raise_fd_limit(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, need))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def hostile(host, port, token, n_slow, n_idle, n_sse, n_readers, seconds, reopen_after, ready, result):
    # The misbehaving clients would be on other machines: here they yield the CPU to serve and to the timed client.
    os.nice(10)
    sel = selectors.DefaultSelector()
    stats = {"opened": 0, "closed_by_server": 0, "connect_failed": 0, "refused_503": 0, "sse_dropped": 0, "reader_frames": [0] * n_readers}
    auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
    sse_request = b"GET /api/v1/events HTTP/1.1\r\nHost: load\r\n" + auth + b"Accept: text/event-stream\r\n\r\n"
    conns = {}  # fd -> dict(kind, sock, sent, idx)
    reopen = []  # (when, kind, idx)

    def open_one(kind, idx):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if kind == "sse":  # a client that never reads: keep its receive window small so its buffers fill early
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            if kind in ("sse", "reader"):  # event streams ask at once, before the other clients crowd in
                s.settimeout(5)
                s.connect((host, port))
                s.sendall(sse_request)
                s.setblocking(False)
            else:
                s.setblocking(False)
                try:
                    s.connect((host, port))
                except BlockingIOError:
                    pass
        except OSError:
            stats["connect_failed"] += 1
            s.close()
            reopen.append((time.monotonic() + reopen_after, kind, idx))
            return
        c = {"kind": kind, "sock": s, "sent": 0, "idx": idx, "next": time.monotonic(), "parked": kind == "sse"}
        conns[s.fileno()] = c
        if kind != "sse":  # a never-reading stream is only watched for the server closing it (POLLRDHUP, below)
            sel.register(s, selectors.EVENT_READ, c)
        stats["opened"] += 1

    def close_one(c, reason):
        try:
            sel.unregister(c["sock"])
        except (KeyError, ValueError):
            pass
        conns.pop(c["sock"].fileno(), None)
        c["sock"].close()
        stats[reason] += 1
        reopen.append((time.monotonic() + reopen_after, c["kind"], c["idx"]))

    for i in range(n_readers):
        open_one("reader", i)
    for i in range(n_sse):
        open_one("sse", i)
    for i in range(n_slow):
        open_one("slow", i)
    for i in range(n_idle):
        open_one("idle", i)
    ready.set()
    end = time.monotonic() + seconds
    next_check = 0.0
    while time.monotonic() < end:
        now = time.monotonic()
        for c in list(conns.values()):  # one byte every 2 s of a header that never finishes in time
            if c["kind"] == "slow" and now >= c["next"]:
                try:
                    c["sock"].send(SLOW_REQUEST[c["sent"] % len(SLOW_REQUEST):][:1])
                    c["sent"] += 1
                except BlockingIOError:
                    pass
                except OSError:
                    close_one(c, "closed_by_server")
                    continue
                c["next"] = now + 2.0
        if reopen_after <= 0:
            reopen.clear()
        due = [r for r in reopen if r[0] <= now]
        reopen[:] = [r for r in reopen if r[0] > now]
        for _, kind, idx in due:
            open_one(kind, idx)
        for key, ev in sel.select(timeout=0.05):
            c = key.data
            s = c["sock"]
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                close_one(c, "closed_by_server")
                continue
            if c["kind"] == "reader":
                stats["reader_frames"][c["idx"]] += data.count(b"\ndata: ") + data.startswith(b"data: ")
            elif data.startswith(b"HTTP/1.1 503") or data.startswith(b"HTTP/1.0 503"):
                stats["refused_503"] += 1
        # Never-reading clients: a FIN behind unread data is invisible to recv, so ask poll for POLLRDHUP.
        if now >= next_check:
            next_check = now + 0.5
            parked = [c for c in conns.values() if c.get("parked")]
            pl = select.poll()
            for c in parked:
                pl.register(c["sock"], select.POLLRDHUP)
            by_fd = {c["sock"].fileno(): c for c in parked}
            for fd, ev in pl.poll(0):
                c = by_fd[fd]
                conns.pop(fd, None)
                c["sock"].close()
                stats["sse_dropped"] += 1
                reopen.append((now + reopen_after, "sse", c["idx"]))
    stats["open_at_end"] = len(conns)
    for c in conns.values():
        c["sock"].close()
    result.put(stats)


def get_metrics(host, port, token, timeout):
    t0 = time.perf_counter()
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        s.sendall(f"GET /metrics HTTP/1.1\r\nHost: load\r\n{auth}Connection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    status = data[9:12].decode(errors="replace") if data.startswith(b"HTTP/1.") else "???"
    return time.perf_counter() - t0, status


def pct(sorted_values, p):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(round(p / 100 * (len(sorted_values) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="http://127.0.0.1:PORT (loopback only)")
    ap.add_argument("--token", default="", help="bearer token for /metrics and the event streams")
    ap.add_argument("--slow", type=int, default=120)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--sse", type=int, default=100, help="event-stream clients that never read")
    ap.add_argument("--readers", type=int, default=10, help="event-stream clients that read")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rate", type=float, default=50, help="/metrics requests per second")
    ap.add_argument("--timeout", type=float, default=30, help="per /metrics request")
    ap.add_argument("--reopen-after", type=float, default=1.0,
                    help="seconds before a misbehaving client the server closed connects again (0: never)")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("serve_load.py: loopback only")
    total = a.slow + a.idle + a.sse + a.readers
    if total > 5000 or a.seconds > 600:
        sys.exit("serve_load.py: at most 5000 clients and 600 s")
    raise_fd_limit(total + 256)
    host, port = u.hostname, u.port
    ready, result = mp.Event(), mp.Queue()
    warmup = 3.0
    p = mp.Process(target=hostile,
                   args=(host, port, a.token, a.slow, a.idle, a.sse, a.readers, a.seconds + warmup, a.reopen_after, ready,
                         result))
    p.start()
    ready.wait(60)
    time.sleep(warmup)  # let the misbehaving clients settle in
    lat, fails, codes = [], 0, {}
    end = time.monotonic() + a.seconds
    next_t = time.monotonic()
    while time.monotonic() < end:
        try:
            dt, status = get_metrics(host, port, a.token, a.timeout)
            codes[status] = codes.get(status, 0) + 1
            if status == "200":
                lat.append(dt * 1000)
            else:
                fails += 1
        except OSError as e:
            fails += 1
            codes[type(e).__name__] = codes.get(type(e).__name__, 0) + 1
        next_t += 1 / a.rate
        time.sleep(max(0, next_t - time.monotonic()))
    stats = result.get(timeout=a.seconds + 60)
    p.join()
    lat.sort()
    print(f"hostile load: {a.slow} slow-header, {a.idle} idle, {a.sse} never-reading event streams, "
          f"{a.readers} reading event streams, token {'on' if a.token else 'off'}")
    print(f"/metrics over {a.seconds:.0f} s: {len(lat)} ok, {fails} failed {codes}; latency ms p50 {pct(lat, 50):.2f} "
          f"p90 {pct(lat, 90):.2f} p99 {pct(lat, 99):.2f} max {max(lat) if lat else float('nan'):.2f}")
    frames = sorted(stats.pop("reader_frames"))
    print(f"reading event streams: frames received min {frames[0] if frames else 0} "
          f"max {frames[-1] if frames else 0}")
    print("misbehaving clients: " + ", ".join(f"{k} {v}" for k, v in stats.items()))


if __name__ == "__main__":
    main()
