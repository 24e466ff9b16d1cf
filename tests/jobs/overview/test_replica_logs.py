"""Logs per replica on the overview: the local backend's process log and a cluster's pod logs
(the real `kubernetes` client against the emulator's pods/<name>/log route), bounded in lines
and bytes, with secrets of the environment taken out, for members of the organisation only."""

import time

import pytest
from django.conf import settings
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import deploy as verbs
from jobs.backends import redaction
from jobs.backends.local import processes as proc
from jobs.models import Application
from jobs.overview import replica_logs
from jobs.reconciler import Reconciler
from tests.fakes.kube_objects import PROD_NAMESPACE, predictor_pod
from tests.helpers import SHORTEST

OPERATOR_TOKEN = "hf_operatorOwnTokenAbcdefghij0123456789"
POD = "bge-embed-predictor-5d8f-x7k2p"


def logs_url(name="bge-embed", **query):
    return reverse("jobs:application-logs", args=[name]), query


def get(client, **query):
    url, query = logs_url(**query)
    return client.get(url, query, HTTP_HX_REQUEST="true")


@pytest.fixture
def running(deployer) -> Application:
    application = verbs.apply(SHORTEST, deployer).application
    reconciler, deadline = Reconciler(), time.monotonic() + 15
    while time.monotonic() < deadline:
        reconciler.step_local()
        application.refresh_from_db()
        if application.phase == "Running":
            return application
        time.sleep(0.05)
    pytest.fail(f"bge-embed is {application.phase}: {application.reason}")


def local_log(lines: list[str]) -> None:
    path = settings.SERVEDECK_LOCAL_STATE_DIR / "acme" / "bge-embed" / "replica-0.log"
    with open(path, "a") as log:
        log.write("".join(f"{line}\n" for line in lines))


def test_local_replica_log_tail_with_secrets_taken_out(as_deployer, running, monkeypatch):
    monkeypatch.setenv("OPERATOR_HF_TOKEN", OPERATOR_TOKEN)
    local_log(
        [
            f"downloading with token {OPERATOR_TOKEN}",
            "calling with Authorization: Bearer sdk_abcdefghijklmnop1234",
            "the last line",
        ]
    )
    response = get(as_deployer, replica="0", lines="100")
    assert response.status_code == 200
    html = response.content.decode()
    assert OPERATOR_TOKEN not in html and "sdk_abcdefghijklmnop1234" not in html
    assert html.count("[redacted]") == 2 and "the last line" in html
    assert "replica 0 (ready" in html  # the picker names the replica and its state


def test_local_log_lines_are_bounded(as_deployer, running):
    local_log([f"line {n}" for n in range(3000)])
    html = get(as_deployer, lines="50").content.decode()
    # the server adds a line or two as the view asks whether it answers
    assert "line 2999" in html and "line 2940" not in html
    refused = get(as_deployer, lines="5000")
    assert refused.status_code == 400
    assert (
        "lines: &#x27;5000&#x27; is not a whole number from 1 to 2000" in refused.content.decode()
    )


def test_a_replica_that_is_not_one_is_refused_by_name(as_deployer, running):
    response = get(as_deployer, replica="../../etc/passwd")
    assert response.status_code == 400
    text = response.content.decode()
    assert "replica: &#x27;../../etc/passwd&#x27; is not a replica" in text and "0" in text


def test_viewers_do_not_read_logs(as_viewer, running):
    """A deployer's, as on the REST API: a model server's log may quote what callers sent."""
    assert get(as_viewer).status_code == 403
    page = as_viewer.get(f"/models/{running.name}/").content.decode()
    assert 'id="replica-logs"' not in page


def test_outsiders_get_404(as_outsider, running):
    assert get(as_outsider).status_code == 404


def test_the_byte_bound_keeps_the_last_lines():
    lines = ["x" * 1000] * 400
    kept, cut = replica_logs.within_bytes(lines, 10_000)
    assert cut and len(kept) == 9


