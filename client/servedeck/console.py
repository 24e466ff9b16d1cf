"""The console's REST API (`/api/v1/`) over httpx, with a personal access token.

Every failure becomes one of two exceptions the command line turns into exit codes:
`Failed` (the console answered and refused, exit 1) with the console's own message and
problems, and `Unreachable` (no answer at all, exit 3).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from servedeck import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


class ClientError(Exception):
    exit_code = EXIT_FAILED

    def __init__(self, message: str, problems: list[dict] | None = None, status: int = 0):
        super().__init__(message)
        self.message = message
        self.problems = problems or []
        self.status = status


class Failed(ClientError):
    """The console (or the gateway) answered, and refused or failed: its words."""


class UsageError(ClientError):
    exit_code = EXIT_USAGE


class Unreachable(ClientError):
    exit_code = EXIT_UNREACHABLE


def unreachable(url: str, error: Exception) -> Unreachable:
    kind = "did not answer in time" if isinstance(error, httpx.TimeoutException) else "no answer"
    detail = str(error) or type(error).__name__
    return Unreachable(
        f"cannot reach the console at {url} ({kind}: {detail[:200]}). Check the address "
        "(servedeck context list) and that the console is running, then try again."
    )


def redirected(who: str, status: int, location: str | None, what_to_do: str) -> Failed:
    """A redirect, never followed: the token or API key would go along to wherever it
    points (a proxy's login page, another host, plain http)."""
    return Failed(
        f"the {who} answered {status}, a redirect to {(location or '?')[:200]}; nothing was "
        f"sent there. {what_to_do[0].upper() + what_to_do[1:]} (https:// behind TLS).",
        status=status,
    )


def segment(value: str) -> str:
    """A name as one path segment: it never adds a segment or a query."""
    return quote(value, safe="")


class Console:
    """One console, as one member of one organisation (the token's)."""

    def __init__(self, url: str, token: str, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.url + "/api/v1",
            headers={
                "Authorization": f"Bearer {token}",
                "User-Agent": f"servedeck-cli/{__version__}",
                "Accept": "application/json",
            },
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            follow_redirects=False,
        )

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The response of a call that succeeded (2xx); raises Failed or Unreachable."""
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise unreachable(self.url, error) from None
        if response.status_code >= 400:
            raise self._failure(response)
        if 300 <= response.status_code < 400:
            raise redirected(
                "console",
                response.status_code,
                response.headers.get("Location"),
                "log in with the address it redirects to",
            )
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.call(method, path, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise Failed(
                f"{self.url} answered {path} without JSON: is it a ServeDeck console?"
            ) from None

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.json("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.json("POST", path, **kwargs)

    def _failure(self, response: httpx.Response) -> ClientError:
        status = response.status_code
        try:
            error = response.json()["error"]
            message, problems = str(error["message"]), list(error.get("problems") or [])
        except (ValueError, KeyError, TypeError):
            if status in (502, 503, 504):
                return Unreachable(
                    f"{self.url} answered {status} without the console's error shape: a proxy "
                    "in front of it could not reach the console. Try again when it is up."
                )
            return Failed(
                f"{self.url} answered {status} without the console's error shape: is it a "
                "ServeDeck console? (servedeck context list shows the address.)",
                status=status,
            )
        if status == 401:
            message += " Log in again: servedeck login URL."
        return Failed(message, problems, status)
