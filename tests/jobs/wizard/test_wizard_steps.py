"""The wizard's pure parts, as tables: paths in a document, which step owns each problem, form
text into manifest data, and Compute's sizing from Check model's answer."""

import pytest

from jobs.backends.base import target_answer
from jobs.manifest import Problem
from jobs.wizard import fields, paths, sizing, steps
from models_catalog.check_types import SERVABLE, CheckResult
from models_catalog.service import layout_refusal
from models_catalog.sizing import Suggestion

M = "spec.source.model"


class CheckSaid(str):
    """A message of Check model's own (origin check-model), in the table below."""


class TargetSaid(str):
    """An answer of the profile's target (origin target, said at spec.profileName) about the
    field `about` names, as the backend gives it: the field is never read from the words."""

    def __new__(cls, message: str, about: str = "") -> "TargetSaid":
        said = super().__new__(cls, message)
        said.about = about
        return said


GIB = 2**30


# ---- paths ----


def test_put_creates_groups_and_none_removes_emptied_ones():
    doc: dict = {}
    paths.put(doc, f"{M}.resources.cpu", "2")
    assert doc == {"spec": {"source": {"model": {"resources": {"cpu": "2"}}}}}
    paths.put(doc, f"{M}.resources.cpu", None)
    assert doc == {}
    assert paths.get({"a": {"b": 1}}, "a.b") == 1
    assert paths.get({"a": 1}, "a.b", "none") == "none"
    assert paths.has({"a": {"b": None}}, "a.b") and not paths.has({}, "a")


def test_remove_keeps_groups_that_still_hold_something():
    doc = {"spec": {"name": "x", "access": {"exposure": "Internal"}}}
    paths.remove(doc, "spec.access.exposure")
    assert doc == {"spec": {"name": "x"}}
    paths.remove(doc, "spec.missing.deep")  # nothing there: nothing happens
    assert doc == {"spec": {"name": "x"}}


@pytest.mark.parametrize(
    "path, prefix, inside",
    [
        (f"{M}.engine.extraArgs[1]", f"{M}.engine.extraArgs", True),
        (f"{M}.engine", f"{M}.engine", True),
        (f"{M}.engineX", f"{M}.engine", False),
        ("spec.name", "spec.namespace", False),
    ],
)
def test_under(path, prefix, inside):
    assert paths.under(path, prefix) is inside


# ---- which step owns a problem ----

VERDICT = "meta-llama/Llama-3.1-8B-Instruct is gated, and the profile has no Hugging Face token"


@pytest.mark.parametrize(
    "path, message, step",
    [
        ("document", "is not valid YAML", "model"),
        ("spec.name", "'Bad_Name' is not a DNS label", "model"),
        ("spec.profileName", TargetSaid("vLLM is not installed on this machine"), "model"),
        (f"{M}.uri", "'ftp://x' is not a URI the platform reads", "model"),
        (f"{M}.uri", "'hf://a/b' is not pinned", "model"),
        (f"{M}.uri", CheckSaid(f"{VERDICT}. Accept the model's terms."), "check"),
        (f"{M}.uri", CheckSaid("The weights are PyTorch .bin (pickle) files."), "check"),
        (f"{M}.format", "required for s3://", "model"),
        (f"{M}.runtime.isolation", "needs KubeVirt", "model"),
        (f"{M}.resources.cpu", "does not fit the node", "compute"),
        (f"{M}.engine.extraArgs[0]", "repeats --dtype", "compute"),
        (f"{M}.serving.maxContextTokens", "above the model's own limit", "compute"),
        (f"{M}.serving", "is not a mapping", "compute"),
        (f"{M}.scaling.metric.requestsWaiting", "needs KEDA", "compute"),
        (f"{M}.cache.size", "required when enabled", "compute"),
        (f"{M}.queue.name", "needs Kueue", "compute"),
        ("spec.access.domain", "no verified domain", "access"),
        (f"{M}.serving.apiFormat", "'V1' is the predictive protocol", "api"),
        (f"{M}.serving.multimodal.maxImagesPerPrompt", "above 64", "api"),
        ("spec", "cannot be rendered for Kubernetes", "model"),
        # The local backend's preflight speaks at the profile but names the field.
        (
            "spec.profileName",
            TargetSaid(
                f"{M}.resources.accelerator.gpu.countPerReplica asks for 1 NVIDIA GPU(s)",
                f"{M}.resources.accelerator.gpu.countPerReplica",
            ),
            "compute",
        ),
        (
            "spec.profileName",
            TargetSaid(f"{M}.format is SKLearn: the local backend serves vLLM", f"{M}.format"),
            "model",
        ),
        # Routing reads the field the target named, never its words.
        ("spec.profileName", TargetSaid("this machine lacks memory", f"{M}.resources"), "compute"),
    ],
)
def test_each_problem_belongs_to_the_step_that_fixes_it(path, message, step):
    if isinstance(message, CheckSaid):  # Check model's own answer, as the dry run reports it
        problem = Problem(path, message, origin="check-model")
    elif isinstance(message, TargetSaid):  # the target's preflight, as the dry run reports it
        problem = target_answer(message, message.about)
    else:
        problem = Problem(path, message)
    assert steps.owner(problem) == step


