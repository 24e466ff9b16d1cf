"""Model masters: pages by role, the recommended set, recipe import, and defaults in the dry run."""

import pytest
from django.urls import reverse

from jobs.deploy import dry_run
from models_catalog.models import ModelMaster
from models_catalog.recommended import RECOMMENDED
from tests.helpers import SHORTEST
from tests.models_catalog.test_recipes import LLAMA

LLAMA_MANIFEST = SHORTEST.replace("hf://BAAI/bge-m3", "hf://meta-llama/Llama-3.1-8B-Instruct")


def test_the_recommended_set_covers_the_well_known_models():
    ids = {entry["model_id"] for entry in RECOMMENDED}
    assert len(ids) >= 12
    for needed in (
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-70B-Instruct",
        "Qwen/Qwen3-30B-A3B",
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "google/gemma-3-27b-it",
        "openai/gpt-oss-20b",
        "openai/gpt-oss-120b",
        "BAAI/bge-m3",
        "BAAI/bge-reranker-v2-m3",
        "openai/whisper-large-v3",
        "nvidia/parakeet-tdt-0.6b-v3",
    ):
        assert needed in ids
    parakeet = next(e for e in RECOMMENDED if e["runtime"] == "parakeet")
    assert not parakeet.get("dtype") and not parakeet.get("tensor_parallel_size")


def test_masters_page_for_each_role(as_viewer, as_deployer, org):
    page = as_viewer.get(reverse("models_catalog:masters")).content.decode()
    assert "Recommended parameters" in page and "Add model master" not in page
    assert as_viewer.get(reverse("models_catalog:master-add")).status_code == 403
    assert as_deployer.get(reverse("models_catalog:master-add")).status_code == 200


def test_use_a_recommended_entry_then_edit_and_delete(as_deployer, deployer):
    response = as_deployer.post(
        reverse("models_catalog:master-recommended"), {"model_id": "Qwen/Qwen3-8B"}
    )
    master = ModelMaster.objects.get(model_id="Qwen/Qwen3-8B")
    assert response["Location"] == reverse("models_catalog:master-edit", args=[master.slug])
    assert master.reasoning_parser == "qwen3" and master.source == "recommended"
    edit = as_deployer.get(response["Location"])
    assert edit.status_code == 200
    data = {
        "model_id": "Qwen/Qwen3-8B",
        "runtime": "vllm",
        "image": "img:1",
        "dtype": "bfloat16",
        "quantization": "",
        "reasoning_parser": "qwen3",
        "tool_call_parser": "hermes",
        "gpu_memory_utilization": "0.85",
        "extra_args_text": "--enable-prefix-caching",
        "env_yaml": "A: 1",
        "notes": "",
    }
    assert as_deployer.post(response["Location"], data).status_code == 302
    master.refresh_from_db()
    assert master.extra_args == ["--enable-prefix-caching"] and master.env == {"A": "1"}
    as_deployer.post(reverse("models_catalog:master-delete", args=[master.slug]))
    assert not ModelMaster.objects.exists()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_id": "just-a-name"}, "write it as org/name"),
        ({"gpu_memory_utilization": "1.5"}, "less than or equal to 0.99"),
        ({"extra_args_text": "'unclosed"}, "No closing quotation"),
        ({"env_yaml": "- a"}, "mapping"),
    ],
)
def test_master_form_errors(as_deployer, org, change, message):
    data = {"model_id": "a/b", "runtime": "vllm", "extra_args_text": "", "env_yaml": "", **change}
    response = as_deployer.post(reverse("models_catalog:master-add"), data)
    assert response.status_code == 200
    assert message in response.content.decode()


def test_import_a_recipe(as_deployer, deployer):
    response = as_deployer.post(
        reverse("models_catalog:master-recipe"),
        {"recipe_text": LLAMA, "variant": "bf16", "gpu_kind": "l4"},
    )
    assert response.status_code == 302, response.content.decode()
    master = ModelMaster.objects.get(model_id="meta-llama/Llama-3.1-8B-Instruct")
    assert master.source == "recipe" and master.tool_call_parser == "llama3_json"
    again = as_deployer.post(
        reverse("models_catalog:master-recipe"),
        {"recipe_text": LLAMA, "variant": "bf16", "gpu_kind": "l4"},
    )
    assert "has a model master already" in again.content.decode()


def test_a_broken_recipe_shows_every_key(as_deployer, org):
    response = as_deployer.post(
        reverse("models_catalog:master-recipe"),
        {"recipe_text": "model: {model_id: x}\nvariants: {a: {precision: fp5}}", "gpu_kind": "l4"},
    )
    page = response.content.decode()
    assert "model.model_id" in page and "variants.a.precision" in page


def test_outsider_cannot_see_another_orgs_master(as_outsider, deployer):
    ModelMaster.objects.create(organization=deployer.organization, model_id="a/b")
    assert as_outsider.get(reverse("models_catalog:master-edit", args=["a--b"])).status_code == 404


def test_dry_run_starts_from_the_model_master(deployer):
    engine = lambda run: run.manifest["spec"]["source"]["model"]["engine"]  # noqa: E731
    run = dry_run(LLAMA_MANIFEST, deployer.organization)
    assert engine(run)["toolCallParser"] == "llama3_json"  # the recommended set
    ModelMaster.objects.create(
        organization=deployer.organization,
        model_id="meta-llama/Llama-3.1-8B-Instruct",
        tool_call_parser="pythonic",
        gpu_memory_utilization="0.8",
    )
    run = dry_run(LLAMA_MANIFEST, deployer.organization)
    assert engine(run)["toolCallParser"] == "pythonic"
    assert engine(run)["gpuMemoryUtilization"] == 0.8
    own = LLAMA_MANIFEST + "      engine:\n        toolCallParser: hermes\n"
    assert engine(dry_run(own, deployer.organization))["toolCallParser"] == "hermes"
