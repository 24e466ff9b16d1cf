"""The `key` verbs: create, list, revoke and rotate the organisation's API keys for the
gateway; a new secret is printed once."""

from __future__ import annotations

from servedeck import present
from servedeck.console import EXIT_OK, Failed, segment
from servedeck.contexts import console_for
from servedeck.terminal import err, out, show_json, table_or_json


def _key_failure(error: Failed) -> Failed:
    """A key verb's refusal names the option it came from, as `manage.py apikey` does."""
    if error.status == 400 and error.problems and error.problems[0].get("path"):
        first = error.problems[0]
        error.message = f"{present.key_flag(first['path'])}: {first['message']}"
        error.problems = []
    return error


def _secret(answer: dict, as_json: bool, said: str) -> None:
    if as_json:
        show_json(answer)
        return
    out(said)
    out(answer["key"])
    err(present.SECRET_ONCE)


def do_key_create(args) -> int:
    body = {
        "name": args.name,
        "applications": args.apps,
        "requestsPerMinute": args.rpm,
        "tokensPerMinute": args.tpm,
        "concurrentRequests": args.concurrency,
        "expiresInDays": args.expires_in,
    }
    try:
        answer = console_for(args).post("/keys", json=body)
    except Failed as error:
        raise _key_failure(error) from None
    _secret(answer, args.as_json, present.key_created_line(answer["name"]))
    return EXIT_OK


def do_key_list(args) -> int:
    found = console_for(args).get("/keys")
    return table_or_json(args, found, present.key_rows)


def do_key_revoke(args) -> int:
    console = console_for(args)
    before = console.get(f"/keys/{segment(args.name)}")
    console.post(f"/keys/{segment(args.name)}/revoke")
    out(present.key_revoked_line(args.name, already=before["state"] == "revoked"))
    return EXIT_OK


def do_key_rotate(args) -> int:
    try:
        answer = console_for(args).post(
            f"/keys/{segment(args.name)}/rotate", json={"graceMinutes": args.grace}
        )
    except Failed as error:
        raise _key_failure(error) from None
    said = present.key_rotated_line(args.name, answer.get("previousExpiresAt"))
    _secret(answer, args.as_json, said)
    return EXIT_OK
