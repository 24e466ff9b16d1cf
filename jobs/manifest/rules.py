"""Cross-field and context rules on the spec, the artifact, the engine and serving: what
depends on other fields, the profile, the organisation or Check model.

Each rule reads well-typed effective values (Facts) and skips when one it needs is unknown,
so a single wrong value produces a single problem.
"""

from __future__ import annotations

from typing import Any

from jobs.kube_names import PREDICTOR_SUFFIX

from . import adapters, rollout
from .capacity import byte_amount, check_capacity, kind_of_gpu
from .checks import Bad, Qty
from .context import ManifestContext
from .defaults import MODEL_PATH as M
from .defaults import Facts, group, ok
from .engine_flags import check_engine_args
from .fixed import check_fixed
from .problems import Out, Problem, listing, show
from .quantity import format_bytes
from .schema import (
    API_PROTOCOLS,
    ENGINE_FORMATS,
    ENGINE_PROTOCOLS,
    FORMAT_ENGINE,
    INSTALLED_RUNTIMES,
    api_formats,
)
from .uri import VLLM_DEFAULT_SCHEMES

MODALITY_FIELDS = {
    "maxImagesPerPrompt": "image",
    "maxVideosPerPrompt": "video",
    "maxAudioClipsPerPrompt": "audio",
}
MULTIMODAL_WARN_ABOVE = 64
# KServe names the predictor Service "<name>-predictor"; a Service name is at most 63.
KSERVE_NAME_MAX = 63 - len(PREDICTOR_SUFFIX)
KSERVE_RENAME_PREFIX = "m-"


def file_on_kubernetes(uri: str, profile_name: str) -> tuple[str, str]:
    """Why a file:// folder cannot be the source on a Kubernetes profile, and what to do: said
    alike by this rule and by Check model on that profile (jobs.dry_run)."""
    return (
        f"{show(uri)} is a folder on the console's machine, which profile {profile_name}'s "
        "Kubernetes cluster cannot read; accepts file:// on the local profile only.",
        "Copy the model onto a PersistentVolumeClaim and set uri to pvc://<claim>/<path>, or "
        "use hf://, or deploy it on a local profile.",
    )


def kserve_rename(app: str) -> str:
    """A name KServe accepts for `app`, to suggest: a letter in front, cut to KSERVE_NAME_MAX
    (the prefix counts), never ending in a dash."""
    kept = app[: KSERVE_NAME_MAX - len(KSERVE_RENAME_PREFIX)]
    return f"{KSERVE_RENAME_PREFIX}{kept}".rstrip("-")


# KServe's webhook serves a multi-node predictor (workerSpec) only from these storage schemes.
MULTINODE_SCHEMES = ("pvc", "oci")
# The engine and serving fields that only a vLLM the platform runs is given (as flags or
# environment); a runtime of the user's gets engine.extraArgs alone, parakeet none of them.
VLLM_ENGINE_FIELDS = (
    "dtype",
    "quantization",
    "tensorParallelSize",
    "pipelineParallelSize",
    "reasoningParser",
    "toolCallParser",
    "gpuMemoryUtilization",
)
VLLM_SERVING_FIELDS = ("maxContextTokens", "kvCacheSize", "maxConcurrentRequests", "multimodal")
GATEWAY_API_ADDON = "gatewayApi"


def check(
    draft: dict[str, Any], facts: Facts, manifest: dict[str, Any], ctx: ManifestContext
) -> list[Problem]:
    out = Out()
    spec = draft["spec"]
    _profile(spec, facts, ctx, out)
    _namespace(spec, facts, out)
    _access(spec, facts, ctx, out)
    rollout.check(spec, facts, out)
    source = spec["source"]
    if isinstance(source, dict):
        _source(source, out)
        model = source["model"]
        if isinstance(model, dict) and source["type"] != "YAML":
            _artifact(model, facts, out)
            _engine(model, facts, out)
            _engine_args(model, manifest, facts, ctx, out)
            _adapters(model, spec, facts, out)
            _serving(model, facts, ctx, out)
            check_capacity(model, facts, out)
    if ctx.existing is not None:
        check_fixed(manifest, facts, ctx, out)
    return out.problems


