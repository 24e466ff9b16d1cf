"""The dry run's Check model of LoRA adapters: each adapter_config.json is read from the fake
Hub through the real huggingface_hub client (or from the models folder) and a mismatch is
refused at spec.source.model.adapters[i].uri, saying what was found."""

import json

import pytest

from jobs.deploy import dry_run
from jobs.models import Profile
from tests.fakes.s3 import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from tests.helpers import SHORTEST

SMOL = "hf://HuggingFaceTB/SmolLM2-135M-Instruct"
PATH = "spec.source.model.adapters"


def manifest(*adapters: tuple[str, str], base: str = SMOL, name: str = "smol") -> str:
    items = "".join(f"\n        - name: {n}\n          uri: {u}" for n, u in adapters)
    text = SHORTEST.replace("hf://BAAI/bge-m3", base).replace("bge-embed", name)
    return text + (f"      adapters:{items}\n" if adapters else "")


def at(run, index):
    return [p.message for p in run.refusals if p.path == f"{PATH}[{index}].uri"]


def test_an_adapter_of_the_same_base_passes_and_mismatches_are_refused_by_their_field(org):
    run = dry_run(
        manifest(
            ("support", "hf://acme/smol-support-lora"),
            ("qwen", "hf://acme/qwen-lora"),
            ("wide", "hf://acme/wide-rank-lora"),
            ("missing", "hf://acme/no-such-lora"),
        ),
        org,
    )
    assert run.check is not None and run.check.can_serve, run.refusals
    assert at(run, 0) == []
    (qwen,) = at(run, 1)
    assert "trained on 'Qwen/Qwen3-0.6B'" in qwen and "HuggingFaceTB/SmolLM2-135M-Instruct" in qwen
    (wide,) = at(run, 2)
    assert "is 128, above 64" in wide and "--max-lora-rank" in wide
    (missing,) = at(run, 3)
    assert "hf://acme/no-such-lora cannot be read" in missing
    assert all(p.origin == "check-model" for p in run.refusals if p.path.startswith(PATH))


def test_a_good_adapter_leaves_the_dry_run_ok(org):
    run = dry_run(manifest(("support", "hf://acme/smol-support-lora")), org)
    assert not [p for p in run.refusals if p.path.startswith(PATH)], run.refusals


@pytest.fixture
def folders(tmp_path, settings):
    models = tmp_path / "models"
    (models / "lora-good").mkdir(parents=True)
    (models / "lora-empty").mkdir()
    settings.SERVEDECK_MODELS_DIR = str(models)
    return models


def test_a_folder_adapter_is_read_from_the_models_folder(org, folders, tmp_path):
    config = {
        "peft_type": "LORA",
        "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "r": 16,
        "target_modules": [],
    }
    (folders / "lora-good" / "adapter_config.json").write_text(json.dumps(config))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    run = dry_run(
        manifest(
            ("good", f"file://{folders}/lora-good"),
            ("empty", f"file://{folders}/lora-empty"),
            ("outside", f"file://{outside}"),
        ),
        org,
    )
    (good,) = at(run, 0)
    assert "names no target_modules (found an empty list)" in good
    (empty,) = at(run, 1)
    assert "has no adapter_config.json" in empty
    (far,) = at(run, 2)
    assert far.startswith(f"{PATH}[2].uri file://") and "outside the models folder" in far


def test_an_s3_adapter_is_read_with_the_profiles_storage_access(org, s3, monkeypatch):
    """A private bucket's adapter on the local profile: refused without the profile's storage
    credentials, its adapter_config.json read with them (moto's S3 through boto3)."""
    config = {
        "peft_type": "LORA",
        "base_model_name_or_path": "Qwen/Qwen3-0.6B",
        "r": 8,
        "target_modules": ["q_proj"],
    }
    s3.folder("private-loras", "support/", {"adapter_config.json": json.dumps(config).encode()})
    doc = manifest(("support", "s3://private-loras/support"))
    (denied,) = at(dry_run(doc, org), 0)
    assert "s3://private-loras/support cannot be read" in denied
    assert "storageCredentials" in denied
    monkeypatch.setenv("ACME_S3_ACCESS_KEY_ID", ACCESS_KEY_ID)
    monkeypatch.setenv("ACME_S3_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
    org.token_variables = ["ACME_S3_ACCESS_KEY_ID", "ACME_S3_SECRET_ACCESS_KEY"]
    org.save()
    Profile.objects.filter(organization=org, name="local").update(
        storage_credentials_ref="env/ACME_S3"
    )
    (mismatch,) = at(dry_run(doc, org), 0)
    assert "trained on 'Qwen/Qwen3-0.6B'" in mismatch


def test_a_model_id_is_the_organisations_once(org):
    from jobs.models import Application

    Application.objects.create(
        organization=org,
        name="other",
        profile=Profile.objects.get(organization=org, name="local"),
        manifest={
            "spec": {"source": {"model": {"adapters": [{"name": "taken", "uri": "hf://a/b"}]}}}
        },
    )
    run = dry_run(
        manifest(
            ("other", "hf://acme/smol-support-lora"), ("taken", "hf://acme/smol-support-lora")
        ),
        org,
    )
    names = {p.path: p.message for p in run.refusals if p.path.endswith(".name")}
    assert "the name of an application" in names[f"{PATH}[0].name"]
    assert "another application's adapter" in names[f"{PATH}[1].name"]
    run = dry_run(manifest(name="taken"), org)
    assert any(p.path == "spec.name" and "LoRA adapter" in p.message for p in run.refusals)
