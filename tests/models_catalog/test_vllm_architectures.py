"""The architecture data file, its lookups, and the command that regenerates it."""

import dataclasses
import io
import json
import sys
import types
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from models_catalog import architectures
from models_catalog.architectures import ArchInfo, Unsupported, lookup

REGISTRY = Path(__file__).parents[3] / "shared" / "reference" / "vllm" / "registry.json"
needs_registry = pytest.mark.skipif(
    not REGISTRY.exists(), reason=f"the vLLM registry facts file {REGISTRY} is not on this machine"
)


@pytest.mark.parametrize(
    ("arch", "version", "task", "modalities", "via"),
    [
        ("LlamaForCausalLM", "0.13.0", "generate", (), "vllm"),
        ("DeepseekV3ForCausalLM", "0.13.0", "generate", (), "vllm"),
        ("Gemma3ForConditionalGeneration", "0.13.0", "generate", ("image",), "vllm"),
        ("Qwen2_5_VLForConditionalGeneration", "0.13.0", "generate", ("image", "video"), "vllm"),
        ("Qwen2_5OmniForConditionalGeneration", "0.13.0", "generate",
         ("image", "video", "audio"), "vllm"),
        ("WhisperForConditionalGeneration", "0.13.0", "transcribe", ("audio",), "vllm"),
        ("XLMRobertaModel", "0.13.0", "embed", (), "vllm"),
        ("XLMRobertaForSequenceClassification", "0.13.0", "score", (), "vllm"),
        ("JinaVLForRanking", "0.13.0", "score", ("image",), "vllm"),  # a multimodal reranker
        ("GPT2ForSequenceClassification", "0.13.0", "score", (), "vllm"),
        ("CLIPModel", "0.13.0", "embed", ("image",), "vllm"),
        ("SmolLM3ForCausalLM", "0.13.0", "generate", (), "transformers"),
        ("Gemma4ForCausalLM", "0.33.0", "generate", (), "vllm"),
        ("VibeVoiceAsrForConditionalGeneration", "0.33.0", "transcribe", (), "transformers"),
    ],
)  # fmt: skip
def test_supported(arch, version, task, modalities, via):
    found = lookup(arch, version)
    assert isinstance(found, ArchInfo)
    assert (found.task, found.modalities, found.via) == (task, modalities, via)
    assert found.data_version == version


def test_a_generator_may_also_embed():
    found = lookup("Qwen2ForCausalLM", "0.13.0")
    assert found.tasks == ("generate", "embed")


@pytest.mark.parametrize(
    ("arch", "version", "last", "plugin", "added", "words"),
    [
        ("MllamaForConditionalGeneration", "0.13.0", "0.10.2", None, None,
         "vLLM served MllamaForConditionalGeneration until version 0.10.2"),
        ("BartForConditionalGeneration", "0.13.0", "0.10.2", None, None, "until version 0.10.2"),
        ("BartForConditionalGeneration", "0.33.0", None,
         "https://github.com/vllm-project/bart-plugin", None, "out-of-tree plugin"),
        ("Gemma4ForCausalLM", "0.13.0", None, None, "0.33.0", "served from vLLM 0.33.0"),
        ("MysteryNetForCausalLM", "0.13.0", None, None, None,
         "vLLM 0.13.0 has no implementation of the architecture MysteryNetForCausalLM"),
    ],
)  # fmt: skip
def test_unsupported(arch, version, last, plugin, added, words):
    found = lookup(arch, version)
    assert isinstance(found, Unsupported)
    assert (found.last_version, found.plugin, found.added_in) == (last, plugin, added)
    assert words in found.reason
    assert found.fix[0].isupper()


def test_dropped_without_a_previously_supported_entry_names_the_last_version_on_file():
    data = {
        "versions": {
            "1.0.0": {"architectures": {"OldForCausalLM": {"task": "generate"}},
                      "previously_supported": {}, "out_of_tree": {}},
            "2.0.0": {"architectures": {}, "previously_supported": {}, "out_of_tree": {}},
        }
    }  # fmt: skip
    found = lookup("OldForCausalLM", "2.0.0", data)
    assert found.last_version == "1.0.0"
    assert (
        found.reason == "vLLM 1.0.0 served OldForCausalLM; the profile's vLLM 2.0.0 no longer does"
    )


def test_draft_models_are_not_served_alone():
    found = lookup("EagleLlamaForCausalLM", "0.13.0")
    assert isinstance(found, Unsupported)
    assert "speculative decoding" in found.reason


