"""Embeddings, reranking and transcription on the local backend's CPU runtimes against vLLM's CPU
build, on the packaged models, in one run, side by side:

1. embeddings of all-MiniLM-L6-v2 on infinity-emb and on vLLM's CPU build (its pooling runner,
   `--runner pooling`): start to first embedding, then a closed loop of 1, 4 and 16 clients for
   two workloads, a query (one short sentence a request) and passages (8 passages of about 100
   words a request): requests/s, latency p50 and p95, the ratio vLLM / infinity; resident memory
   of each server's process group (after start, and the peak under load); how alike the vectors
   are (cosine of the two runtimes' vectors of the same texts);
2. reranking: what each answers at /v1/rerank for the packaged models (no cross-encoder is
   packaged: measured only where a model both serve exists);
3. transcription: whether vLLM's CPU build can load the packaged Whisper (its layout, its audio
   extras, and what it says when started on it), then faster-whisper-server at 1, 4 and 16
   clients on a spoken sentence (espeak-ng).

Each server is started with the command line and environment the local backend gives it
(runtimes.cpu_launch, vllm_cpu.environment, command.server_environment), straight, not through
the console: the console sends embeddings to infinity, so the bench starts vLLM's side itself
with the flag its pooling runner needs. Both embedding servers are up while the levels run,
interleaved (a busy moment of the machine touches both); the CPU each used while the other was
measured is printed, so an idle server's own use shows.

Run: .venv/bin/python bench/pooling_runtimes_bench.py [--seconds 15] [--levels 1,4,16]
Needs scripts/cpu_runtimes.sh (infinity, faster-whisper, vllm), the packaged models
(tests/packaged_models.py) and espeak-ng. A scratch folder (bench/scratch.py): vLLM's compile
cache there starts cold. Other processes on the machine move every figure: the load average is
printed with them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.cpu_runtimes_bench import free_port, group_rss_mib, load, stop_group  # noqa: E402

WORDS = (
    "model", "server", "memory", "request", "answer", "token", "batch", "vector", "search",
    "query", "document", "passage", "engine", "kernel", "thread", "core", "cache", "latency",
    "throughput", "cluster", "replica", "gateway", "console", "profile", "organisation",
    "manifest", "runtime", "weights", "layer", "attention", "pooling", "sentence", "meaning",
)  # fmt: skip
QUERY_WORDS, PASSAGE_WORDS, PASSAGES = 12, 100, 8
KV_CACHE_GIB = 1  # vLLM's CPU KV cache for the embedding model (an encoder keeps none)
START_TIMEOUT = 900
SENTENCE = "The capital of France is Paris, and the meeting starts at ten in the morning."


def text(n_words: int, seed: int) -> str:
    """A different text of `n_words` for every seed (no server caches a repeated one)."""
    return " ".join(WORDS[(seed * 7 + i * (seed % 5 + 1)) % len(WORDS)] for i in range(n_words))


def group_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by a process group's live processes."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[2]) == pid or int(entry.name) == pid:
                total += int(stat[11]) + int(stat[12])
        except (OSError, ValueError, IndexError):
            continue
    return total / tick


@dataclass
class Server:
    """One runtime's server, started as the local backend starts it."""

    label: str
    runtime: str
    model_id: str
    url: str
    child: subprocess.Popen
    log: Path
    start_s: float = 0.0
    rss_started: float = 0.0
    rss_peak: float = 0.0
    notes: list[str] = field(default_factory=list)