def test_redaction_takes_out_longest_values_first_and_token_shapes():
    secrets = redaction.secret_values(
        {"VLLM_API_KEY": "abcdef-long-secret", "PATH": "/usr/bin", "HF_TOKEN": "short"},
        extra=["abcdef-long-secret-and-more", None],
    )
    assert secrets == {"abcdef-long-secret", "abcdef-long-secret-and-more"}  # 'short' is too short
    got = redaction.redact(
        ["key=abcdef-long-secret-and-more", "hf_ABCDEFGHIJKLMNOPQRSTUV in a url", "/usr/bin"],
        secrets,
    )
    assert got == ["key=[redacted]", "[redacted] in a url", "/usr/bin"]


@pytest.mark.parametrize("kept", [8, 20, 33])
def test_a_secret_across_the_line_cut_is_taken_out_not_shown_in_part(kept):
    """A long line is cut to MAX_LINE_CHARS: the cut must not leave a secret's first `kept`
    characters, as a value or a token shape, where redaction no longer recognises them."""
    value = "value-of-a-secret-0123456789abcdefghij"
    token = "hf_" + "Q" * 34
    pad = "x" * (redaction.MAX_LINE_CHARS - kept - 1) + " "
    got = redaction.redact([pad + value, pad + token + " and more"], {value})
    for line, secret in zip(got, (value, token), strict=True):
        assert len(line) <= redaction.MAX_LINE_CHARS
        assert secret[:kept] not in line, line[-40:]


# --- a Kubernetes cluster -------------------------------------------------------------------


@pytest.fixture
def on_cluster(prod, deployer, kube) -> Application:
    manifest = SHORTEST.replace("profileName: local", "profileName: prod")
    application = verbs.apply(manifest, deployer).application
    pod = predictor_pod("bge-embed", PROD_NAMESPACE, name=POD)
    pod["spec"]["containers"][0]["env"] = [
        {"name": "STORAGE_ACCESS_KEY", "value": "s3-access-value-123"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}},
    ]
    kube.put(pod)
    other = predictor_pod("bge-embed", PROD_NAMESPACE, name="theirs", organization="globex")
    kube.put(other)
    kube.set_pod_log(PROD_NAMESPACE, "theirs", "globex's own log\n")
    kube.set_pod_log(
        PROD_NAMESPACE,
        POD,
        "".join(f"pod line {n}\n" for n in range(500)) + "key s3-access-value-123 used\n",
    )
    return application


def test_pod_logs_through_the_kubernetes_api(as_deployer, on_cluster, kube):
    response = get(as_deployer, lines="10")
    assert response.status_code == 200, response.content
    html = response.content.decode()
    assert "pod line 499" in html and "pod line 489" not in html
    assert "s3-access-value-123" not in html and "key [redacted] used" in html
    assert POD in html and "theirs" not in html  # only this organisation's pods are replicas
    assert "kserve/huggingfaceserver:v0.15.2" in html
    asked = [r for r in kube.requests if r.path.endswith(f"/pods/{POD}/log")]
    assert asked and asked[-1].query["tailLines"] == "10"
    assert asked[-1].query["limitBytes"] == str(replica_logs.MAX_BYTES)
    assert asked[-1].query["container"] == "kserve-container"


def test_another_organisations_pod_is_not_a_replica(as_deployer, on_cluster, kube):
    response = get(as_deployer, replica="theirs")
    assert response.status_code == 400
    assert "globex" not in response.content.decode()
    assert not [r for r in kube.requests if r.path.endswith("/pods/theirs/log")]


def test_a_pod_log_the_cluster_refuses_says_why(as_deployer, on_cluster, kube):
    kube.fail_next(403, "pods/log is forbidden", verb="get", resource="pods", name=POD)
    html = get(as_deployer).content.decode()
    assert f"The log of {POD} cannot be read" in html


def test_a_cluster_that_is_down_says_so(as_deployer, on_cluster, kube):
    with kube.down():
        response = get(as_deployer)
    assert response.status_code == 503
    html = response.content.decode()
    assert (
        "cannot be listed on cluster prod" in html and "Try again once the cluster answers" in html
    )
    assert str(kube.kubeconfig_path) not in html  # a path on the console's host stays there


# --- following a log by its cursor: each line once ---------------------------------------


