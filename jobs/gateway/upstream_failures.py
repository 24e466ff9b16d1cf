"""What the gateway answers when a model server fails it: ReplicaFailed (the replica is taken
out for a back-off, replicas.py), a redirect it does not follow, an answer larger than it reads.
"""

from __future__ import annotations

from .errors import GatewayError


class ReplicaFailed(GatewayError):
    """The replica failed or did not answer (not the request): it is taken out for a back-off.
    `retry`: another replica may be asked, if nothing has reached the client yet."""

    def __init__(self, status: int, message: str, code: str, retry: bool) -> None:
        super().__init__(status, message, code=code)
        self.retry = retry


def server_failed(status: int) -> ReplicaFailed:
    """The model server's own 5xx, said in OpenAI's shape without its internals; another
    replica may be asked."""
    return ReplicaFailed(
        502, f"The model server failed (status {status}).", "upstream_failed", True
    )


async def read_bounded(response, limit: int) -> bytes:
    """The whole answer, or a 502 once it grows past `limit` bytes."""
    declared = response.content_length
    if declared is not None and declared > limit:
        raise too_big(limit)
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise too_big(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def too_big(limit: int) -> GatewayError:
    size = f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"
    return GatewayError(
        502,
        f"The model server's answer is larger than {size}, more than the gateway reads; "
        "ask for less in one request.",
        code="upstream_failed",
    )


def unreachable(error: Exception, failed: str) -> GatewayError:
    """504 when the model server took too long, 502 when it `failed` otherwise; either takes
    the replica out for a while, and a 502 (it did not answer at all) tries another."""
    if isinstance(error, TimeoutError):
        return ReplicaFailed(
            504, "The model server did not answer in time.", "upstream_timeout", False
        )
    return ReplicaFailed(502, f"The model server {failed}.", "upstream_failed", True)


def redirected(status: int) -> GatewayError:
    return GatewayError(
        502,
        f"The model server answered with a redirect (status {status}), which the gateway does "
        "not follow: it calls only the application's own server.",
        code="upstream_failed",
    )