def start(label: str, runtime: str, model: Path, work: Path, engine_args=(), task="embed"):
    """Start `runtime` on `model`; return the Server once it answered its first request (the
    one that makes a local replica Running), with the seconds that took."""
    import httpx

    from jobs.backends.local import runtimes as rt
    from jobs.backends.local import vllm_cpu as vc
    from jobs.backends.local.command import server_environment
    from jobs.backends.local.first_request import first_request

    runtimes_dir = rt.configured_runtimes_dir()
    port = free_port()
    engine_env = None
    if runtime == rt.VLLM_CPU.name:
        version = rt.installed_version(runtime, runtimes_dir) or "unknown"
        cache = vc.compile_cache(work / "vllm-cache", version, str(model))
        engine_env = vc.environment(KV_CACHE_GIB, None, cache)
        # engine.dtype `auto`, as the local backend serves it on this CPU
        engine_args = ["--dtype", vc.served_dtype("auto", vc.cpu_flags()), *engine_args]
    launch = rt.cpu_launch(
        runtime,
        model=str(model),
        name=label,
        port=port,
        runtimes_dir=runtimes_dir,
        max_concurrent=16,
        engine_args=list(engine_args),
        engine_env=engine_env,
    )
    env = server_environment(os.environ, launch.env)
    log = work / f"{label}.log"
    began = time.monotonic()
    with open(log, "w") as out:
        child = subprocess.Popen(
            launch.argv, env=env, cwd=launch.cwd, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    server = Server(label, runtime, launch.model_id, url, child, log)
    first = first_request(runtime, task)
    while time.monotonic() - began < START_TIMEOUT:
        if child.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise SystemExit(f"{label} exited ({child.returncode}) before answering:\n{tail}")
        try:
            if httpx.get(url + launch.readiness_path, timeout=5).status_code == 200:
                answer = httpx.post(
                    url + first.route, timeout=300, **first.httpx_arguments(launch.model_id)
                )
                if answer.status_code == 200:
                    break
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    else:
        stop_group(child)
        raise SystemExit(f"{label} did not answer within {START_TIMEOUT} s; see {log}")
    server.start_s = time.monotonic() - began
    server.rss_started = server.rss_peak = group_rss_mib(child.pid)
    return server


def embed_body(server: Server, workload: str, seed: int) -> dict:
    if workload == "query":
        texts = [text(QUERY_WORDS, seed)]
    else:
        texts = [text(PASSAGE_WORDS, seed * PASSAGES + i) for i in range(PASSAGES)]
    return {"model": server.model_id, "input": texts}


def closed_loop(server: Server, route: str, body, clients: int, seconds: float) -> dict:
    """`clients` threads each sending the next request as soon as the last was answered, for
    `seconds`: requests/s, latency p50/p95 in ms, failures, the server's CPU seconds, and its
    group's peak resident memory (sampled)."""
    import httpx

    latencies: list[float] = []
    failures: list[str] = []
    counter = iter(range(10**9))
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    done = threading.Event()

    def client() -> None:
        with httpx.Client(base_url=server.url, timeout=300) as http:
            while time.monotonic() < stop_at:
                with lock:
                    seed = next(counter)
                began = time.monotonic()
                answer = http.post(route, **body(seed))
                took = time.monotonic() - began
                with lock:
                    if answer.status_code == 200:
                        latencies.append(took)
                    else:
                        failures.append(f"{answer.status_code} {answer.text[:200]}")

    def sample() -> None:
        while not done.wait(0.5):
            server.rss_peak = max(server.rss_peak, group_rss_mib(server.child.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu_before, began = group_cpu_s(server.child.pid), time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    done.set()
    sampler.join()
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50": percentile(latencies, 50) * 1000,
        "p95": percentile(latencies, 95) * 1000,
        "done": len(latencies),
        "failed": failures,
        "cpu_s": group_cpu_s(server.child.pid) - cpu_before,
        "elapsed": elapsed,
    }


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, math.ceil(p / 100 * len(sorted_values)) - 1)]


def vectors(server: Server, texts: list[str]) -> list[list[float]]:
    import httpx

    answer = httpx.post(
        server.url + "/v1/embeddings", json={"model": server.model_id, "input": texts}, timeout=60
    )
    answer.raise_for_status()
    return [row["embedding"] for row in sorted(answer.json()["data"], key=lambda r: r["index"])]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def rerank_probe(server: Server) -> str:
    """What the server answers to a reranking of two documents for the packaged model."""
    import httpx

    body = {
        "model": server.model_id,
        "query": "Where is the capital of France?",
        "documents": ["Paris is the capital of France.", "Bananas are yellow."],
    }
    answer = httpx.post(server.url + "/v1/rerank", json=body, timeout=60)
    if answer.status_code != 200:
        try:
            said = answer.json()
            said = said.get("error", said).get("message", said) if isinstance(said, dict) else said
        except ValueError:
            said = answer.text
        return f"{answer.status_code}: {str(said)[:160]}"
    scores = [round(r.get("relevance_score", math.nan), 3) for r in answer.json()["results"]]
    return f"200, scores {scores} (cosine of the two vectors: a bi-encoder, not a reranker)"


