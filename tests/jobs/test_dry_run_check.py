"""The dry run runs Check model: its verdict, facts and sizing, and its refusals refuse."""

import pytest

from jobs.deploy import dry_run
from jobs.models import Profile
from models_catalog.check_types import SERVABLE
from tests.fakes.hub import GOOD_TOKEN, closed_endpoint
from tests.helpers import SHORTEST


def manifest(uri: str, extra: str = "") -> str:
    return SHORTEST.replace("hf://BAAI/bge-m3", uri) + extra


def refusals_at(run, path="spec.source.model.uri"):
    return [p.message for p in run.refusals if p.path == path]


def test_a_servable_model_reports_verdict_facts_and_sizing(org):
    run = dry_run(SHORTEST, org)
    assert run.ok, run.refusals
    assert run.check.verdict == SERVABLE
    assert run.check.task == "embed" and run.check.architecture == "XLMRobertaModel"
    assert run.check.parameters and run.check.weight_bytes
    assert run.as_dict()["checkModel"]["verdict"] == SERVABLE


def test_a_missing_repository_refuses_the_dry_run(org):
    run = dry_run(manifest("hf://acme/no-such-model"), org)
    assert not run.ok
    (message,) = refusals_at(run)
    assert "acme/no-such-model" in message


def test_a_gated_model_without_a_token_says_how_to_get_access(org):
    run = dry_run(manifest("hf://meta-llama/Llama-3.1-8B-Instruct"), org)
    (message,) = refusals_at(run)
    assert "gated" in message.lower() and "token" in message.lower()


def test_the_profiles_token_opens_a_gated_model(org, monkeypatch):
    monkeypatch.setenv("HF_TOKEN_ACME", GOOD_TOKEN)
    org.token_variables = ["HF_TOKEN_ACME"]  # the operator allowed it
    org.save()
    Profile.objects.filter(organization=org).update(hf_token_ref="env/HF_TOKEN_ACME")
    run = dry_run(manifest("hf://meta-llama/Llama-3.1-8B-Instruct"), org)
    assert run.ok, run.refusals
    assert run.check.max_context_tokens == 131072
    assert run.check.kv_bytes_per_token == 128 * 1024


def test_custom_code_is_refused_with_the_fix(org):
    run = dry_run(manifest("hf://acme/remote-code-lm"), org)
    (message,) = refusals_at(run)
    assert "custom code" in message.lower() or "trust_remote_code" in message


def test_a_context_above_the_models_limit_is_refused_on_its_field(org):
    text = manifest(
        "hf://Qwen/Qwen2.5-7B-Instruct", "      serving:\n        maxContextTokens: 999999\n"
    )
    run = dry_run(text, org)
    assert refusals_at(run, "spec.source.model.serving.maxContextTokens")


def test_a_hub_that_cannot_be_reached_is_a_warning_not_a_refusal(org, monkeypatch):
    with closed_endpoint() as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        run = dry_run(SHORTEST, org)
    assert run.ok
    assert run.check.inconclusive
    assert any("Could not reach the Hugging Face Hub" in p.message for p in run.warnings)


def test_no_check_when_the_uri_itself_is_wrong(org):
    run = dry_run(manifest("ftp://somewhere/model"), org)
    assert run.check is None
    assert len(refusals_at(run)) == 1


@pytest.mark.parametrize("uri", ["s3://bucket/models/churn", "gs://bucket/iris"])
def test_storage_uris_are_answered_from_the_format(org, uri):
    text = manifest(uri).replace("uri: " + uri, f"uri: {uri}\n      format: SKLearn")
    run = dry_run(text, org)
    assert run.check.runtime == "sklearn"
    # Check model is content; the local profile's backend is what refuses predictive models.
    assert {p.path for p in run.refusals} == {"spec.profileName"}
    assert "Kubernetes profile" in run.refusals[0].message
    assert any(
        "cannot" in w.message.lower() or "inspect" in w.message.lower() for w in run.warnings
    )


def test_too_few_gpus_for_the_model_is_refused_on_the_count(org):
    gpu = "      resources:\n        accelerator:\n          gpu: {model: t4, countPerReplica: 1}\n"
    run = dry_run(manifest("hf://Qwen/Qwen3-30B-A3B", gpu), org)
    (message,) = refusals_at(run, "spec.source.model.resources.accelerator.gpu.countPerReplica")
    assert "too few" in message and "t4" in message


def test_a_context_above_the_limit_is_said_once(org):
    text = manifest(
        "hf://Qwen/Qwen2.5-7B-Instruct", "      serving:\n        maxContextTokens: 999999\n"
    )
    run = dry_run(text, org)
    assert [p.path for p in run.refusals] == ["spec.source.model.serving.maxContextTokens"]


@pytest.mark.parametrize(
    "source",
    ["", "  source: null\n", "  source: [hf://BAAI/bge-m3]\n", "  source: text\n"],
    ids=["missing", "null", "a-list", "text"],
)
def test_a_source_that_is_missing_or_not_a_mapping_is_refused_without_check_model(org, source):
    text = (
        "apiVersion: servedeck.io/v1\nkind: Application\nspec:\n  name: m\n"
        "  profileName: local\n" + source
    )
    run = dry_run(text, org)
    assert not run.ok
    assert [p.path for p in run.refusals] == ["spec.source"]
    assert run.check is None
