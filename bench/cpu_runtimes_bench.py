"""The CPU runtimes on the packaged real models, started with runtimes.py's command lines:

1. each runtime's time to ready, split into runtime start (imports, server up) and model load,
   and its memory (RSS of the process group) when ready and after a request;
2. the 135M chat model: output tokens/s and first-token latency at concurrency 1, and the
   aggregate tokens/s at 2 and 4, with and without transformers serve's --continuous-batching.

Run: .venv/bin/python bench/cpu_runtimes_bench.py [--skip-chat-load]
Needs scripts/cpu_runtimes.sh and the packaged models (tests/packaged_models.py prepares them).
Other processes on the machine move every figure: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from openai import OpenAI  # noqa: E402

from jobs.backends.local import processes  # noqa: E402
from jobs.backends.local import runtimes as rt  # noqa: E402
from jobs.backends.local.command import server_environment  # noqa: E402
from tests.packaged_models import prepare  # noqa: E402

RUNTIMES_DIR = rt.configured_runtimes_dir()
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
INFINITY_LOG_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) infinity_emb")


def group_rss_mib(pid: int) -> float:
    """RSS of the process and its children (uvicorn, tokenizer workers), in MiB."""
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


class Server:
    """One runtime process with its log, timed from spawn to readiness."""

    def __init__(self, launch: rt.Launch, port: int, argv: list[str] | None = None) -> None:
        self.launch, self.port = launch, port
        self.log = Path(tempfile.mkstemp(prefix=f"{launch.runtime}-", suffix=".log")[1])
        env = server_environment(os.environ, launch.env)
        self.spawned_wall = time.time()
        self.spawned = time.monotonic()
        with open(self.log, "w") as out:
            self.child = subprocess.Popen(
                argv or launch.argv,
                cwd=launch.cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.base = f"http://127.0.0.1:{port}"
        self.ready_after = self._wait()

    def _wait(self, limit: float = 600) -> float:
        while time.monotonic() - self.spawned < limit:
            if self.child.poll() is not None:
                raise SystemExit(f"{self.launch.runtime} exited; see {self.log}")
            try:
                if httpx.get(self.base + self.launch.readiness_path, timeout=2).status_code == 200:
                    return time.monotonic() - self.spawned
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"{self.launch.runtime} not ready in {limit} s; see {self.log}")

    def rss(self) -> float:
        return group_rss_mib(self.child.pid)

    def client(self) -> OpenAI:
        url = f"{self.base}{self.launch.route_prefix}"
        return OpenAI(base_url=url, api_key="unused", timeout=900, max_retries=0)

    def stop(self) -> None:
        os.killpg(self.child.pid, signal.SIGTERM)
        try:
            self.child.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.child.pid, signal.SIGKILL)
            self.child.wait()


def start(runtime: str, model: Path, name: str, max_concurrent: int | None = None) -> Server:
    port = processes.free_port()
    launch = rt.cpu_launch(
        runtime,
        model=str(model),
        name=name,
        port=port,
        runtimes_dir=RUNTIMES_DIR,
        max_concurrent=max_concurrent,
    )
    return Server(launch, port)


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def _ask(client: OpenAI, model: str, tokens: list[int]) -> None:
    answer = client.chat.completions.create(
        model=model, messages=QUESTION, max_tokens=24, temperature=0
    )
    tokens.append(answer.usage.completion_tokens)


def chat_figures(server: Server) -> None:
    client, model = server.client(), server.launch.model_id
    started = time.monotonic()
    first = None
    chunks = 0
    for chunk in client.chat.completions.create(
        model=model, messages=QUESTION, max_tokens=32, temperature=0, stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            chunks += 1
            first = first or time.monotonic() - started
    total = time.monotonic() - started
    print(
        f"  concurrency 1: first token {first * 1000:.0f} ms, "
        f"{(chunks - 1) / (total - first):.1f} tokens/s after it ({chunks} chunks), {load()}"
    )
    for concurrency in (2, 4):
        tokens: list[int] = []
        threads = [
            threading.Thread(target=_ask, args=(client, model, tokens)) for _ in range(concurrency)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        took = time.monotonic() - started
        print(
            f"  concurrency {concurrency}: {sum(tokens)} tokens in {took:.1f} s = "
            f"{sum(tokens) / took:.1f} tokens/s aggregate, {load()}"
        )


def bench_transformers(chat_model: Path, with_load: bool) -> None:
    print("transformers serve (SmolLM2-135M-Instruct, float32)")
    port = processes.free_port()
    bare = rt.cpu_launch(
        "transformers", model=str(chat_model), name="chat", port=port, runtimes_dir=RUNTIMES_DIR
    )
    # Without a model to preload it is up as soon as its imports are done: the runtime's start.
    empty = Server(bare, port, bare.argv[:-1])
    runtime_start = empty.ready_after
    empty.stop()
    server = start("transformers", chat_model, "chat")
    print(
        f"  ready in {server.ready_after:.1f} s: runtime start {runtime_start:.1f} s, model load "
        f"{server.ready_after - runtime_start:.1f} s; RSS {server.rss():.0f} MiB, {load()}"
    )
    started = time.monotonic()
    answer = server.client().chat.completions.create(
        model=server.launch.model_id, messages=QUESTION, max_tokens=16, temperature=0
    )
    took = time.monotonic() - started
    print(
        f"  first answer {answer.choices[0].message.content!r}: {answer.usage.completion_tokens} "
        f"tokens in {took:.1f} s; RSS after {server.rss():.0f} MiB"
    )
    if with_load:
        chat_figures(server)
    server.stop()
    if with_load:
        print("transformers serve --continuous-batching (maxConcurrentRequests 4)")
        try:
            batched = start("transformers", chat_model, "chat", max_concurrent=4)
        except SystemExit as exc:
            print(f"  did not start: {exc}")
            return
        chat_figures(batched)
        batched.stop()


def bench_infinity(model: Path) -> None:
    print("infinity-emb (all-MiniLM-L6-v2)")
    server = start("infinity", model, "minilm")
    text = server.log.read_text()
    stamps = INFINITY_LOG_TIME.findall(text)
    imports = None
    if stamps:
        first_line = datetime.strptime(stamps[0], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        imports = first_line - server.spawned_wall
    split = (
        f"runtime start {imports:.1f} s, model load {server.ready_after - imports:.1f} s"
        if imports is not None
        else "no split: its log had no timestamps"
    )
    print(f"  ready in {server.ready_after:.1f} s: {split}; RSS {server.rss():.0f} MiB")
    started = time.monotonic()
    server.client().embeddings.create(model="minilm", input=["A man is eating food."] * 8)
    print(
        f"  8 sentences embedded in {(time.monotonic() - started) * 1000:.0f} ms; RSS after "
        f"{server.rss():.0f} MiB, {load()}"
    )
    server.stop()


def bench_whisper(model: Path) -> None:
    print("faster-whisper-server (Whisper tiny.en, CTranslate2)")
    wav = Path(tempfile.mkstemp(suffix=".wav")[1])
    subprocess.run(["espeak-ng", "-w", str(wav), "The capital of France is Paris."], check=True)
    server = start("faster-whisper", model, "whisper")
    print(
        f"  ready in {server.ready_after:.1f} s (the model loads on the first request); "
        f"RSS {server.rss():.0f} MiB"
    )
    times = []
    for _ in range(2):
        started = time.monotonic()
        with open(wav, "rb") as audio:
            text = server.client().audio.transcriptions.create(model="whisper", file=audio).text
        times.append(time.monotonic() - started)
    print(
        f"  first transcription {times[0]:.1f} s (model load about {times[0] - times[1]:.1f} s), "
        f"then {times[1]:.1f} s: {text!r}; RSS after {server.rss():.0f} MiB, {load()}"
    )
    server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-chat-load", action="store_true", help="no concurrency runs")
    args = parser.parse_args()
    models = prepare(runtimes_dir=RUNTIMES_DIR)
    print(f"{os.cpu_count()} cores, {load()}")
    bench_infinity(models.embedding)
    bench_whisper(models.transcription)
    bench_transformers(models.chat, not args.skip_chat_load)


if __name__ == "__main__":
    main()