# --- spec ------------------------------------------------------------------------------------


def _profile(spec: dict[str, Any], facts: Facts, ctx: ManifestContext, out: Out) -> None:
    name = spec["profileName"]
    if ok(name) and facts.profile is None:
        out.pick(
            "spec.profileName",
            name,
            ctx.profiles,
            "a deployment profile",
            "An organisation admin creates one under Profiles; then set profileName to it.",
        )
    app = spec["name"]
    if ok(app) and facts.profile is not None and facts.profile.backend == "kubernetes":
        if app[0].isdigit():
            out.refuse(
                "spec.name",
                f"{show(app)} starts with a digit; KServe requires an InferenceService name to "
                f"start with a letter, so on profile {facts.profile.name} it accepts a name "
                f"starting with a letter. Rename it, for example {kserve_rename(app)}.",
            )
        if len(app) > KSERVE_NAME_MAX:
            out.refuse(
                "spec.name",
                f"{show(app)} is {len(app)} characters; on Kubernetes it accepts at most "
                f"{KSERVE_NAME_MAX}, because KServe names the predictor '<name>-predictor' "
                "within 63 characters. Shorten it.",
            )


def _namespace(spec: dict[str, Any], facts: Facts, out: Out) -> None:
    # Organisations may share a cluster: a manifest goes only where its profile allows.
    namespace, profile = spec["namespace"], facts.profile
    if not ok(namespace) or profile is None or namespace in profile.allowed_namespaces:
        return
    out.refuse(
        "spec.namespace",
        f"{show(namespace)} is not a namespace profile {profile.name} may deploy to; accepts "
        f"{listing(profile.allowed_namespaces)}. Remove spec.namespace to use the profile's "
        f"own ({profile.namespace}), or ask an organisation admin to allow {namespace} on the "
        "profile (Other namespaces).",
    )


def _access(spec: dict[str, Any], facts: Facts, ctx: ManifestContext, out: Out) -> None:
    access = spec["access"]
    if isinstance(access, Bad):
        return
    access = access or {}
    exposure = access.get("exposure") or "Internal"
    domain, policy = access.get("domain"), access.get("accessPolicy")
    base = "spec.access"
    if exposure == "Internal":
        for key, value in (("domain", domain), ("accessPolicy", policy)):
            if value is not None:
                out.refuse(
                    f"{base}.{key}",
                    f"{show(getattr(value, 'raw', value))} is set but exposure is Internal, so "
                    f"it would be ignored; accepts {key} only with exposure: Domain. Set "
                    f"exposure to Domain, or remove {key}.",
                )
        return
    if exposure != "Domain":
        return
    profile = facts.profile
    # On Kubernetes the public endpoint is an HTTPRoute on the cluster's gateway; the local
    # backend has no cluster, and the console's own gateway serves the domain there.
    if (
        profile is not None
        and profile.backend == "kubernetes"
        and GATEWAY_API_ADDON not in profile.addons
    ):
        out.refuse(
            f"{base}.exposure",
            f"'Domain' needs the Gateway API add-on ({GATEWAY_API_ADDON}) on the cluster of "
            f"profile {profile.name}, which it does not have; accepts Internal there. Ask an "
            "admin to install the Gateway API add-on on the cluster, or set exposure to "
            "Internal.",
        )
    verified = {d.lower(): d for d in ctx.verified_domains}
    if domain is None:
        if verified:
            out.refuse(
                f"{base}.domain",
                f"required with exposure Domain, missing; accepts a verified domain "
                f"({listing(verified.values())}). Set domain to one of them.",
            )
        else:
            out.refuse(
                f"{base}.domain",
                "required with exposure Domain, but the organisation has no verified domain "
                "yet; accepts a verified domain. Verify one under Team, and use exposure: "
                "Internal meanwhile.",
            )
    elif ok(domain) and domain.lower() not in verified:
        out.pick(
            f"{base}.domain",
            domain,
            verified.values(),
            "a verified domain of the organisation",
            "Verify the domain under Team, and use exposure: Internal meanwhile.",
        )
    if policy is None:
        if ctx.access_policies:
            out.refuse(
                f"{base}.accessPolicy",
                f"required with exposure Domain, missing; accepts an access policy "
                f"({listing(ctx.access_policies)}). Set accessPolicy to one of them.",
            )
        else:
            out.refuse(
                f"{base}.accessPolicy",
                "required with exposure Domain, but the organisation has no access policy "
                "yet; accepts an access policy. Create one under Team, and use exposure: "
                "Internal meanwhile.",
            )
    elif ok(policy) and policy not in ctx.access_policies:
        out.pick(
            f"{base}.accessPolicy",
            policy,
            ctx.access_policies,
            "an access policy of the organisation",
            "Create one under Team, and use exposure: Internal meanwhile.",
        )


