"""Two local replicas of the packaged SmolLM2, a multi-turn chat workload with a shared system
prompt, in one run: round robin over the replicas vs ServeDeck's routing (through the console's
gateway: prefix affinity with bounded loads, replica_choice.py); then scale to zero, the time
from a sleeping model's first request to its first token.

1. Routing: CONVERSATIONS conversations of TURNS turns each, CONCURRENCY at a time, every one
   opening with the same long system prompt and a document of its own; each turn streams a
   short answer that the next turn carries. Round robin calls the two replicas directly in
   turn (the best a blind Service or client can do); ServeDeck sends the same kind of workload
   (fresh documents, so neither side finds the other's conversations cached) through /v1 with
   an API key. The phases alternate (RR, ServeDeck, RR, ServeDeck) so a busy moment touches
   both. Printed: time to first token p50/p95, and the prefix-cache hit rate from the runtime's
   own counters (vLLM's prefix_cache_hits / prefix_cache_queries, in tokens) where it runs;
   transformers serve keeps no such counters, so its rate reads n/a.
2. Wake: a second application with minReplicas 0 and scaleToZeroAfter 5s is put to sleep by
   the console's reconciler; a streamed chat then wakes it, timed to its first token; twice.
   The first wake after the deploy finds the runtime's compile cache warm (the deploy filled
   it); the cold figure is the deploy itself, printed with whether the cache was empty then.

Run: .venv/bin/python bench/replica_routing_bench.py [--conversations 8] [--turns 4]
Needs scripts/cpu_runtimes.sh and the packaged models (as bench/cpu_runtimes_bench.py). A
scratch database and state folder (bench/scratch.py); nothing is left running. Other processes
on the machine move every figure: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.cpu_runtimes_bench import ORG, Console, load, stop_group  # noqa: E402
from tests.manifest_text import local_manifest  # noqa: E402

SYSTEM = (
    "You are a careful assistant for a shipping company. Answer in one short sentence, "
    "quote the document when you can, and never invent a tracking number. "
) * 12
WORDS = [
    "parcel",
    "harbour",
    "invoice",
    "crate",
    "pallet",
    "customs",
    "manifest",
    "freight",
    "berth",
    "tanker",
    "depot",
    "route",
    "schedule",
    "delay",
    "weather",
    "container",
    "seal",
    "signature",
    "warehouse",
    "dock",
    "forklift",
]
HIT_COUNTER = re.compile(r"^vllm:prefix_cache_hits(?:_total)?\{[^}]*\}\s+([0-9.eE+]+)", re.M)
QUERY_COUNTER = re.compile(r"^vllm:prefix_cache_queries(?:_total)?\{[^}]*\}\s+([0-9.eE+]+)", re.M)


def chat_manifest(name: str, folder: Path, scaling: str) -> str:
    """The shortest local manifest for the chat folder, with its scaling block."""
    return local_manifest(name, f"file://{folder}") + "      scaling:\n" + scaling


def document(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(300))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def first_token_seconds(client, model: str, messages: list[dict]) -> tuple[float, str]:
    """Seconds to the first content chunk of a streamed answer, and the whole answer."""
    started, first, parts = time.monotonic(), None, []
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=8, temperature=0, stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            if first is None:
                first = time.monotonic() - started
            parts.append(chunk.choices[0].delta.content)
    return (first if first is not None else time.monotonic() - started), "".join(parts)


def run_workload(pick_client, model: str, seed: int, conversations: int, turns: int, at_once: int):
    """TTFT of every turn of `conversations` conversations, `at_once` running together;
    `pick_client()` gives the client for each request (round robin or the gateway)."""
    rng = random.Random(seed)
    todo = [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": document(rng)}]
        for _ in range(conversations)
    ]
    ttfts: list[float] = []
    lock = threading.Lock()

    def converse() -> None:
        while True:
            with lock:
                if not todo:
                    return
                messages = todo.pop()
            for turn in range(turns):
                seconds, said = first_token_seconds(pick_client(), model, messages)
                with lock:
                    ttfts.append(seconds)
                messages = messages + [
                    {"role": "assistant", "content": said or "ok"},
                    {"role": "user", "content": f"And what about item {turn + 1}?"},
                ]

    threads = [threading.Thread(target=converse) for _ in range(at_once)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ttfts


def prefix_counters(ports: list[int]) -> tuple[float, float] | None:
    """(hits, queries) summed over the replicas, in tokens; None where no runtime counts."""
    import httpx

    hits = queries = 0.0
    found = False
    for port in ports:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        hit, query = HIT_COUNTER.findall(text), QUERY_COUNTER.findall(text)
        if hit and query:
            found = True
            hits += sum(float(x) for x in hit)
            queries += sum(float(x) for x in query)
    return (hits, queries) if found else None


def replica_ports(console: Console, name: str) -> list[int]:
    state = json.loads((console.work / "local" / ORG / name / "state.json").read_text())
    return [replica["port"] for replica in state["replicas"]]


def wait_for_phase(name: str, phase: str, limit: float) -> None:
    from jobs.models import Application

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        application = Application.objects.get(name=name)
        if application.phase == phase:
            return
        if application.phase == "Failed":
            raise SystemExit(f"{name} failed: {application.reason}")
        time.sleep(0.5)
    raise SystemExit(f"{name} did not reach {phase} in {limit:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--wake-only", action="store_true", help="only part 2, the wakes")
    args = parser.parse_args()

    from bench.scratch import django_on_scratch

    work = django_on_scratch("replica-routing", stand_in=False)
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from accesspolicies.models import Membership, Role
    from jobs.backends.local import runtimes as rt
    from tests.gateway.support import make_key
    from tests.helpers import bearer, make_org
    from tests.packaged_models import default_models_dir, prepare

    runtimes_dir = rt.configured_runtimes_dir()
    models_dir = default_models_dir().resolve()
    os.environ["SERVEDECK_RUNTIMES_DIR"] = str(runtimes_dir)
    os.environ["SERVEDECK_MODELS_DIR"] = str(models_dir)
    os.environ["ALLOWED_HOSTS"] = "127.0.0.1,localhost,testserver"
    settings.SERVEDECK_RUNTIMES_DIR, settings.SERVEDECK_MODELS_DIR = runtimes_dir, models_dir
    models = prepare(runtimes_dir=runtimes_dir)
    call_command("migrate", verbosity=0)
    org = make_org(ORG)
    user = get_user_model().objects.create_user(username="bench", password="unused-bench-pw")
    admin = Membership.objects.create(organization=org, user=user, role=Role.ADMIN)
    token = bearer(admin)["HTTP_AUTHORIZATION"].split(" ", 1)[1]
    _, key = make_key(org, "bench")
    cache = Path(os.environ.get("SERVEDECK_VLLM_CACHE_DIR", work / "vllm-cache"))
    cache_was_empty = not cache.exists() or not any(cache.iterdir())
    print(f"{os.cpu_count()} cores, {load()}")

    console = Console(work, token)
    try:
        if not args.wake_only:
            routing(console, models, key, args)
        wakes(console, models, key, cache_was_empty)
    finally:
        from jobs.backends.local.backend import local_runner

        local_runner(ORG).shutdown()
        stop_group(console.child)


def routing(console: Console, models, key: str, args) -> None:
    """Part 1: round robin vs ServeDeck's routing over two replicas."""
    from openai import OpenAI

    two = "        minReplicas: 2\n        maxReplicas: 2\n"
    deployed = console.deploy("chat", chat_manifest("chat", models.chat, two))
    ports = replica_ports(console, "chat")
    from jobs.models import Application

    runtime = Application.objects.get(name="chat").runtime or "?"
    print(f"chat: {len(ports)} replicas on {runtime}, Running after {deployed:.0f} s")
    direct = [
        OpenAI(base_url=f"http://127.0.0.1:{p}/v1", api_key="-", timeout=600, max_retries=0)
        for p in ports
    ]
    gateway = OpenAI(base_url=f"{console.url}/v1", api_key=key, timeout=600, max_retries=0)
    turn = iter(range(10**9))

    def round_robin():
        return direct[next(turn) % len(direct)]

    for client in direct:  # one answer each, so neither starts cold
        first_token_seconds(client, "chat", [{"role": "user", "content": "hi"}])

    figures: dict[str, dict[str, list[float]]] = {
        side: {"ttft": [], "hits": [], "queries": []} for side in ("rr", "sd")
    }
    for phase, side in enumerate(("rr", "sd", "rr", "sd")):
        pick = round_robin if side == "rr" else (lambda: gateway)
        before = prefix_counters(ports)
        ttfts = run_workload(
            pick, "chat", 1000 + phase, args.conversations, args.turns, args.concurrency
        )
        after = prefix_counters(ports)
        figures[side]["ttft"] += ttfts
        if before and after:
            figures[side]["hits"].append(after[0] - before[0])
            figures[side]["queries"].append(after[1] - before[1])

    print(
        f"\n{args.conversations} conversations x {args.turns} turns, {args.concurrency} at"
        f" once, twice each way          round robin   ServeDeck"
    )
    rows = []
    for label, share in (("TTFT p50 ms", 0.5), ("TTFT p95 ms", 0.95)):
        rr, sd = (percentile(figures[s]["ttft"], share) * 1000 for s in ("rr", "sd"))
        rows.append(f"  {label:50} {rr:11.0f} {sd:11.0f}   ratio {sd / rr:.2f}")
    rates = []
    for side in ("rr", "sd"):
        queries = sum(figures[side]["queries"])
        rates.append(f"{sum(figures[side]['hits']) / queries:.1%}" if queries else "n/a")
    rows.append(f"  {'prefix-cache hit rate (tokens, runtime counters)':50} {rates[0]:>11}"
                f" {rates[1]:>11}")  # fmt: skip
    print("\n".join(rows))
    print(f"  {load()}")


