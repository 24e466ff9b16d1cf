"""The three packaged real models deployed through the console on the CPU runtimes, in one run:

1. Deploy -> Running for each (POST /api/v1/applications until the reconciler records Running),
   split into runtime start (imports, server up) and model load;
2. the 135M chat model, streamed: output tokens/s after the first token and first-token latency
   through the console's gateway (/v1, with an API key) and directly against its runtime, side
   by side, with their ratio (target >= 0.97);
3. memory: RSS of each runtime's process group and of the console, with the three deployed;
4. concurrency 1, 2 and 4 against the chat model, without transformers serve's
   --continuous-batching (serving.maxConcurrentRequests 1) and with it (4).

Run: .venv/bin/python bench/cpu_runtimes_bench.py [--quick] [--rounds N]
Needs scripts/cpu_runtimes.sh, the packaged models (tests/packaged_models.py prepares them) and
espeak-ng. A scratch database and state folder (bench/scratch.py); nothing is left running.
Other processes on the machine move every figure: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.manifest_text import local_manifest  # noqa: E402

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
INFINITY_LOG_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) infinity_emb")
ORG = "bench"


def group_rss_mib(pid: int) -> float:
    """RSS of the process and the others of its process group (uvicorn, tokenizer workers)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[2]) != pid and int(entry.name) != pid:  # process group id
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1024


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(child: subprocess.Popen) -> None:
    if child.poll() is not None:
        return
    os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


class Console:
    """The console (daphne, python -m console.serve) on the scratch database, driven through
    its REST API; the bench follows applications with the reconciler's local step."""

    def __init__(self, work: Path, token: str) -> None:
        self.work, self.port = work, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.headers = {"Authorization": f"Bearer {token}"}
        self.log = work / "console.log"
        with open(self.log, "w") as out:
            self.child = subprocess.Popen(
                [sys.executable, "-m", "console.serve", "-b", "127.0.0.1", "-p", str(self.port)]
                + ["console.asgi:application"],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url + "/api/v1/openapi.json", timeout=2)
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise SystemExit(f"the console did not start; see {self.log}")

    def deploy(self, name: str, text: str) -> float:
        """POST the manifest; seconds until the reconciler records Running."""
        import httpx

        from jobs.models import Application
        from jobs.reconciler import Reconciler

        started = time.monotonic()
        created = httpx.post(
            f"{self.url}/api/v1/applications",
            headers={**self.headers, "Content-Type": "application/yaml"},
            content=text,
            timeout=120,
        )
        if created.status_code != 201:
            raise SystemExit(f"deploying {name}: {created.status_code} {created.text[:500]}")
        reconciler = Reconciler()
        while True:
            reconciler.step_local()
            application = Application.objects.get(name=name)
            if application.phase == "Running":
                return time.monotonic() - started
            if application.phase == "Failed" or time.monotonic() - started > 900:
                raise SystemExit(f"{name} is {application.phase}: {application.reason}")
            time.sleep(0.1)

    def stop(self, name: str) -> None:
        import httpx

        httpx.post(f"{self.url}/api/v1/applications/{name}/stop", headers=self.headers, timeout=60)

    def replica(self, name: str) -> dict:
        state = json.loads((self.work / "local" / ORG / name / "state.json").read_text())
        return state["replicas"][0]

    def replica_log(self, name: str) -> str:
        return (self.work / "local" / ORG / name / "replica-0.log").read_text()


def started_epoch(replica: dict) -> float:
    return datetime.fromisoformat(replica["started_at"]).timestamp()


# transformers serve writes this when its imports are done and it starts loading the model
# (it listens only once the model is loaded); its log lines carry no time, so they are watched.
TRANSFORMERS_LOADING = re.compile(r"^\[transformers\] Loading ", re.M)
# faster-whisper-server is up (uvicorn's line) before it loads its model on the first request.
WHISPER_UP = re.compile(r"Uvicorn running on")


def watch_log(path: Path, pattern: re.Pattern, found: list[float], stop: threading.Event):
    """Note when `pattern` first appears in the log at `path`."""
    while not stop.is_set():
        try:
            if pattern.search(path.read_text(errors="replace")):
                found.append(time.time())
                return
        except OSError:
            pass
        time.sleep(0.02)


