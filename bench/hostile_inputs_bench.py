"""Time and peak memory of the worst inputs the review found, through the bounded loader (the
manifest parse), through the API's dry run and the Deploy-from-YAML page, and through the model
master and recipe forms. Where it is safe, the unbounded read they replaced is shown as well
("before"); deep nesting "before" runs in a child process, since it used to kill it.

Uses a throwaway SQLite file and var folder (bench/scratch.py). Asserts nothing.
Run: .venv/bin/python bench/hostile_inputs_bench.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc

from scratch import django_on_scratch  # noqa: E402

WORK = django_on_scratch("hostile")

import yaml  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.files.uploadedfile import SimpleUploadedFile  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from accesspolicies.models import Membership, Organization, PersonalAccessToken, Role  # noqa: E402
from jobs.manifest import ManifestContext, parse  # noqa: E402
from jobs.models import Cluster, Profile  # noqa: E402
from tests.fakes.hub import FakeHub  # noqa: E402
from tests.jobs.test_hostile_inputs import alias_bomb, merge_bomb  # noqa: E402

MB = 1024 * 1024
INPUTS = {
    "flow nesting 100 KB": "[" * 100_000,
    "block nesting 100 KB": "- " * 50_000 + "x\n",
    "alias bomb 1 KB": alias_bomb(9, 9),
    "merge bomb 1.3 KB": merge_bomb(9, 9),
    "1 MB scalar": "spec:\n  name: " + "x" * (MB - 20) + "\n",
    "many keys (60k)": "".join(f"k{i}: {i}\n" for i in range(60_000)),
}
SMALL_BOMB = alias_bomb(6, 9)  # 9**6 = 531441 values once expanded


def measure(call) -> tuple[float, float, str]:
    """Seconds (a plain run), peak MiB (a second run under tracemalloc, which slows it) and a
    short outcome of `call()`."""

    def run() -> str:
        try:
            return str(call())
        except Exception as error:  # noqa: BLE001 - a bench reports what happened
            return type(error).__name__

    started = time.perf_counter()
    outcome = run()
    seconds = time.perf_counter() - started
    tracemalloc.start()
    run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, peak / MB, outcome[:70]


def row(surface: str, name: str, figures: tuple[float, float, str]) -> None:
    seconds, peak, outcome = figures
    print(f"{surface:<12} {name:<22} {seconds * 1000:>9.1f} ms {peak:>8.1f} MiB  {outcome}")


def parse_outcome(text: str) -> str:
    result = parse(text, ManifestContext(profiles={}))
    return "; ".join(f"{p.path}: {p.message[:40]}" for p in result.refusals[:1]) or "accepted"


def before_in_child(text: str) -> str:
    """The unbounded read (libyaml's composer) in a child process: its exit status."""
    code = "import sys, yaml; yaml.load(sys.stdin.read(), Loader=yaml.CSafeLoader)"
    child = subprocess.run(
        [sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=120
    )
    return {0: "read", -11: "killed by SIGSEGV"}.get(child.returncode, f"exit {child.returncode}")


def expanded_before(text: str) -> str:
    """The unbounded read, then what a page does with it (JSON of the data)."""
    data = yaml.load(text, Loader=yaml.CSafeLoader)
    return f"{len(json.dumps(data)) / MB:.1f} MB once expanded"


def main() -> None:
    call_command("migrate", verbosity=0)
    org = Organization.objects.create(slug="acme", name="Acme")
    cluster = Cluster.objects.create(organization=org, name="local")
    Profile.objects.create(organization=org, name="local", cluster=cluster)
    user = get_user_model().objects.create_user(username="deployer")
    Membership.objects.create(organization=org, user=user, role=Role.DEPLOYER)
    _, token = PersonalAccessToken.issue(user, org, "bench")
    client = Client()
    client.force_login(user)
    print(f"{'surface':<12} {'input':<22} {'time':>12} {'peak':>12}  outcome")
    for name in ("flow nesting 100 KB", "block nesting 100 KB"):
        row("before", name, measure(lambda text=INPUTS[name]: before_in_child(text)))
    row("before", "alias bomb 6 levels", measure(lambda: expanded_before(SMALL_BOMB)))
    # Unbounded reads that finish quickly enough to show (the 9-level bomb takes minutes).
    for name in ("1 MB scalar", "many keys (60k)"):
        row("before", name, measure(lambda text=INPUTS[name]: expanded_before(text)))
    parse_outcome("a: 1")  # first calls import and warm caches: not part of the figures
    for name, text in INPUTS.items():
        row("parse", name, measure(lambda text=text: parse_outcome(text)))
    with FakeHub().serve() as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
        client.post(
            "/api/v1/applications?dryRun=true",
            data="a: 1",
            content_type="application/yaml",
            **headers,
        )
        client.post("/deploy/yaml/dry-run/", {"manifest": "a: 1"})
        client.get("/catalog/masters/add/")
        for name, text in INPUTS.items():
            row(
                "API dry run",
                name,
                measure(
                    lambda text=text: (
                        client.post(
                            "/api/v1/applications?dryRun=true",
                            data=text,
                            content_type="application/yaml",
                            **headers,
                        ).status_code
                    )
                ),
            )
        for name, text in INPUTS.items():
            row(
                "YAML page",
                name,
                measure(
                    lambda text=text: (
                        client.post("/deploy/yaml/dry-run/", {"manifest": text}).status_code
                    )
                ),
            )
    env_bomb = alias_bomb(7, 9)
    row(
        "master form",
        f"env bomb {len(env_bomb)} B",
        measure(
            lambda: (
                client.post(
                    "/catalog/masters/add/",
                    {"model_id": "a/b", "runtime": "vllm", "env_yaml": env_bomb},
                ).status_code
            )
        ),
    )
    recipe = b"a: " + b"x" * (13 * MB)
    row(
        "recipe",
        "13 MB upload",
        measure(
            lambda: (
                client.post(
                    "/catalog/masters/recipe/",
                    {"recipe_file": SimpleUploadedFile("r.yaml", recipe), "gpu_kind": "l4"},
                ).status_code
            )
        ),
    )


if __name__ == "__main__":
    main()
