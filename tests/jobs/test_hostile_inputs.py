"""Hostile text on every surface that reads YAML or JSON from users: the REST API (dry run,
create, PUT), the Deploy-from-YAML page, `manage.py app apply -f`, and the cluster and
profile forms. Each answers the refusal the input is known to get, and the process lives: the
API a 400 in its one error envelope (console/api_errors.py) whose refusals are where the input
puts them (the whole document, with the limit it passed, or the fields it holds), the page its
list of refusals, the command line exit 1 with them, a form the error on the field given.

libyaml's composer used to overflow the C stack on deep nesting, killing the process: that is
tested in a child process, so a crash fails the test instead of ending pytest.
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from dataclasses import dataclass, replace
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
from jobs.manifest.problems import show
from jobs.models import Application, Cluster, Profile
from tests.helpers import SHORTEST, api_error, bearer
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

# The manifest reader's limits (jobs/manifest/bounded.py, MANIFEST_LIMITS) and the refusal each
# worst input gets; the property tests below know the same of every document they are given.
MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_VALUES = 100_000
REQUIRED = ("apiVersion", "kind", "spec")  # what a manifest holds at its top, each refused missing
# The profile's target (this machine, the cluster) answers at spec.profileName.
TARGET = "spec.profileName"
TOO_DEEP = f"is nested more than {MAX_DEPTH} levels deep"
TOO_MANY_VALUES = f"holds more than {MAX_VALUES} values"
WORST_SAYS = {
    "flow-sequences": TOO_DEEP,
    "flow-mappings": TOO_DEEP,
    "block-sequences": TOO_DEEP,
    "indented-mappings": TOO_DEEP,
    "json-nesting": TOO_DEEP,
    "json-objects": TOO_DEEP,
    "alias-bomb": TOO_MANY_VALUES,
    "merge-bomb": TOO_MANY_VALUES,
    "too-many-values": TOO_MANY_VALUES,
    "too-large": f"accepts at most {MAX_BYTES} bytes",
    "self-reference": "refers to itself",
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
    assert WORST_SAYS[name] in refusal.message
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


def refusals_in_the_envelope(response) -> list[dict]:
    """A 400 in the API's one error envelope (console/api_errors.py) whose message counts the
    refusals listed under problems and names the first; the refusals."""
    assert response.status_code == 400, response.content[:500]
    error = api_error(response)
    refusals = [p for p in error["problems"] if p["level"] == "refusal"]
    assert refusals, error
    count, first = len(refusals), refusals[0]
    assert error["message"] == (
        f"The manifest was refused: {count} problem{'s' if count != 1 else ''} to fix "
        f"(first: {first['path']}: {first['message']}). Each is listed under problems."
    )
    return refusals


def refused_clearly(response) -> list[dict]:
    """A refusal in the one envelope, small whatever was sent; its problems."""
    refusals_in_the_envelope(response)
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
        assert [p["path"] for p in problems] == ["document"]
        assert WORST_SAYS[name] in problems[0]["message"]
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
    # The dry run shows its answer (200); Deploy refuses what it was given (400).
    for url, status in (("jobs:deploy-yaml-dry-run", 200), ("jobs:deploy-yaml-apply", 400)):
        response = as_deployer.post(reverse(url), {"manifest": WORST[name]})
        assert response.status_code == status
        page = response.content.decode()
        assert "Refused.</strong> Fix 1 problem and run it again." in page
        assert "<code>document</code> " + WORST_SAYS[name] in page
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


@dataclass(frozen=True)
class Hostile:
    """A hostile document and the refusal it gets. `whole`: a phrase of the one refusal, at
    "document", when the text is refused as a whole ("": any phrase). `under`: the paths every
    refusal lies under when the text reads but is not a manifest. When both are set either
    answer is right, each exactly. `may_pass`: a mutated manifest that may still be one.
    `names_it`: the document names the application the PUT tests address (bge-embed)."""

    text: str
    whole: str | None = None
    under: tuple[str, ...] | None = None
    may_pass: bool = False
    names_it: bool = False

    def check(self, refusals: list[dict]) -> None:
        """`refusals` (path, message) are the ones this document gets."""
        assert refusals, "refused without a refusal"
        paths = [r["path"] for r in refusals]
        whole = paths == ["document"] and self.whole is not None
        if whole and self.whole in refusals[0]["message"]:
            return
        assert self.under is not None, (
            f"{self.text[:80]!r} as a whole should be refused ({self.whole!r}): {refusals[:3]}"
        )
        outside = [p for p in paths if not any(_within(p, root) for root in self.under)]
        assert not outside, f"{self.text[:80]!r}: refusals outside {self.under[:8]}: {outside[:5]}"

    def check_put(self, refusals: list[dict]) -> None:
        """A PUT to bge-embed of a readable document naming another name (or none) is refused
        for that name alone, first."""
        if not self.names_it and [r["path"] for r in refusals] == ["spec.name"]:
            return
        self.check(refusals)


ANYWHERE = "*"


def _within(path: str, root: str) -> bool:
    return root == ANYWHERE or path == root or path.startswith((root + ".", root + "["))


def _key_paths(mapping: dict) -> tuple[str, ...]:
    """The paths a mapping's top-level keys are refused at: a key that is not text as the
    manifest's messages spell a value (null, 1, a date value). Under an empty key, paths are
    spelled from the top (`.name` is written `name`): anywhere, then."""
    if "" in mapping:
        return (ANYWHERE,)
    return tuple(key if isinstance(key, str) else show(key) for key in mapping)


def _read(value, again: bool = True) -> Hostile:
    """A value that reads (YAML or JSON): a mapping is refused at its keys or a missing top
    field ("document": a NUL character in a key); anything else at the document, or at the
    items of a list that hold a NUL character. A document that is one string is read again as
    text by the dry run (jobs/dry_run.py loads it, then manifest.parse reads the string)."""
    if isinstance(value, dict):
        return Hostile("", under=(*_key_paths(value), *REQUIRED, "document"))
    if isinstance(value, str) and again:
        try:
            inner = yaml.safe_load(value)
        except (yaml.YAMLError, ValueError):
            inner = None
        if isinstance(inner, dict):
            return replace(_read(inner, again=False), whole="")
    return Hostile("", whole="", under=("document", ""))


def _as(hostile: Hostile, text: str) -> Hostile:
    return replace(hostile, text=text)


MUTATED = {  # where the shortest manifest is mutated, and the path of that part
    "spec": "spec",
    "source": "spec.source",
    "model": "spec.source.model",
    "engine": "spec.source.model.engine.extraArgs",
}


def _mutated_manifest(draw) -> Hostile:
    """The shortest manifest with one part replaced: random values where a manifest is read.
    Refused under that part (the model's rules and Check model under the model, the target at
    spec.profileName), or a manifest still."""
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
    under = (MUTATED[spot],) if spot == "spec" else ("spec.source.model", MUTATED[spot], TARGET)
    text = _dumped(doc, draw(st.booleans()))
    return Hostile(text, under=under, may_pass=True, names_it=spot != "spec")


def _bomb(make, levels: int, width: int) -> Hostile:
    """Refused as a whole for the values its aliases repeat (at least width**levels), else read
    as a mapping of its anchors' keys (a0.. or m0..)."""
    prefix = "a" if make is alias_bomb else "m"
    keys = tuple(f"{prefix}{level}" for level in range(levels))
    if width**levels > MAX_VALUES:
        return Hostile(make(levels, width), whole=TOO_MANY_VALUES)
    return Hostile(make(levels, width), whole=TOO_MANY_VALUES, under=(*keys, *REQUIRED))


