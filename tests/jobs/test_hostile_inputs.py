"""Hostile text on every surface that reads YAML or JSON from users: the REST API (dry run,
create, PUT), the Deploy-from-YAML page, `manage.py app apply -f`, and the cluster and
profile forms. Each answers a clear refusal (4xx, a form error, exit 1) and the process lives.

libyaml's composer used to overflow the C stack on deep nesting, killing the process: that is
tested in a child process, so a crash fails the test instead of ending pytest.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.backends.local.command import EngineArgsRefused, local_command
from jobs.models import Application, Cluster, Profile
from tests.helpers import SHORTEST, bearer
from tests.helpers import problems as problems_of

ROOT = Path(__file__).resolve().parents[2]
API = "/api/v1/applications"


def deep(opening: str, depth: int, closing: str = "") -> str:
    return opening * depth + closing * depth


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """About 1 KB of YAML that expands to width**levels values."""
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * width)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["m0: &m0 {" + ", ".join(f"k{i}: v" for i in range(width)) + "}"]
    for level in range(1, levels):
        keys = ", ".join(f"c{i}: *m{level - 1}" for i in range(width))
        lines.append(f"m{level}: &m{level} {{<<: *m{level - 1}, {keys}}}")
    return "\n".join(lines) + "\n"


# The worst inputs the review found, and their relatives; each must be refused at "document".
WORST = {
    "flow-sequences": "[" * 100_000,
    "flow-mappings": "{a: " * 30_000,
    "block-sequences": "- " * 50_000 + "x\n",
    "indented-mappings": "".join(" " * i + "a:\n" for i in range(1200)),
    "json-nesting": deep("[", 50_000, "]"),
    "json-objects": '{"a":' * 30_000 + "1" + "}" * 30_000,
    "alias-bomb": alias_bomb(),
    "merge-bomb": merge_bomb(),
    "too-large": "a: " + "x" * (1024 * 1024 + 1),
    "self-reference": "spec: &s {name: m, source: {type: YAML, inferenceService: *s}}\n",
    "too-many-values": "".join(f"k{i}: [1, 2, 3, 4]\n" for i in range(25_000)),
}

CHILD = """
import json, os, sys
sys.path.insert(0, {root!r})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
import django
django.setup()
from jobs.manifest import ManifestContext, load_document, parse
from jobs.manifest.bounded import DocumentError, load_bounded
from console.form_fields import FORM_YAML_LIMITS
from models_catalog.master_checks import ENV_LIMITS
from models_catalog.recipes import RecipeError, RECIPE_LIMITS, parse_recipe
texts = json.load(sys.stdin)
out = {{}}
for name, text in texts.items():
    result = parse(text, ManifestContext(profiles={{}}))
    seen = [p.path for p in result.refusals]
    for limits in (FORM_YAML_LIMITS, ENV_LIMITS, RECIPE_LIMITS):
        try:
            load_bounded(text, "field", limits)
            seen.append("accepted")
        except DocumentError as error:
            seen.append(error.problems[0].path)
    try:
        parse_recipe(text)
        seen.append("accepted")
    except RecipeError:
        seen.append("recipe")
    out[name] = seen
