"""The gateway against a stand-in upstream that answers at once, side by side with calling the
upstream directly, in one run (loopback, `wrk` from Debian):

1. added latency, sequential (1 connection): median and p99, direct vs gateway;
2. throughput at 32 connections: requests/s, errors, CPU per request of the serving process;
   the key is checked, its limits counted (in process, or in Redis with --redis URL) and every
   request metered (the meter's count is checked at the end);
3. streaming: time to first chunk, direct vs gateway, and whether chunks were merged or
   delayed (the upstream sends 5 events 5 ms apart);
4. the embedded mode: the gateway mounted in the console's ASGI app, under daphne and under
   uvicorn, at 32 connections.

Run: .venv/bin/python bench/gateway_bench.py [--seconds 8] [--redis redis://127.0.0.1:6379/12]
Uses a throwaway SQLite database (bench/scratch.py). Other processes on the machine move the
figures; the gateway and the upstream share its CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHAT = json.dumps(
    {"model": "bench", "messages": [{"role": "user", "content": "Say hello in five words."}]}
).encode()
ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello there, how are you?"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
    }
).encode()
EVENTS = 5
EVENT_GAP = 0.005


# --- the fast upstream: raw asyncio on uvloop, keep-alive, answers at once ---------------------


class Upstream(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.buffer = b""

    def data_received(self, data):
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].lower()
            match = re.search(rb"content-length:\s*(\d+)", head)
            length = int(match.group(1)) if match else 0
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            if b'"stream":true' in body.replace(b" ", b""):
                asyncio.ensure_future(self.stream())
            else:
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(ANSWER)).encode()
                    + b"\r\n\r\n"
                    + ANSWER
                )

    async def stream(self):
        write = self.transport.write
        write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for i in range(EVENTS):
            event = b'data: {"choices":[{"index":0,"delta":{"content":"w%d"}}]}\n\n' % i
            write(b"%x\r\n%s\r\n" % (len(event), event))
            await asyncio.sleep(EVENT_GAP)
        usage = b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":5}}\n\n'
        done = b"data: [DONE]\n\n"
        for event in (usage, done):
            write(b"%x\r\n%s\r\n" % (len(event), event))
        write(b"0\r\n\r\n")


def serve_upstream(port: int) -> None:
    import uvloop

    async def main():
        server = await asyncio.get_running_loop().create_server(Upstream, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


# --- helpers -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk_script(key: str) -> str:
    path = Path(tempfile.mkdtemp()) / "post.lua"
    body = CHAT.decode().replace('"', '\\"')
    path.write_text(
        'wrk.method = "POST"\n'
        f'wrk.body = "{body}"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.headers["Authorization"] = "Bearer {key}"\n'
    )
    return str(path)


def to_ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def wrk(url: str, script: str, connections: int, seconds: int, pid: int) -> dict:
    threads = min(2, connections)
    before = cpu_seconds(pid)
    out = subprocess.run(
        [
            "wrk",
            "-t",
            str(threads),
            "-c",
            str(connections),
            "-d",
            f"{seconds}s",
            "--latency",
            "-s",
            script,
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cpu = cpu_seconds(pid) - before
    if "requests in" not in out or "50%" not in out:
        raise SystemExit(f"wrk against {url} gave:\n{out}")
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50": to_ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)),
        "p99": to_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)),
        "requests": requests,
        "errors": int(errors.group(1)) if errors else 0,
        "socket_errors": socket_errors.group(1) if socket_errors else "",
        "cpu_us": cpu / max(requests, 1) * 1e6,
    }


def first_chunks(port: int, key: str | None, rounds: int) -> tuple[list[float], int, float]:
    """(times to first event in ms, reads that held more than one event, largest extra gap ms)."""
    body = json.dumps(
        {"model": "bench", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    ).encode()
    auth = f"Authorization: Bearer {key}\r\n".encode() if key else b""
    ttfc, merged, worst = [], 0, 0.0
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(rounds):
        started = time.perf_counter()
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n"
            b"Content-Type: application/json\r\n"
            + auth
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        seen, last, data = 0, None, b""
        while b"0\r\n\r\n" not in data[-7:]:
            chunk = sock.recv(65536)
            if not chunk:
                raise SystemExit("the stream broke off")
            now = time.perf_counter()
            events = chunk.count(b'data: {"choices":[{')
            if events and seen == 0:
                ttfc.append((now - started) * 1000)
            if events > 1:
                merged += 1
            if events and last is not None:
                worst = max(worst, (now - last) * 1000 - EVENT_GAP * 1000)
            if events:
                last = now
            seen += events
            data += chunk
    sock.close()
    return ttfc, merged, worst


# --- the run ---------------------------------------------------------------------------------


def setup(upstream_url: str) -> str:
    from bench.scratch import django_on_scratch

    django_on_scratch("gateway")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from accesspolicies.models import APIKey
    from accesspolicies.secrets import API_KEY
    from tests.gateway.support import make_app
    from tests.helpers import make_org

    org = make_org("bench")
    make_app(org, "bench", upstream_url)
    lookup, plain, digest = API_KEY.mint()
    APIKey.objects.create(
        organization=org,
        name="bench",
        lookup=lookup,
        secret_hash=digest,
        requests_per_minute=10**9,
        tokens_per_minute=10**12,
        concurrent_requests=10**6,
    )
    return plain


def start(command: list[str], port: int, env: dict) -> subprocess.Popen:
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port(port)
    except SystemExit:
        process.kill()
        raise SystemExit(process.stderr.read().decode()[-2000:]) from None
    return process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--redis", default="")
    parser.add_argument("--stream-rounds", type=int, default=200)
    args = parser.parse_args()

    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(up_port)])
    wait_port(up_port)
    key = setup(f"http://127.0.0.1:{up_port}")
    env = {**os.environ, "LOG_LEVEL": "WARNING"}
    if args.redis:
        env["REDIS_URL"] = args.redis
    else:
        env.pop("REDIS_URL", None)
    script = wrk_script(key)
    count_file = Path(tempfile.mkdtemp()) / "metered"
    env["BENCH_METER_COUNT"] = str(count_file)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    uvicorn = [
        sys.executable,
        "-m",
        "uvicorn",
        "--loop",
        "uvloop",
        "--http",
        "httptools",
        "--no-access-log",
        "--log-level",
        "warning",
        "--host",
        "127.0.0.1",
    ]
    servers = {}
    gw_port = free_port()
    servers["gateway"] = (
        start([*uvicorn, "--port", str(gw_port), "bench.gateway_app:application"], gw_port, env),
        gw_port,
    )
    rows = []
    sent = 0  # requests sent to the gateway process, to compare with what it metered
    try:
        url = "http://127.0.0.1:{}/v1/chat/completions"
        wrk(url.format(up_port), script, 4, 1, upstream.pid)  # warm up
        sent += wrk(url.format(gw_port), script, 4, 1, servers["gateway"][0].pid)["requests"]
        seq_direct = wrk(url.format(up_port), script, 1, args.seconds, upstream.pid)
        seq_gw = wrk(url.format(gw_port), script, 1, args.seconds, servers["gateway"][0].pid)
        par_direct = wrk(url.format(up_port), script, 32, args.seconds, upstream.pid)
        par_gw = wrk(url.format(gw_port), script, 32, args.seconds, servers["gateway"][0].pid)
        sent += seq_gw["requests"] + par_gw["requests"] + args.stream_rounds
        rows.append(("sequential median ms", seq_direct["p50"], seq_gw["p50"]))
        rows.append(("sequential p99 ms", seq_direct["p99"], seq_gw["p99"]))
        rows.append(("32 conn requests/s", par_direct["rps"], par_gw["rps"]))
        rows.append(("32 conn errors", par_direct["errors"], par_gw["errors"]))
        rows.append(("32 conn CPU us/request", par_direct["cpu_us"], par_gw["cpu_us"]))
        d_ttfc, d_merged, d_worst = first_chunks(up_port, None, args.stream_rounds)
        g_ttfc, g_merged, g_worst = first_chunks(gw_port, key, args.stream_rounds)
        rows.append(
            ("stream first chunk median ms", statistics.median(d_ttfc), statistics.median(g_ttfc))
        )
        rows.append(("stream reads with merged events", d_merged, g_merged))
        rows.append(("stream worst extra gap ms", d_worst, g_worst))
        for name, command in (
            (
                "daphne",
                [
                    sys.executable,
                    "-m",
                    "daphne",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    "{port}",
                    "console.asgi:application",
                ],
            ),
            ("uvicorn", [*uvicorn, "--port", "{port}", "console.asgi:application"]),
        ):
            port = free_port()
            process = start([c.replace("{port}", str(port)) for c in command], port, env)
            servers[name] = (process, port)
            wrk(url.format(port), script, 4, 1, process.pid)
            seq = wrk(url.format(port), script, 1, args.seconds, process.pid)
            par = wrk(url.format(port), script, 32, args.seconds, process.pid)
            rows.append((f"embedded/{name} sequential median ms", seq_direct["p50"], seq["p50"]))
            rows.append((f"embedded/{name} 32 conn requests/s", par_direct["rps"], par["rps"]))
            rows.append((f"embedded/{name} 32 conn errors", 0, par["errors"]))
            rows.append((f"embedded/{name} CPU us/request", par_direct["cpu_us"], par["cpu_us"]))
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(timeout=30)
        upstream.terminate()
    metered = int(count_file.read_text()) if count_file.exists() else -1
    print(
        f"\nlimits in {'Redis ' + args.redis if args.redis else 'process'}; "
        f"{args.seconds} s per wrk run on loopback\n"
    )
    print(f"{'':40} {'direct':>10} {'gateway':>10} {'ratio':>8}")
    for name, direct, gateway in rows:
        ratio = f"{gateway / direct:.2f}" if direct else "-"
        print(f"{name:40} {direct:>10.3f} {gateway:>10.3f} {ratio:>8}")
    print(
        f"\nthe gateway process metered {metered} requests; wrk and the stream client sent "
        f"{sent} (wrk counts only completed ones: a few in flight at its end may be more)"
    )
    added = seq_gw["p50"] - seq_direct["p50"], seq_gw["p99"] - seq_direct["p99"]
    print(
        f"\nadded latency: median {added[0]:.3f} ms (target < 0.5), p99 {added[1]:.3f} ms "
        f"(target < 3); stream first chunk added "
        f"{statistics.median(g_ttfc) - statistics.median(d_ttfc):.3f} ms (target < 1)"
    )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-upstream":
        serve_upstream(int(sys.argv[2]))
    else:
        main()