def vllm_on_whisper(folder: Path, work: Path) -> str:
    """vLLM's CPU build started on the packaged Whisper folder: the last line it logs before it
    exits (or that it started, which it should not)."""
    try:
        server = start("whisper-vllm", "vllm-cpu", folder, work, task="transcribe")
    except SystemExit as failed:
        lines = [line.strip() for line in str(failed).splitlines() if line.strip()]
        said = [line for line in lines if "rror" in line and "errors.pydantic.dev" not in line]
        return (said or lines)[-1].split(" [type=")[0][:300]
    stop_group(server.child)
    return f"it started and answered a transcription in {server.start_s:.0f} s"


def row(result: dict) -> str:
    failed = f" ({len(result['failed'])} failed)" if result["failed"] else ""
    return f"{result['rps']:7.1f} {result['p50']:7.0f} {result['p95']:7.0f}{failed}"


def embeddings(models, work: Path, args) -> None:
    servers = [
        start("minilm-infinity", "infinity", models.embedding, work),
        start("minilm-vllm", "vllm-cpu", models.embedding, work, ["--runner", "pooling"]),
    ]
    try:
        print("\nStart to first embedding, and resident memory after it (the server's group)")
        for server in servers:
            print(f"  {server.runtime:10} {server.start_s:6.1f} s  {server.rss_started:6.0f} MiB")
        probe = [text(QUERY_WORDS, 10**6 + i) for i in range(4)] + [SENTENCE]
        alike = [cosine(a, b) for a, b in zip(*(vectors(s, probe) for s in servers), strict=True)]
        dims = len(vectors(servers[0], ["x"])[0]), len(vectors(servers[1], ["x"])[0])
        print(
            f"  vectors: {dims[0]} and {dims[1]} dimensions; cosine of the two runtimes' vectors "
            f"of {len(probe)} texts: min {min(alike):.5f}"
        )
        print("\nReranking (/v1/rerank) with the packaged all-MiniLM-L6-v2 (a bi-encoder):")
        for server in servers:
            print(f"  {server.runtime:10} {rerank_probe(server)}")

        results: dict = {}
        for workload in ("query", "passages"):
            for server in servers:  # one warm-up round of each level's shape
                closed_loop(server, "/v1/embeddings", make_body(server, workload), 2, 2)
            for level in args.levels:
                for server in servers:
                    other = servers[1 - servers.index(server)]
                    idle_before = group_cpu_s(other.child.pid)
                    result = closed_loop(
                        server, "/v1/embeddings", make_body(server, workload), level, args.seconds
                    )
                    result["other_cpu_s"] = group_cpu_s(other.child.pid) - idle_before
                    results[workload, level, server.runtime] = result
        print(
            f"\nEmbeddings, closed loop, {args.seconds:g} s per level: requests/s, latency p50 "
            "and p95 ms; ratio of vLLM's requests/s to infinity's"
        )
        print(
            f"  workload  clients  {'infinity':>7} {'p50':>7} {'p95':>7}   "
            f"{'vLLM':>7} {'p50':>7} {'p95':>7}   ratio"
        )
        for workload in ("query", "passages"):
            for level in args.levels:
                inf, vll = (results[workload, level, s.runtime] for s in servers)
                print(
                    f"  {workload:8}  {level:7}  {row(inf)}   {row(vll)}   "
                    f"{vll['rps'] / max(inf['rps'], 1e-9):5.2f}x"
                )
        print(
            "\n  CPU seconds per request (the server's group), and what the idle one used "
            "meanwhile (s)"
        )
        for workload in ("query", "passages"):
            for level in args.levels:
                cells = []
                for server in servers:
                    r = results[workload, level, server.runtime]
                    cells.append(
                        f"{server.runtime} {r['cpu_s'] / max(r['done'], 1) * 1000:6.1f} ms "
                        f"(other {r['other_cpu_s']:4.1f})"
                    )
                print(f"  {workload:8}  {level:3}  " + "   ".join(cells))
        print("\nPeak resident memory under load (the server's group)")
        for server in servers:
            print(f"  {server.runtime:10} {server.rss_peak:6.0f} MiB")
        for server in servers:
            failures = [
                f for key, r in results.items() if key[2] == server.runtime for f in r["failed"]
            ]
            if failures:
                print(f"  {server.runtime}: {len(failures)} failed, first: {failures[0]}")
        print(f"  {load()}")
    finally:
        for server in servers:
            stop_group(server.child)