def wakes(console: Console, models, key: str, cache_was_empty: bool) -> None:
    """Part 2: a model that sleeps, woken by a streamed chat, twice."""
    from openai import OpenAI

    gateway = OpenAI(base_url=f"{console.url}/v1", api_key=key, timeout=600, max_retries=0)
    one = "        minReplicas: 0\n        maxReplicas: 1\n        scaleToZeroAfter: 5s\n"
    woke = console.deploy("sleepy", chat_manifest("sleepy", models.chat, one))
    print(
        f"\nsleepy: Running after {woke:.0f} s at deploy "
        f"(compile cache {'empty' if cache_was_empty else 'warm'} at the bench's start)"
    )
    for attempt in (1, 2):
        wait_for_phase("sleepy", "Sleeping", 180)
        try:
            seconds, _ = first_token_seconds(
                gateway, "sleepy", [{"role": "user", "content": "Wake up, please."}]
            )
        except Exception:
            from jobs.models import Application

            app = Application.objects.get(name="sleepy")
            print(f"  failed: {app.phase} {app.reason!r} {app.replica_endpoints!r} {app.endpoint}")
            print(console.log.read_text()[-3000:])
            raise
        print(f"  wake {attempt}: first request to first token {seconds:.1f} s (cache warm)")
    print(f"  {load()}")


if __name__ == "__main__":
    main()
