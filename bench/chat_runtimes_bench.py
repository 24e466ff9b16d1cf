"""The packaged SmolLM2-135M-Instruct on both chat runtimes of the local backend, in one run:
vLLM's CPU build and transformers serve, each deployed through the console (file://), then
GuideLLM at concurrency 1, 4 and 16 straight at the runtime and through the console's gateway.

Prints a table: output tokens/s, time to first token p50 and inter-token latency p50 per
level and way, the gateway's share of direct, vLLM's multiple of transformers serve; and for
each runtime Deploy -> Running (vLLM cold, then warm after a Restart) and resident memory; and
the console's CPU per request through the gateway (its process's user + system time over the
gateway run, less what it spent over the direct run of the same length, when it only scraped
and reconciled); and the memory floor at one request (bench/memory_floor.py): each runtime's
least inter-token latency at this machine's read rate, beside its measured one, and the highest
vLLM / transformers serve ratio at one request that floor allows.

Both replicas are given the machine's cores (resources.cpu: `--cpu`, default all of them):
transformers serve's torch uses every core whatever it is given, and vLLM's CPU build runs one
engine thread per core asked for (left unset, every core but one: one on 2 cores).

GuideLLM 0.8.1 runs offline here: synthetic 64-token prompts made with the model folder's own
tokenizer, 32-token answers (max_tokens; transformers serve refuses GuideLLM's ignore_eos, so
neither is sent it and an answer may end early at the model's end token). It is installed on
first use into its own virtualenv (requirements/bench/guidellm.txt, beside the runtimes).

This machine kind's speed moves while a run goes on (the same vLLM replica answered 50 and 31
output tokens/s at one request half an hour apart), and the runtimes are measured one after the
other: `--rounds 2` measures vLLM, transformers serve, transformers serve, vLLM, so that a
machine slowing down or speeding up weighs on both alike, prints each round's ratios and
averages the figures.

Run: .venv/bin/python bench/chat_runtimes_bench.py [--seconds 25] [--levels 1,4,16] [--rounds 2]
Needs scripts/cpu_runtimes.sh (transformers and vllm) and the packaged models. A scratch
database and var folder (bench/scratch.py): vLLM's compile cache there starts cold. Other
processes on the machine move every figure: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.cpu_runtimes_bench import ORG, Console, group_rss_mib, load, stop_group  # noqa: E402
from bench.gateway_bench import cpu_seconds  # noqa: E402
from bench.memory_floor import (  # noqa: E402
    ceiling,
    floor_ms,
    read_gb_per_s,
    served_bytes,
    weights_gb,
)
from tests.manifest_text import local_manifest  # noqa: E402

GUIDELLM_REQUIREMENTS = ROOT / "requirements" / "bench" / "guidellm.txt"
TORCH_INDEX = os.environ.get("SERVEDECK_TORCH_INDEX", "https://download.pytorch.org/whl/cpu")
# (runtime, SERVEDECK_VLLM_CPU that makes the console choose it, application name)
RUNTIMES = (("vllm-cpu", "auto", "chat-vllm"), ("transformers", "off", "chat-tf"))


def guidellm(venvs: Path) -> Path:
    """GuideLLM's program, installed on first use into its own virtualenv beside the runtimes."""
    venv = venvs / "guidellm"
    program = venv / "bin" / "guidellm"
    stamp = venv / ".requirements"
    wanted = GUIDELLM_REQUIREMENTS.read_text()
    if program.exists() and stamp.exists() and stamp.read_text() == wanted:
        return program
    print(f"installing GuideLLM into {venv} (once) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--progress-bar", "off"]
    torch = next(line for line in wanted.splitlines() if line.startswith("torch=="))
    subprocess.run([*pip, "--no-deps", "--extra-index-url", TORCH_INDEX, torch], check=True)
    subprocess.run([*pip, "-r", str(GUIDELLM_REQUIREMENTS)], check=True)
    stamp.write_text(wanted)
    return program


