"""The machine-wide GPU ledger: every organisation's local runner on one machine picks GPUs
from one ledger under one lock, so no GPU is given twice, even to concurrent applies. A fake
`nvidia-smi` on PATH stands in for the host program that lists the GPUs."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from jobs.backends.local.gpu_ledger import LEDGER_FILE, GpuLedger
from jobs.backends.local.runner import RUNNING, LocalRefused, LocalRunner
from tests.jobs.backends.local.test_local_backend import (
    fake_nvidia_smi,
    manifest,
    servers_tagged,
    stand_in,
    wait_for,
)

GPU = {"resources": {"accelerator": {"gpu": {"countPerReplica": 1}}}}


@pytest.fixture
def machine(tmp_path, monkeypatch) -> Path:
    """A machine with two GPUs; returns the root of every organisation's state folder."""
    fake_nvidia_smi(tmp_path / "bin", gpus=2)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    root = tmp_path / "local"
    root.mkdir()
    return root


@pytest.fixture
def runners(machine):
    """Runners of two organisations on one machine, as local_runner() makes them."""
    made: list[LocalRunner] = []

    def runner(org: str) -> LocalRunner:
        made.append(
            LocalRunner(
                machine / org, template=stand_in(machine), grace_seconds=1.0, probe_timeout=0.5
            )
        )
        return made[-1]

    yield runner
    for each in made:
        each.shutdown()
    assert servers_tagged(machine) == []


def devices(runner: LocalRunner, app: str, replica: int = 0) -> str:
    """The CUDA_VISIBLE_DEVICES the stand-in reports in its log once it serves."""
    wait_for(runner, app, RUNNING)
    lines = [line for line in runner.tail(app, 10, replica) if "CUDA_VISIBLE_DEVICES=" in line]
    assert lines, runner.tail(app, 10, replica)
    return lines[-1].split("CUDA_VISIBLE_DEVICES=")[1].split()[0]


def test_two_organisations_never_get_the_same_gpu(runners):
    acme, globex = runners("acme"), runners("globex")
    acme.apply("chat", manifest("chat", **GPU), 1)
    globex.apply("chat", manifest("chat", **GPU), 1)
    assert {devices(acme, "chat"), devices(globex, "chat")} == {"0", "1"}
    with pytest.raises(LocalRefused) as refused:
        runners("initech").apply("chat", manifest("chat", **GPU), 1)
    assert "needs 1 GPU(s) and 0 of this machine's 2 are free" in refused.value.refusals[0]


def test_concurrent_applies_of_two_organisations_share_out_the_gpus(runners):
    orgs = [runners("acme"), runners("globex")]
    outcomes: dict[tuple[int, int], str] = {}
    start = threading.Barrier(6)

    def apply(org: int, number: int) -> None:
        start.wait()
        try:
            orgs[org].apply(f"app{number}", manifest(f"app{number}", **GPU), 1)
            outcomes[org, number] = devices(orgs[org], f"app{number}")
        except LocalRefused:
            outcomes[org, number] = "refused"

    threads = [
        threading.Thread(target=apply, args=(org, number)) for org in (0, 1) for number in (1, 2, 3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    given = sorted(v for v in outcomes.values() if v != "refused")
    assert given == ["0", "1"], outcomes
    assert list(outcomes.values()).count("refused") == 4


def test_stop_and_delete_release_their_gpus_to_another_organisation(runners):
    acme, globex = runners("acme"), runners("globex")
    acme.apply("pair", manifest("pair", scaling={"minReplicas": 2}, **GPU), 1)
    with pytest.raises(LocalRefused):
        globex.apply("chat", manifest("chat", **GPU), 1)
    acme.stop("pair")
    globex.apply("chat", manifest("chat", **GPU), 1)
    with pytest.raises(LocalRefused):  # a stopped application gets its GPUs back only if free
        acme.start("pair")
    globex.delete("chat")
    acme.start("pair")
    assert {devices(acme, "pair", 0), devices(acme, "pair", 1)} == {"0", "1"}


def test_a_crashed_replica_releases_its_gpu(runners):
    acme, globex = runners("acme"), runners("globex")
    acme.apply("pair", manifest("pair", scaling={"minReplicas": 2}, **GPU), 1)
    status = wait_for(acme, "pair", RUNNING)
    crashed_gpu = devices(acme, "pair", 1)
    os.killpg(status.replicas[1].pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while acme.observe("pair").phase == RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
    globex.apply("chat", manifest("chat", **GPU), 1)
    assert devices(globex, "chat") == crashed_gpu


def test_the_ledger_is_recovered_from_the_state_files(runners, machine):
    acme = runners("acme")
    acme.apply("chat", manifest("chat", **GPU), 1)
    held = json.loads((machine / LEDGER_FILE).read_text())["holdings"]
    assert [(h["owner"], h["gpus"]) for h in held] == [("acme/chat", [0])]
    (machine / LEDGER_FILE).unlink()  # as on a root written before the ledger
    with GpuLedger(machine).held() as book:
        assert book.in_use() == {0}
    globex = runners("globex")  # a console started again
    globex.apply("chat", manifest("chat", **GPU), 1)
    assert devices(globex, "chat") == "1"