def _source(source: dict[str, Any], out: Out) -> None:
    kind = source["type"]
    model, isvc = source["model"], source["inferenceService"]
    if kind == "Model":
        if model is None:
            out.refuse(
                f"{M}",
                "required with source.type Model, missing; accepts a mapping with at least "
                "uri. Add model: {uri: hf://<org>/<repo>:<revision>}.",
            )
        if isvc is not None:
            out.refuse(
                "spec.source.inferenceService",
                "is set but source.type is Model; accepts an InferenceService only with "
                "source.type YAML. Remove it, or set source.type to YAML and remove model.",
            )
    elif kind == "YAML":
        if model is not None:
            out.refuse(
                M,
                "is set but source.type is YAML; accepts model only with source.type Model "
                "(the InferenceService says everything). Remove model, or set source.type to "
                "Model.",
            )
        path = "spec.source.inferenceService"
        if isvc is None:
            out.refuse(
                path,
                "required with source.type YAML, missing; accepts a KServe InferenceService "
                "(apiVersion serving.kserve.io/v1beta1, kind InferenceService, spec). Add it.",
            )
        elif not isinstance(isvc, Bad):
            _inference_service(isvc, path, out)


def _inference_service(isvc: Any, path: str, out: Out) -> None:
    if not isinstance(isvc, dict):
        out.refuse(
            path,
            f"{show(isvc)} is not a mapping; accepts a KServe InferenceService. Paste the whole "
            "object (apiVersion, kind, spec).",
        )
        return
    expected = (("apiVersion", "serving.kserve.io/v1beta1"), ("kind", "InferenceService"))
    for key, want in expected:
        if isvc.get(key) != want:
            given = "missing" if key not in isvc else show(isvc[key])
            out.refuse(
                f"{path}.{key}",
                f"{given}; accepts {want}. Set {key}: {want}.",
            )
    if not isinstance(isvc.get("spec"), dict):
        given = "missing" if "spec" not in isvc else f"{show(isvc['spec'])}, not a mapping"
        out.refuse(
            f"{path}.spec",
            f"{given}; accepts the InferenceService spec (a mapping with a predictor). Add it.",
        )


# --- artifact and runtime --------------------------------------------------------------------