def test_without_check_model_the_uri_belongs_to_the_model_step():
    problem = Problem(f"{M}.uri", f"{VERDICT}. Accept the model's terms.")
    assert steps.owner(problem) == "model"


def test_the_target_answer_about_no_field_goes_to_review():
    problem = target_answer("admission webhook denied the request")
    assert steps.by_step([problem])["review"] == [problem]


def test_the_first_blocked_step():
    refusal = Problem("spec.access.domain", "missing")
    assert steps.first_blocked(steps.by_step([refusal])) == "access"
    assert steps.first_blocked(steps.by_step([])) is None


def test_step_order():
    assert steps.SLUGS == ("model", "check", "compute", "access", "api", "review")
    assert steps.previous("model") is None and steps.following("review") is None
    assert steps.previous("compute") == "check" and steps.following("compute") == "access"


# ---- form text into manifest data ----


@pytest.mark.parametrize(
    "kind, raw, data",
    [
        ("text", "  8Gi ", "8Gi"),
        ("text", "   ", None),
        ("int", "4", 4),
        ("int", "-1", -1),
        ("int", "four", "four"),  # kept as typed: the manifest rules say what is wrong
        ("int", "4.5", "4.5"),
        ("number", "0.85", 0.85),
        ("number", "1", 1),
        ("number", "", None),
        ("lines", "--a\n\n  --b=1 \n", ["--a", "--b=1"]),
        ("lines", "\n", None),
        ("text", None, None),
    ],
)
def test_coerce(kind, raw, data):
    assert fields.coerce(kind, raw) == data


@pytest.mark.parametrize(
    "repo, revision, uri",
    [
        ("Qwen/Qwen2.5-7B-Instruct", "", "hf://Qwen/Qwen2.5-7B-Instruct"),
        ("Qwen/Qwen2.5-7B-Instruct", "abc123", "hf://Qwen/Qwen2.5-7B-Instruct:abc123"),
        ("hf://BAAI/bge-m3:v1", "", "hf://BAAI/bge-m3:v1"),
        ("https://huggingface.co/BAAI/bge-m3", "", "hf://BAAI/bge-m3"),
        ("https://huggingface.co/BAAI/bge-m3/tree/v2", "", "hf://BAAI/bge-m3:v2"),
        ("  ", "abc", None),
    ],
)
def test_hub_uri(repo, revision, uri):
    assert fields.hub_uri(repo, revision) == uri


def doc_of(uri, profile="local", fmt=None):
    model = {"uri": uri, **({"format": fmt} if fmt else {})}
    return {"spec": {"profileName": profile, "source": {"model": model}}}


@pytest.mark.parametrize(
    "other, same",
    [
        (doc_of("hf://qwen/qwen2.5-7b-instruct"), True),  # another revision, or case
        (doc_of("hf://BAAI/bge-m3:abc"), False),
        (doc_of("hf://Qwen/Qwen2.5-7B-Instruct:abc", profile="prod"), False),
        (doc_of("hf://Qwen/Qwen2.5-7B-Instruct:abc", fmt="ONNX"), False),
    ],
)
def test_the_sizing_key_is_model_format_and_profile_not_revision(other, same):
    one = doc_of("hf://Qwen/Qwen2.5-7B-Instruct:abc")
    assert (fields.sizing_key(one) == fields.sizing_key(other)) is same


