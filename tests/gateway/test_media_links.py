"""Media links in a chat (image_url, audio_url, video_url, and their kin on the other routes)
are fetched by the runtime from its own host: by default only `data:` URLs pass the gateway;
with SERVEDECK_GATEWAY_MEDIA_URLS=public, http(s) links to public hosts pass too, never one to
loopback, link-local or private ranges, however it is spelled (finding 8 of issue 21).

No test here sends traffic anywhere but loopback: the gateway only resolves a link's host, and
the stand-in model server fetches nothing."""

import base64
import json
import threading

import httpx
import pytest

from jobs.backends.local.command import local_env
from jobs.gateway import media
from jobs.render.engine import engine_env
from tests.gateway.support import caught_up, live_gateway, make_app, make_key

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
# Hosts a runtime must never be sent to: loopback (other model servers take no key), the
# metadata service, private and shared ranges, by name and by spelling.
INNER = [
    "http://127.0.0.1:8000/v1/models",
    "http://localhost/secret",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.7/x.png",
    "http://192.168.1.2/x.png",
    "http://100.64.1.1/x.png",
    "http://[::1]/x.png",
    "http://[::ffff:127.0.0.1]/x.png",
    "http://[fe80::1]/x.png",
    "http://0.0.0.0/x.png",
    "http://2130706433/x.png",  # 127.0.0.1 as one number
    "http://0x7f.1/x.png",
    "https://user@127.0.0.1/x.png",
    "http://public.example\\@127.0.0.1/x.png",
]
NOT_LINKS = ["file:///etc/passwd", "/etc/passwd", "ftp://example.com/x.png", "gopher://x", ""]


def served(stand_in) -> float:
    text = httpx.get(stand_in.url + "/metrics", timeout=5).text
    line = next(x for x in text.splitlines() if x.startswith("vllm:request_success_total"))
    return float(line.rsplit(" ", 1)[1])


def chat_with(kind: str, url: str) -> dict:
    part = {"type": kind, kind: {"url": url}}
    return {
        "model": "alpha",
        "messages": [
            {"role": "system", "content": "Describe what you are shown."},
            {"role": "user", "content": [{"type": "text", "text": "What is this?"}, part]},
        ],
    }


def post(live, plain, path, body):
    return httpx.post(
        live.url + path, headers={"Authorization": f"Bearer {plain}"}, json=body, timeout=30
    )


def refused_at(answer, field: str) -> str:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == field and error["message"].startswith(field + ":")
    assert error["type"] == "invalid_request_error"
    return error["message"]


@pytest.fixture
def world(org, alpha, gateway):
    make_app(org, "alpha", alpha.url)
    _, plain = make_key(org)
    caught_up(gateway)
    return plain


@pytest.fixture
def public_gateway(transactional_db, org, alpha):
    live = live_gateway(read_timeout=5.0, media_urls="public")
    make_app(org, "alpha", alpha.url)
    _, plain = make_key(org)
    caught_up(live)
    yield live, plain
    live.stop()


@pytest.mark.parametrize("kind", ["image_url", "audio_url", "video_url"])
def test_by_default_a_link_is_refused_at_its_field_and_a_data_url_passes(
    gateway, world, alpha, kind
):
    before = served(alpha)
    answer = post(gateway, world, "/v1/chat/completions", chat_with(kind, "https://example.com/a"))
    message = refused_at(answer, f"messages[1].content[1].{kind}.url")
    assert "data:" in message and "example.com" not in message
    assert served(alpha) == before, "the link reached the model server"
    assert post(gateway, world, "/v1/chat/completions", chat_with(kind, PNG)).status_code == 200


@pytest.mark.parametrize("url", INNER[:3] + NOT_LINKS[:2])
def test_every_route_and_shape_is_checked(gateway, world, alpha, url):
    before = served(alpha)
    shapes = [
        ("/v1/responses", {"model": "alpha", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": url}]}]}, "input[0].content[0].image_url"),
        ("/v1/embeddings", {"model": "alpha", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}]}]},
         "messages[0].content[0].image_url.url"),
        ("/v1/chat/completions", {"model": "alpha", "messages": [{"role": "user", "content": [
            {"type": "file", "file_url": url}]}]}, "messages[0].content[0].file_url"),
        # A key spelled with a JSON escape is the same key once parsed.
        ("/v1/chat/completions", {"model": "alpha", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image\u005furl": {"url": url}}]}]},
         "messages[0].content[0].image_url.url"),
    ]  # fmt: skip
    for path, body, field in shapes:
        refused_at(post(gateway, world, path, body), field)
    escaped = (
        b'{"model":"alpha","messages":[{"role":"user","content":[{"type":"image_url",'
        b'"image\\u005furl":{"url":"http://127.0.0.1:9/"}}]}]}'
    )
    answer = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {world}", "Content-Type": "application/json"},
        content=escaped,
        timeout=30,
    )
    refused_at(answer, "messages[0].content[0].image_url.url")
    assert served(alpha) == before