def _deep(opening: str, closing: str, depth: int) -> Hostile:
    text = deep(opening, depth, closing)
    if depth > MAX_DEPTH:
        return Hostile(text, whole=TOO_DEEP)
    if opening in ("[", "- "):
        return Hostile(text, whole="is a list, not a mapping")
    return Hostile(text, under=("a", *REQUIRED))  # {a: {a: ...}}: an unknown field, no manifest


def _huge(size: int, char: str) -> Hostile:
    text = "spec:\n  name: " + char * size + "\n"
    if char == "\x07":
        return Hostile(text, whole="unacceptable character #x0007")
    if len(text.encode()) > MAX_BYTES:
        return Hostile(text, whole=f"accepts at most {MAX_BYTES} bytes")
    return Hostile(text, under=REQUIRED)  # spec.name too long; apiVersion, kind, ... missing


def _text(text: str) -> Hostile:
    """Random text: refused as a whole (not YAML, not a mapping), or read as a mapping (what
    PyYAML reads of it, the same libyaml the reader runs)."""
    try:
        value = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError):
        return Hostile(text, whole="")
    return _as(_read(value), text)


@st.composite
def hostile_cases(draw) -> Hostile:
    kind = draw(st.sampled_from(["worst", "deep", "bomb", "random", "manifest", "text", "huge"]))
    if kind == "worst":
        name = draw(st.sampled_from(sorted(WORST)))
        return Hostile(WORST[name], whole=WORST_SAYS[name])
    if kind == "deep":
        opening, closing = draw(
            st.sampled_from([("[", "]"), ("{a: ", "}"), ("- ", ""), ('{"a":', "}")])
        )
        return _deep(opening, closing, draw(st.integers(60, 5000)))
    if kind == "bomb":
        make = draw(st.sampled_from([alias_bomb, merge_bomb]))
        return _bomb(make, draw(st.integers(2, 9)), draw(st.integers(2, 12)))
    if kind == "random":
        as_json = draw(st.booleans())
        text = _dumped(draw(VALUES), as_json)
        # What the text reads as, not the value dumped: a YAML key holding a line break (\x85)
        # reads back as a space.
        return _as(_read(json.loads(text) if as_json else yaml.safe_load(text)), text)
    if kind == "manifest":
        return _mutated_manifest(draw)
    if kind == "huge":
        size = draw(st.sampled_from([70_000, 300_000, 1_000_000]))
        return _huge(size, draw(st.sampled_from(["x", "\x07", "é"])))
    return _text(draw(st.text(st.characters(codec="utf-8"), max_size=300)))


