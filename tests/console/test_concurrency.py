"""Concurrent writes through the REST API, on whichever database is configured (SQLite in a
file, as the console runs it, or PostgreSQL with DATABASE_URL): no 500, no lost or duplicate
revision. Real threads, each with its own client and database connection."""

import threading
from collections import Counter

import pytest
from django.db import connections
from django.test import Client

from jobs.models import Application, Revision
from tests.helpers import SHORTEST, bearer

pytestmark = [pytest.mark.database_file]

URL = "/api/v1/applications"
MANUAL = SHORTEST.replace("profileName: local", "profileName: local\n  syncType: Manual")


def manifest(name: str = "bge-embed", memory: str | None = None, text: str = MANUAL) -> str:
    text = text.replace("name: bge-embed", f"name: {name}")
    if memory:
        text = text.replace(
            "uri: hf://BAAI/bge-m3",
            f"uri: hf://BAAI/bge-m3\n      resources:\n        memory: {memory}",
        )
    return text


def at_once(count: int, request) -> list:
    """Run request(i) for i in range(count), each in its own thread, all released together;
    answers (status, body) in order of i."""
    barrier = threading.Barrier(count)
    answers: list = [None] * count

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            response = request(i)
            answers[i] = (response.status_code, response.json() if response.content else None)
        except Exception as error:  # a test failure, reported below with the others
            answers[i] = (None, repr(error))
        finally:
            connections.close_all()  # this thread's connections only

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a request never answered"
    return answers


@pytest.fixture
def token(transactional_db, deployer):
    return bearer(deployer)


def post(token, text):
    return Client(**token).post(URL, data=text, content_type="application/yaml")


def put(token, name, text):
    return Client(**token).put(f"{URL}/{name}", data=text, content_type="application/yaml")


def statuses(answers) -> Counter:
    return Counter(status for status, _ in answers)


def test_fifty_concurrent_creates_of_distinct_applications_all_succeed(token, org):
    answers = at_once(50, lambda i: post(token, manifest(f"app-{i}")))
    assert statuses(answers) == {201: 50}, [a for a in answers if a[0] != 201][:3]
    assert Application.objects.filter(organization=org).count() == 50
    numbers = Revision.objects.filter(application__organization=org).values_list(
        "application__name", "number"
    )
    assert sorted(numbers) == sorted((f"app-{i}", 1) for i in range(50))


def test_twenty_concurrent_updates_of_one_application_each_make_one_revision(token, org):
    assert post(token, manifest()).status_code == 201
    memories = [f"{200 + i}Mi" for i in range(20)]
    answers = at_once(20, lambda i: put(token, "bge-embed", manifest(memory=memories[i])))
    assert statuses(answers) == {200: 20}, [a for a in answers if a[0] != 200][:3]
    revisions = list(Revision.objects.filter(application__name="bge-embed"))
    assert sorted(r.number for r in revisions) == list(range(1, 22))  # none lost, none twice
    saved = Counter(
        r.manifest["spec"]["source"]["model"]["resources"]["memory"] for r in revisions[:-1]
    )
    assert saved == Counter(memories)  # every update is a revision of its own
    assert sorted(body["revision"] for _, body in answers) == list(range(2, 22))


def test_twenty_concurrent_creates_of_one_name_make_one_and_409_the_rest(token, org):
    answers = at_once(20, lambda i: post(token, manifest(memory=f"{200 + i}Mi")))
    assert statuses(answers) == {201: 1, 409: 19}, [a for a in answers if a[0] not in (201, 409)]
    for status, body in answers:
        if status == 409:
            assert "already exists" in body["error"]["message"]
    assert Application.objects.filter(organization=org).count() == 1
    assert Revision.objects.filter(application__organization=org).count() == 1


def test_concurrent_auto_deploys_and_applies_record_every_outcome(token, org):
    auto = SHORTEST
    assert post(token, manifest("served", text=auto)).status_code == 201

    def request(i: int):
        if i < 3:
            return Client(**token).post(f"{URL}/served/deploy")
        if i < 6:
            return put(token, "served", manifest("served", memory=f"{300 + i}Mi", text=auto))
        return post(token, manifest(f"auto-{i}", text=auto))

    answers = at_once(8, request)
    assert statuses(answers) == {200: 6, 201: 2}, [a for a in answers if a[0] not in (200, 201)]
    served = Revision.objects.filter(application__name="served")
    assert sorted(r.number for r in served) == [1, 2, 3, 4]
    outcomes = Counter(Revision.objects.values_list("outcome", flat=True))
    assert outcomes == {Revision.Outcome.APPLIED: 6}  # none left Pending


def test_concurrent_rollbacks_never_share_a_revision_number(token, org):
    assert post(token, manifest()).status_code == 201
    assert put(token, "bge-embed", manifest(memory="300Mi")).status_code == 200

    def rollback(i: int):
        return Client(**token).post(
            f"{URL}/bge-embed/rollback", data={"revision": 1}, content_type="application/json"
        )

    answers = at_once(6, rollback)
    # Once one has rolled back, revision 1 may be what runs: the later ones say so (400).
    assert set(statuses(answers)) <= {200, 400}, answers
    assert 200 in statuses(answers)
    numbers = sorted(
        Revision.objects.filter(application__name="bge-embed").values_list("number", flat=True)
    )
    assert numbers == list(range(1, len(numbers) + 1))
