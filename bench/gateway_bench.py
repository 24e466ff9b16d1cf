"""The gateway against a stand-in upstream that answers at once, side by side with calling the
upstream directly, in one run (loopback, `wrk` from Debian):

1. added latency, sequential (1 connection): median and p99, direct vs gateway;
2. throughput at 32 connections: requests/s, errors, CPU per request of the serving process;
   the key is checked, its limits counted (in process, or in Redis with --redis URL) and every
   request metered (the meter's count is checked at the end);
3. streaming: time to first chunk, direct vs gateway, and whether chunks were merged or
   delayed (the upstream sends 5 events 5 ms apart);
4. the embedded mode as the docs run it: the gateway mounted in the console's ASGI app
   (console.asgi, with the in-process reconciler on), served by `python -m console.serve`
   (uvicorn) as scripts/run.sh does, and by daphne (`manage.py runserver`'s) beside it, at 32
   connections.

The application is deployed through the real apply path on the local backend, whose command
(SERVEDECK_LOCAL_COMMAND) is this file's fast upstream, and reconciled until Running: the
console's own reconciler finds it running and keeps it so (and starts it again when a console
that stopped it at its exit is followed by the next one).

Every figure is of answered requests: a run whose requests fail (a status other than 200, a
socket error) stops the bench, which says what the failing request got.

Run: .venv/bin/python bench/gateway_bench.py [--seconds 8] [--redis redis://127.0.0.1:6379/12]
Uses a throwaway SQLite database (bench/scratch.py) and the fake Hugging Face Hub of the
tests. Other processes on the machine move the figures; the gateway and the upstream share
its CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
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


def one_call(url: str, key: str | None) -> tuple[int, str]:
    """(status, the start of the body) of one chat request, as a failing run is explained."""
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    call = urllib.request.Request(url, data=CHAT, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(call, timeout=30) as reply:  # noqa: S310 (loopback)
            return reply.status, reply.read(300).decode(errors="replace")
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read(300).decode(errors="replace")
    except OSError as error:
        return 0, f"{type(error).__name__}: {error}"


def answering(url: str, key: str | None, what: str, wait: float = 0.0) -> None:
    """Stop the bench unless `url` answers a chat request with 200 (within `wait` seconds)."""
    deadline = time.monotonic() + wait
    while True:
        status, body = one_call(url, key)
        if status == 200:
            return
        if time.monotonic() >= deadline:
            raise SystemExit(
                f"{what} does not answer the bench's requests: status {status}: {body}\n"
                "No figures are printed for requests that fail."
            )
        time.sleep(0.5)


def wrk(url: str, script: str, connections: int, seconds: int, pid: int, key=None) -> dict:
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
            "--timeout",
            "10s",
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
    if errors or socket_errors:
        # A refusal answers faster than a model: its "throughput" would be no figure at all.
        status, body = one_call(url, key)
        raise SystemExit(
            f"wrk against {url} ({connections} connections): of {requests} requests, "
            f"{errors.group(1) if errors else 0} were not answered with 2xx"
            f"{'; socket errors: ' + socket_errors.group(1) if socket_errors else ''}. "
            f"One request now gets status {status}: {body}\n"
            "No figures are printed for requests that fail."
        )
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50": to_ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)),
        "p99": to_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)),
        "requests": requests,
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
        last = None
        head = sock.recv(65536)
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"a stream was refused: {head[:400].decode(errors='replace')}")
        data = head
        seen = head.count(b'data: {"choices":[{')
        if seen:
            ttfc.append((time.perf_counter() - started) * 1000)
            last = time.perf_counter()
            merged += seen > 1
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


MANIFEST = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: bench
  profileName: local
  source:
    type: Model
    model:
      uri: hf://BAAI/bge-m3
"""


def setup() -> tuple[str, str]:
    """The bench application deployed and Running as a user would have it (the local
    backend runs this file's upstream for it), and an API key with limits no run reaches.
    Returns (the key, the slug of the organisation)."""
    from bench.scratch import django_on_scratch

    django_on_scratch("gateway", stand_in=False)
    # Read when a replica starts, by this process and by the consoles started below.
    os.environ["SERVEDECK_LOCAL_COMMAND"] = (
        f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))} "
        "--serve-upstream {port}"
    )
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from accesspolicies.models import APIKey, Membership, Role
    from accesspolicies.secrets import API_KEY
    from jobs.deploy import apply
    from jobs.reconciler import Reconciler
    from tests.helpers import make_org

    org = make_org("bench")
    user = get_user_model().objects.create_user(username="bench")
    membership = Membership.objects.create(organization=org, user=user, role=Role.ADMIN)
    application = apply(MANIFEST, membership).application
    reconciler = Reconciler()
    deadline = time.monotonic() + 60
    while application.phase != "Running":
        if time.monotonic() > deadline:
            raise SystemExit(f"bench is {application.phase}: {application.reason}")
        reconciler.step_local()
        application.refresh_from_db()
        time.sleep(0.1)
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
    return plain, org.slug