@pytest.mark.parametrize(
    ("asked", "answered"),
    [("0.13.0", "0.13.0"), ("0.13.1", "0.13.0"), ("0.20.0", "0.13.0"), ("0.33.0", "0.33.0"),
     ("0.40.0rc1", "0.33.0"), ("0.5.0", "0.13.0"), ("v0.33.0+cu129", "0.33.0")],
)  # fmt: skip
def test_the_newest_older_data_answers(asked, answered):
    assert architectures.data_version_for(asked) == answered
    assert lookup("LlamaForCausalLM", asked).data_version == answered


def test_default_gpu_memory_utilization_per_version():
    assert architectures.default_gpu_memory_utilization("0.13.0") == 0.9
    assert architectures.default_gpu_memory_utilization("0.33.0") == 0.92


def test_version_key_refuses_nonsense():
    with pytest.raises(ValueError, match="not a vLLM version"):
        architectures.version_key("latest")


@needs_registry
def test_data_file_holds_every_registry_architecture():
    facts = json.loads(REGISTRY.read_text())
    data = architectures.load_data()
    for version, groups in facts.items():
        entry = data["versions"][version]
        for group, archs in groups.items():
            if isinstance(archs, list):
                missing = set(archs) - set(entry["architectures"])
                assert not missing, f"{version} {group}: {sorted(missing)}"
        assert entry["previously_supported"] == groups.get("previously_supported_models", {})
        assert entry["out_of_tree"] == groups.get("oot_supported_models", {})


@needs_registry
def test_committed_data_file_is_what_the_command_builds(tmp_path):
    out, said = tmp_path / "archs.json", io.StringIO()
    call_command("vllm_architectures", from_registry_json=REGISTRY, output=out, stdout=said)
    assert out.read_text() == architectures.DATA_FILE.read_text()
    assert (
        "vLLM 0.33.0: 415 architectures, 50 previously supported, 5 out of tree" in said.getvalue()
    )


def test_command_without_vllm_says_so(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if vLLM were not installed
    with pytest.raises(CommandError, match="vLLM is not installed here"):
        call_command("vllm_architectures", output=tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_command_reads_an_installed_vllm(monkeypatch, tmp_path):
    """A stand-in vllm package with the registry's shape: dicts per group, previously
    supported and out-of-tree maps, get_supported_archs(), CacheConfig's default."""
    registry = types.ModuleType("vllm.model_executor.models.registry")
    registry._TEXT_GENERATION_MODELS = {"LlamaForCausalLM": ("llama", "LlamaForCausalLM")}
    registry._EMBEDDING_MODELS = {"BertModel": ("bert", "BertEmbeddingModel")}
    registry._VLLM_MODELS = {**registry._TEXT_GENERATION_MODELS, **registry._EMBEDDING_MODELS}
    registry._PREVIOUSLY_SUPPORTED_MODELS = {"OldForCausalLM": "0.40.0"}
    registry._OOT_SUPPORTED_MODELS = {"PluggedForCausalLM": "https://example.org/plugin"}

    class ModelRegistry:
        @staticmethod
        def get_supported_archs():
            return [*registry._VLLM_MODELS, "RegisteredByPluginForCausalLM"]

    config = types.ModuleType("vllm.config")
    config.CacheConfig = dataclasses.make_dataclass(
        "CacheConfig", [("gpu_memory_utilization", float, dataclasses.field(default=0.93))]
    )
    vllm = types.ModuleType("vllm")
    vllm.__version__ = "0.41.0"
    vllm.ModelRegistry = ModelRegistry
    modules = {
        "vllm": vllm,
        "vllm.config": config,
        "vllm.model_executor": types.ModuleType("vllm.model_executor"),
        "vllm.model_executor.models": types.ModuleType("vllm.model_executor.models"),
        "vllm.model_executor.models.registry": registry,
    }
    modules["vllm.model_executor.models"].registry = registry
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    out = tmp_path / "archs.json"
    out.write_text(architectures.DATA_FILE.read_text())
    call_command("vllm_architectures", output=out, stdout=io.StringIO())

    data = json.loads(out.read_text())
    entry = data["versions"]["0.41.0"]
    assert entry["architectures"] == {
        "BertModel": {"task": "embed"},
        "LlamaForCausalLM": {"task": "generate"},
        "RegisteredByPluginForCausalLM": {"task": "generate"},
    }
    assert entry["previously_supported"] == {"OldForCausalLM": "0.40.0"}
    assert entry["out_of_tree"] == {"PluggedForCausalLM": "https://example.org/plugin"}
    assert entry["defaults"] == {"gpu_memory_utilization": 0.93}
    assert {"0.13.0", "0.33.0"} <= set(data["versions"])  # other versions kept
    assert lookup("BertModel", "0.41.0", data).task == "embed"