def _artifact(model: dict[str, Any], facts: Facts, out: Out) -> None:
    uri = facts.uri
    if uri is not None and uri.scheme == "hf":
        if uri.hf_revision is None:
            out.warn(
                f"{M}.uri",
                f"{show(uri.text)} is not pinned; a rollback may serve different bytes. Pin it "
                f"as hf://{uri.hf_repo}:<commit>.",
            )
        elif not uri.pinned:
            out.warn(
                f"{M}.uri",
                f"revision {show(uri.hf_revision)} is a branch or tag, which can move; a "
                f"rollback may serve different bytes. Pin it as hf://{uri.hf_repo}:<commit> "
                "(the 40-character commit hash).",
            )
    if model["format"] is None and uri is not None and uri.scheme not in VLLM_DEFAULT_SCHEMES:
        out.refuse(
            f"{M}.format",
            f"required for an artifact on {uri.scheme}://, missing (only hf:// and file:// "
            "default to vLLM); "
            "accepts vLLM, SKLearn, XGBoost, LightGBM, TensorFlow, PyTorch, ONNX, TensorRT, "
            "Triton, MLflow, PMML or Paddle. Set format to the artifact's format.",
        )
    runtime = group(model, "runtime")
    engine, fmt = runtime.get("engine"), facts.format
    if ok(engine) and fmt is not None and fmt not in ENGINE_FORMATS.get(engine, (fmt,)):
        able = sorted(e for e, fmts in ENGINE_FORMATS.items() if fmt in fmts)
        out.refuse(
            f"{M}.runtime.engine",
            f"{show(engine)} cannot load {fmt} models; accepts for {fmt}: "
            f"{', '.join(able)}, or the name of your own serving runtime. Leave engine out "
            f"to let format choose ({FORMAT_ENGINE[fmt]}).",
        )
    if (
        uri is not None
        and facts.multinode
        and facts.on_gpu  # on CPU nodesPerReplica itself is refused
        and uri.scheme not in MULTINODE_SCHEMES
        # A virtual machine replica downloads into its own shared volume (jobs/render/kubevirt).
        and facts.isolation != "VirtualMachine"
    ):
        out.refuse(
            f"{M}.uri",
            f"{show(uri.text)} is on {uri.scheme}://, but resources.nodesPerReplica is "
            f"{facts.nodes}: KServe serves a multi-node replica only from pvc:// or oci:// "
            "storage; accepts pvc://<claim>/<path> or oci://<registry>/<repo>[:<tag>] there. "
            "Copy the weights to a PVC (or into an OCI image) and set uri to it, or set "
            "nodesPerReplica to 1.",
        )
    profile = facts.profile
    on_kubernetes = profile is not None and profile.backend == "kubernetes"
    if uri is not None and uri.scheme == "file" and on_kubernetes:
        out.refuse(f"{M}.uri", " ".join(file_on_kubernetes(uri.text, profile.name)))
    vm = facts.isolation == "VirtualMachine"
    if vm and profile is not None and "kubevirt" not in profile.addons:
        out.refuse(
            f"{M}.runtime.isolation",
            f"VirtualMachine needs the KubeVirt add-on, which profile {profile.name} does not "
            "have (its cluster's discovery found no kubevirt.io API); accepts Container there. "
            "Set isolation to Container, pick a profile with KubeVirt, or ask an admin to "
            "install KubeVirt and discover the cluster again.",
        )


def _engine(model: dict[str, Any], facts: Facts, out: Out) -> None:
    block = model["engine"]
    if block is not None and facts.generative is False:
        out.refuse(
            f"{M}.engine",
            f"is set for a {facts.format} model; accepts engine settings only with format vLLM. "
            f"Remove the engine block (the {facts.engine or facts.format} runtime takes none).",
        )
        return
    if facts.generative is False:
        return
    if block is not None and not isinstance(block, Bad) and facts.parakeet:
        out.refuse(
            f"{M}.engine",
            "is set, but engine settings are vLLM's; the parakeet runtime takes none, so it "
            "accepts no engine block with runtime.engine parakeet. Remove the engine block.",
        )
        return
    gpu = "resources.accelerator.gpu.countPerReplica"
    if facts.tp is not None:
        if facts.on_gpu and facts.count is not None and facts.tp != facts.count:
            out.refuse(
                f"{M}.engine.tensorParallelSize",
                f"engine.tensorParallelSize is {facts.tp} but {gpu} is {facts.count}: one model "
                f"copy is split across exactly the GPUs a replica reserves; accepts "
                f"{facts.count}. Set tensorParallelSize to {facts.count} (or leave it out), or "
                f"set countPerReplica to {facts.tp}.",
            )
        elif facts.on_gpu is False and facts.tp != 1:
            out.refuse(
                f"{M}.engine.tensorParallelSize",
                f"engine.tensorParallelSize is {facts.tp} but the model runs on CPU (no "
                f"resources.accelerator); accepts 1. Set it to 1 (or leave it out), or add "
                f"resources.accelerator.gpu.countPerReplica: {facts.tp}.",
            )
    if facts.pp is not None and facts.nodes is not None and facts.pp != facts.nodes:
        out.refuse(
            f"{M}.engine.pipelineParallelSize",
            f"engine.pipelineParallelSize is {facts.pp} but resources.nodesPerReplica is "
            f"{facts.nodes}: one model copy is split across exactly the nodes a replica spans; "
            f"accepts {facts.nodes}. Set pipelineParallelSize to {facts.nodes} (or leave it out), "
            f"or set nodesPerReplica to {facts.pp}.",
        )