def model_server(slug: str) -> tuple[int, int]:
    """(port, pid) of the bench application's model server as the local backend runs it."""
    from jobs.backends.local.backend import local_runner

    [replica] = local_runner(slug).observe("bench").replicas
    return replica.port, replica.pid


def start(command: list[str], port: int, env: dict) -> subprocess.Popen:
    # Its complaints go to a file, never a pipe nobody reads (a full one would stop it); the
    # process keeps its own handle on the file after this one is closed.
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
        try:
            wait_port(port)
        except SystemExit:
            process.kill()
            process.wait(timeout=30)
            errors.seek(0)
            raise SystemExit(errors.read().decode(errors="replace")[-2000:]) from None
    return process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--redis", default="")
    parser.add_argument("--stream-rounds", type=int, default=200)
    args = parser.parse_args()

    from tests.fakes.hub import FakeHub

    with FakeHub().serve() as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        try:
            run(args)
        finally:
            from jobs.backends.local.backend import forget_local_runner, local_runners_on_disk

            for runner in local_runners_on_disk():  # servers a console started too
                runner.shutdown()
            forget_local_runner()


def run(args) -> None:
    key, slug = setup()
    up_port, up_pid = model_server(slug)
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
    reconciler = "on" if "REDIS_URL" not in env else "off (REDIS_URL: run beside)"
    try:
        url = "http://127.0.0.1:{}/v1/chat/completions"
        answering(url.format(up_port), None, "the model server")
        answering(url.format(gw_port), key, "the gateway")
        sent += 1
        wrk(url.format(up_port), script, 4, 1, up_pid)  # warm up
        sent += wrk(url.format(gw_port), script, 4, 1, servers["gateway"][0].pid, key)["requests"]
        seq_direct = wrk(url.format(up_port), script, 1, args.seconds, up_pid)
        seq_gw = wrk(url.format(gw_port), script, 1, args.seconds, servers["gateway"][0].pid, key)
        par_direct = wrk(url.format(up_port), script, 32, args.seconds, up_pid)
        par_gw = wrk(url.format(gw_port), script, 32, args.seconds, servers["gateway"][0].pid, key)
        sent += seq_gw["requests"] + par_gw["requests"] + args.stream_rounds
        rows.append(("sequential median ms", seq_direct["p50"], seq_gw["p50"]))
        rows.append(("sequential p99 ms", seq_direct["p99"], seq_gw["p99"]))
        rows.append(("32 conn requests/s", par_direct["rps"], par_gw["rps"]))
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
            (
                "console.serve",  # as scripts/run.sh and docs/install.md run the console
                [
                    sys.executable,
                    "-m",
                    "console.serve",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    "{port}",
                    "console.asgi:application",
                ],
            ),
        ):
            port = free_port()
            process = start([c.replace("{port}", str(port)) for c in command], port, env)
            servers[name] = (process, port)
            # The console's reconciler keeps the application Running; a console before it
            # stopped its server at exit, so this one may be starting it again first.
            answering(url.format(port), key, f"the console under {name}", wait=60)
            wrk(url.format(port), script, 4, 1, process.pid, key)
            seq = wrk(url.format(port), script, 1, args.seconds, process.pid, key)
            par = wrk(url.format(port), script, 32, args.seconds, process.pid, key)
            rows.append((f"embedded/{name} sequential median ms", seq_direct["p50"], seq["p50"]))
            rows.append((f"embedded/{name} 32 conn requests/s", par_direct["rps"], par["rps"]))
            rows.append((f"embedded/{name} CPU us/request", par_direct["cpu_us"], par["cpu_us"]))
            process.terminate()  # its reconciler stops the model servers at its exit
            process.wait(timeout=30)
    finally:
        for process, _ in servers.values():
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
    metered = int(count_file.read_text()) if count_file.exists() else -1
    print(
        f"\nlimits in {'Redis ' + args.redis if args.redis else 'process'}; the console's "
        f"in-process reconciler {reconciler}; {args.seconds} s per wrk run on loopback; "
        "every request of every run answered 200\n"
    )
    print(f"{'':46} {'direct':>10} {'gateway':>10} {'ratio':>8}")
    for name, direct, gateway in rows:
        ratio = f"{gateway / direct:.2f}" if direct else "-"
        print(f"{name:46} {direct:>10.3f} {gateway:>10.3f} {ratio:>8}")
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
    if len(sys.argv) >= 3 and sys.argv[1] == "--serve-upstream":
        serve_upstream(int(sys.argv[2]))  # as the local backend starts it: --port's value
    else:
        main()