def hostile_documents():
    """The hostile documents alone (for the model catalog's hostile-input tests)."""
    return hostile_cases().map(lambda case: case.text)


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
@given(case=hostile_cases())
def test_api_dry_run_answers_a_clear_status(api, case):
    response = api("post", f"{API}?dryRun=true", case.text)
    if case.may_pass and response.status_code == 200:
        body = response.json()
        assert body["ok"] is True and body["refusals"] == []
        assert body["manifest"]["spec"]["name"] == "bge-embed"
    else:
        case.check(refusals_in_the_envelope(response))
    _memory_bounded()


@PROPERTY
@given(case=hostile_cases())
def test_api_create_answers_a_clear_status(api, case):
    response = api("post", API, case.text)
    if case.may_pass and response.status_code == 201:
        assert response.json()["application"]["spec"]["name"] == "bge-embed"
    else:
        case.check(refusals_in_the_envelope(response))
        assert not Application.objects.exists()
    Application.objects.all().delete()  # a document that passed is not the point here
    _memory_bounded()


@PROPERTY
@given(case=hostile_cases())
def test_api_put_answers_a_clear_status(api, existing, case):
    response = api("put", f"{API}/bge-embed?dryRun=true", case.text)
    if case.may_pass and response.status_code == 200:
        assert response.json()["manifest"]["spec"]["name"] == "bge-embed"
    else:
        case.check_put(refusals_in_the_envelope(response))
    _memory_bounded()


@PROPERTY
@given(case=hostile_cases())
def test_deploy_from_yaml_page_answers_a_clear_status(as_deployer, case):
    response = as_deployer.post(reverse("jobs:deploy-yaml-dry-run"), {"manifest": case.text})
    page = response.content.decode()
    if not case.text.strip():  # nothing pasted: the page says so, not "the document is empty"
        assert response.status_code == 400 and response.context["empty"]
        assert "Manifest (YAML or JSON) is empty." in page
        return
    assert response.status_code == 200
    run = response.context["run"]
    if case.may_pass and run.ok:
        assert "Dry run passed." in page
    else:
        count = len(run.refusals)
        assert count and f"Fix {count} problem{'s' if count != 1 else ''} and run" in page
        assert page.count('<li class="refusal">') == count
    _memory_bounded()