def test_apply_model_writes_the_uri_and_never_a_fixed_field():
    doc = {"spec": {"name": "keep", "source": {"type": "Model", "model": {"uri": "hf://a/b"}}}}
    form = {"name": "other", "profile": "local", "source": "storage", "storage_uri": "s3://b/m"}
    fields.apply_model(doc, form, fixed={"spec.name", f"{M}.uri"})
    assert doc["spec"]["name"] == "keep" and doc["spec"]["profileName"] == "local"
    assert doc["spec"]["source"]["model"]["uri"] == "hf://a/b"
    assert doc["apiVersion"] == "servedeck.io/v1" and doc["kind"] == "Application"
    fields.apply_model(doc, {"source": "storage", "storage_uri": "s3://b/m", "format": "ONNX"})
    assert doc["spec"]["source"]["model"] == {"uri": "s3://b/m", "format": "ONNX"}


def compute_doc():
    return {
        "spec": {
            "source": {
                "model": {
                    "resources": {"accelerator": {"gpu": {"model": "a10g", "countPerReplica": 1}}},
                    "engine": {"tensorParallelSize": 1, "dtype": "bfloat16"},
                    "cache": {"enabled": True, "size": "16Gi"},
                }
            }
        }
    }


def test_apply_compute_on_the_cpu_drops_the_gpu_and_follows_the_hardware():
    doc = compute_doc()
    fields.apply_compute(doc, {"gpu_kind": "cpu", "gpus": "4", "memory": "16Gi", "cpu": ""})
    model = doc["spec"]["source"]["model"]
    assert model["resources"] == {"memory": "16Gi"}
    assert model["engine"] == {"dtype": "bfloat16"}  # tensorParallelSize follows the GPUs


def test_apply_compute_gpu_metric_and_cache():
    doc = compute_doc()
    form = {
        "gpu_kind": "l4",
        "gpus": "2",
        "capacity": "Spot",
        "metric": "cpu",
        "metric_target": "70",
        "cache_shown": "1",
    }
    fields.apply_compute(doc, form)
    model = doc["spec"]["source"]["model"]
    assert model["resources"]["accelerator"]["gpu"] == {
        "model": "l4",
        "countPerReplica": 2,
        "capacityType": "Spot",
    }
    assert model["scaling"] == {"metric": {"cpu": 70}}
    assert "cache" not in model  # unticked: the whole block goes
    fields.apply_compute(doc, {"metric": "", "cache_shown": "1", "cache_enabled": "on"})
    assert "scaling" not in model and model["cache"] == {"enabled": True}


def test_apply_compute_leaves_what_the_form_did_not_send():
    doc = compute_doc()
    fields.apply_compute(doc, {"queue": "gpu-queue"}, fixed={f"{M}.queue.name"})
    assert doc["spec"]["source"]["model"]["resources"]["accelerator"]["gpu"]["model"] == "a10g"
    assert "queue" not in doc["spec"]["source"]["model"]


def test_apply_api_writes_media_only_for_the_models_inputs():
    doc: dict = {}
    fields.apply_api(doc, {"api_format": "V2", "max_images": "4", "max_audio": "2"}, {"image"})
    assert doc["spec"]["source"]["model"]["serving"] == {
        "apiFormat": "V2",
        "multimodal": {"maxImagesPerPrompt": 4},
    }


def test_errors_go_beside_their_field_and_the_rest_above():
    problems = [
        Problem(f"{M}.resources.accelerator.gpu.countPerReplica", "too many"),
        Problem(f"{M}.scaling.metric", "sets both"),
        Problem(f"{M}.scaling.metric.cpu", "above 100"),
        target_answer(f"{M}.resources.memory does not fit this machine", f"{M}.resources.memory"),
        Problem(f"{M}.resources", "is not a mapping"),
    ]
    placed, general = fields.errors_by_field(problems, fields.COMPUTE_FIELDS)
    assert [p.message for p in placed["gpus"]] == ["GPUs per replica: too many"]
    assert [p.message for p in placed["metric"]] == [
        "Scaling signal: sets both",
        "Scaling signal: above 100",
    ]
    assert [(p.path, p.message) for p in placed["memory"]] == [
        (f"{M}.resources.memory", "Memory: does not fit this machine")
    ]
    assert [p.message for p in general] == ["is not a mapping"]


# ---- Compute sizing ----

