import pytest

from tests.gateway.support import StandIn, live_gateway


@pytest.fixture(scope="session")
def alpha():
    server = StandIn("alpha")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def beta():
    server = StandIn("beta")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def speech_server():
    server = StandIn("speech", "--runtime", "parakeet")
    yield server
    server.stop()


@pytest.fixture
def gateway(transactional_db):
    live = live_gateway(read_timeout=2.0)
    yield live
    live.stop()