def follow_local(log, cursor, n=1000, max_bytes=replica_logs.MAX_BYTES):
    lines, cursor = proc.lines_after(log, cursor, n, max_bytes)
    return lines, cursor


def test_a_local_log_is_followed_by_byte_offset_with_repeated_lines_each_once(tmp_path):
    log = tmp_path / "replica-0.log"
    log.write_bytes(b"start\nsame\nsame\n")
    shown, cursor = proc.tail_with_cursor(log, 2)
    assert shown == ["same", "same"]
    with log.open("ab") as handle:
        handle.write(b"same\nsame\npart")  # two more of the same, and a line being written
    lines, cursor = follow_local(log, cursor)
    assert lines == ["same", "same"]  # an overlap of texts could not tell these apart
    assert follow_local(log, cursor) == ([], cursor)  # nothing new: the partial line waits
    with log.open("ab") as handle:
        handle.write(b"ial\rdone\nsame\n")
    lines, cursor = follow_local(log, cursor)
    assert lines == ["done", "same"]  # what a terminal would show of a progress bar
    # A bound on lines or bytes: the cursor stops after what was given; the next call goes on.
    with log.open("ab") as handle:
        handle.write(b"a\nb\nc\n")
    first, cursor = follow_local(log, cursor, n=2)
    rest, cursor = follow_local(log, cursor, max_bytes=4)
    assert first + rest == ["a", "b", "c"]


def test_a_rotation_between_two_calls_loses_and_repeats_nothing(tmp_path):
    log = tmp_path / "replica-0.log"
    log.write_bytes(b"one\ntwo\n")
    _, cursor = proc.tail_with_cursor(log, 10)
    with log.open("ab") as handle:
        handle.write(b"three\nthree\n")
    proc.cap_log(log, 10)  # past half of 10 bytes: copied to .1 and emptied in place
    assert log.stat().st_size == 0 and proc.rotated(log).exists()
    with log.open("ab") as handle:
        handle.write(b"four\n")
    lines, cursor = follow_local(log, cursor)
    assert lines == ["three", "three", "four"]
    assert follow_local(log, cursor)[0] == []


def test_a_cursor_no_log_gave_is_refused_by_name(as_deployer, running, client):
    from tests.helpers import api_error, bearer

    auth = bearer(running.organization.memberships.get(role="deployer"))
    url = "/api/v1/applications/bge-embed/logs"
    first = client.get(url, {"lines": 5}, **auth).json()
    assert first["cursor"].startswith("b")
    again = client.get(url, {"after": first["cursor"]}, **auth).json()
    assert again["cursor"]
    refused = client.get(url, {"after": "t12.x"}, **auth)
    error = api_error(refused)
    assert refused.status_code == 400 and error["problems"][0]["path"] == "after", error


def test_a_pod_log_is_followed_by_the_kubelets_timestamps(on_cluster, kube):
    first = replica_logs.follow(on_cluster, POD, 3, None)
    assert first.lines == ["pod line 498", "pod line 499", "key [redacted] used"]
    # One write of two identical lines (one timestamp), then another in a later write.
    kube.append_pod_log(PROD_NAMESPACE, POD, "same\nsame\n")
    time.sleep(0.001)
    kube.append_pod_log(PROD_NAMESPACE, POD, "same\n")
    followed = replica_logs.follow(on_cluster, POD, 1000, first.cursor)
    assert followed.lines == ["same", "same", "same"]
    assert replica_logs.follow(on_cluster, POD, 1000, followed.cursor).lines == []
    # A bound cuts a write's lines in two: the rest come next, once each.
    kube.append_pod_log(PROD_NAMESPACE, POD, "x\nx\nx\n")
    part = replica_logs.follow(on_cluster, POD, 2, followed.cursor)
    rest = replica_logs.follow(on_cluster, POD, 1000, part.cursor)
    assert part.lines + rest.lines == ["x", "x", "x"]
    asked = [r for r in kube.requests if r.path.endswith(f"/pods/{POD}/log")]
    assert asked[-1].query["timestamps"] == "true"


# --- cursors: read strictly, in one place, for both backends ------------------------------


