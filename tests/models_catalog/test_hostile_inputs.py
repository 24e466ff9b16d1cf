"""Hostile text in model masters and recipe uploads: bounded, refused with the field named, and
a master's engine arguments held to the manifest's rule on save and where they are used."""

from __future__ import annotations

import resource

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.deploy import dry_run
from models_catalog.master_checks import args_problems, env_problems
from models_catalog.models import ModelMaster
from models_catalog.recipes import MAX_RECIPE_BYTES
from models_catalog.recommended import RECOMMENDED
from tests.helpers import SHORTEST
from tests.jobs.test_hostile_inputs import alias_bomb, hostile_documents
from tests.models_catalog.test_recipes import LLAMA

# A few hundred bytes that expanded to tens of MB when the environment was saved.
ENV_BOMB = alias_bomb(levels=7, width=9)


def master_form(**change) -> dict:
    return {"model_id": "a/b", "runtime": "vllm", "extra_args_text": "", "env_yaml": "", **change}


def post_master(client, **change):
    return client.post(reverse("models_catalog:master-add"), master_form(**change))


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        ({"env_yaml": ENV_BOMB}, "uses more than 0 aliases"),
        ({"env_yaml": "[" * 10_000}, "is nested more than 2 levels deep"),
        ({"env_yaml": "A: {b: 1}"}, "Environment.A: is not a plain value"),
        ({"env_yaml": "1A: x"}, "is not a variable name"),
        ({"env_yaml": "A: " + "x" * 20_000}, "accepts at most 16384 bytes"),
        ({"extra_args_text": "--trust_remote_code"}, "is read as --trust-remote-code"),
        ({"extra_args_text": "--hos 0.0.0.0"}, "is read as --host"),
        ({"extra_args_text": "--download-dir /etc"}, "names a file or folder"),
        ({"extra_args_text": "="}, "is not a flag"),
        ({"extra_args_text": "x" * 5000}, "at most 4000 characters"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_master_form_refuses_with_the_field_named(as_deployer, org, change, phrase):
    response = post_master(as_deployer, **change)
    assert response.status_code == 200
    assert phrase in response.content.decode()
    assert not ModelMaster.objects.exists()


def test_a_stored_masters_arguments_are_refused_where_they_are_used(org):
    # Saved before masters were checked: it would apply to every later deployment.
    ModelMaster.objects.create(
        organization=org, model_id="BAAI/bge-m3", extra_args=["--enforce-eager", "--hos=0.0.0.0"]
    )
    run = dry_run(SHORTEST, org)
    assert [p.path for p in run.refusals] == ["spec.source.model.engine.extraArgs"]
    message = run.refusals[0].message
    assert message.startswith("model master BAAI/bge-m3, field extra_args[1]: '--hos=0.0.0.0'")
    assert "is read as --host" in message


def test_a_recipe_upload_over_the_limit_is_refused_before_it_is_read(as_deployer, org):
    big = SimpleUploadedFile("recipe.yaml", b"a: " + b"x" * (13 * 1024 * 1024))
    response = as_deployer.post(
        reverse("models_catalog:master-recipe"),
        {"recipe_file": big, "variant": "", "gpu_kind": "l4"},
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert f"accepts at most {MAX_RECIPE_BYTES} bytes" in page
    assert not ModelMaster.objects.exists()


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        (alias_bomb(), "holds more than 20000 values"),
        ("[" * 100_000, "is nested more than 16 levels deep"),
        (LLAMA.replace("--enable-prefix-caching", "--trust-remote"), "is read as --trust-remote"),
    ],
    ids=["alias-bomb", "deep", "remote-code"],
)
def test_a_hostile_recipe_is_refused(as_deployer, org, text, phrase):
    response = as_deployer.post(
        reverse("models_catalog:master-recipe"),
        {"recipe_text": text, "variant": "bf16", "gpu_kind": "l4"},
    )
    assert response.status_code == 200
    assert phrase in response.content.decode()
    assert not ModelMaster.objects.exists()


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
MAX_RSS_KB = 3 * 1024 * 1024


@PROPERTY
@given(text=hostile_documents(), args=st.text(max_size=200))
def test_master_form_answers_a_form_error_or_saves_something_small(as_deployer, org, text, args):
    response = post_master(as_deployer, env_yaml=text, extra_args_text=args)
    assert response.status_code in (200, 302)
    for master in ModelMaster.objects.filter(organization=org):
        assert len(str(master.env)) < 40_000 and len(master.extra_args) <= 64
        master.delete()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < MAX_RSS_KB


@PROPERTY
@given(text=hostile_documents(), as_file=st.booleans())
def test_recipe_upload_answers_a_form_error_or_saves(as_deployer, org, text, as_file):
    data = {"variant": "", "gpu_kind": "l4"}
    if as_file:
        data["recipe_file"] = SimpleUploadedFile("r.yaml", text.encode("utf-8", "surrogatepass"))
    else:
        data["recipe_text"] = text
    response = as_deployer.post(reverse("models_catalog:master-recipe"), data)
    assert response.status_code in (200, 302)
    ModelMaster.objects.filter(organization=org).delete()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < MAX_RSS_KB


def test_every_recommended_master_passes_the_engine_flag_rule():
    for entry in RECOMMENDED:
        assert args_problems(entry.get("extra_args") or []) == [], entry["model_id"]
        assert env_problems(entry.get("env") or {}) == [], entry["model_id"]
