"""Issue 21, finding 11: a live socket stayed open, and kept sending the organisation's fragments,
after its session logged out, after the user's password changed, or after the user was
deactivated. Now such a socket is closed with 4401 (sign in and open the page again): at once
when this console process hears of it (the user's channel-layer group), and at the latest at
its next send when another process made the change (the session is checked again with the
membership, about once a second).

Through Channels' WebsocketCommunicator on the console's ASGI application, the sessions made
and ended through the console's own pages (Django's test client)."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session
from django.db import connections
from django.test import Client
from django.urls import reverse

from jobs.backends.base import Observed
from jobs.lifecycle import record_status
from jobs.live import consumers, members
from jobs.models import Application

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

HEADERS = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")]


@pytest.fixture(autouse=True)
def in_memory_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture
def recheck(monkeypatch):
    """The membership re-check's clock, moved by the test: `recheck()` makes every listener's
    confirmation stale, as RECHECK_SECONDS passing would."""
    now = [0.0]
    monkeypatch.setattr(members.members, "clock", lambda: now[0])
    monkeypatch.setattr(members.members, "_seen", {})

    def later() -> None:
        now[0] += members.RECHECK_SECONDS

    return later


def session_of(user, password=None) -> Client:
    browser = Client()
    if password is None:
        browser.force_login(user)
    else:
        login = {"username": user.username, "password": password}
        assert browser.post(reverse("login"), login).status_code == 302
    return browser


def make_app(org) -> Application:
    return Application.objects.create(
        organization=org, name="chat", profile=org.profiles.get(), manifest={"spec": {}}
    )


async def open_page(browser: Client) -> WebsocketCommunicator:
    """The model's overview page's socket of `browser`'s session, past its catch-up."""
    from console.asgi import application

    cookie = (b"cookie", f"sessionid={browser.cookies['sessionid'].value}".encode())
    page = WebsocketCommunicator(application, "/ws/applications/chat/", [*HEADERS, cookie])
    connected, _ = await page.connect(timeout=5)
    assert connected
    await page.receive_from(timeout=5)
    return page


async def closed_with(page) -> int:
    output = await page.receive_output(timeout=5)
    assert output["type"] == "websocket.close", output
    return output["code"]


async def still_open(page, app, reason: str) -> None:
    """The page still gets what happens: a status change reaches it."""
    await sync_to_async(record_status)(app, Observed(phase="Failed", reason=reason))
    assert reason in await page.receive_from(timeout=5)


async def finish(*pages) -> None:
    for page in pages:
        await page.disconnect()
    await sync_to_async(connections.close_all)()


async def test_logging_out_closes_the_pages_of_that_session_only(org, viewer):
    app = await sync_to_async(make_app)(org)
    here = await sync_to_async(session_of)(viewer.user)
    elsewhere = await sync_to_async(session_of)(viewer.user)
    leaving, staying = await open_page(here), await open_page(elsewhere)
    assert (await sync_to_async(here.post)(reverse("logout"))).status_code == 302
    assert await closed_with(leaving) == consumers.CLOSE_NOT_SIGNED_IN == 4401
    await still_open(staying, app, "Still watched elsewhere.")
    await finish(leaving, staying)


async def test_a_new_password_closes_the_users_other_pages(org, deployer):
    await sync_to_async(make_app)(org)
    laptop = await sync_to_async(session_of)(deployer.user)
    phone = await sync_to_async(session_of)(deployer.user)
    page = await open_page(laptop)
    changed = await sync_to_async(phone.post)(
        reverse("password-change"),
        {
            "old_password": "pw-dan",
            "new_password1": "a quiet harbour 77",
            "new_password2": "a quiet harbour 77",
        },
    )
    assert changed.status_code == 302
    assert await closed_with(page) == consumers.CLOSE_NOT_SIGNED_IN
    await finish(page)


async def test_a_deactivated_user_is_closed(org, viewer):
    await sync_to_async(make_app)(org)
    page = await open_page(await sync_to_async(session_of)(viewer.user))

    def deactivate():  # as an operator does, in `manage.py shell`
        viewer.user.is_active = False
        viewer.user.save()

    await sync_to_async(deactivate)()
    assert await closed_with(page) == consumers.CLOSE_NOT_SIGNED_IN
    await finish(page)


@pytest.mark.parametrize("how", ["logged out", "deactivated"])
async def test_a_change_made_by_another_process_is_seen_at_the_next_send(org, viewer, recheck, how):
    """No signal reaches this process: the session is checked again with the membership."""
    app = await sync_to_async(make_app)(org)
    browser = await sync_to_async(session_of)(viewer.user)
    page = await open_page(browser)
    await still_open(page, app, "Seen while signed in.")  # confirmed: fresh for a while
    key = browser.cookies["sessionid"].value
    if how == "logged out":  # another process flushed the session
        await sync_to_async(Session.objects.filter(session_key=key).delete)()
    else:
        await sync_to_async(type(viewer.user).objects.filter(pk=viewer.user.pk).update)(
            is_active=False
        )
    recheck()
    await sync_to_async(record_status)(app, Observed(phase="Failed", reason="Not for them."))
    assert await closed_with(page) == consumers.CLOSE_NOT_SIGNED_IN
    await finish(page)


async def test_logging_in_again_leaves_the_pages_open(org, viewer, recheck):
    """A login elsewhere changes only last_login: the user's pages are not asked to check."""
    app = await sync_to_async(make_app)(org)
    viewer.user.set_password("pw-vera-long")
    await sync_to_async(viewer.user.save)()
    page = await open_page(await sync_to_async(session_of)(viewer.user))
    await sync_to_async(session_of)(viewer.user, "pw-vera-long")
    await still_open(page, app, "Still here.")
    await finish(page)