print(json.dumps(out))
"""


def test_the_worst_inputs_are_refused_and_the_process_survives():
    child = subprocess.run(
        [sys.executable, "-c", CHILD.format(root=str(ROOT))],
        input=json.dumps(WORST),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert child.returncode == 0, f"the child died ({child.returncode}): {child.stderr[-2000:]}"
    seen = json.loads(child.stdout)
    expected = ["document", "field", "field", "field", "recipe"]
    assert seen == dict.fromkeys(WORST, expected)


# Inputs that never crashed can be read in this process, for their messages.
SURVIVABLE = sorted(set(WORST) - {"flow-sequences", "flow-mappings", "block-sequences"})


@pytest.mark.parametrize("name", SURVIVABLE)
def test_each_worst_input_says_which_limit_and_quotes_nothing(name):
    from jobs.manifest import ManifestContext, parse

    (refusal,) = parse(WORST[name], ManifestContext(profiles={})).refusals
    assert refusal.path == "document"
    assert "accepts" in refusal.message
    assert len(refusal.message) < 400


# --- the same inputs through every surface, in this process (the loader is safe now) --------


@pytest.fixture
def api(deployer, client):
    headers = bearer(deployer)

    def send(method: str, path: str, text: str):
        call = getattr(client, method)
        return call(path, data=text, content_type="application/yaml", **headers)

    return send


@pytest.fixture
def existing(deployer):
    """An application to PUT to (the hostile documents never replace it)."""
    from jobs import deploy as verbs

    return verbs.apply(SHORTEST, deployer).application


def refused_clearly(response) -> list[dict]:
    assert response.status_code in (400, 409, 422), response.content[:500]
    found = problems_of(response)
    assert found and len(response.content) < 20_000
    return found


@pytest.mark.parametrize(
    "name", ["flow-sequences", "block-sequences", "alias-bomb", "json-nesting"]
)
def test_the_api_refuses_the_worst_inputs(api, existing, name):
    for method, path in (
        ("post", f"{API}?dryRun=true"),
        ("post", API),
        ("put", f"{API}/{existing.name}"),
    ):
        problems = refused_clearly(api(method, path, WORST[name]))
        assert problems[0]["path"] == "document"
    assert list(Application.objects.all()) == [existing]


def with_nul(where: str) -> str:
    """The shortest manifest as JSON with a NUL character at `where` (a JSON \\u0000)."""
    doc = yaml.safe_load(SHORTEST)
    if where == "spec.profileName":
        doc["spec"]["profileName"] = "lo\x00cal"
    elif where == "spec.name":
        doc["spec"]["name"] = "bge\x00embed"
    elif where == "spec.source.model.engine.extraArgs[0]":
        doc["spec"]["source"]["model"]["engine"] = {"extraArgs": ["--seed\x00"]}
    else:  # a key holding one
        doc["spec"]["labels\x00"] = {}
        where = "spec"
    return where, json.dumps(doc)


@pytest.mark.parametrize(
    "where",
    ["spec.profileName", "spec.name", "spec.source.model.engine.extraArgs[0]", "a key"],
)
def test_a_nul_character_anywhere_is_refused_at_its_field_before_any_lookup(api, existing, where):
    """PostgreSQL refuses NUL even in a query: found by the API fuzz test as a 500 there."""
    path, text = with_nul(where)
    for method, url in (("post", f"{API}?dryRun=true"), ("post", API)):
        response = api(method, url, text)
        problems = refused_clearly(response)
        assert [p["path"] for p in problems] == [path]
        assert "NUL character" in problems[0]["message"]
    assert list(Application.objects.all()) == [existing]


@pytest.mark.parametrize("name", ["flow-sequences", "alias-bomb", "merge-bomb"])
def test_the_deploy_from_yaml_page_refuses_the_worst_inputs(as_deployer, name):
    for url in ("jobs:deploy-yaml-dry-run", "jobs:deploy-yaml-apply"):
        response = as_deployer.post(reverse(url), {"manifest": WORST[name]})
        assert response.status_code in (200, 400)
        page = response.content.decode()
        assert "accepts at most" in page
        # The page keeps what was pasted (nothing is lost), and adds nothing input-sized.
        assert len(page) < len(WORST[name]) * 2 + 100_000
    assert not Application.objects.exists()


def test_the_page_writes_out_no_refused_manifest(as_deployer):
    text = "spec:\n  name: " + "x" * 300_000 + "\n"
    response = as_deployer.post(reverse("jobs:deploy-yaml-dry-run"), {"manifest": text})
    assert response.status_code == 200 and not response.context["run"].ok
    assert "filled_yaml" not in response.context
    assert response.content.decode().count("x" * 300_000) == 1  # the pasted text, kept


def test_app_apply_refuses_the_worst_inputs_with_exit_1(admin, tmp_path):
    for name in ("flow-sequences", "alias-bomb"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(WORST[name])
        err = StringIO()
        with pytest.raises(CommandError) as raised:
            call_command("app", "apply", "-f", str(path), stdout=StringIO(), stderr=err)
        assert raised.value.returncode == 1
        assert "document" in err.getvalue() and "accepts at most" in err.getvalue()


# --- a manifest without a source (the fuzzer's 500) ------------------------------------------

NO_SOURCE = (
    "apiVersion: servedeck.io/v1\nkind: Application\nspec:\n  name: bge-embed\n"
    "  profileName: local\n"
)


@pytest.mark.parametrize("source", ["", "  source: null\n", "  source: [a]\n"])
def test_a_manifest_without_a_source_mapping_is_a_400_everywhere(
    api, existing, admin, tmp_path, source
):
    text = NO_SOURCE + source
    for method, path in (
        ("post", f"{API}?dryRun=true"),
        ("post", API),
        ("put", f"{API}/bge-embed"),
        ("put", f"{API}/bge-embed?dryRun=true"),
    ):
        problems = refused_clearly(api(method, path, text))
        assert [p["path"] for p in problems] == ["spec.source"]
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(CommandError) as raised:
        call_command("app", "apply", "-f", str(path), stdout=StringIO(), stderr=StringIO())
    assert raised.value.returncode == 1


# --- the local backend's last guard ----------------------------------------------------------


def test_the_local_backend_builds_no_argv_from_refused_engine_arguments():
    # A manifest stored before the dry run checked arguments this way still never starts.
    stored = {
        "spec": {
            "name": "m",
            "source": {
                "model": {
                    "uri": "hf://Qwen/Qwen3-0.6B",
                    "engine": {"extraArgs": ["--trust-remote"]},
                }
            },
        }
    }
    with pytest.raises(EngineArgsRefused, match="is read as --trust-remote-code"):
        local_command(stored, 8000)
    stored["spec"]["source"]["model"]["engine"]["extraArgs"] = ["--enforce_eager"]
    assert local_command(stored, 8000)[-1] == "--enforce_eager"


# --- property tests: random and adversarial documents on every surface -----------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.text(st.characters(codec="utf-8"), max_size=20),
)
KEYS = st.one_of(
    st.sampled_from(["spec", "source", "model", "engine", "extraArgs", "<<", "", "apiVersion"]),
    st.text(max_size=12),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=30,
)


def _dumped(value, as_json: bool) -> str:
    if as_json:
        return json.dumps(value, allow_nan=True)
    return yaml.safe_dump(value, allow_unicode=True)


def _mutated_manifest(draw) -> str:
    """The shortest manifest with one part replaced: random values where a manifest is read."""
    doc = yaml.safe_load(SHORTEST)
    spot = draw(st.sampled_from(["spec", "source", "model", "engine"]))
    value = draw(VALUES)
    if spot == "spec":
        doc["spec"] = value
    elif spot == "source":
        doc["spec"]["source"] = value
    elif spot == "model":
        doc["spec"]["source"]["model"] = value
    else:
        tokens = st.one_of(
            st.sampled_from(["=", "", "--", "-", "--hos", "--trust_remote", "--seed", "-tp"]),
            st.text(max_size=15),
        )
        doc["spec"]["source"]["model"]["engine"] = {"extraArgs": draw(st.lists(tokens, max_size=6))}
    return _dumped(doc, draw(st.booleans()))


@st.composite
def hostile_documents(draw) -> str:
    kind = draw(st.sampled_from(["worst", "deep", "bomb", "random", "manifest", "text", "huge"]))
    if kind == "worst":
        return WORST[draw(st.sampled_from(sorted(WORST)))]
    if kind == "deep":
        opening, closing = draw(
            st.sampled_from([("[", "]"), ("{a: ", "}"), ("- ", ""), ('{"a":', "}")])
        )
        return deep(opening, draw(st.integers(60, 5000)), closing)
    if kind == "bomb":
        make = draw(st.sampled_from([alias_bomb, merge_bomb]))
        return make(draw(st.integers(2, 9)), draw(st.integers(2, 12)))
    if kind == "random":
        return _dumped(draw(VALUES), draw(st.booleans()))
    if kind == "manifest":
        return _mutated_manifest(draw)
    if kind == "huge":
        size = draw(st.sampled_from([70_000, 300_000, 1_000_000]))
        return "spec:\n  name: " + draw(st.sampled_from(["x", "\x07", "é"])) * size + "\n"
    return draw(st.text(st.characters(codec="utf-8"), max_size=300))


PROPERTY = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
MAX_RSS_KB = 3 * 1024 * 1024  # the process never grows past this (ru_maxrss is in KB)


def _memory_bounded() -> None:
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < MAX_RSS_KB


@PROPERTY
@given(text=hostile_documents())
def test_api_dry_run_answers_a_clear_status(api, text):
    response = api("post", f"{API}?dryRun=true", text)
    assert response.status_code in (200, 400, 409, 422), response.content[:500]
    assert response.json() is not None
    _memory_bounded()


@PROPERTY
@given(text=hostile_documents())
def test_api_create_answers_a_clear_status(api, text):
    response = api("post", API, text)
    assert response.status_code in (201, 400, 409, 422), response.content[:500]
    Application.objects.all().delete()  # a document that passed is not the point here
    _memory_bounded()


@PROPERTY
@given(text=hostile_documents())
def test_api_put_answers_a_clear_status(api, existing, text):
    response = api("put", f"{API}/bge-embed?dryRun=true", text)
    assert response.status_code in (200, 400, 409, 422), response.content[:500]
    _memory_bounded()


@PROPERTY
@given(text=hostile_documents())
def test_deploy_from_yaml_page_answers_a_clear_status(as_deployer, text):
    response = as_deployer.post(reverse("jobs:deploy-yaml-dry-run"), {"manifest": text})
    assert response.status_code in (200, 400)
    _memory_bounded()


@PROPERTY
@given(text=hostile_documents())
def test_app_apply_dry_run_exits_0_or_1_with_a_message(admin, tmp_path_factory, text):
    path = tmp_path_factory.mktemp("cli") / "m.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    err = StringIO()
    try:
        call_command("app", "apply", "-f", str(path), "--dry-run", stdout=StringIO(), stderr=err)
    except CommandError as error:
        assert error.returncode == 1
        assert str(error) or err.getvalue()
    _memory_bounded()


@PROPERTY
@given(text=hostile_documents(), field=st.sampled_from(["machine_catalog_yaml", "defaults_yaml"]))
def test_profile_form_answers_a_form_error_or_saves(as_admin, org, text, field):
    cluster = Cluster.objects.get(organization=org, name="local")
    data = {
        "name": "p2",
        "cluster": cluster.pk,
        "namespace": "default",
        "vllm_version": "0.13.0",
        "machine_catalog_yaml": "",
        "defaults_yaml": "",
        field: text,
    }
    response = as_admin.post(reverse("jobs:profile-add"), data)
    assert response.status_code in (200, 302)
    Profile.objects.filter(organization=org, name="p2").delete()
    _memory_bounded()


@PROPERTY
@given(text=hostile_documents())
def test_cluster_form_answers_a_form_error_or_saves(as_admin, org, text):
    data = {"name": "c2", "backend": "local", "queues": "", "cache_node_groups": text}
    response = as_admin.post(reverse("jobs:cluster-add"), data)
    assert response.status_code in (200, 302)
    Cluster.objects.filter(organization=org, name="c2").delete()
    _memory_bounded()


def test_deep_nesting_in_a_form_is_a_form_error_not_a_500(as_admin, org):
    # A Kubernetes cluster: a local one's page ignores its Kubernetes fields, this one too.
    data = {"name": "c2", "backend": "kubernetes", "queues": "", "cache_node_groups": "[" * 5000}
    response = as_admin.post(reverse("jobs:cluster-add"), data)
    assert response.status_code == 200
    assert "nested more than 16 levels" in response.content.decode()


def test_app_apply_reads_no_more_than_a_manifest_and_refuses_non_utf8(admin, tmp_path):
    for content, phrase in (
        (b"a: " + b"x" * (2 * 1024 * 1024), "accepts at most 1048576 bytes"),
        (b"spec:\n  name: \xff\xfe\n", "is not UTF-8 text"),
    ):
        path = tmp_path / "m.yaml"
        path.write_bytes(content)
        err = StringIO()
        with pytest.raises(CommandError) as raised:
            call_command("app", "apply", "-f", str(path), stdout=StringIO(), stderr=err)
        assert raised.value.returncode == 1
        assert phrase in err.getvalue()


def test_a_value_that_holds_itself_is_a_form_error_not_a_500(as_admin, org):
    # Stored as JSON, a self-referencing mapping raised "Circular reference detected".
    cluster = Cluster.objects.get(organization=org, name="local")
    data = {
        "name": "p2",
        "cluster": cluster.pk,
        "namespace": "default",
        "vllm_version": "0.13.0",
        "machine_catalog_yaml": "",
        "defaults_yaml": "a: &a {b: *a}\n",
    }
    response = as_admin.post(reverse("jobs:profile-add"), data)
    assert response.status_code == 200
    assert "refers to itself" in response.content.decode()
    assert not Profile.objects.filter(name="p2").exists()