def run_guidellm(
    program: Path, target: str, model: str, tokenizer: Path, args, out: Path, key: str = ""
) -> list[dict]:
    """GuideLLM at each concurrency level against `target` (a base URL whose /v1 answers):
    per level output tokens/s, TTFT p50 and inter-token latency p50 (ms), requests done."""
    backend = {"kind": "openai_http", "target": target, "model": model, "max_tokens": args.tokens}
    # A request that never ends must not hold the run: one through the gateway at concurrency 4
    # once waited for 13 minutes with no connection left open (GuideLLM waits forever unless told).
    backend["timeout"] = 120.0
    if key:
        # Through the gateway: it has no /health for GuideLLM's check; the key is checked by
        # the first request.
        backend.update(api_key=key, validate_backend=False)
    scenario = {
        "spec": {
            "backend": {**backend, "request_format": "/v1/chat/completions"},
            "profile": {"kind": "concurrent"},
            "tokenizer": {"kind": "huggingface_auto", "model": str(tokenizer)},
            # No output_tokens: GuideLLM then sends no ignore_eos, which transformers serve
            # refuses (422); max_tokens caps the answer on both runtimes.
            "data": [{"kind": "synthetic_text", "prompt_tokens": args.prompt}],
            "constraints": [{"kind": "max_duration", "seconds": args.seconds}],
            "outputs": [{"kind": "json", "path": str(out)}],
        },
        "benchmarks": [{"profile.streams": level} for level in args.levels],
    }
    file = out.with_suffix(".scenario.json")
    file.write_text(json.dumps(scenario))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = out.with_suffix(".log")
    # GuideLLM itself sometimes stops between two measurements for good, its processes idle
    # and no request open (seen twice, at the end of a level through the gateway): past this
    # limit it is stopped and run once more.
    limit = 180 + len(args.levels) * (args.seconds + 120)
    for attempt in (1, 2):
        with open(log, "w") as written:
            child = subprocess.Popen(
                [str(program), "run", "-c", str(file), "--disable-console-interactive"],
                env=env, stdout=written, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            try:
                returncode = child.wait(limit)
                break
            except subprocess.TimeoutExpired:
                stop_group(child)
                print(f"  GuideLLM against {target} did not end in {limit:.0f} s (attempt "
                      f"{attempt}): stopped", flush=True)  # fmt: skip
    else:
        raise SystemExit(f"GuideLLM against {target} did not end twice; its log: {log}")
    if returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise SystemExit(f"GuideLLM failed against {target}:\n{tail}")
    rows = []
    for benchmark in json.loads(out.read_text())["benchmarks"]:
        metrics = benchmark["metrics"]
        rows.append(
            {
                "level": benchmark["config"]["strategy"]["streams"],
                "tokens_per_s": metrics["output_tokens_per_second"]["successful"]["mean"],
                "ttft_p50": metrics["time_to_first_token_ms"]["successful"]["median"],
                "itl_p50": metrics["inter_token_latency_ms"]["successful"]["median"],
                "done": metrics["request_totals"]["successful"],
            }
        )
    return rows


def restart(console: Console, name: str) -> float:
    """POST restart; seconds until the reconciler records Running again."""
    import httpx

    from jobs.models import Application
    from jobs.reconciler import Reconciler

    started = time.monotonic()
    url = f"{console.url}/api/v1/applications/{name}/restart"
    answer = httpx.post(url, headers=console.headers, timeout=120)
    if answer.status_code != 200:
        raise SystemExit(f"restarting {name}: {answer.status_code} {answer.text[:300]}")
    reconciler = Reconciler()
    time.sleep(1)  # the old replica's Running must not be the one seen
    while True:
        reconciler.step_local()
        application = Application.objects.get(name=name)
        if application.phase == "Running":
            return time.monotonic() - started
        if application.phase == "Failed" or time.monotonic() - started > 1200:
            raise SystemExit(f"{name} is {application.phase}: {application.reason}")
        time.sleep(0.2)


def measure(work, token, key, program, models, args, runtime, choice, name, warm) -> dict:
    """One runtime, one round: a console that chooses `runtime` (SERVEDECK_VLLM_CPU=`choice`)
    deploys the model as `name` (and restarts it when `warm`, to time a start with the compile
    cache kept), GuideLLM runs straight at its replica, then through the gateway, and the model
    is stopped."""
    from django.conf import settings

    from jobs.backends.local.backend import local_runner

    os.environ["SERVEDECK_VLLM_CPU"] = choice  # the console's choice of chat runtime
    settings.SERVEDECK_VLLM_CPU = choice
    console = Console(work, token)
    try:
        text = local_manifest(name, f"file://{models.chat}", max(args.levels))
        # A short context: the KV cache sized for 16 requests of the model's own 8k window
        # would not fit a small machine's free memory, and a request here is 100 tokens.
        text += "        maxContextTokens: 512\n"
        text += f"      resources:\n        cpu: {args.cpu}\n"
        starts = [console.deploy(name, text)]
        if warm:
            starts.append(restart(console, name))
        port = console.replica(name)["port"]
        before = cpu_seconds(console.child.pid)
        direct = run_guidellm(
            program, f"http://127.0.0.1:{port}", name, models.chat, args,
            work / f"{name}-direct.json",
        )  # fmt: skip
        idle = cpu_seconds(console.child.pid) - before
        before = cpu_seconds(console.child.pid)
        gateway = run_guidellm(
            program, console.url, name, models.chat, args, work / f"{name}-gateway.json", key
        )
        busy = cpu_seconds(console.child.pid) - before
        done = sum(row["done"] for row in gateway)
        tokens = sum(row["tokens_per_s"] * args.seconds for row in gateway)
        memory = group_rss_mib(console.replica(name)["pid"])
        console.stop(name)
    finally:
        local_runner(ORG).shutdown()
        stop_group(console.child)
    return {
        "starts": starts, "direct": direct, "gateway": gateway, "memory": memory,
        "console_cpu": (idle, busy, done, tokens),
    }  # fmt: skip


def rate(row: dict, other: dict) -> float:
    """row's output tokens/s over other's (nan, printed so, where other served nothing)."""
    return row["tokens_per_s"] / other["tokens_per_s"] if other["tokens_per_s"] > 0 else math.nan


def mean_rows(runs: list[list[dict]]) -> list[dict]:
    """Each level's figures averaged over the rounds (requests done: summed)."""
    rows = []
    for i, first in enumerate(runs[0]):
        row = {key: statistics.fmean(run[i][key] for run in runs) for key in first}
        rows.append({**row, "done": sum(run[i]["done"] for run in runs)})
    return rows


def print_floor(model: Path, read_rates: list[float], vllm: dict, tf: dict) -> None:
    """Each runtime's memory floor at one request beside its measured inter-token latency, and
    the highest vLLM / transformers serve ratio the machine's read rate allows."""
    from models_catalog.folders import safetensors_parameters

    parameters = sum(safetensors_parameters(model).values())
    fastest = max(read_rates)  # the faster reading: the lower floor, the higher ceiling
    print(
        f"\nthe memory floor at one request: each token reads all {parameters / 1e6:.1f} M "
        f"weights; torch read {read_rates[0]:.1f} GB/s before the runs, {read_rates[-1]:.1f} "
        f"after ({fastest:.1f} taken)"
    )
    floors = {runtime: floor_ms(parameters, runtime, fastest) for runtime, *_ in RUNTIMES}
    for runtime, row in (("vllm-cpu", vllm), ("transformers", tf)):
        floor = floors[runtime]
        print(
            f"  {runtime:13} {weights_gb(parameters, runtime):.2f} GB a token "
            f"({served_bytes(runtime)} bytes a weight): floor {floor:5.1f} ms; ITL p50 "
            f"{row['itl_p50']:5.1f} ms, {100 * floor / max(row['itl_p50'], 1e-9):3.0f}% of the "
            f"read rate"
        )
    most = ceiling(floors["vllm-cpu"], tf["tokens_per_s"])
    print(f"  vLLM / transformers serve: {rate(vllm, tf):.1f}x measured, at most {most:.1f}x here")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="measured per level")
    parser.add_argument("--levels", default="1,4,16", help="concurrency levels")
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--tokens", type=int, default=32, help="answer tokens at most")
    parser.add_argument(
        "--cpu", type=int, default=os.cpu_count() or 1, help="resources.cpu of each replica"
    )
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="rounds: vLLM first, then transformers serve first, and so on; figures averaged",
    )  # fmt: skip
    args = parser.parse_args()
    args.levels = [int(level) for level in args.levels.split(",")]

    from bench.scratch import django_on_scratch

    work = django_on_scratch("chat-runtimes", stand_in=False)
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
    missing = {"vllm-cpu", "transformers"} - rt.installed_runtimes(runtimes_dir)
    if missing:
        raise SystemExit(f"not installed in {runtimes_dir}: {', '.join(sorted(missing))}")
    program = guidellm(runtimes_dir.resolve().parent / "bench")
    os.environ["SERVEDECK_RUNTIMES_DIR"] = str(runtimes_dir)
    os.environ["SERVEDECK_MODELS_DIR"] = str(models_dir)
    os.environ["ALLOWED_HOSTS"] = "127.0.0.1,localhost,testserver"
    settings.SERVEDECK_RUNTIMES_DIR = runtimes_dir
    settings.SERVEDECK_MODELS_DIR = models_dir
    models = prepare(runtimes_dir=runtimes_dir)
    call_command("migrate", verbosity=0)
    org = make_org(ORG)
    user = get_user_model().objects.create_user(username="bench", password="unused-bench-pw")
    admin = Membership.objects.create(organization=org, user=user, role=Role.ADMIN)
    token = bearer(admin)["HTTP_AUTHORIZATION"].split(" ", 1)[1]
    _, key = make_key(org, "bench")
    print(f"{os.cpu_count()} cores, {load()}; GuideLLM {args.seconds:g} s per level, "
          f"{args.prompt}-token prompts, answers up to {args.tokens} tokens; "
          f"resources.cpu {args.cpu}")  # fmt: skip
    torch_python = runtimes_dir / rt.CPU_RUNTIMES["transformers"].folder / "bin" / "python"
    read_rates = [read_gb_per_s(torch_python, args.cpu)]

    results = {runtime: [] for runtime, _, _ in RUNTIMES}  # per round: (direct, gateway)
    starts = {runtime: [] for runtime, _, _ in RUNTIMES}
    memory = {runtime: 0.0 for runtime, _, _ in RUNTIMES}
    console_cpu = {runtime: [0.0, 0.0, 0, 0.0] for runtime, _, _ in RUNTIMES}
    for round_number in range(args.rounds):
        # vLLM first in odd rounds, last in even ones: a machine that slows down (or speeds
        # up) over the run weighs on both runtimes alike.
        order = RUNTIMES if round_number % 2 == 0 else RUNTIMES[::-1]
        for runtime, choice, name in order:
            if args.rounds > 1:
                name = f"{name}-{round_number + 1}"
            print(f"round {round_number + 1}: {runtime} ({load()})", flush=True)
            warm = runtime == "vllm-cpu" and not starts[runtime]  # its first start is cold
            measured = measure(work, token, key, program, models, args, runtime, choice, name, warm)
            results[runtime].append((measured["direct"], measured["gateway"]))
            starts[runtime].extend(measured["starts"])
            memory[runtime] = max(memory[runtime], measured["memory"])
            for i, figure in enumerate(measured["console_cpu"]):
                console_cpu[runtime][i] += figure

    if args.rounds > 1:
        print("\neach round: vLLM / transformers serve (direct), gateway / direct (vLLM)")
        rounds = zip(results["vllm-cpu"], results["transformers"], strict=True)
        for n, ((v_direct, v_gateway), (t_direct, _)) in enumerate(rounds, 1):
            ratios = "  ".join(
                f"{level}: {rate(v_direct[i], t_direct[i]):.1f}x "
                f"{rate(v_gateway[i], v_direct[i]):.2f}"
                for i, level in enumerate(args.levels)
            )
            print(f"  round {n}: {ratios}")
    for runtime, runs in results.items():
        results[runtime] = tuple(mean_rows([run[way] for run in runs]) for way in (0, 1))
    print(
        "\nDeploy -> Running, each start in turn (vLLM's first compiles the model, the later ones"
        " find its compile cache), and resident memory after the benchmark (the replica's group)"
    )
    for runtime, took in starts.items():
        times = ", ".join(f"{t:.0f}" for t in took)
        print(f"  {runtime:13} {times} s; {memory[runtime]:.0f} MiB")
    if args.rounds > 1:
        print(f"\nthe mean of {args.rounds} rounds (vLLM first, then transformers serve first)")
    print("\nconcurrency  way       runtime        out tok/s  TTFT p50 ms  ITL p50 ms  done")
    for i, level in enumerate(args.levels):
        for way in (0, 1):
            for runtime, _, _ in RUNTIMES:
                row = results[runtime][way][i]
                print(
                    f"  {level:9}  {('direct', 'gateway')[way]:8}  {runtime:13} "
                    f"{row['tokens_per_s']:9.1f}  {row['ttft_p50']:11.0f}  "
                    f"{row['itl_p50']:10.1f}  {row['done']:4}"
                )
    print("\nratios: vLLM / transformers serve (direct), gateway / direct (each runtime)")
    (v_direct, v_gateway), (t_direct, t_gateway) = results["vllm-cpu"], results["transformers"]
    for i, level in enumerate(args.levels):
        print(
            f"  {level:3}: vLLM {rate(v_direct[i], t_direct[i]):5.1f}x   gateway "
            f"{rate(v_gateway[i], v_direct[i]):.2f} (vLLM) "
            f"{rate(t_gateway[i], t_direct[i]):.2f} (tf)"
        )
    read_rates.append(read_gb_per_s(torch_python, args.cpu))
    if 1 in args.levels:
        at_one = args.levels.index(1)
        print_floor(models.chat, read_rates, v_direct[at_one], t_direct[at_one])
    print("\nthe console's CPU through the gateway (all levels)")
    for runtime, (idle, busy, done, tokens) in console_cpu.items():
        spent = busy - idle
        print(
            f"  {runtime:13} {busy:5.1f} s over the gateway run, {idle:5.1f} s over the direct "
            f"one; the difference for {done} requests: {1000 * spent / max(done, 1):5.1f} ms per "
            f"request, {1000 * spent / max(tokens, 1):5.2f} ms per output token"
        )
    print(f"  {load()}")


if __name__ == "__main__":
    main()
