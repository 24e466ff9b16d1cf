"""infinity-emb is given no model whose Sentence Transformers files name a class its loader
would import and run: modules.json's module types (the pinned sentence-transformers imports
each and calls its load(): joblib.load unpickles anything, and in a model folder a type
outside sentence_transformers is imported from a .py file of the folder, whatever
--no-trust-remote-code says), module paths that leave the folder, a Dense module's activation,
a reranker's activation in config.json, and the encoder config's from_pretrained arguments.

One check (jobs/backends/local/model_files.py), applied where the files are used: Check model
and the dry run for hf:// (read from the Hub) and file:// folders, and again on disk right
before each start of infinity (the runner for a folder, the download launcher for a
snapshot). The runtime here is test_local_cpu_wiring's stand-in, installed as infinity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.backends.local import model_files
from jobs.backends.local import runtimes as rt
from jobs.backends.local.runner import LocalRefused, LocalRunner
from jobs.machine_catalog import MachineReadings, machine_catalog
from models_catalog import hub
from models_catalog.check import check_model
from tests.fakes.cpu_runtime import install_fake
from tests.fakes.hub import FakeHub, disk_repo
from tests.helpers import wait_for
from tests.jobs.backends.local.test_local_cpu_wiring import manifest, running, safetensors, seen

CATALOG = machine_catalog(MachineReadings(cores=2, memory_bytes=16 * 2**30, gpus=()))
BERT = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 37,
    "max_position_embeddings": 512,
    "vocab_size": 100,
    "torch_dtype": "float32",
}
# all-MiniLM-L6-v2's own files, as the Hub has them.
MINILM = {
    "modules.json": [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ],
    "sentence_bert_config.json": {"max_seq_length": 256, "do_lower_case": False},
    "config_sentence_transformers.json": {
        "__version__": {"sentence_transformers": "2.0.0"}, "prompts": {},
        "similarity_fn_name": "cosine",
    },
    "1_Pooling/config.json": {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True},
}  # fmt: skip
# LaBSE's Dense module, as the Hub has it.
DENSE = {
    "modules.json": [
        *MINILM["modules.json"][:2],
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    ],
    "2_Dense/config.json": {
        "in_features": 768, "out_features": 768, "bias": True,
        "activation_function": "torch.nn.modules.activation.Tanh",
    },
}  # fmt: skip
JOBLIB = [{"idx": 0, "name": "0", "path": "1_Pooling/config.json",
           "type": "sklearn.utils.parallel.joblib"}]  # fmt: skip


def module(kind: str = "sentence_transformers.models.Pooling", path: str = "1_Pooling") -> dict:
    return {"idx": 1, "name": "1", "path": path, "type": kind}


def said(files: dict) -> str | None:
    def read(name: str):
        return files.get(name, model_files.MISSING)

    return model_files.refusal(read, "hf://acme/embed")


def test_real_sentence_transformers_files_are_accepted():
    assert said(MINILM) is None
    assert said({**MINILM, **DENSE}) is None
    assert said({"config.json": BERT}) is None  # no Sentence Transformers files at all
    reranker = {**BERT, "sbert_ce_default_activation_function": "torch.nn.modules.linear.Identity"}
    assert said({"config.json": reranker}) is None


@pytest.mark.parametrize(
    ("files", "phrase"),
    [
        ({"modules.json": JOBLIB}, "module 0 has type 'sklearn.utils.parallel.joblib'"),
        ({"modules.json": [module("evil.Evil")]}, "module 0 has type 'evil.Evil'"),
        ({"modules.json": [module("sentence_transformers.models.WordEmbeddings")]},
         "has type 'sentence_transformers.models.WordEmbeddings'"),
        ({"modules.json": [module("sentence_transformers.models.Asym")]}, "has type"),
        ({"modules.json": [module(path="/etc")]}, "has path '/etc'"),
        ({"modules.json": [module(path="../other-model/1_Pooling")]}, "has path '../other"),
        ({"modules.json": [module(path="..")]}, "has path '..'"),
        ({"modules.json": [module(path="1_Pooling\\..\\..")]}, "has path '1_Pooling\\\\"),
        ({"modules.json": [module(path="a" * 65)]}, "at most 64 characters"),
        ({"modules.json": [module("sentence_transformers.models.Transformer", "0_BERT")]},
         "is a Transformer with path '0_BERT'"),
        ({"modules.json": {"0": module()}}, 'modules.json of hf://acme/embed is {"0": '),
        ({"modules.json": []}, "is a list of 0; a list of 1 to 16 modules"),
        ({"modules.json": [module()] * 17}, "is a list of 17"),
        ({"modules.json": [1]}, "module 0 is 1; a module has a name, a path and a type"),
        ({"modules.json": [{**module(), "code": "x"}]}, "has the key 'code'"),
        ({"modules.json": model_files.UNREADABLE}, "modules.json of hf://acme/embed cannot be"),
        ({**DENSE, "2_Dense/config.json": {"activation_function": "os.system",
                                           "in_features": 2, "out_features": 2}},
         "2_Dense/config.json has activation_function 'os.system'"),
        ({"modules.json": DENSE["modules.json"]}, "2_Dense/config.json is missing"),
        ({**DENSE, "2_Dense/config.json": {**DENSE["2_Dense/config.json"], "in_features": 2**40}},
         "has in_features 1099511627776; 1 to 131072"),
        ({"sentence_bert_config.json": {"model_args": {"weights_only": False}}},
         "sentence_bert_config.json of hf://acme/embed, model_args has 'weights_only'"),
        ({"sentence_bert_config.json": {"tokenizer_name_or_path": "/etc"}},
         "has the key 'tokenizer_name_or_path'"),
        ({"sentence_roberta_config.json": {"config_args": {"attn_implementation": "k/x"}}},
         "sentence_roberta_config.json of hf://acme/embed, config_args has"),
        ({"sentence_bert_config.json": {"model_args": {"torch_dtype": "a b"}}},
         "torch_dtype is 'a b'; a plain word or number"),
        ({"config.json": {**BERT, "sbert_ce_default_activation_function": "builtins.breakpoint"}},
         "config.json of hf://acme/embed has sbert_ce_default_activation_function 'builtins."),
    ],
    ids=lambda v: str(v)[:40],
)  # fmt: skip
def test_files_that_name_other_classes_or_leave_the_folder_are_refused(files, phrase):
    refusal = said(files)
    assert refusal is not None and phrase in refusal, refusal
    assert "hf://acme/embed" in refusal and refusal.rstrip().endswith(".")
    assert "Use a model whose Sentence Transformers files name only these" in refusal or (
        "Correct the file, or use another model." in refusal
    )


def test_an_infinity_model_with_such_files_is_refused_and_others_are_not():
    facts = rt.ModelFacts(rt.EMBED, rt.HF, files_refusal="modules.json of x names y.")
    refused = rt.choose_runtime(facts, vllm_installed=False, installed=set(rt.CPU_RUNTIMES))
    assert refused == rt.Refusal("modules.json of x names y.")
    chat = rt.ModelFacts(rt.GENERATE, rt.HF, files_refusal="modules.json of x names y.")
    chosen = rt.choose_runtime(chat, vllm_installed=False, installed=set(rt.CPU_RUNTIMES))
    assert chosen.runtime == "transformers"  # transformers serve reads no modules.json


# ---- a folder under the models folder ----


def embed_folder(where: Path, files: dict) -> Path:
    where.mkdir(parents=True)
    (where / "config.json").write_text(json.dumps(BERT))
    (where / "tokenizer.json").write_text('{"model": {}}')
    safetensors(where / "model.safetensors", {"embeddings": [100, 32], "layer": [32, 32]})
    for name, content in files.items():
        (where / name).parent.mkdir(exist_ok=True)
        (where / name).write_text(json.dumps(content))
    return where


def test_a_folder_naming_another_class_is_refused_by_check_model_and_the_backend(
    cpu_machine, tmp_path
):
    runtimes, models = cpu_machine
    install_fake(runtimes, "infinity")
    folder = embed_folder(models / "embed", {**MINILM, "modules.json": JOBLIB})
    (folder / "evil.py").write_text("raise SystemExit('ran')\n")
    result = check_model(f"file://{folder}", catalog=CATALOG)
    assert not result.can_serve
    assert result.verdict.startswith(f"modules.json of file://{folder}, module 0 has type ")
    assert "sentence_transformers.models.Transformer" in result.verdict  # what is accepted
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    doc = manifest("embed", f"file://{folder}")
    refusals = [p.message for p in runner.check(doc)]
    assert refusals == [result.verdict]
    with pytest.raises(LocalRefused):
        runner.apply("embed", doc, 1)
    (folder / "modules.json").write_text(json.dumps(MINILM["modules.json"]))
    assert check_model(f"file://{folder}", catalog=CATALOG).can_serve
    assert runner.check(doc) == []


def test_the_dry_run_refuses_it_once_at_the_uri(cpu_machine, client, deployer):
    from tests.helpers import bearer
    from tests.manifest_text import local_manifest

    runtimes, models = cpu_machine
    install_fake(runtimes, "infinity")
    dense = {"activation_function": "subprocess.getoutput", "in_features": 32, "out_features": 32}
    folder = embed_folder(models / "embed", {**DENSE, "2_Dense/config.json": dense})
    client.defaults.update(bearer(deployer))
    answer = client.post(
        "/api/v1/applications?dryRun=true",
        local_manifest("chat", f"file://{folder}"),
        content_type="application/yaml",
    )
    assert answer.status_code == 400, answer.content
    refused = [p for p in answer.json()["error"]["problems"] if p["level"] == "refusal"]
    assert len(refused) == 1, refused
    assert {p["path"] for p in refused} == {"spec.source.model.uri"}
    message = refused[0]["message"]
    assert "2_Dense/config.json has activation_function 'subprocess.getoutput'" in message


def test_a_folder_changed_after_apply_is_checked_again_before_infinity_starts(
    cpu_machine, tmp_path
):
    runtimes, models = cpu_machine
    install_fake(runtimes, "infinity")
    folder = embed_folder(models / "embed", MINILM)
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    try:
        runner.apply("embed", manifest("embed", f"file://{folder}"), 1)
        running(runner, "embed")
        assert seen(runner, "embed")["argv"][:3] == ["v2", "--model-id", str(folder.resolve())]
        started = [line for line in runner.tail("embed", 200) if line.startswith("SEEN ")]
        (folder / "modules.json").write_text(json.dumps(JOBLIB))

        status = runner.restart("embed")
        assert status.phase == "Failed", status
        assert status.replicas[0].pid is None  # never spawned
        assert "module 0 has type 'sklearn.utils.parallel.joblib'" in status.reason
        assert status.next_step.startswith("Correct the folder's files, or deploy another model")
        log = runner.tail("embed", 200)
        assert [line for line in log if line.startswith("SEEN ")] == started
    finally:
        runner.shutdown()


# ---- a Hub repository, downloaded by its replica ----

REPO = "acme/embed"


@pytest.fixture
def embed_hub(cpu_machine, tmp_path, settings, monkeypatch):
    """The stand-in infinity, a downloads folder, and a Hub serving an embedding model from a
    folder on disk (its files as the test writes them)."""
    runtimes, _ = cpu_machine
    install_fake(runtimes, "infinity")
    settings.SERVEDECK_DOWNLOADS_DIR = str(tmp_path / "downloads")
    folder = embed_folder(tmp_path / "hub" / REPO, MINILM)
    with FakeHub({REPO: disk_repo(REPO, folder)}).serve() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        hub.clear_cache()
        yield server, folder
    hub.clear_cache()


def test_a_hub_repo_naming_another_class_is_refused_by_check_model_and_the_backend(
    embed_hub, tmp_path
):
    _, folder = embed_hub
    (folder / "modules.json").write_text(json.dumps(JOBLIB))
    result = check_model(f"hf://{REPO}", catalog=CATALOG, on_this_machine=True)
    assert not result.can_serve
    assert result.verdict.startswith(f"modules.json of hf://{REPO}, module 0 has type ")
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    refusals = [p.message for p in runner.check(manifest("embed", f"hf://{REPO}"))]
    assert refusals == [result.verdict]


def test_a_snapshot_is_checked_on_disk_before_the_launcher_becomes_infinity(embed_hub, tmp_path):
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    try:
        runner.apply("embed", manifest("embed", f"hf://{REPO}"), 1)
        running(runner, "embed")
        snapshot = Path(seen(runner, "embed")["argv"][2])
        assert (snapshot / "1_Pooling" / "config.json").is_file()
        started = [line for line in runner.tail("embed", 200) if line.startswith("SEEN ")]
        # The blob behind the snapshot's modules.json, changed on this machine's disk.
        (snapshot / "modules.json").resolve().write_text(json.dumps(JOBLIB))

        runner.restart("embed")

        def failed():
            status = runner.observe("embed")
            return status if status.phase == "Failed" else None

        status = wait_for(failed, "the launcher started infinity", 30)
        assert status.replicas[0].exit_code == 78
        assert f"modules.json of hf://{REPO}, module 0 has type 'sklearn." in status.reason
        assert status.next_step == "Deploy another model, or a commit of it without them."
        log = runner.tail("embed", 200)
        assert [line for line in log if line.startswith("SEEN ")] == started
    finally:
        runner.shutdown()


def test_check_model_answers_a_modules_list_of_anything_but_modules(cpu_machine):
    runtimes, models = cpu_machine
    install_fake(runtimes, "infinity")
    folder = embed_folder(models / "embed", {"modules.json": [1, "x"]})
    result = check_model(f"file://{folder}", catalog=CATALOG)  # was an AttributeError, a 500
    assert not result.can_serve
    assert result.verdict.startswith(f"modules.json of file://{folder}, module 0 is 1; ")
