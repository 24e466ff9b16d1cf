"""A real LoRA adapter, end to end: made with peft for the packaged SmolLM2 (random
weights: the loading path is real), deployed through the REST API beside its base on vLLM's CPU
build by the real local backend (file:// folders under the models folder), and called through
the console's gateway under its own model id with a key that may call only the adapter; its
requests metered apart from the base's.

The adapter is made once by tests/packaged_models.py with peft. Needs vLLM's CPU build: skipped
without it on a developer's machine, failed in CI (CI=true). vLLM's CPU start is slow (minutes
cold); its compile cache (SERVEDECK_VLLM_CACHE_DIR) makes the next one faster.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import openai
import pytest

from jobs.backends.local import runtimes as rt
from jobs.backends.local.backend import local_runner
from jobs.models import UsageMinute
from tests.gateway.support import CHAT_RUNTIME, IN_CI, MISSING, WHY_MISSING
from tests.gateway.test_embedded_end_to_end import command
from tests.gateway.test_real_models_end_to_end import (
    ANSWER_TIMEOUT,
    RELOAD_TIMEOUT,
    follow,
    served,
)
from tests.helpers import bearer
from tests.manifest_text import local_manifest

WHY_NOT = (
    WHY_MISSING
    if MISSING
    else "this CPU does not run vLLM's CPU build, which serves LoRA adapters here"
    if CHAT_RUNTIME is None
    else None
)
pytestmark = [
    pytest.mark.real_models,
    pytest.mark.database_file,  # the live server is another process: a database file
    pytest.mark.skipif(WHY_NOT is not None and not IN_CI, reason=WHY_NOT or ""),
]


def test_a_lora_adapter_is_a_model_of_its_own_behind_v1(real_machine, console_server, admin):
    if WHY_NOT is not None:
        pytest.fail(f"CI runs the LoRA adapter test, but {WHY_NOT}")
    live = console_server
    headers = {"Authorization": bearer(admin)["HTTP_AUTHORIZATION"]}
    base = Path(real_machine.chat).resolve()
    adapter = Path(real_machine.chat_adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["base_model_name_or_path"] == str(base), config
    text = local_manifest("smol", f"file://{base}")
    # float32 as the end-to-end chat test runs it; the adapter beside it under its own id.
    text += "      engine:\n        dtype: float32\n"
    text += f"      adapters:\n        - name: smol-support\n          uri: file://{adapter}\n"
    created = httpx.post(
        f"{live}/api/v1/applications",
        headers={**headers, "Content-Type": "application/yaml"},
        content=text,
        timeout=60,
    )
    assert created.status_code == 201, created.text
    assert follow("smol", "Running").runtime == rt.VLLM_CPU.name

    made = json.loads(
        command("apikey", "create", "adapter-only", "--app", "smol-support", "--json")
    )
    client = openai.OpenAI(
        base_url=f"{live}/v1", api_key=made["key"], max_retries=0, timeout=ANSWER_TIMEOUT
    )
    deadline = time.monotonic() + RELOAD_TIMEOUT
    while True:
        try:
            listed = [m.id for m in client.models.list().data]
            break
        except openai.AuthenticationError:
            if time.monotonic() > deadline:
                pytest.fail(f"the new key was not accepted within {RELOAD_TIMEOUT:.0f} s")
            time.sleep(0.1)
    assert listed == ["smol-support"]

    answer = served(
        lambda: client.chat.completions.create(
            model="smol-support",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=12,
            temperature=0,
        )
    )
    # vLLM answered as the adapter (its --lora-modules name), on the base's replica.
    assert answer.model == "smol-support", answer
    assert answer.usage.completion_tokens > 0, answer
    with pytest.raises(openai.PermissionDeniedError, match="not allowed to call the model 'smol'"):
        client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}])

    # Metered apart: the adapter's row on the base application.
    deadline = time.monotonic() + RELOAD_TIMEOUT
    while not UsageMinute.objects.filter(application__name="smol", adapter="smol-support"):
        assert time.monotonic() < deadline, list(UsageMinute.objects.values())
        time.sleep(0.5)
    row = UsageMinute.objects.filter(application__name="smol", adapter="smol-support").first()
    assert row.completion_tokens > 0

    # A second adapter, a revision that changes nothing else: the running replica loads it at
    # run time (VLLM_ALLOW_RUNTIME_LORA_UPDATING), the same process answers to it.
    before = local_runner(admin.organization.slug).observe("smol").replicas[0]
    second = adapter.with_name(adapter.name + "-second")
    shutil.rmtree(second, ignore_errors=True)  # a copy of the adapter made this time
    shutil.copytree(adapter, second)
    text += f"        - name: smol-legal\n          uri: file://{second}\n"
    updated = httpx.put(
        f"{live}/api/v1/applications/smol",
        headers={**headers, "Content-Type": "application/yaml"},
        content=text,
        timeout=300,
    )
    assert updated.status_code == 200, updated.text
    after = local_runner(admin.organization.slug).observe("smol").replicas[0]
    assert (after.pid, after.port) == (before.pid, before.port), (before, after)
    assert follow("smol", "Running").runtime == rt.VLLM_CPU.name
    made = json.loads(command("apikey", "create", "legal-only", "--app", "smol-legal", "--json"))
    legal = openai.OpenAI(
        base_url=f"{live}/v1", api_key=made["key"], max_retries=0, timeout=ANSWER_TIMEOUT
    )

    deadline = time.monotonic() + RELOAD_TIMEOUT
    while True:
        try:
            answered = legal.chat.completions.create(
                model="smol-legal", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
            )
            break
        except (openai.AuthenticationError, openai.NotFoundError):
            # The gateway reloads its keys and routes about once a second.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert answered.model == "smol-legal", answered

    stopped = httpx.post(f"{live}/api/v1/applications/smol/stop", headers=headers, timeout=120)
    assert stopped.status_code == 200, stopped.text
    follow("smol", "Stopped", timeout=120)
