"""The launcher a ServeDeck virtual machine runs at boot, as systemd's servedeck-model@<machine>
unit: `python3 -I launch.py <machine>.json`. It reads the machine's start plan (written by
jobs/render/kubevirt.py into the application's guest-files ConfigMap), downloads the weights
when the plan says so, runs the plan's steps, then becomes the server (exec), every command an
argv list from the plan and never a shell line.

It runs in the guest, not in the console: standard library and huggingface_hub only (the guest
image has both), no import of the console's code.
"""

import json
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as handle:
        plan = json.load(handle)
    env = dict(os.environ, **plan.get("env", {}))
    fetch = plan.get("download")
    if fetch:
        os.environ.update(plan.get("env", {}))
        from huggingface_hub import snapshot_download

        snapshot_download(fetch["repo"], revision=fetch.get("revision"), local_dir=fetch["to"])
    for step in plan.get("steps", []):
        subprocess.run(step, env=env, check=True)
    os.execvpe(plan["exec"][0], plan["exec"], env)  # noqa: S606 - the plan's argv, no shell
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