@pytest.mark.parametrize(
    "after, kind, numbers",
    [
        ("b0.0", "b", (0, 0)),
        ("b1234.1717000000123456789", "b", (1234, 1717000000123456789)),
        ("t1717000000123456789.2", "t", (1717000000123456789, 2)),
        ("t9223372036854775807.0", "t", (2**63 - 1, 0)),
        ("t\u00b2.1", "t", None),  # a superscript two: str.isdigit says yes, int() says no
        ("t\u0661\u0662.1", "t", None),  # Arabic-Indic digits, which int() would read
        ("b1.\uff11", "b", None),  # a fullwidth one
        ("t9223372036854775808.0", "t", None),  # past a signed 64-bit number
        ("t" + "9" * 20 + ".1", "t", None),
        ("b1.2", "t", None),  # the other backend's cursor
        ("t1.2", "b", None),
        ("t1_0.2", "t", None),  # int() takes underscores
        ("t+1.2", "t", None),
        ("t 1.2", "t", None),
        ("t1.2\n", "t", None),
        ("t1.2.3", "t", None),
        ("t1.", "t", None),
        ("t.1", "t", None),
        ("t12", "t", None),
        ("t", "t", None),
    ],
)
def test_a_cursor_is_ascii_digits_of_a_bounded_length(after, kind, numbers):
    if numbers is not None:
        assert replica_logs.parse_cursor(after, kind) == numbers
        return
    with pytest.raises(replica_logs.LogsRefused) as refused:
        replica_logs.parse_cursor(after, kind)
    message = str(refused.value)
    assert message.startswith(f"after: {after!r} is not a cursor this log gave"), message
    assert f"{kind}<digits>.<digits>" in message and "previous answer" in message


def test_a_long_cursor_is_refused_without_being_echoed():
    after = "t" + "\u00b2" * 5000
    with pytest.raises(replica_logs.LogsRefused) as refused:
        replica_logs.parse_cursor(after, "t")
    message = str(refused.value)
    assert "\u00b2" not in message and "5001 characters" in message
    assert len(message) < 300


def test_a_pod_cursor_of_unicode_digits_is_a_400_naming_after(as_deployer, on_cluster, client):
    from tests.helpers import api_error, bearer

    auth = bearer(on_cluster.organization.memberships.get(role="deployer"))
    refused = client.get("/api/v1/applications/bge-embed/logs", {"after": "t\u00b2.1"}, **auth)
    error = api_error(refused)
    assert refused.status_code == 400, error
    problem = error["problems"][0]
    assert problem["path"] == "after" and "t<digits>.<digits>" in problem["message"], problem


# What a client may send as `after`: anything, cursors and near-cursors most of all.
DIGITS = "0123456789\u00b2\u0660\u0661\u0966\uff11"
AFTERS = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=60),
    st.from_regex(rf"[bt][{DIGITS}]{{0,24}}\.[{DIGITS}]{{0,24}}", fullmatch=True),
    st.builds("t{}.{}".format, st.integers(0, 10**22), st.integers(0, 10**22)),
    st.builds("b{}.{}".format, st.integers(0, 10**22), st.integers(0, 10**22)),
    st.text("t0123456789.\u00b2", min_size=100, max_size=3000),
)


def property_of_after(auth, client):
    """Any `after` is answered 200 or 400 (with the API's error shape), never anything else."""

    @hypothesis_settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(AFTERS)
    def check(after):
        response = client.get("/api/v1/applications/bge-embed/logs", {"after": after}, **auth)
        assert response.status_code in (200, 400), (after, response.content[:300])
        if response.status_code == 400:
            error = response.json()["error"]
            assert error["problems"][0]["path"] == "after", error
            assert len(error["message"]) < 400  # a long value is never sent back

    check()


def test_any_after_gives_200_or_400_on_the_local_backend(running, client):
    from tests.helpers import bearer

    client.raise_request_exception = False  # a crash is a 500 to count, as a caller sees it
    property_of_after(bearer(running.organization.memberships.get(role="deployer")), client)


def test_any_after_gives_200_or_400_on_a_cluster(on_cluster, client):
    from tests.helpers import bearer

    client.raise_request_exception = False
    property_of_after(bearer(on_cluster.organization.memberships.get(role="deployer")), client)
