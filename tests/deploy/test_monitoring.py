"""deploy/monitoring: the alert rules (a plain rules file, and the same groups as a
PrometheusRule), the Grafana dashboard and the ServiceMonitors read only series the product
exports (the gateway's /metrics, jobs/gateway/prom.py, and the reconciler's,
jobs/reconciler/metrics.py, as rendered here), the alerts the issue asks for are there, and
the component renders into an overlay."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from jobs.gateway.metering import Meter, RequestRecord
from jobs.gateway.prom import render_metrics
from jobs.reconciler import Reconciler
from jobs.reconciler import metrics as reconciler_metrics
from tests.deploy.manifests import DEPLOY, kubectl, render

MONITORING = DEPLOY / "monitoring"
SERIES = re.compile(r"\bservedeck_[a-z_]+\b")
RULE_KEYS = {"alert", "expr", "for", "labels", "annotations"}


def rules_file() -> list[dict]:
    return yaml.safe_load((MONITORING / "servedeck-alerts.yaml").read_text())["groups"]


def prometheus_rule() -> dict:
    return yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())


def dashboard() -> dict:
    return json.loads((MONITORING / "servedeck-dashboard.json").read_text())


def expressions() -> list[str]:
    found = [rule["expr"] for group in rules_file() for rule in group["rules"]]
    for panel in dashboard()["panels"]:
        found += [target["expr"] for target in panel.get("targets") or []]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["definition"])
    return found


@pytest.fixture
def exported(org, db) -> set[str]:
    """Every series name the two /metrics pages carry, with some traffic and an application."""
    from jobs.models import Application

    meter = Meter(write=lambda batch: None, announce=False)
    meter._names[7] = "chat"
    meter.record(
        RequestRecord(at=0.0, status=200, latency_ms=800.0, application_id=7, stream=True,
                      route="/v1/chat/completions", prompt_tokens=3, completion_tokens=4,
                      ttft_ms=50.0)
    )  # fmt: skip
    Application.objects.create(
        organization=org, name="chat", profile=org.profiles.get(name="local"), manifest={}
    )
    text = render_metrics(meter, in_flight=lambda: 1).decode()
    text += reconciler_metrics.render(Reconciler()).decode()
    return {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_every_series_the_alerts_and_the_dashboard_read_is_exported(exported):
    read = {name for expr in expressions() for name in SERIES.findall(expr)}
    assert read, "no series read"
    assert read - exported == set()


def test_the_prometheus_rule_holds_the_rules_files_groups():
    rule = prometheus_rule()
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["spec"]["groups"] == rules_file()


def test_the_alerts_the_operators_need_are_there_and_say_what_to_do():
    alerts = {rule["alert"]: rule for group in rules_file() for rule in group["rules"]}
    assert {
        "ServeDeckGatewayErrorRate",
        "ServeDeckGatewayLatencyHigh",
        "ServeDeckModelFailed",
        "ServeDeckModelStuck",
        "ServeDeckReconcilerWithoutLeader",
    } <= set(alerts)
    for name, rule in alerts.items():
        assert set(rule) <= RULE_KEYS, name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), name
    assert "histogram_quantile(0.95" in alerts["ServeDeckGatewayLatencyHigh"]["expr"]
    # No scrape at all counts as no leader.
    assert "or vector(0)" in alerts["ServeDeckReconcilerWithoutLeader"]["expr"]


def test_the_dashboard_is_one_grafana_can_import():
    board = dashboard()
    assert board["uid"] == "servedeck" and board["schemaVersion"] >= 36
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])}  # fmt: skip
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        for target in panel.get("targets") or []:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert target["expr"].strip(), panel["title"]
    titles = " ".join(panel["title"] for panel in board["panels"])
    for figure in ("Requests", "Errors", "Latency p50 and p95", "first token", "Tokens"):
        assert figure in titles


def test_the_component_renders_into_an_overlay(tmp_path):
    """An overlay that adds deploy/monitoring, as the install page says to."""
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    overlay = copy / "overlays" / "observed"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [../production]\ncomponents: [../../monitoring]\n"
    )
    out = subprocess.run(
        [kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    objects = [doc for doc in yaml.safe_load_all(out.stdout) if doc]
    by_kind = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    board = by_kind[("ConfigMap", "servedeck-dashboard")]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["servedeck-dashboard.json"]) == dashboard()
    assert by_kind[("PrometheusRule", "servedeck")]["spec"]["groups"] == rules_file()
    services = {name: o for (kind, name), o in by_kind.items() if kind == "Service"}
    for kind_name in (
        ("ServiceMonitor", "servedeck-gateway"),
        ("ServiceMonitor", "servedeck-reconciler"),
    ):  # noqa: E501
        monitor = by_kind[kind_name]["spec"]
        (service,) = [
            s for s in services.values()
            if monitor["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]  # fmt: skip
        ports = {p["name"] for p in service["spec"]["ports"]}
        assert {e["port"] for e in monitor["endpoints"]} <= ports
    assert len(objects) == len(render("production")) + 4
