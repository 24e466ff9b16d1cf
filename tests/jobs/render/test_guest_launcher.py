"""The launcher a virtual machine's guest runs at boot (jobs/render/guest_launcher.py), run here
as the unit runs it (`python3 -I launch.py <plan>`) on plans the renderer's StartPlan writes:
the weights downloaded by the real huggingface_hub client from the fake Hub into the volume,
then a restart that finds them complete and starts offline without asking the Hub; the
readiness probe's port answered while it downloads; a refusal to start when the weight volume
is not mounted; and the address Ray and vLLM advertise, which must be this guest's own.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from jobs.render import guest_launcher
from jobs.render.cloud_init import StartPlan
from tests.fakes.hub import FakeHub, closed_endpoint, disk_repo
from tests.helpers import wait_for

LAUNCHER = str(Path(guest_launcher.__file__).resolve())
REPO = "acme/tiny-vm"
# The "server": prints what it was started with, as JSON.
SHOW = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], "
    "'offline': os.environ.get('HF_HUB_OFFLINE'), 'host': os.environ.get('VLLM_HOST_IP')}))"
)
SERVER = (sys.executable, "-c", SHOW, "--port=8000")
BOUND = 120  # seconds a launcher may take before the test gives up on it (not a measure)


@pytest.fixture
def hub(tmp_path):
    folder = tmp_path / "hub" / REPO
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 64)
    with FakeHub({REPO: disk_repo(REPO, folder)}).serve() as served:
        yield served


def write(tmp_path: Path, plan: StartPlan) -> str:
    path = tmp_path / "machine.json"
    path.write_text(plan.as_json())
    return str(path)


def command(plan_path: str) -> list[str]:
    return [sys.executable, "-I", LAUNCHER, plan_path]


def launch(tmp_path: Path, plan: StartPlan, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(write(tmp_path, plan)),
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )


def started(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def probe(port: int) -> int | None:
    """What GET /v1/models answers on the port, as the readiness probe asks it."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def downloading(hub, tmp_path: Path, **more) -> StartPlan:
    to = str(tmp_path / "weights" / "model")
    fetch = {"repo": REPO, "to": to, "revision": hub.repos[REPO].sha}
    return StartPlan(exec=SERVER, download=fetch, env={"HF_HOME": str(tmp_path / "hf")}, **more)


def test_a_restart_finds_the_weights_complete_and_starts_offline(hub, tmp_path):
    plan = downloading(hub, tmp_path)
    first = started(launch(tmp_path, plan, HF_ENDPOINT=hub.url))
    assert first == {"argv": ["--port=8000"], "offline": "1", "host": None}
    model = tmp_path / "weights" / "model"
    assert (model / "weights.bin").read_bytes() == bytes(range(256)) * 64
    assert json.loads((tmp_path / "weights" / "model.complete.json").read_text()) == {
        "repo": REPO,
        "revision": hub.repos[REPO].sha,
    }
    assert hub.requests
    # The Hub is gone: the restart reads the volume alone.
    with closed_endpoint() as nowhere:
        second = launch(tmp_path, plan, HF_ENDPOINT=nowhere)
    assert started(second)["offline"] == "1"
    assert "complete" in second.stderr and "starting offline" in second.stderr


def test_a_half_done_download_is_done_again(hub, tmp_path):
    plan = downloading(hub, tmp_path)
    started(launch(tmp_path, plan, HF_ENDPOINT=hub.url))
    marker = tmp_path / "weights" / "model.complete.json"
    marker.write_text(json.dumps({"repo": REPO, "revision": "0" * 40}))  # another commit's
    hub.reset_log()
    started(launch(tmp_path, plan, HF_ENDPOINT=hub.url))
    assert hub.requests  # asked the Hub again
    assert json.loads(marker.read_text())["revision"] == hub.repos[REPO].sha


def test_the_readiness_probe_hears_downloading_until_the_server_starts(hub, tmp_path):
    port = free_port()
    hub.slow_files = {"weights.bin": 1.0}
    plan = downloading(hub, tmp_path, probe_port=port)
    process = subprocess.Popen(
        command(write(tmp_path, plan)),
        env={**os.environ, "HF_ENDPOINT": hub.url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: probe(port) == guest_launcher.DOWNLOADING, "no 503 while downloading", 30)
        out, err = process.communicate(timeout=BOUND)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert json.loads(out)["offline"] == "1"
    assert probe(port) is None  # the launcher let go of the port for the server


def test_without_its_weight_volume_a_machine_refuses_to_start(hub, tmp_path):
    volume = tmp_path / "weights"
    volume.mkdir()  # a folder on the root disk, not a mount
    worker = StartPlan(exec=SERVER, mounts={str(volume): "weights"})
    done = launch(tmp_path, worker)
    assert done.returncode == guest_launcher.REFUSED
    assert done.stdout == ""  # no server started
    assert f"refusing to start: {volume} is not mounted (volume weights" in done.stderr
    assert "EnableVirtioFsStorageVolumes" in done.stderr
    # The leader says so to its readiness probe too, and downloads nothing meanwhile.
    port = free_port()
    leader = downloading(hub, tmp_path, mounts={str(volume): "weights"}, probe_port=port)
    process = subprocess.Popen(
        command(write(tmp_path, leader)),
        env={**os.environ, "HF_ENDPOINT": hub.url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: probe(port) == guest_launcher.VOLUME_MISSING, "no 507 from the leader")
    finally:
        process.kill()
        process.wait()
    assert not hub.requests
    assert not (volume / "model").exists()


def test_ray_and_vllm_advertise_the_address_the_cluster_knows_this_machine_by(tmp_path):
    bin_dir, said = tmp_path / "bin", tmp_path / "ray-args"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    ray.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(said)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    ray.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    plan = StartPlan(
        exec=SERVER,
        steps=(("ray", "stop"), ("ray", "start", "--head", "--port=6379")),
        advertise="127.0.0.1",  # a name that resolves to an address this machine holds
    )
    assert started(launch(tmp_path, plan, PATH=path))["host"] == "127.0.0.1"
    assert [json.loads(line) for line in said.read_text().splitlines()] == [
        ["stop"],
        ["start", "--head", "--port=6379", "--node-ip-address=127.0.0.1"],
    ]
    # A name that resolves elsewhere (a NAT'ed guest's pod address): refused, nothing started.
    nat = StartPlan(exec=SERVER, steps=(("ray", "stop"),), advertise="192.0.2.7")
    said.unlink()
    done = launch(tmp_path, nat, PATH=path)
    assert done.returncode == guest_launcher.REFUSED and done.stdout == ""
    assert "resolves to 192.0.2.7, not an address of this guest" in done.stderr
    assert "bridged to the pod network" in done.stderr
    assert not said.exists()