def deploy_figures(console: Console, name: str, text: str, runtime: str) -> dict:
    """Deploy -> Running for one model, split into runtime start and model load: the runtime
    is started when transformers serve logs that it loads the model, when infinity writes its
    first (timed) log line, when faster-whisper-server's uvicorn says it runs."""
    folder = console.work / "local" / ORG / name
    stop, seen = threading.Event(), []
    watcher = None
    if runtime == "transformers":
        watch = (watch_log, folder / "replica-0.log", TRANSFORMERS_LOADING, seen, stop)
    elif runtime == "faster-whisper":
        watch = (watch_log, folder / "replica-0.log", WHISPER_UP, seen, stop)
    else:
        watch = None
    if watch is not None:
        watcher = threading.Thread(target=watch[0], args=watch[1:], daemon=True)
        watcher.start()
    total = console.deploy(name, text)
    stop.set()
    replica = console.replica(name)
    spawned = started_epoch(replica)
    start = None
    if runtime == "infinity":
        stamps = INFINITY_LOG_TIME.findall(console.replica_log(name))
        if stamps:
            first = datetime.strptime(stamps[0], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            start = first - spawned
    elif seen:
        start = seen[0] - spawned
    return {"name": name, "runtime": runtime, "total": total, "start": start}


def stream_once(client, model: str, max_tokens: int) -> tuple[float, float, float]:
    """(first-token latency s, tokens/s from the first token to the last, seconds from the
    last token to the end of the stream) of one streamed answer."""
    started = time.monotonic()
    first = last = None
    chunks = 0
    for chunk in client.chat.completions.create(
        model=model, messages=QUESTION, max_tokens=max_tokens, temperature=0, stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            chunks += 1
            last = time.monotonic() - started
            if first is None:
                first = last
    end = time.monotonic() - started
    first, last = first or end, last or end
    return first, (chunks - 1) / max(last - first, 1e-9), end - last


def concurrency(client, model: str, count: int, max_tokens: int) -> tuple[int, float, list]:
    """(tokens, seconds, each one's latency) of `count` chats sent at once."""
    tokens, latencies = [], []

    def ask() -> None:
        began = time.monotonic()
        answer = client.chat.completions.create(
            model=model, messages=QUESTION, max_tokens=max_tokens, temperature=0
        )
        latencies.append(time.monotonic() - began)
        tokens.append(answer.usage.completion_tokens)

    threads = [threading.Thread(target=ask) for _ in range(count)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(tokens), time.monotonic() - started, sorted(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds, short answers")
    parser.add_argument("--rounds", type=int, default=None, help="streamed answers each way")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 8)
    max_tokens = 12 if args.quick else 32

    from bench.scratch import django_on_scratch

    work = django_on_scratch("cpu-runtimes", stand_in=False)
    from django.conf import settings
    from django.core.management import call_command

    from accesspolicies.models import Membership, Role
    from jobs.backends.local import runtimes as rt
    from tests.gateway.support import make_key
    from tests.helpers import bearer, make_org
    from tests.packaged_models import default_models_dir, prepare

    runtimes_dir = rt.configured_runtimes_dir()
    models_dir = default_models_dir().resolve()
    # The console subprocess reads these from its environment.
    os.environ["SERVEDECK_RUNTIMES_DIR"] = str(runtimes_dir)
    os.environ["SERVEDECK_MODELS_DIR"] = str(models_dir)
    os.environ["ALLOWED_HOSTS"] = "127.0.0.1,localhost,testserver"
    settings.SERVEDECK_RUNTIMES_DIR = runtimes_dir
    settings.SERVEDECK_MODELS_DIR = models_dir
    models = prepare(runtimes_dir=runtimes_dir)
    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    org = make_org(ORG)
    admin = Membership.objects.create(
        organization=org,
        user=get_user_model().objects.create_user(username="bench", password="unused-bench-pw"),
        role=Role.ADMIN,
    )
    token = bearer(admin)["HTTP_AUTHORIZATION"].split(" ", 1)[1]
    _, key = make_key(org, "bench")
    print(f"{os.cpu_count()} cores, {load()}; {rounds} streamed answers each way")

    from openai import OpenAI

    console = Console(work, token)
    try:
        first = [  # name, folder, maxConcurrentRequests, the runtime it should get
            ("chat", models.chat, 1, "transformers"),
            ("minilm", models.embedding, None, "infinity"),
            ("whisper", models.transcription, None, "faster-whisper"),
        ]
        deployed = [
            deploy_figures(console, name, local_manifest(name, f"file://{folder}", limit), runtime)
            for name, folder, limit, runtime in first
        ]
        print("\nDeploy -> Running          total   runtime start   model load")
        for row in deployed:
            split = (
                f"{row['start']:13.1f} s {row['total'] - row['start']:10.1f} s"
                if row["start"] is not None
                else "   (no split: nothing marked the runtime's start)"
            )
            print(f"  {row['name']:8} {row['runtime']:15} {row['total']:6.1f} s {split}")

        gateway = OpenAI(base_url=f"{console.url}/v1", api_key=key, timeout=900, max_retries=0)
        chat_port = console.replica("chat")["port"]
        direct = OpenAI(
            base_url=f"http://127.0.0.1:{chat_port}/v1", api_key="-", timeout=900, max_retries=0
        )
        # One answer from each model first (through the gateway), so each has loaded it all.
        gateway.embeddings.create(model="minilm", input=["A man is eating food."])
        wav = work / "speech.wav"
        subprocess.run(["espeak-ng", "-w", str(wav), "The capital of France is Paris."], check=True)
        with open(wav, "rb") as audio:
            heard = gateway.audio.transcriptions.create(
                model="whisper", file=audio, response_format="srt"
            )
        stream_once(direct, "chat", 4)
        stream_once(gateway, "chat", 4)

        figures = {"direct": [], "gateway": []}
        for _ in range(rounds):  # interleaved, so a busy moment touches both sides
            figures["direct"].append(stream_once(direct, "chat", max_tokens))
            figures["gateway"].append(stream_once(gateway, "chat", max_tokens))
        print(
            f"\nchat, streamed ({max_tokens} tokens), median of {rounds}: direct   gateway   ratio"
        )
        d_ttft = statistics.median(f[0] for f in figures["direct"]) * 1000
        g_ttft = statistics.median(f[0] for f in figures["gateway"]) * 1000
        d_rate = statistics.median(f[1] for f in figures["direct"])
        g_rate = statistics.median(f[1] for f in figures["gateway"])
        print(
            f"  tokens/s after the first token  {d_rate:8.1f} {g_rate:9.1f} {g_rate / d_rate:7.3f}"
        )
        print(
            f"  first-token latency ms          {d_ttft:8.0f} {g_ttft:9.0f} {g_ttft / d_ttft:7.3f}"
        )
        d_tail = statistics.median(f[2] for f in figures["direct"]) * 1000
        g_tail = statistics.median(f[2] for f in figures["gateway"]) * 1000
        print(f"  last token to end of stream ms  {d_tail:8.0f} {g_tail:9.0f}")
        print(f"  (target: tokens/s ratio >= 0.97), {load()}")

        print("\nRSS with the three deployed (each answered once)")
        for row in deployed:
            pid = console.replica(row["name"])["pid"]
            print(f"  {row['runtime']:15} {group_rss_mib(pid):7.0f} MiB")
        print(f"  console         {group_rss_mib(console.child.pid):7.0f} MiB (daphne, gateway)")
        print(f"  transcription through the gateway, as srt: {heard.strip()[:80]!r}")

        rows = {}
        for label, name, limit in (("without", "chat", 1), ("with", "chat-batched", 4)):
            if name != "chat":
                console.stop("chat")
                console.deploy(name, local_manifest(name, f"file://{models.chat}", limit))
            port = console.replica(name)["port"]
            client = OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="-", timeout=900, max_retries=0
            )
            concurrency(client, name, 1, 4)  # warm
            rows[label] = [concurrency(client, name, c, max_tokens) for c in (1, 2, 4)]
        print(
            f"\nconcurrency against the chat model ({max_tokens} tokens each): aggregate tokens/s,"
            " and each request's latency in s (equal ones were served together)"
        )
        print("  concurrency   without --continuous-batching   with it (maxConcurrentRequests 4)")
        for i, count in enumerate((1, 2, 4)):
            cells = []
            for label in ("without", "with"):
                tokens, took, latencies = rows[label][i]
                each = "/".join(f"{x:.1f}" for x in latencies)
                cells.append(f"{tokens / took:6.1f} tok/s  {each}")
            print(f"  {count:11}   {cells[0]:29}   {cells[1]}")
        print(f"  {load()}")
    finally:
        from jobs.backends.local.backend import local_runner

        local_runner(ORG).shutdown()
        stop_group(console.child)


if __name__ == "__main__":
    main()
