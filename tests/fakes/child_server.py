"""What the fakes that run their server in a child process on 127.0.0.1 (moto's S3 server,
Azurite) share: a free port to give it, its start with its output in a log file, and its stop."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now, for a server to take."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ChildServer:
    """A server in a child process started in `folder`, its output in `folder / log_name`."""

    def __init__(
        self,
        command: list[str],
        folder: Path,
        log_name: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.log = open(folder / log_name, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(  # noqa: S603 - our own binaries and arguments
            command,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=folder,
        )

    def stop(self) -> None:
        """Asked to stop, killed if it has not within 10 s; the log closed."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
