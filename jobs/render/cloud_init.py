"""What a KubeVirt virtual machine runs at boot: its start plan (argv lists, never a shell line),
the guest files every machine of the application reads from one ConfigMap (the launcher, the
systemd unit, each machine's plan), and the small cloud-init user data that mounts them and
starts the unit.

The files travel in a ConfigMap, mounted into the guest as a disk, because KubeVirt's webhook
refuses inline cloud-init user data over 2048 bytes (cloudInitUserMaxLen): the launcher alone is
larger. The user data is then a few mounts and three commands, whatever the manifest says.

Nothing a member types is ever part of a command line that a shell, systemd or cloud-init
interprets: the plan is a JSON file the launcher reads with json.load and hands to execve as a
list, the user data is dumped by a YAML emitter (so a value cannot end its scalar), the
launcher and the unit are constants, and the unit's instance name is the machine's name (a DNS
label).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .guest_launcher import REFUSED

# KubeVirt's webhook: inline userData (and userDataBase64) of at most this many bytes.
USER_DATA_MAX = 2048
GUEST_SERIAL = "servedeck-guest"  # the disk serial of the guest files' ConfigMap (<= 20)
GUEST_DIR = "/run/servedeck/guest"
LAUNCHER_FILE = "launch.py"
# A template unit (one instance per machine, by its name); a ConfigMap key takes no "@", so
# it travels as UNIT_KEY and is installed under its own name.
UNIT_FILE = "servedeck-model@.service"
UNIT_KEY = "servedeck-model.service"
WEIGHTS_TAG = "weights"  # the virtiofs tag of the replica's weight volume
WEIGHTS_DIR = "/weights"
MODELS_TAG = "models"  # the virtiofs tag of a pvc:// artifact's claim
MODELS_DIR = "/mnt/models"
HF_TOKEN_SERIAL = "hf-token"  # the disk serial of the Secret holding HF_TOKEN
HF_TOKEN_DIR = "/run/servedeck/hf-token"

# Read once per boot by the unit below; its only input is the plan file. Its messages go to
# the guest's serial console too, which `virtctl console` and KubeVirt's console log show.
UNIT = f"""\
[Unit]
Description=ServeDeck model server (%i)
Wants=network-online.target
After=network-online.target local-fs.target

[Service]
ExecStart=/usr/bin/python3 -I {GUEST_DIR}/{LAUNCHER_FILE} {GUEST_DIR}/%i.json
Restart=on-failure
RestartSec=10
RestartPreventExitStatus={REFUSED}
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
"""


@cache
def launcher() -> str:
    """The launcher's source: guest_launcher.py beside this file, standard library and
    huggingface_hub only, as the guest's python3 runs it."""
    return Path(__file__).with_name("guest_launcher.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class StartPlan:
    """What one virtual machine runs (guest_launcher.py reads it): the volumes that must be
    mounted (path -> virtiofs tag), the readiness probe's port (the leader's, answered by the
    launcher until the server starts), the name to advertise to the replica's other machines,
    an optional download, steps, then the server (exec)."""

    exec: tuple[str, ...]
    steps: tuple[tuple[str, ...], ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    download: Mapping[str, str] | None = None
    mounts: Mapping[str, str] = field(default_factory=dict)
    probe_port: int | None = None
    advertise: str | None = None

    def as_json(self) -> str:
        plan: dict[str, Any] = {"mounts": dict(self.mounts)}
        if self.probe_port is not None:
            plan["probe_port"] = self.probe_port
        if self.advertise:
            plan["advertise"] = self.advertise
        if self.download:
            plan["download"] = dict(self.download)
        plan["env"] = dict(self.env)
        plan["steps"] = [list(step) for step in self.steps]
        plan["exec"] = list(self.exec)
        return json.dumps(plan, indent=2, sort_keys=False) + "\n"


def plan_file(machine: str) -> str:
    return f"{machine}.json"


def guest_files(plans: Mapping[str, StartPlan]) -> dict[str, str]:
    """The ConfigMap's data: the launcher, the unit, and each machine's plan by its name."""
    files = {LAUNCHER_FILE: launcher(), UNIT_KEY: UNIT}
    for machine, plan in plans.items():
        files[plan_file(machine)] = plan.as_json()
    return files


def guest_digest(files: Mapping[str, str], machine: str) -> str:
    """What of the guest files one machine reads: a changed plan, launcher or unit is a changed
    machine (its instance is replaced), though the VirtualMachine names only the ConfigMap."""
    read = {name: files[name] for name in (LAUNCHER_FILE, UNIT_KEY, plan_file(machine))}
    text = json.dumps(read, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def user_data(machine: str, *, weights: bool, models: bool, hf_token: bool) -> str:
    """#cloud-config that mounts the volumes and the guest files, installs the unit and starts
    this machine's instance of it. Commands are lists (cloud-init quotes each item)."""
    mounts = [
        [f"/dev/disk/by-id/virtio-{GUEST_SERIAL}", GUEST_DIR, "iso9660", "ro,nofail", "0", "0"]
    ]
    # nofail: a volume that does not mount must not stop the boot (the guest would sit in
    # emergency mode, unreachable); the launcher refuses to start without it instead.
    if weights:
        mounts.append([WEIGHTS_TAG, WEIGHTS_DIR, "virtiofs", "defaults,nofail", "0", "0"])
    if models:
        mounts.append([MODELS_TAG, MODELS_DIR, "virtiofs", "ro,nofail", "0", "0"])
    if hf_token:
        disk = f"/dev/disk/by-id/virtio-{HF_TOKEN_SERIAL}"
        mounts.append([disk, HF_TOKEN_DIR, "iso9660", "ro,nofail", "0", "0"])
    config: dict[str, Any] = {
        "mounts": mounts,
        "runcmd": [
            ["cp", f"{GUEST_DIR}/{UNIT_KEY}", f"/etc/systemd/system/{UNIT_FILE}"],
            ["systemctl", "daemon-reload"],
            ["systemctl", "enable", "--now", unit_instance(machine)],
        ],
    }
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=100_000)
    return "#cloud-config\n" + body


def unit_instance(machine: str) -> str:
    return UNIT_FILE.replace("@.", f"@{machine}.")
