"""The reconciler's scrapes of vLLM's /metrics stay bounded: each scrape has a deadline for the
whole page (a server that drips it is cut off, on this machine and through the API server's
service proxy), and a pass of scrapes starts none past its budget, the applications tried
longest ago first. A real local HTTP server drips; the real clients read it. What is asserted
is the outcome (which applications got figures, which were left for the next pass), never
how long anything took."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jobs.models import Application
from jobs.overview import serving_metrics
from jobs.reconciler import Reconciler
from tests.fakes.kube_objects import PROD_NAMESPACE

FIGURES = b"vllm:num_requests_waiting 7\nvllm:kv_cache_usage_perc 0.5\n"
# After the figures, a comment a byte at a time: each byte well within the scrape's wait for
# the next piece, the whole far past its deadline (about 8 s: long enough for the old
# per-read timeouts to read it all and show the figures, short enough to find that out).
DRIP_BYTES = 32
DRIP_EVERY_SECONDS = 0.25


class MetricsPages(BaseHTTPRequestHandler):
    """/fast/metrics answers at once; /drip/metrics sends its figures, then drips."""

    def log_message(self, format, *args):  # quiet: pytest shows failures
        pass

    def do_GET(self):
        drip = self.path == "/drip/metrics"
        if not drip and self.path != "/fast/metrics":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(FIGURES) + (DRIP_BYTES + 2 if drip else 0)))
        self.end_headers()
        try:
            self.wfile.write(FIGURES)
            self.wfile.flush()
            if drip:
                self.wfile.write(b"#")
                for _ in range(DRIP_BYTES):
                    time.sleep(DRIP_EVERY_SECONDS)
                    self.wfile.write(b"#")
                    self.wfile.flush()
                self.wfile.write(b"\n")
        except OSError:
            pass  # the scraper gave up and went away


@pytest.fixture
def pages():
    server = ThreadingHTTPServer(("127.0.0.1", 0), MetricsPages)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def vllm_app(org, name, profile, **fields) -> Application:
    return Application.objects.create(
        organization=org,
        name=name,
        profile=org.profiles.get(name=profile),
        phase="Running",
        manifest={
            "spec": {
                "namespace": PROD_NAMESPACE,
                "source": {"model": {"uri": "hf://acme/chat", "runtime": {"engine": "vllm"}}},
            }
        },
        **fields,
    )


def test_a_local_server_dripping_its_metrics_is_cut_off_at_the_deadline(pages, org):
    dripping = vllm_app(org, "dripping", "local", endpoint=f"{pages}/drip")
    fast = vllm_app(org, "fast", "local", endpoint=f"{pages}/fast")
    assert serving_metrics.observe(dripping) is None
    assert serving_metrics.latest(dripping.pk) is None
    # The same figures sent at once are read: only the dripping was refused.
    assert serving_metrics.observe(fast)["requests_waiting"] == 7.0


def test_a_service_dripping_through_the_api_server_is_cut_off_at_the_deadline(
    pages, org, prod, kube
):
    dripping = vllm_app(org, "dripping", "prod")
    fast = vllm_app(org, "fast", "prod")
    kube.serve_service(PROD_NAMESPACE, "dripping-predictor", f"{pages}/drip")
    kube.serve_service(PROD_NAMESPACE, "fast-predictor", f"{pages}/fast")
    assert serving_metrics.observe(dripping) is None
    assert serving_metrics.latest(dripping.pk) is None
    assert serving_metrics.observe(fast)["kv_cache_usage"] == 0.5


def test_a_pass_starts_no_scrape_past_its_budget_and_the_next_goes_on_from_there(
    pages, org, prod, kube
):
    """Two workers and a budget shorter than a dripping scrape: each worker's first scrape
    outlasts the budget, so a pass tries two applications and leaves the rest; the next pass
    tries those first."""
    apps = [vllm_app(org, name, "prod") for name in ("a", "b", "c", "d")]
    for app in apps:
        kube.serve_service(PROD_NAMESPACE, f"{app.name}-predictor", f"{pages}/drip")
    pk = {app.name: app.pk for app in apps}
    reconciler = Reconciler(scrape_workers=2, scrape_budget=1.0)

    first = reconciler.scrape_kubernetes()
    assert sorted(first.tried) == [pk["a"], pk["b"]]
    assert sorted(first.skipped) == [pk["c"], pk["d"]]
    assert first.figures == {}
    second = reconciler.scrape_kubernetes()
    assert sorted(second.tried) == [pk["c"], pk["d"]]
    assert sorted(second.skipped) == [pk["a"], pk["b"]]
    assert all(serving_metrics.latest(app.pk) is None for app in apps)


def test_applications_left_out_get_their_figures_in_a_later_pass(pages, org, prod, kube):
    """A budget of nothing: each worker tries one application a pass, the one tried longest
    ago; the fast ones get their figures in turn, the dripping ones never hold up the rest."""
    names = {"a": "drip", "b": "fast", "c": "fast", "d": "drip"}
    apps = {name: vllm_app(org, name, "prod") for name in names}
    for name, page in names.items():
        kube.serve_service(PROD_NAMESPACE, f"{name}-predictor", f"{pages}/{page}")
    reconciler = Reconciler(scrape_workers=2, scrape_budget=0)

    first = reconciler.scrape_kubernetes()
    assert sorted(first.tried) == [apps["a"].pk, apps["b"].pk]
    assert list(first.figures) == [apps["b"].pk]
    assert sorted(first.skipped) == [apps["c"].pk, apps["d"].pk]
    second = reconciler.scrape_kubernetes()
    assert sorted(second.tried) == [apps["c"].pk, apps["d"].pk]
    assert list(second.figures) == [apps["c"].pk]
    assert serving_metrics.latest(apps["b"].pk)["requests_waiting"] == 7.0
    assert serving_metrics.latest(apps["a"].pk) is None
    assert serving_metrics.latest(apps["d"].pk) is None