def _engine_args(
    model: dict[str, Any], manifest: dict[str, Any], facts: Facts, ctx: ManifestContext, out: Out
) -> None:
    """The filled-in engine arguments, as vLLM will read them, whatever their source: the
    manifest's engine.extraArgs, else the model master's (stored masters apply to every later
    deployment, so they are checked where they are used, not only when saved)."""
    if facts.parakeet or facts.generative is False:
        return  # parakeet's engine block is refused apart; predictive runtimes get no flags
    filled = group(group(group(manifest["spec"], "source"), "model"), "engine").get("extraArgs")
    if not isinstance(filled, list):
        return
    path = f"{M}.engine.extraArgs"
    from_master = group(model, "engine").get("extraArgs") is None and bool(filled)
    problems = check_engine_args(
        filled, custom_runtime=facts.custom_runtime, extra_flags=ctx.extra_engine_flags
    )
    for index, sentence in problems:
        if from_master:
            master = ctx.master_name or "of this model"
            out.refuse(
                path,
                f"model master {master}, field extra_args[{index}]: {sentence} Correct the "
                "model master (Models, Masters), or set engine.extraArgs in the manifest, "
                "which replaces the master's.",
            )
        else:
            out.refuse(f"{path}[{index}]", sentence)


def _adapters(model: dict[str, Any], spec: dict[str, Any], facts: Facts, out: Out) -> None:
    """LoRA adapters: each item's name and uri (adapters.read), served by vLLM only; on a
    Kubernetes profile read by vLLM itself from the Hub (no storage initializer fetches them)."""
    items = model.get("adapters")
    if not ok(items) or not items:
        return
    path = adapters.PATH
    if facts.generative is False or facts.parakeet or facts.custom_runtime:
        out.refuse(path, adapters.engine_refusal(facts.engine or facts.format))
        return
    base = spec["name"] if ok(spec["name"]) else None
    found = adapters.read(items, base, out)
    profile = facts.profile
    on_kubernetes = profile is not None and profile.backend == "kubernetes"
    for adapter in found:
        at = f"{path}[{adapter.index}].uri"
        if on_kubernetes and adapter.uri.scheme != "hf":
            out.refuse(
                at,
                f"{show(adapter.uri.text)} is on {adapter.uri.scheme}://; on profile "
                f"{profile.name}'s Kubernetes cluster vLLM reads adapters from the Hugging Face "
                "Hub itself, so accepts hf://<org>/<repo> there. Push the adapter to the Hub "
                "(a private repository is read with the profile's token), or deploy on a local "
                "profile.",
            )
        elif on_kubernetes and adapter.uri.hf_revision not in (None, "main"):
            # vLLM's --lora-modules takes a repository, not a revision: what Check model read
            # at another revision would not be what the cluster serves.
            out.refuse(
                at,
                f"{show(adapter.uri.text)} names the revision {show(adapter.uri.hf_revision)}; "
                f"on profile {profile.name}'s Kubernetes cluster vLLM loads an adapter's main "
                "branch (its --lora-modules takes no revision), so accepts "
                f"hf://{adapter.uri.hf_repo} only. Remove the revision (Check model then reads "
                "main).",
            )
        elif on_kubernetes:
            out.warn(
                at,
                f"{show(adapter.uri.text)}: on a Kubernetes cluster vLLM loads the adapter's "
                "main branch at each start, so a push to it changes what a restart serves. "
                "Keep the adapter's repository for releases only.",
            )
        elif adapter.uri.scheme == "hf" and not adapter.uri.pinned:
            out.warn(
                at,
                f"{show(adapter.uri.text)} is not pinned to a commit; a restart may load "
                f"different weights. Pin it as hf://{adapter.uri.hf_repo}:<commit>.",
            )