CATALOG = [
    {"name": "t4", "vendor": "nvidia", "gpuMemory": "15360Mi", "gpusPerNode": 4},
    {"name": "l4", "vendor": "nvidia", "gpuMemory": "23034Mi", "gpusPerNode": 8},
    {"name": "mi300x", "vendor": "amd", "gpuMemory": "192Gi", "gpusPerNode": 8},
]


def option(kind, gpus, needed, memory):
    return Suggestion(
        accelerator="gpu",
        gpu_kind=kind,
        gpus_per_replica=gpus,
        gpu_memory_bytes=memory,
        needed_per_gpu_bytes=needed,
    )


SIZED = CheckResult(
    uri="hf://Qwen/Qwen2.5-7B-Instruct",
    can_serve=True,
    verdict=SERVABLE,
    next_step="",
    task="generate",
    weight_bytes=15 * GIB,
    context_tokens=32768,
    suggestion=option("l4", 1, 20 * GIB, 22 * GIB),
    options=[option("t4", 2, 11 * GIB, 15 * GIB), option("l4", 1, 20 * GIB, 22 * GIB)],
    unfit=[("mi300x", "the vLLM runtime runs on NVIDIA GPUs only")],
)


def test_tiles_the_cpu_then_every_kind_with_what_it_needs():
    tiles = sizing.tiles(SIZED, CATALOG, "t4")
    assert [t.kind for t in tiles] == ["cpu", "t4", "l4", "mi300x"]
    cpu, t4, l4, amd = tiles
    assert cpu.fits and "needs about 22Gi of memory" in cpu.needed and cpu.memory_needed == "22Gi"
    assert t4.chosen and t4.fits and (t4.gpus, t4.nodes) == (2, 1)
    assert t4.needed == "needs 11.0 GiB per GPU on 2 GPUs"
    assert l4.suggested and t4.memory == "15.0 GiB per GPU, 4 per node"
    assert not amd.fits and amd.reason == "Cannot run it: the vLLM runtime runs on NVIDIA GPUs only"


def test_tiles_without_sizing_leave_every_kind_open():
    unsized = CheckResult(uri="s3://b/m", can_serve=True, verdict=SERVABLE, next_step="")
    tiles = sizing.tiles(unsized, CATALOG, None)
    assert all(t.fits for t in tiles)
    assert tiles[1].needed == "Check model could not size it here"


@pytest.mark.parametrize(
    "kind, gpus, nodes, path",
    [
        ("t4", 1, 1, f"{M}.resources.accelerator.gpu.countPerReplica"),
        ("t4", 2, 1, None),
        ("t4", 1, 2, None),
        ("l4", 1, 1, None),
        ("mi300x", 8, 1, f"{M}.resources.accelerator.gpu.model"),
        ("h100", 1, 1, None),  # not in Check model's answer: nothing to say
        (None, 1, 1, None),
        ("t4", "two", 1, None),  # not a number: the manifest rules speak
    ],
)
def test_layout_refusal(kind, gpus, nodes, path):
    problem = layout_refusal(SIZED, kind, gpus, nodes)
    assert (problem.path if problem else None) == path


def test_layout_refusal_says_the_smallest_that_holds_it():
    problem = layout_refusal(SIZED, "t4", 1, 1)
    assert problem.message.startswith("1 is too few: 1 t4 GPU cannot hold the model at 32768")
    assert "Set GPUs per replica to 2" in problem.message


@pytest.mark.parametrize(
    "weights, task, memory",
    [
        (15 * GIB, "generate", "22Gi"),
        (GIB, "embed", None),  # the 4Gi default holds it
        (15 * GIB, "predict", None),
        (None, "generate", None),
    ],
)
def test_cpu_memory(weights, task, memory):
    check = CheckResult(
        uri="hf://a/b", can_serve=True, verdict=SERVABLE, next_step="", weight_bytes=weights
    )
    check.task = task
    assert sizing.cpu_memory(check) == memory


def test_chosen_size_is_check_models_gpu_or_the_cpu():
    assert sizing.chosen_size(SIZED) == ("l4", 1, 1)
    cpu = CheckResult(uri="x", can_serve=True, verdict=SERVABLE, next_step="")
    assert sizing.chosen_size(cpu) == (None, 0, 1)
    assert sizing.chosen_size(None) == (None, 0, 1)


def test_a_manifest_that_cannot_be_rendered_is_the_model_steps():
    problem = Problem("spec", "cannot be rendered for Kubernetes", origin="target")
    assert steps.by_step([problem])["model"] == [problem]
