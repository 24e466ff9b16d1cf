"""The console's server refuses an upload before reading much of it (finding 3 of issue 21):
daphne read a whole body into a file before the application ran, so a keyless 150 MB upload
was read in full before the key check. Started as scripts/run.sh starts it, the console answers
a keyless 128 MiB upload to /v1 (401) and an oversized one to its own routes (413) before the
client could send 16 MiB, with a Content-Length and chunked alike.

The client sends slowly (a chunk, then a look for an answer) on a small send buffer, and counts
the bytes the kernel took from it: more than the server can have read."""

from __future__ import annotations

import select
import socket
import time

import pytest

from tests.console.console_process import ConsoleProcess

pytestmark = pytest.mark.database_file  # the console is another process: a database file

MiB = 1024 * 1024
UPLOAD = 128 * MiB
READ_AT_MOST = 16 * MiB
CHUNK = 64 * 1024
FORM = "multipart/form-data; boundary=x"


@pytest.fixture
def console(transactional_db, tmp_path):
    server = ConsoleProcess(tmp_path)
    yield server
    server.stop()


def upload(port: int, path: str, kind: str, chunked: bool, headers=()) -> tuple[int, int | None]:
    """POST a 128 MiB body slowly; (bytes the kernel took, status answered or None) once the
    server answered or closed, or once 16 MiB went out without either."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHUNK)
    length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {UPLOAD}"
    head = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Type: {kind}", length]
    sock.sendall(("\r\n".join([*head, *headers]) + "\r\n\r\n").encode())
    sock.setblocking(False)
    piece = b"x" * CHUNK
    if chunked:
        piece = f"{CHUNK:x}\r\n".encode() + piece + b"\r\n"
    sent, pending = 0, piece
    deadline = time.monotonic() + 120  # a wait with a limit, not a timing
    try:
        while sent < READ_AT_MOST and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock], [], 0.5)
            if readable:
                break
            if writable:
                taken = sock.send(pending)
                sent += taken
                pending = pending[taken:] or piece
                # Slowly: a moment for the server's answer after each piece.
                if select.select([sock], [], [], 0.02)[0]:
                    break
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed by the server: its answer, if any, is in the receive queue
    return sent, answered_status(sock)


def answered_status(sock: socket.socket) -> int | None:
    sock.setblocking(True)
    sock.settimeout(10)
    data = b""
    try:
        while b"\r\n" not in data:
            more = sock.recv(65536)
            if not more:
                break
            data += more
    except (TimeoutError, ConnectionResetError, BrokenPipeError):
        pass
    finally:
        sock.close()
    if not data.startswith(b"HTTP/1.1 "):
        return None
    return int(data.split(b" ", 2)[1])


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_keyless_upload_to_the_gateway_is_refused_before_16_mib(console, chunked):
    sent, status = upload(console.port, "/v1/audio/transcriptions", FORM, chunked)
    assert sent < READ_AT_MOST, f"the server took {sent} bytes before it answered"
    assert status == 401


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("path", ["/api/v1/applications", "/login/"])
def test_an_oversized_upload_to_the_console_is_refused_before_16_mib(console, path, chunked):
    sent, status = upload(console.port, path, "application/yaml", chunked)
    assert sent < READ_AT_MOST, f"the server took {sent} bytes before it answered"
    assert status == 413