# --- serving ---------------------------------------------------------------------------------


def _serving(model: dict[str, Any], facts: Facts, ctx: ManifestContext, out: Out) -> None:
    serving = group(model, "serving")
    base = f"{M}.serving"
    _api_format(model, facts, out)
    if facts.generative is False:
        for key in ("maxContextTokens", "kvCacheSize", "maxConcurrentRequests", "multimodal"):
            if serving.get(key) is not None:
                out.refuse(
                    f"{base}.{key}",
                    f"is set for a {facts.format} model; accepts {key} only for generative "
                    f"(vLLM) models. Remove it.",
                )
        return
    if not facts.generative:
        return
    if facts.parakeet or facts.custom_runtime:
        _not_passed(model, facts, out)
        if facts.custom_runtime:
            _multimodal(serving, facts, ctx, out)
        return
    _kv_cache(serving, facts, out)
    _multimodal(serving, facts, ctx, out)


def _api_format(model: dict[str, Any], facts: Facts, out: Out) -> None:
    """apiFormat must suit the model and be a protocol its runtime declares: KServe refuses a
    protocolVersion the runtime does not list (MLServer and Triton speak only v2,
    TensorFlow Serving only v1, parakeet only the OpenAI API)."""
    path = f"{M}.serving.apiFormat"
    api = group(model, "serving").get("apiFormat")
    if not ok(api) or facts.generative is None:
        return
    engine, fmt = facts.engine, facts.format
    spoken = api_formats(engine, facts.generative)
    if spoken is not None and fmt is not None and fmt not in ENGINE_FORMATS[engine]:
        spoken = None  # runtime.engine cannot load the format: refused once, there
    if facts.generative and api == "V1":
        accepted = " or ".join(spoken) if spoken else "OpenAI or V2"
        out.refuse(
            path,
            f"'V1' is the predictive protocol; accepts {accepted} for a generative (vLLM) "
            "model. Set apiFormat to OpenAI, or leave it out.",
        )
        return
    if not facts.generative and api == "OpenAI":
        accepted = " or ".join(spoken) if spoken else "V1 or V2"
        default = spoken[0] if spoken else "V1"
        out.refuse(
            path,
            f"'OpenAI' is for generative models; accepts {accepted} for a {fmt} model. Set "
            f"apiFormat to {accepted}, or leave it out ({default}).",
        )
        return
    if spoken is None or api in spoken:
        return
    runtime, protocols = ENGINE_PROTOCOLS[engine]
    accepted = " or ".join(spoken)
    out.refuse(
        path,
        f"{show(api)} ({API_PROTOCOLS.get(api, api)}) is not a protocol of the {engine} runtime "
        f"({runtime}), which speaks only {', '.join(protocols)}; accepts {accepted} with it. Set "
        f"apiFormat to {spoken[0]}, or leave it out ({spoken[0]}).",
    )