def make_body(server: Server, workload: str):
    return lambda seed: {"json": embed_body(server, workload, seed)}


def transcription(models, work: Path, args) -> None:
    from jobs.backends.local import runtimes as rt

    folder = models.transcription
    files = [p.name for p in folder.iterdir()]
    layout = rt.weights_layout(files)
    site = next((rt.configured_runtimes_dir() / "vllm" / "lib").glob("python*/site-packages"))
    audio = [name for name in ("librosa", "soundfile") if not (site / name).exists()]
    config = json.loads((folder / "config.json").read_text())
    print(f"\nTranscription: the packaged Whisper ({folder.parent.name}) is {layout!r}: "
          f"{', '.join(sorted(files))}")  # fmt: skip
    print(
        f"  config.json names architectures: {config.get('architectures')}; vLLM's CPU venv "
        f"lacks {', '.join(audio) or 'nothing'} (vLLM's audio extras)"
    )
    if not args.skip_vllm_whisper:
        print(f"  vLLM started on it: {vllm_on_whisper(folder, work)}")
    wav = work / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(wav), SENTENCE], check=True)
    audio_bytes = wav.read_bytes()
    server = start("whisper", "faster-whisper", folder, work, task="transcribe")
    try:
        body = lambda seed: {  # noqa: E731
            "data": {"model": server.model_id, "response_format": "json"},
            "files": {"file": ("speech.wav", audio_bytes, "audio/wav")},
        }
        closed_loop(server, "/v1/audio/transcriptions", body, 1, 2)
        import httpx

        heard = httpx.post(server.url + "/v1/audio/transcriptions", timeout=120, **body(0)).json()[
            "text"
        ]
        seconds = len(audio_bytes) / (22050 * 2)  # espeak-ng writes 22.05 kHz 16-bit mono
        print(
            f"\nfaster-whisper-server ({seconds:.1f} s of speech a request; start to first "
            f"transcription {server.start_s:.1f} s, {server.rss_started:.0f} MiB): heard "
            f"{heard.strip()!r}"
        )
        print("  clients  requests/s   p50 ms   p95 ms")
        for level in args.levels:
            r = closed_loop(server, "/v1/audio/transcriptions", body, level, args.seconds)
            print(f"  {level:7}  {row(r)}")
        print(f"  peak resident memory {server.rss_peak:.0f} MiB; {load()}")
    finally:
        stop_group(server.child)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="measured per level")
    parser.add_argument("--levels", default="1,4,16", help="concurrent clients")
    parser.add_argument("--skip-transcription", action="store_true")
    parser.add_argument(
        "--skip-vllm-whisper", action="store_true", help="do not start vLLM on the Whisper"
    )
    args = parser.parse_args()
    args.levels = [int(level) for level in args.levels.split(",")]

    from bench.scratch import django_on_scratch

    work = django_on_scratch("pooling-runtimes", stand_in=False)
    from jobs.backends.local import runtimes as rt
    from tests.packaged_models import prepare

    runtimes_dir = rt.configured_runtimes_dir()
    wanted = {"infinity", "vllm-cpu"} | (set() if args.skip_transcription else {"faster-whisper"})
    missing = wanted - rt.installed_runtimes(runtimes_dir)
    if missing:
        raise SystemExit(f"not installed in {runtimes_dir}: {', '.join(sorted(missing))}")
    models = prepare(runtimes_dir=runtimes_dir)
    versions = ", ".join(f"{r} {rt.installed_version(r, runtimes_dir)}" for r in sorted(wanted))
    print(f"{os.cpu_count()} cores, {load()}; {versions}")
    embeddings(models, work, args)
    if not args.skip_transcription:
        transcription(models, work, args)
    print(f"\n{load()}; logs were in {work} (removed)")


if __name__ == "__main__":
    main()
