"""Personas and a little of everything the tests share: an org admin, a deployer, a viewer, and
an outsider from another organisation, each with a `local` profile in their organisation."""

import os
import shlex
import shutil
import sys
import tempfile
from functools import partial
from pathlib import Path

import pytest

from accesspolicies.models import Role
from jobs.backends.local.backend import forget_local_runner, local_runners_on_disk
from models_catalog import hub
from tests.fakes.hub import FakeHub
from tests.helpers import STAND_IN_FLAGS, client_for, make_member, make_org

# The shared helpers' asserts report their values as a test's own do: pytest rewrites only test
# files and conftests unless told before a module is first imported (test modules import these).
pytest.register_assert_rewrite(
    "tests.gateway.support",
    "tests.jobs.backends.local.bucket_downloads_support",
    "tests.models_catalog.bucket_check_support",
)

# Fixtures every folder may use, registered once here (pytest reads pytest_plugins only in the
# root conftest): the Kubernetes API emulator (`kube_emulator`, `kube`), the cluster and profile
# "prod" on it (`prod`), a machine without vLLM for the CPU runtimes (`cpu_machine`), and
# moto's S3 server (`s3`), a Google Cloud Storage emulator (`gcs`) and Azurite (`azure`).
pytest_plugins = [
    "tests.fakes.kube",
    "tests.fakes.kube_objects",
    "tests.fakes.cpu_runtime",
    "tests.fakes.s3",
    "tests.fakes.gcs",
    "tests.fakes.azure",
]

# The fake Hub answers from this machine; on a loaded one (CI's two passes side by side, a model
# server compiling) it can take more than the product's 5 s budget. Tests of the budget set
# their own.
os.environ.setdefault(hub.TIME_BUDGET_ENV, "30")


def pytest_collection_modifyitems(config, items):
    """Give SQLite a database file when a test writes from several threads at once
    (`database_file`): threads cannot share an in-memory database the way the console's
    processes share its file, so only a file tests what production runs. Decided after
    collection, before any test creates the database."""
    if not any(item.get_closest_marker("database_file") for item in items):
        return
    from django.db import connections

    settings_dict = connections["default"].settings_dict
    test_settings = settings_dict.setdefault("TEST", {})
    if settings_dict["ENGINE"].endswith("sqlite3") and not test_settings.get("NAME"):
        folder = tempfile.mkdtemp(prefix="servedeck-test-db-")
        config.add_cleanup(partial(shutil.rmtree, folder, ignore_errors=True))
        test_settings["NAME"] = str(Path(folder) / "test.sqlite3")


@pytest.fixture(scope="session", autouse=True)
def fake_hub_server():
    """No test reaches the real Hub: HF_ENDPOINT points at the fake one for the whole run (set
    in the environment, so processes the tests start see it too)."""
    with FakeHub().serve() as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_ENDPOINT", server.url)
        patch.delenv("HF_TOKEN", raising=False)
        # Nor a real bucket, nor this machine's cloud credentials: S3 reads go to a closed
        # port unless a test points them at moto's server (the `s3` fixture).
        patch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        patch.setenv("AWS_CONFIG_FILE", os.devnull)
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            patch.delenv(name, raising=False)
        yield server


def pytest_configure(config):
    """Tests drive the reconciler's steps themselves: no console started in this session (in
    this process, a live server forked by a module's fixture, or a console process a test
    starts) runs one of its own, unless a test asks for it (the embedded defaults' tests do,
    through the settings fixture and monkeypatch, which put this back). Set for the whole
    session, before any fixture forks a server."""
    from django.conf import settings

    settings.SERVEDECK_RECONCILER_IN_PROCESS = False
    os.environ["SERVEDECK_RECONCILER_IN_PROCESS"] = "false"
    # The downloads folder's free-space reserve defaults to a tenth of the disk: the tests'
    # downloads are small, so they keep 1 GiB free and pass on a machine with little disk
    # (the reserve's own tests set theirs).
    settings.SERVEDECK_DOWNLOADS_RESERVE = "1Gi"
    os.environ["SERVEDECK_DOWNLOADS_RESERVE"] = "1Gi"


@pytest.fixture(autouse=True)
def fresh_hub_cache():
    hub.clear_cache()


STAND_IN = Path(__file__).parent / "fakes" / "model_server.py"


@pytest.fixture(autouse=True)
def local_model_servers(settings, tmp_path):
    """The local backend runs the stand-in model server instead of vLLM, keeps its state in
    this test's folder, and every server a test started is stopped after it."""
    settings.SERVEDECK_LOCAL_COMMAND = (
        f"{shlex.quote(sys.executable)} {shlex.quote(str(STAND_IN))} --port {{port}} "
        "--served-model-name {name} --startup-delay 0.1 {args}"
    )
    # The stand-in's own test switches, allowed the way an operator allows a server's flags.
    settings.SERVEDECK_EXTRA_ENGINE_FLAGS = STAND_IN_FLAGS
    settings.SERVEDECK_LOCAL_STATE_DIR = tmp_path / "local-backend"
    forget_local_runner()
    yield
    # Servers a forked live server started are in this test's state folder too: stop them all.
    local_runners_on_disk()
    forget_local_runner()


@pytest.fixture(autouse=True)
def empty_cache():
    """Login failure counts (and anything else cached) never leak from one test to the next."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Personas log in with passwords; hashing them properly would dominate the suite's time."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def within_one_minute():
    """For a test whose rows and page both read the wall clock's minute: it starts with at least
    20 s left in the minute, so the minute the rows were written for is the page's minute."""
    import time

    left = 60 - time.time() % 60
    if left < 20:
        time.sleep(left + 0.05)


@pytest.fixture
def org(db):
    return make_org("acme")


@pytest.fixture
def other_org(db):
    return make_org("globex")


@pytest.fixture
def admin(org, django_user_model):
    return make_member(django_user_model, org, "ada", Role.ADMIN)


@pytest.fixture
def deployer(org, django_user_model):
    return make_member(django_user_model, org, "dan", Role.DEPLOYER)


@pytest.fixture
def viewer(org, django_user_model):
    return make_member(django_user_model, org, "vera", Role.VIEWER)


@pytest.fixture
def outsider(other_org, django_user_model):
    return make_member(django_user_model, other_org, "otto", Role.ADMIN)


@pytest.fixture
def as_admin(admin):
    return client_for(admin)


@pytest.fixture
def as_deployer(deployer):
    return client_for(deployer)


@pytest.fixture
def as_viewer(viewer):
    return client_for(viewer)


@pytest.fixture
def as_outsider(outsider):
    return client_for(outsider)