@PROPERTY
@given(case=hostile_cases())
def test_app_apply_dry_run_exits_0_or_1_with_a_message(admin, tmp_path_factory, case):
    path = tmp_path_factory.mktemp("cli") / "m.yaml"
    path.write_text(case.text, encoding="utf-8", errors="surrogatepass")
    out, err = StringIO(), StringIO()
    try:
        call_command("app", "apply", "-f", str(path), "--dry-run", stdout=out, stderr=err)
    except CommandError as error:
        assert error.returncode == 1
        assert re.fullmatch(r"refused: [1-9]\d* problems?", str(error)), str(error)
        assert err.getvalue().startswith("error: "), err.getvalue()[:300]
        if case.whole is not None and case.under is None:  # the file as a whole: one refusal
            assert str(error) == "refused: 1 problem"
            assert err.getvalue().startswith("error: document: ")
            assert case.whole in err.getvalue()
    else:
        assert case.may_pass, "a hostile document passed the dry run"
        assert "bge-embed" in out.getvalue()
    _memory_bounded()


@PROPERTY
@given(case=hostile_cases(), field=st.sampled_from(["machine_catalog_yaml", "defaults_yaml"]))
def test_profile_form_answers_a_form_error_or_saves(as_admin, org, case, field):
    cluster = Cluster.objects.get(organization=org, name="local")
    data = {
        "name": "p2",
        "cluster": cluster.pk,
        "namespace": "default",
        "vllm_version": "0.13.0",
        "machine_catalog_yaml": "",
        "defaults_yaml": "",
        field: case.text,
    }
    response = as_admin.post(reverse("jobs:profile-add"), data)
    if response.status_code == 302:  # saved: the text was a catalog or defaults it accepts
        assert Profile.objects.filter(organization=org, name="p2").exists()
    else:  # the form again, with an error on the field that holds the text and nowhere else
        assert response.status_code == 200
        assert set(response.context["form"].errors) == {field}
        assert not Profile.objects.filter(organization=org, name="p2").exists()
    Profile.objects.filter(organization=org, name="p2").delete()
    _memory_bounded()


@pytest.mark.parametrize(
    ("text", "where"),
    [("a: .nan", "a"), ("a: {b: [1, -.inf]}", "a.b[1]"), ("[.nan]", None)],
)
def test_profile_defaults_without_a_finite_number_are_a_form_error(as_admin, org, text, where):
    # JSON, where defaults are stored, has no NaN or infinity: saving one was a 500.
    cluster = Cluster.objects.get(organization=org, name="local")
    data = {
        "name": "p2",
        "cluster": cluster.pk,
        "namespace": "default",
        "vllm_version": "0.13.0",
        "machine_catalog_yaml": "",
        "defaults_yaml": text,
    }
    response = as_admin.post(reverse("jobs:profile-add"), data)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert set(errors) == {"defaults_yaml"}
    if where is None:  # not a mapping at all: refused as such first
        assert errors["defaults_yaml"] == ["Defaults must be a YAML mapping; a list was given."]
    else:
        assert errors["defaults_yaml"] == [
            f"Defaults: {where} is not a finite number (.nan or .inf); give a number, or "
            "leave the key out."
        ]
    assert not Profile.objects.filter(organization=org, name="p2").exists()


@PROPERTY
@given(case=hostile_cases())
def test_cluster_form_answers_a_form_error_or_saves(as_admin, org, settings, case):
    # A local cluster's page does not read the Kubernetes-only fields, whatever they hold.
    data = {"name": "c2", "backend": "local", "queues": "", "cache_node_groups": case.text}
    response = as_admin.post(reverse("jobs:cluster-add"), data)
    assert response.status_code == 302
    assert Cluster.objects.get(organization=org, name="c2").cache_node_groups == {}
    Cluster.objects.filter(organization=org, name="c2").delete()
    # A Kubernetes cluster's page reads them: saved, or the field's own error.
    settings.SERVEDECK_ALLOW_IN_CLUSTER = True
    data |= {"backend": "kubernetes", "in_cluster": "on"}
    response = as_admin.post(reverse("jobs:cluster-add"), data)
    if response.status_code == 302:
        groups = Cluster.objects.get(organization=org, name="c2").cache_node_groups
        assert all(isinstance(size, int) for size in groups.values())
    else:
        assert response.status_code == 200
        assert set(response.context["form"].errors) == {"cache_node_groups"}
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
