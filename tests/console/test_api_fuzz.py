"""An OpenAPI-driven fuzzer (schemathesis) over the REST API, in this process through WSGI, with
a deployer's token: whatever it sends, no answer is a server error, and every answer has a
status the operation declares, in the schema declared for it. The manifest's JSON Schema in
the document makes the generated bodies manifest-shaped, so they reach the rules behind the
first check. Bounded: a few dozen examples per operation, derandomised so a run repeats."""

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from jobs import deploy as verbs
from tests.helpers import SHORTEST, bearer

MAX_EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(autouse=True)
def requests_keep_the_test_connection():
    """As Django's test client does: the end of a request must not close the database
    connection, whose open transaction holds this test's rows."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def token(deployer) -> dict:
    # One application to find, so the routes with {name} are reached past their 404 too.
    verbs.apply(SHORTEST.replace("profileName: local", MANUAL), deployer)
    _, header = bearer(deployer).popitem()
    return {"Authorization": header}


MANUAL = "profileName: local\n  syncType: Manual"
# The document as the console serves it; reading it touches no database.
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_error_and_every_answer_is_declared(case, token):
    case.call_and_validate(headers=token, checks=CHECKS)