@pytest.mark.parametrize("url", INNER + NOT_LINKS)
def test_public_links_never_reach_inner_networks(public_gateway, alpha, url):
    live, plain = public_gateway
    before = served(alpha)
    answer = post(live, plain, "/v1/chat/completions", chat_with("image_url", url))
    message = refused_at(answer, "messages[1].content[1].image_url.url")
    assert "127.0.0.1" not in message and "169.254" not in message  # the link is not quoted
    assert served(alpha) == before


def test_public_links_pass_when_the_operator_allows_them(public_gateway):
    live, plain = public_gateway
    # A literal public address needs no lookup; the stand-in does not fetch it.
    for url in ("https://93.184.215.14/cat.png", "http://[2606:4700:4700::1111]/a.wav", PNG):
        body = chat_with("image_url", url)
        assert post(live, plain, "/v1/chat/completions", body).status_code == 200, url


def test_vllm_is_started_following_no_redirect_of_a_media_link():
    """On every backend vLLM follows no redirect of a media link (a public link must not lead
    inward after the gateway's check), and is given no variable vLLM does not have."""
    want = {"VLLM_MEDIA_URL_ALLOW_REDIRECTS": "0"}
    model = {"uri": "hf://acme/chat", "runtime": {"engine": "vllm"}}
    manifest = {"spec": {"name": "chat", "source": {"type": "Model", "model": model}}}
    envs = [local_env(manifest)] + [engine_env(model, "vllm", gpu) for gpu in (True, False)]
    for env in envs:
        assert want.items() <= env.items()
        assert not {k for k in env if k.startswith("VLLM_MEDIA_")} - set(want)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-32-be"])
def test_a_body_not_in_utf8_is_refused_before_its_links_could_pass_unseen(
    gateway, world, alpha, encoding
):
    """json.loads reads UTF-16 and UTF-32 too, where no byte spells `_url`: such a body is
    refused as a whole (RFC 8259 JSON is UTF-8), so no link in it reaches the model server."""
    before = served(alpha)
    body = chat_with("image_url", "http://169.254.169.254/latest/meta-data/")
    answer = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {world}", "Content-Type": "application/json"},
        content=json.dumps(body).encode(encoding),
        timeout=30,
    )
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]["message"]
    assert "body" in message and "UTF-8" in message
    assert served(alpha) == before, "the link reached the model server"
    # The same request in UTF-8 (with or without a byte-order mark) is read and checked.
    for prefix in (b"", b"\xef\xbb\xbf"):
        answer = httpx.post(
            gateway.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {world}", "Content-Type": "application/json"},
            content=prefix + json.dumps(body).encode(),
            timeout=30,
        )
        refused_at(answer, "messages[1].content[1].image_url.url")


def test_links_are_refused_busy_while_the_gateways_lookups_are_all_taken(
    public_gateway, alpha, monkeypatch
):
    """Host lookups are capped process-wide (a lookup the gateway stopped waiting for still
    holds its thread): past the cap a link to a named host is a 503 that says so."""
    live, plain = public_gateway
    before = served(alpha)
    monkeypatch.setattr(media, "LOOKUPS", threading.BoundedSemaphore(1))
    media.LOOKUPS.acquire()  # the one lookup allowed, taken
    answer = post(live, plain, "/v1/chat/completions", chat_with("image_url", "http://x.invalid/"))
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["param"] == "messages[1].content[1].image_url.url"
    assert "too many" in error["message"] and "data: URL" in error["message"]
    assert served(alpha) == before


def test_links_are_checked_only_for_a_caller_who_may_call_the_model(
    gateway, world, alpha, other_org
):
    """A key that may not call the model is told only that (no word on its links, no lookup)."""
    _, stranger = make_key(other_org)
    caught_up(gateway)
    body = chat_with("image_url", "http://127.0.0.1:9/")
    answer = post(gateway, stranger, "/v1/chat/completions", body)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "model_not_found"
    refused_at(
        post(gateway, world, "/v1/chat/completions", body), "messages[1].content[1].image_url.url"
    )
