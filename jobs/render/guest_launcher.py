"""The launcher a ServeDeck virtual machine runs at boot, as systemd's servedeck-model@<machine>
unit: `python3 -I launch.py <machine>.json`. It reads the machine's start plan (written by
jobs/render/kubevirt.py into the application's guest-files ConfigMap) and, in order:

1. refuses to start when a volume the plan names is not mounted (the weight volume's mount is
   `nofail`, so a virtiofs that fails leaves an empty folder on the root disk, which every
   restart throws away: downloading there would only hide the fault);
2. finds the address the cluster knows this machine by (its name in the replica's headless
   Service) and refuses when the guest does not hold it (a NAT'ed interface): Ray and vLLM
   advertise that address to the other machines of the replica;
3. downloads the weights into the replica's volume, unless a complete snapshot of the same
   commit is there already (a marker written after a download that finished): a restart
   starts offline, without the Hub;
4. runs the plan's steps, then becomes the server (exec), offline when it downloaded.

While it downloads (or refuses), it answers the readiness probe's port itself, with a status
that says which (DOWNLOADING, VOLUME_MISSING): the kubelet's "Readiness probe failed" event
carries the status code, and jobs.status.machines reads it. Every command is an argv list from
the plan, never a shell line.

It runs in the guest, not in the console: standard library and huggingface_hub only (the guest
image has both). The console imports it only for the two status codes.
"""

from __future__ import annotations  # the guest's python3 may be older than the console's

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

DOWNLOADING = 503  # the readiness probe's answer while the weights download
VOLUME_MISSING = 507  # ... while it refuses to start because a volume is not mounted
REFUSED = 78  # exit status (sysexits' EX_CONFIG): the unit does not retry
COMPLETE_SUFFIX = ".complete.json"  # beside the snapshot folder: what was downloaded there
RESOLVE_SECONDS = 600  # how long the machine's name may take to appear in the cluster's DNS


def say(text: str) -> None:
    print(f"servedeck: {text}", file=sys.stderr, flush=True)


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(self.server.code)  # type: ignore[attr-defined]
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args: object) -> None:  # the probe asks every few seconds
        pass


def answer(port: int, code: int) -> http.server.ThreadingHTTPServer:
    """Answer every request on the server's port with `code` until shut down."""
    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), _Answer)  # noqa: S104 - as the server
    server.code = code  # type: ignore[attr-defined]
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def refuse(text: str, port: int | None) -> int:
    say(f"refusing to start: {text}")
    if port is None:
        return REFUSED
    # The leader keeps saying so to its readiness probe, which is how the console learns it.
    server = answer(port, VOLUME_MISSING)
    threading.Event().wait()  # until the machine stops
    server.shutdown()
    return REFUSED  # not reached


def missing_volume(mounts: dict[str, str]) -> str | None:
    for path, tag in sorted(mounts.items()):
        if not os.path.ismount(path):
            return (
                f"{path} is not mounted (volume {tag}, shared into the guest with virtiofs), so "
                "the weights would land on the root disk, which every restart loses. Check that "
                "KubeVirt shares PersistentVolumeClaims with virtiofs (feature gate "
                "EnableVirtioFsStorageVolumes) and that the claim is bound, then restart the "
                "application."
            )
    return None


def own_address(name: str) -> tuple[str | None, list[str]]:
    """The address `name` resolves to that this guest holds (None if none), and all it
    resolves to. Waits for the name to appear: the Service publishes it once the machine's
    pod has its address."""
    deadline = time.monotonic() + RESOLVE_SECONDS
    while True:
        try:
            found = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
            break
        except socket.gaierror:
            if time.monotonic() > deadline:
                return None, []
            time.sleep(2)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            try:
                probe.bind((address, 0))  # only an address of this guest can be bound
            except OSError:
                continue
            return address, addresses
    return None, addresses


def with_address(argv: list[str], address: str | None) -> list[str]:
    """`ray start` advertises the address the cluster knows this machine by."""
    if address and argv[:2] == ["ray", "start"]:
        return [*argv, f"--node-ip-address={address}"]
    return argv


def complete(fetch: dict) -> bool:
    marker = fetch["to"] + COMPLETE_SUFFIX
    try:
        with open(marker, encoding="utf-8") as handle:
            done = json.load(handle)
    except (OSError, ValueError):
        return False
    wanted = {"repo": fetch["repo"], "revision": fetch.get("revision")}
    return done == wanted and os.path.isdir(fetch["to"])


def download(fetch: dict, env: dict[str, str]) -> None:
    marker = fetch["to"] + COMPLETE_SUFFIX
    if os.path.exists(marker):
        os.remove(marker)  # what follows changes the folder: it is not complete until done
    os.environ.update(env)  # huggingface_hub reads HF_HOME and HF_TOKEN_PATH when imported
    from huggingface_hub import snapshot_download

    say(f"downloading {fetch['repo']} into {fetch['to']}")
    snapshot_download(fetch["repo"], revision=fetch.get("revision"), local_dir=fetch["to"])
    with open(marker + ".tmp", "w", encoding="utf-8") as handle:
        json.dump({"repo": fetch["repo"], "revision": fetch.get("revision")}, handle)
    os.replace(marker + ".tmp", marker)  # whole or absent
    say(f"{fetch['repo']} is complete in {fetch['to']}")


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as handle:
        plan = json.load(handle)
    port = plan.get("probe_port")
    missing = missing_volume(plan.get("mounts") or {})
    if missing:
        return refuse(missing, port)
    env = dict(os.environ, **plan.get("env", {}))
    address = None
    if plan.get("advertise"):
        name = plan["advertise"]
        address, found = own_address(name)
        if address is None:
            listed = ", ".join(found) or "no address"
            return refuse(
                f"this machine's name {name} resolves to {listed}, not an address of this "
                "guest, so the replica's other machines could not reach what it advertises. "
                "Its interface must be bridged to the pod network (bridge binding), not "
                "masqueraded.",
                None,
            )
        env["VLLM_HOST_IP"] = address  # vLLM's own address for the replica's other machines
    fetch = plan.get("download")
    if fetch:
        if complete(fetch):
            say(f"{fetch['repo']} is complete in {fetch['to']}: starting offline, without the Hub")
        else:
            responder = answer(port, DOWNLOADING) if port else None
            try:
                download(fetch, plan.get("env", {}))
            finally:
                if responder is not None:
                    responder.shutdown()
                    responder.server_close()  # the server takes the port next
        env["HF_HUB_OFFLINE"] = "1"  # the server reads the folder and never asks the Hub
    for step in plan.get("steps", []):
        subprocess.run(with_address(step, address), env=env, check=True)  # noqa: S603 - the plan's argv
    command = with_address(plan["exec"], address)
    os.execvpe(command[0], command, env)  # noqa: S606 - the plan's argv, no shell
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
