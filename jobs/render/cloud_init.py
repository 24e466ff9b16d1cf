"""What a KubeVirt virtual machine runs at boot: the start plan (argv lists, never a shell
line) and the cloud-init user data that writes it, a fixed launcher and a systemd unit.

Nothing a member types is ever part of a command line that a shell, systemd or cloud-init
interprets: the plan is a JSON file the launcher reads with json.load and hands to execve as a
list, the user data is dumped by a YAML emitter (so a value cannot end its scalar), and the
launcher and the unit are constants.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

PLAN_PATH = "/etc/servedeck/serve.json"
LAUNCHER_PATH = "/usr/local/lib/servedeck/launch.py"
UNIT_NAME = "servedeck-model.service"
WEIGHTS_TAG = "weights"  # the virtiofs tag of the replica's weight volume
WEIGHTS_DIR = "/weights"
MODELS_TAG = "models"  # the virtiofs tag of a pvc:// artifact's claim
MODELS_DIR = "/mnt/models"
HF_TOKEN_SERIAL = "hf-token"  # the disk serial of the Secret holding HF_TOKEN
HF_TOKEN_DIR = "/run/servedeck/hf-token"

# Read once per boot by the unit below; its only input is the plan file.
LAUNCHER = """\
import json, os, subprocess, sys

with open(sys.argv[1], encoding="utf-8") as handle:
    plan = json.load(handle)
env = dict(os.environ, **plan.get("env", {}))
fetch = plan.get("download")
if fetch:
    os.environ.update(plan.get("env", {}))
    from huggingface_hub import snapshot_download

    snapshot_download(fetch["repo"], revision=fetch.get("revision"), local_dir=fetch["to"])
for step in plan.get("steps", []):
    subprocess.run(step, env=env, check=True)
os.execvpe(plan["exec"][0], plan["exec"], env)
"""

UNIT = f"""\
[Unit]
Description=ServeDeck model server
Wants=network-online.target
After=network-online.target local-fs.target

[Service]
ExecStart=/usr/bin/python3 -I {LAUNCHER_PATH} {PLAN_PATH}
Restart=on-failure
RestartSec=10

[Install]
WantedBy=multi-user.target
"""


@dataclass(frozen=True)
class StartPlan:
    """What one virtual machine runs: optional download, steps, then the server (exec)."""

    exec: tuple[str, ...]
    steps: tuple[tuple[str, ...], ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    download: Mapping[str, str] | None = None

    def as_json(self) -> str:
        plan: dict[str, Any] = {}
        if self.download:
            plan["download"] = dict(self.download)
        plan["env"] = dict(self.env)
        plan["steps"] = [list(step) for step in self.steps]
        plan["exec"] = list(self.exec)
        return json.dumps(plan, indent=2, sort_keys=False) + "\n"


def user_data(plan: StartPlan, *, weights: bool, models: bool, hf_token: bool) -> str:
    """#cloud-config that mounts the volumes, writes the plan, the launcher and the unit,
    and starts the unit. Commands are lists (cloud-init quotes each item)."""
    mounts = []
    if weights:
        mounts.append([WEIGHTS_TAG, WEIGHTS_DIR, "virtiofs", "defaults,nofail", "0", "0"])
    if models:
        mounts.append([MODELS_TAG, MODELS_DIR, "virtiofs", "ro,nofail", "0", "0"])
    if hf_token:
        disk = f"/dev/disk/by-id/virtio-{HF_TOKEN_SERIAL}"
        mounts.append([disk, HF_TOKEN_DIR, "iso9660", "ro,nofail", "0", "0"])
    config: dict[str, Any] = {}
    if mounts:
        config["mounts"] = mounts
    config["write_files"] = [
        {"path": PLAN_PATH, "permissions": "0644", "content": plan.as_json()},
        {"path": LAUNCHER_PATH, "permissions": "0644", "content": LAUNCHER},
        {"path": f"/etc/systemd/system/{UNIT_NAME}", "permissions": "0644", "content": UNIT},
    ]
    config["runcmd"] = [
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", "--now", UNIT_NAME],
    ]
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=100_000)
    return "#cloud-config\n" + body


def read_plan(data: str) -> dict[str, Any]:
    """The start plan written by user_data (for tests and the dry run's readers)."""
    config = yaml.safe_load(data.split("\n", 1)[1])
    for entry in config["write_files"]:
        if entry["path"] == PLAN_PATH:
            return json.loads(entry["content"])
    raise ValueError("no start plan in the user data")
