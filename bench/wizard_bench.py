"""Time each step of Deploy model (the wizard) on the server, and the Hugging Face autocomplete
against the tests' local fake Hub: median and p95 in milliseconds.

Steps are timed with the Hub's answers cached (as they are for a user going through the steps,
Check model having read the model once) and, for the steps that wait on the Hub, with the cache
emptied before each request too. Targets: under 50 ms a step, except steps that wait on the
Hub; the autocomplete under 150 ms median from the local Hub.

Uses a throwaway SQLite file (DATABASE_URL) and var folder, so it never touches a real database.
Run: .venv/bin/python bench/wizard_bench.py [N]   (N requests per case, default 50)
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from collections.abc import Callable

from scratch import django_on_scratch  # noqa: E402

WORK = django_on_scratch("wizard")

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

from accesspolicies.models import Membership, Organization, Role  # noqa: E402
from jobs import deploy as verbs  # noqa: E402
from jobs.backends.local.backend import forget_local_runner  # noqa: E402
from jobs.models import Application, Cluster, Draft, Profile  # noqa: E402
from models_catalog import hub  # noqa: E402
from tests.fakes.hub import FakeHub  # noqa: E402

STEP_TARGET_MS = 50.0
SEARCH_TARGET_MS = 150.0
QWEN = {
    "name": "qwen-chat",
    "profile": "local",
    "source": "hub",
    "repo": "Qwen/Qwen2.5-7B-Instruct",
    "revision": "24668f3e831ec22a450368581ff8806f933c208f",
    "format": "",
    "go": "next",
}
COMPUTE = {"gpu_kind": "cpu", "context": "8192", "min_replicas": "1", "cache_shown": "1"}


def deployer() -> tuple[Client, Membership]:
    org = Organization.objects.create(slug="acme", name="Acme")
    cluster = Cluster.objects.create(organization=org, name="local")
    Profile.objects.create(organization=org, name="local", cluster=cluster)
    user = get_user_model().objects.create_user(username="dan")
    membership = Membership.objects.create(organization=org, user=user, role=Role.DEPLOYER)
    client = Client(headers={"X-Page-Organization": org.slug})  # as base.html's htmx header
    client.force_login(user)
    return client, membership


def timed(call: Callable[[], object], n: int, cold: bool = False) -> dict:
    """Server time of `call` (through django.test.Client, in process); `cold` empties the Hub
    cache before each call, so every Hub read goes to the (local) Hub."""
    for _ in range(3):  # warm up templates, imports and connections
        call()
    times = []
    for _ in range(n):
        if cold:
            hub.clear_cache()
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {
        "median": statistics.median(times),
        "p95": times[min(len(times) - 1, round(0.95 * len(times)) - 1)],
    }


def ok(response, *codes: int):
    assert response.status_code in (codes or (200,)), (response.status_code, response.content[:300])
    return response


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    call_command("migrate", verbosity=0)
    with FakeHub().serve() as fake:
        os.environ["HF_ENDPOINT"] = fake.url
        client, membership = deployer()
        ok(client.post(reverse("jobs:wizard"), QWEN), 302)
        draft = Draft.objects.get()

        def step(slug: str) -> str:
            return reverse(f"jobs:wizard-{slug}", kwargs={"key": draft.key})

        memory = reverse("jobs:wizard-memory", kwargs={"key": draft.key})
        cases: list[tuple[str, Callable[[], object], bool]] = [
            ("GET Deploy model (new draft)", lambda: ok(client.get(reverse("jobs:wizard"))), False),
            (
                "GET name as typed",
                lambda: ok(client.get(reverse("jobs:wizard-name"), {"name": "qwen-x"})),
                False,
            ),
            ("GET Model", lambda: ok(client.get(step("model"))), False),
            ("POST Model, same model", lambda: ok(client.post(step("model"), QWEN), 302), False),
            ("GET Check model", lambda: ok(client.get(step("check"))), False),
            ("GET Compute", lambda: ok(client.get(step("compute"))), False),
            (
                "GET Compute memory (context)",
                lambda: ok(client.get(memory, {"context": "4096", "gpu_kind": "l4"})),
                False,
            ),
            (
                "POST Compute",
                lambda: ok(client.post(step("compute"), {**COMPUTE, "go": "next"}), 302),
                False,
            ),
            ("GET Access", lambda: ok(client.get(step("access"))), False),
            (
                "POST Access",
                lambda: ok(client.post(step("access"), {"exposure": "Internal"}), 302),
                False,
            ),
            ("GET API", lambda: ok(client.get(step("api"))), False),
            (
                "POST API",
                lambda: ok(client.post(step("api"), {"api_format": "OpenAI"}), 302),
                False,
            ),
            ("GET Review", lambda: ok(client.get(step("review"))), False),
            # Steps that wait on the Hub: another model is checked and sized afresh.
            (
                "POST Model, another model",
                lambda: ok(
                    client.post(
                        step("model"),
                        {**QWEN, "repo": ("BAAI/bge-m3" if flip() else QWEN["repo"])},
                    ),
                    302,
                ),
                True,
            ),
            ("GET Check model", lambda: ok(client.get(step("check"))), True),
        ]
        turns = iter(range(10**9))

        def flip() -> bool:
            return next(turns) % 2 == 0

        print(f"Deploy model wizard: {n} requests per case through django.test.Client, SQLite")
        print(f"Load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs before the run.")
        print(f"{'step':34} {'Hub':>6} {'median ms':>10} {'p95 ms':>9}  target")
        worst = 0.0
        for label, call, cold in cases:
            result = timed(call, n, cold=cold)
            target = "waits on the Hub" if cold else f"< {STEP_TARGET_MS:.0f} ms"
            if not cold:
                worst = max(worst, result["median"])
            hub_state = "cold" if cold else "cached"
            print(
                f"{label:34} {hub_state:>6} {result['median']:10.1f} {result['p95']:9.1f}  {target}"
            )

        search = reverse("jobs:wizard-hub")
        print()
        print("Hugging Face autocomplete (GET /deploy/hub/?repo=...), the fake Hub on 127.0.0.1")
        for query in ("qwen", "llama", "bge"):
            cold = timed(lambda q=query: ok(client.get(search, {"repo": q})), n, cold=True)
            cached = timed(lambda q=query: ok(client.get(search, {"repo": q})), n)
            print(
                f"  {query!r:8} from the Hub: median {cold['median']:6.1f} ms, p95 "
                f"{cold['p95']:6.1f} ms; cached: median {cached['median']:5.1f} ms "
                f"(target < {SEARCH_TARGET_MS:.0f} ms median)"
            )

        # Deploy: the dry run, a new application, its first revision, and the model server.
        deploys = []
        for index in range(min(n, 5)):
            ok(client.post(reverse("jobs:wizard"), {**QWEN, "name": f"bench-{index}"}), 302)
            mine = Draft.objects.get(manifest__spec__name=f"bench-{index}")
            page = ok(client.get(reverse("jobs:wizard-review", kwargs={"key": mine.key})))
            reviewed = re.search(r'name="reviewed" value="(\w+)"', page.content.decode())[1]
            start = time.perf_counter()
            ok(
                client.post(
                    reverse("jobs:wizard-deploy", kwargs={"key": mine.key}), {"reviewed": reviewed}
                ),
                302,
            )
            deploys.append((time.perf_counter() - start) * 1000)
        print()
        print(
            f"Deploy (dry run, application, revision 1, local model server started): median "
            f"{statistics.median(deploys):.1f} ms over {len(deploys)}"
        )
        print(
            f"Slowest step not waiting on the Hub: {worst:.1f} ms median "
            f"({'within' if worst < STEP_TARGET_MS else 'OVER'} the {STEP_TARGET_MS:.0f} ms target)"
        )
        for application in Application.objects.all():
            verbs.delete(application, membership)
        forget_local_runner()


if __name__ == "__main__":
    main()