def _not_passed(model: dict[str, Any], facts: Facts, out: Out) -> None:
    """Fields set for a runtime that is not given them: a runtime of the user's gets only
    engine.extraArgs; parakeet none (its engine block is refused apart)."""
    engine, serving = group(model, "engine"), group(model, "serving")
    fields = (
        []
        if facts.parakeet
        else [f"engine.{k}" for k in VLLM_ENGINE_FIELDS if engine.get(k) is not None]
    )
    # multimodal is refused for a runtime of the user's by _multimodal.
    shown = VLLM_SERVING_FIELDS if facts.parakeet else VLLM_SERVING_FIELDS[:-1]
    fields += [f"serving.{k}" for k in shown if serving.get(k) is not None]
    if not fields:
        return
    listed = ", ".join(fields)
    if facts.parakeet:
        out.warn(
            f"{M}.runtime.engine",
            f"'parakeet' is the speech-to-text runtime, not vLLM: {listed} "
            f"{'is' if len(fields) == 1 else 'are'} not passed to it and change nothing. "
            "Remove them.",
        )
        return
    out.warn(
        f"{M}.runtime.engine",
        f"{show(facts.engine)} is a serving runtime of yours: the platform passes it only "
        f"engine.extraArgs, so {listed} {'is' if len(fields) == 1 else 'are'} not passed to it "
        "and change nothing. Give the runtime what it needs in engine.extraArgs (for example "
        '"--dtype=bfloat16"), and remove them.',
    )


def _kv_cache(serving: dict[str, Any], facts: Facts, out: Out) -> None:
    path = f"{M}.serving.kvCacheSize"
    kv = facts.kv_cache
    if kv is None:
        return
    if facts.on_gpu is False and facts.memory is not None:
        if kv == 0:
            out.refuse(
                f"{M}.resources.memory",
                f"{format_bytes(facts.memory)} bytes leaves no KV cache on CPU (a quarter of it "
                "is 0 bytes); accepts a quantity such as 4Gi. Raise memory.",
            )
        elif kv >= facts.memory:
            given = serving.get("kvCacheSize")
            out.refuse(
                path,
                f"{show(getattr(given, 'raw', format_bytes(kv)))} is not smaller than "
                f"resources.memory ({format_bytes(facts.memory)}): on CPU the KV cache comes out "
                f"of the replica's memory; accepts less than {format_bytes(facts.memory)}. "
                "Lower kvCacheSize (leave it out for a quarter of memory), or raise memory.",
            )
    if facts.on_gpu and isinstance(serving.get("kvCacheSize"), Qty):
        kind = kind_of_gpu(facts)
        gpu_memory = byte_amount((kind or {}).get("gpuMemory"))
        if gpu_memory is not None and kv >= gpu_memory:
            out.refuse(
                path,
                f"{show(serving['kvCacheSize'].raw)} is not below the memory of one "
                f"{facts.gpu_model} GPU ({format_bytes(gpu_memory)}); accepts less than that. "
                "Lower kvCacheSize, or leave it out to let the runtime size it.",
            )


def _multimodal(serving: dict[str, Any], facts: Facts, ctx: ManifestContext, out: Out) -> None:
    block = serving.get("multimodal")
    path = f"{M}.serving.multimodal"
    if not isinstance(block, dict):
        return
    if all(value is None for value in block.values()):
        out.refuse(
            path,
            "sets no limit; accepts at least one of maxImagesPerPrompt, maxVideosPerPrompt, "
            "maxAudioClipsPerPrompt. Set one, or remove the block.",
        )
        return
    if facts.engine is not None and facts.engine not in INSTALLED_RUNTIMES:
        out.refuse(
            path,
            f"is set but runtime.engine {show(facts.engine)} is a runtime the platform did not "
            "install, so the limits cannot be passed to it; accepts multimodal only with the "
            "platform's runtimes. Remove the block and configure your runtime directly.",
        )
        return
    for key in MODALITY_FIELDS:
        value = block.get(key)
        if ok(value) and value > MULTIMODAL_WARN_ABOVE:
            out.warn(
                f"{path}.{key}",
                f"{show(value)} is above {MULTIMODAL_WARN_ABOVE}: every replica reserves memory "
                "for that many items per request. Lower it unless requests really carry that "
                "many.",
            )
