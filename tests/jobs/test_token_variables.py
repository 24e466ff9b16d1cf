"""Hugging Face tokens of the console's host: an `env/VAR` reference reads VAR only when the
operator allowed it for the organisation, on the form, in Check model and when a local model
server starts; a model server sees only its own application's token, never the console's
secrets. The environment of a started server is read from /proc/<pid>/environ."""

import os
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from jobs import deploy as verbs
from jobs.backends.local.backend import local_runner
from jobs.backends.local.command import server_environment
from jobs.forms import ProfileForm
from jobs.models import Cluster, Profile
from jobs.token_refs import env_token, profile_token, reference_problem
from tests.fakes.hub import GOOD_TOKEN
from tests.helpers import SHORTEST, make_member

HOST = {"HF_TOKEN": "hf_host_token", "HF_TOKEN_ACME": GOOD_TOKEN, "HF_TOKEN_GLOBEX": "hf_globex"}


@pytest.fixture
def host_tokens(monkeypatch):
    for name, value in {**HOST, "SECRET_KEY": "s" * 60, "VLLM_API_KEY": "k"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DATABASE_URL", os.environ.get("DATABASE_URL", "sqlite:///x"))


def organization(*args: str) -> str:
    out = StringIO()
    call_command("organization", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


# ---- the rule, pure ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref, allowed, problem",
    [
        ("", [], None),
        ("secret/hf-token", [], None),
        ("env/HF_TOKEN_ACME", ["HF_TOKEN_ACME"], None),
        ("env/HF_TOKEN", [], "has not been allowed"),
        ("env/HF_TOKEN", ["HF_TOKEN_ACME"], "allowed: HF_TOKEN_ACME"),
        ("env/SECRET_KEY", ["SECRET_KEY"], "has not been allowed"),  # never usable
        ("hf_abcdef", [], "is not a token reference"),
        ("env/" + "A" * 5000, [], "is not a token reference"),
    ],
)
def test_a_reference_names_only_allowed_variables(ref, allowed, problem):
    found = reference_problem(ref, allowed, "acme")
    if problem is None:
        assert found is None
    else:
        assert problem in found.replace("operator has not allowed", "has not been allowed")
        assert len(found) < 600  # a long value is never echoed whole


def test_env_token_reads_only_an_allowed_variable():
    environ = {"HF_TOKEN": "host", "HF_TOKEN_ACME": "acme"}
    assert env_token("env/HF_TOKEN", ["HF_TOKEN_ACME"], environ) is None
    assert env_token("env/HF_TOKEN_ACME", ["HF_TOKEN_ACME"], environ) == "acme"
    assert env_token("secret/hf", ["HF_TOKEN_ACME"], environ) is None
    assert env_token("env/HF_TOKEN_ACME", "HF_TOKEN_ACME", environ) is None  # not a list


# ---- the operator's command -------------------------------------------------------------------


def test_the_operator_allows_and_takes_back_a_variable(org):
    assert organization("token-variables", "acme") == "acme may name: nothing\n"
    assert "env/HF_TOKEN_ACME" in organization("allow-token-variable", "acme", "HF_TOKEN_ACME")
    org.refresh_from_db()
    assert org.token_variables == ["HF_TOKEN_ACME"]
    organization("allow-token-variable", "acme", "HF_TOKEN_ACME", "--remove")
    org.refresh_from_db()
    assert org.token_variables == []


@pytest.mark.parametrize(
    "variable, message",
    [("SECRET_KEY", "console's own settings"), ("hf token", "not an environment variable")],
)
def test_the_operator_cannot_allow_the_consoles_settings(org, variable, message):
    with pytest.raises(CommandError, match=message):
        organization("allow-token-variable", "acme", variable)


def test_an_unknown_organisation_is_named(org):
    with pytest.raises(CommandError, match="'nope': no such organisation; known: acme"):
        organization("token-variables", "nope")


# ---- saving a profile -------------------------------------------------------------------------


def profile_form(org, ref: str) -> ProfileForm:
    profile = Profile.objects.get(organization=org, name="local")
    data = {
        "name": "local",
        "cluster": profile.cluster.pk,
        "namespace": "default",
        "hf_token_ref": ref,
        "vllm_version": "0.13.0",
        "machine_catalog_yaml": "[]",
        "defaults_yaml": "",
    }
    return ProfileForm(data, instance=profile, organization=org)


def test_an_admin_cannot_borrow_the_hosts_token_from_the_page(as_admin, org):
    response = as_admin.post(
        reverse("jobs:profile-edit", args=["local"]),
        {
            "name": "local",
            "cluster": Cluster.objects.get(organization=org, name="local").pk,
            "namespace": "default",
            "hf_token_ref": "env/HF_TOKEN",
            "vllm_version": "0.13.0",
            "machine_catalog_yaml": "[]",
            "defaults_yaml": "",
        },
    )
    assert response.status_code == 200
    assert "has not allowed for organisation acme (allowed: none)" in response.content.decode()
    assert Profile.objects.get(organization=org, name="local").hf_token_ref == ""


def test_an_allowed_variable_is_accepted_for_its_organisation_only(org, other_org):
    org.token_variables = ["HF_TOKEN_ACME"]
    org.save()
    assert profile_form(org, "env/HF_TOKEN_ACME").is_valid()
    refused = profile_form(other_org, "env/HF_TOKEN_ACME")
    assert not refused.is_valid()
    assert "allow-token-variable globex HF_TOKEN_ACME" in refused.errors["hf_token_ref"][0]


# ---- where the token is read ------------------------------------------------------------------


def test_check_model_reads_no_variable_the_operator_did_not_allow(org, host_tokens):
    profile = Profile.objects.get(organization=org, name="local")
    Profile.objects.filter(pk=profile.pk).update(hf_token_ref="env/HF_TOKEN")  # past the form
    profile.refresh_from_db()
    assert profile_token(profile) is None
    org.token_variables = ["HF_TOKEN"]
    org.save()
    profile.refresh_from_db()
    assert profile_token(profile) == "hf_host_token"


def test_a_server_environment_holds_no_host_token_nor_secret():
    console = {
        "PATH": "/usr/bin",
        "HF_TOKEN": "hf_host",
        "HUGGING_FACE_HUB_TOKEN": "hf_old",
        "HF_HOME": "/cache/hf",
        "VLLM_API_KEY": "k",
        "VLLM_LOGGING_LEVEL": "DEBUG",
        "SECRET_KEY": "x" * 50,
        "DATABASE_URL": "postgres://u:p@db/servedeck",
    }
    env = server_environment(console, {"CUDA_VISIBLE_DEVICES": ""}, "hf_own")
    assert env == {
        "PATH": "/usr/bin",
        "HF_HOME": "/cache/hf",
        "VLLM_LOGGING_LEVEL": "DEBUG",
        "CUDA_VISIBLE_DEVICES": "",
        "HF_TOKEN_PATH": os.devnull,
        "HF_TOKEN": "hf_own",
    }
    without = server_environment(console, {}, None)
    assert "HF_TOKEN" not in without and without["HF_HUB_DISABLE_IMPLICIT_TOKEN"] == "1"


def test_local_model_servers_get_only_their_own_applications_token(
    org, other_org, deployer, django_user_model, host_tokens
):
    org.token_variables = ["HF_TOKEN_ACME"]
    org.save()
    Profile.objects.filter(organization=org).update(hf_token_ref="env/HF_TOKEN_ACME")
    # globex's admin wrote a reference past the form; the operator allowed nothing for it.
    Profile.objects.filter(organization=other_org).update(hf_token_ref="env/HF_TOKEN")
    globex = make_member(django_user_model, other_org, "gus", "deployer")
    acme_app = verbs.apply(SHORTEST, deployer).application
    globex_app = verbs.apply(SHORTEST, globex).application
    acme_env = environ_of(local_runner("acme").observe(acme_app.name).replicas[0].pid)
    globex_env = environ_of(local_runner("globex").observe(globex_app.name).replicas[0].pid)
    assert acme_env["HF_TOKEN"] == GOOD_TOKEN
    assert "HF_TOKEN" not in globex_env
    for env in (acme_env, globex_env):
        assert not {"HF_TOKEN_ACME", "HF_TOKEN_GLOBEX", "SECRET_KEY", "DATABASE_URL"} & set(env)
        assert "VLLM_API_KEY" not in env
        assert env["HF_TOKEN_PATH"] == os.devnull
