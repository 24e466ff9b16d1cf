"""The dry run: what applying a manifest would do, in one pass that saves nothing.

Parse once; run Check model once (answers are kept for the pass, so the wizard's sizing asks
it once per request); apply the rules that depend on what it found to the same facts; render
once for a Kubernetes profile (DryRun.objects, which the deploy hands to the backend); then
the target's preflight (the cluster's server-side dry run, or what this machine lacks). Every
problem says where it came from (`Problem.origin`), so the wizard routes by path and origin.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from django.conf import settings

from accesspolicies import domains
from accesspolicies.keys import model_ids
from accesspolicies.models import AccessPolicy
from console.env import configured_engine_flags
from jobs import manifest as mf
from jobs.backends import backend_for
from jobs.backends.local.command import DEFAULT_TEMPLATE, configured_template
from jobs.backends.local.machine_check import free_memory
from jobs.download_cost import download_cost_warning
from jobs.manifest import adapters as mf_adapters
from jobs.manifest.context import ExistingApplication, ManifestContext
from jobs.manifest.problems import Out
from jobs.manifest.rules import file_on_kubernetes
from jobs.manifest.uri import UriError, parse_uri
from jobs.manifest.view import FilledManifest, dig
from jobs.models import Application, Cluster, Profile
from jobs.render import RenderError, render_for_profile
from jobs.storage_access import (
    ANONYMOUS,
    SECRET_FIELD,
    SERVICE_ACCOUNT_FIELD,
    ClusterAccess,
    cluster_access_refusal,
    credentials_unusable,
    profile_credentials,
)
from jobs.token_refs import profile_token
from models_catalog.adapter_check import check_adapters
from models_catalog.architectures import default_gpu_memory_utilization
from models_catalog.check import check_model
from models_catalog.check_types import CheckResult
from models_catalog.models import ModelMaster
from models_catalog.service import layout_refusal, model_facts

# Problems at these paths make Check model pointless: it would only repeat them. The source
# and its model themselves count too (missing, or not a mapping: nothing to check).
CHECK_INPUTS = ("spec.profileName", "spec.source.model.uri", "spec.source.model.format")
CHECK_CONTAINERS = ("spec", "spec.source", "spec.source.type", "spec.source.model")
URI = "spec.source.model.uri"


@dataclass
class DryRun:
    """What applying a manifest would do; saves nothing."""

    manifest: dict | None
    refusals: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    runtime: str | None = None
    scaling: str | None = None
    # What minReplicas 0 (scale to zero) means on the profile's target; "" when it never sleeps.
    sleeping: str = ""
    target_backend: str = ""
    exists: bool = False
    changed: bool = True
    check: CheckResult | None = None
    # What a Kubernetes profile's cluster gets, rendered once: the deploy applies these
    # (stamped with the revision) rather than render the manifest again.
    objects: list = field(default_factory=list)
    server_side: bool = False  # the cluster's server-side dry run was asked
    # The defaults the model itself decided (mf.model_defaults), which the wizard pre-fills.
    model_defaults: mf.ModelDefaults = field(default_factory=mf.ModelDefaults)

    @property
    def ok(self) -> bool:
        return not self.refusals

    @property
    def action(self) -> str:
        return ("update" if self.exists else "create") if self.changed else "unchanged"

    @property
    def filled(self) -> FilledManifest | None:
        return FilledManifest(self.manifest) if self.manifest is not None else None

    def problems(self) -> list[dict]:
        return [p.as_dict() for p in [*self.refusals, *self.warnings]]

    def as_dict(self) -> dict:
        from jobs.present import dry_run_body  # the one output shape of every surface

        return dry_run_body(self)


class CheckModelCalls:
    """Check model's answers for one request: the same question is asked once. Inputs Check
    model reads alike are asked alike (format vLLM on hf:// is its default; no
    gpuMemoryUtilization is the vLLM version's default), so the wizard's sizing and the dry
    run of the size it chose share one answer."""

    def __init__(self) -> None:
        self._answers: dict[tuple, CheckResult] = {}

    @staticmethod
    def _format(uri: str, format: str | None) -> str | None:
        return None if format == "vLLM" and uri.startswith("hf://") else format

    def known(self, uri: str, profile: Profile, format: str | None) -> CheckResult | None:
        """An answer already given for the model on the profile, whatever context it was sized
        for: what Check model found about the model itself does not depend on it."""
        format = self._format(uri, format)
        for key, answer in self._answers.items():
            if key[:2] == (uri, profile.pk) and key[4] == format:
                return answer
        return None

    def ask(
        self,
        uri: str,
        profile: Profile,
        *,
        context_tokens: int | None = None,
        concurrency: int = 1,
        format: str | None = None,
        gpu_memory_utilization: float | None = None,
        wants_gpu: bool | None = None,
        dtype: str | None = None,
    ) -> CheckResult:
        format = self._format(uri, format)
        if gpu_memory_utilization is None:
            gpu_memory_utilization = default_gpu_memory_utilization(profile.vllm_version)
        if profile.cluster.backend != profile.cluster.Backend.LOCAL:
            # Only the local backend's choice of server, and the memory it sizes, depend on them.
            wants_gpu = dtype = None
        key = (
            uri, profile.pk, context_tokens, concurrency, format, gpu_memory_utilization,
            wants_gpu, dtype,
        )  # fmt: skip
        if key not in self._answers:
            self._answers[key] = check_for_profile(
                uri,
                profile,
                context_tokens=context_tokens,
                concurrency=concurrency,
                format=format,
                gpu_memory_utilization=gpu_memory_utilization,
                wants_gpu=wants_gpu,
                dtype=dtype,
            )
        return self._answers[key]


def manifest_context(
    organization, application: Application | None, uri: str | None = None
) -> ManifestContext:
    profiles = Profile.objects.filter(organization=organization).select_related("cluster")
    master = ModelMaster.objects.for_uri(organization, uri)
    existing = None
    if application is not None:
        existing = ExistingApplication(
            manifest=application.manifest,
            created_at=application.created_at,
            served_at=application.served_at,
        )
    return ManifestContext(
        profiles={p.name: p.facts() for p in profiles},
        verified_domains=domains.verified_names(organization),
        access_policies=frozenset(
            AccessPolicy.objects.filter(organization=organization).values_list("name", flat=True)
        ),
        existing=existing,
        engine_defaults=master.engine_defaults() if master else {},
        master_name=master.model_id if master else None,
        master_context_tokens=master.max_context_tokens if master else None,
        extra_engine_flags=configured_engine_flags(),
    )


def dry_run(
    doc,
    organization,
    *,
    expect_name: str | None = None,
    server_side: bool = True,
    checks: CheckModelCalls | None = None,
) -> DryRun:
    """Parse, fill defaults and check `doc` (text or mapping) against the organisation's state.

    `server_side=False` leaves out the cluster's server-side dry run of a Kubernetes profile
    (the wizard asks it at Review and Deploy only); `checks` keeps Check model's answers
    across the dry runs of one request.
    """
    if isinstance(doc, str | bytes):
        try:
            doc = mf.load_document(doc)
        except mf.DocumentError as error:
            return DryRun(
                manifest=None, refusals=[replace(p, origin="schema") for p in error.problems]
            )
    if nul := mf.nul_problems(doc):  # before any of it reaches a database lookup
        return DryRun(manifest=None, refusals=[replace(p, origin="schema") for p in nul])
    if (problem := mf.not_a_mapping(doc)) is not None:
        # Read once: a document that is one quoted string is that string, not YAML again.
        return DryRun(manifest=None, refusals=[problem])
    name = FilledManifest(doc).name
    if expect_name is not None and name != expect_name:
        problem = mf.Problem(
            "spec.name",
            f"{name!r} does not match the application addressed ({expect_name!r}); "
            "send the manifest of that application, or create a new one instead.",
            "refusal",
        )
        return DryRun(manifest=None, refusals=[problem])
    application = (
        Application.objects.filter(organization=organization, name=name).first() if name else None
    )
    ctx = manifest_context(organization, application, FilledManifest(doc).uri)
    checks = checks or CheckModelCalls()
    known = _known(doc, organization, checks)
    if known is not None:
        ctx = replace(ctx, model=known)  # the parse fills the model's defaults at once
    result = mf.parse(doc, ctx)
    checked = _check_model(result, organization, checks)
    facts = model_facts(checked) if checked else None
    if facts is not None and facts != ctx.model:
        if ctx.model is not None or mf.refill_needed(result, facts):
            # What Check model found changes a default (the context window, the memory that
            # holds the model, its pinned commit): fill them from it, and size for them. The
            # document was read once; only the fill and its rules run again.
            ctx = replace(ctx, model=facts)
            result = mf.refill(result, ctx)
            # Sized again for a context window it capped; about the uri as it was asked (the
            # commit it is now pinned to is the one that answer resolved).
            checked = _check_model(result, organization, checks, uri=checked.uri) or checked
        else:
            result = result.with_problems(mf.model_problems(result, facts))
    run = DryRun(
        manifest=result.manifest,
        refusals=list(result.refusals),
        warnings=list(result.warnings),
        exists=application is not None,
        check=checked,
    )
    if result.facts is not None:
        run.model_defaults = result.facts.model_filled
    if result.manifest is not None and result.ok:
        _add_model_id_problems(run, organization, result.manifest)
    if checked is not None:
        _add_check_problems(run, checked)
        if checked.storage_private and result.manifest is not None:
            _add_access_problem(run, organization, checked)
        if result.manifest is not None:
            _add_adapter_problems(run, organization, result.manifest, checked.can_serve)
    if result.manifest is not None and run.ok:
        _on_target(run, organization, server_side)
    if run.server_side and run.ok and checked is not None and checked.can_serve:
        _add_download_cost(run, organization)
    if result.manifest is not None and run.ok:
        run.runtime = mf.runtime_of(result.manifest)
        run.scaling = mf.scaling_of(result.manifest)
        run.sleeping = mf.sleeping_of(result.manifest, run.target_backend)
        run.changed = application is None or application.manifest != result.manifest
    return run


def _known(doc, organization, checks: CheckModelCalls):
    """What Check model found about the document's model in this request already (the wizard
    asks it to size the draft), as the facts its defaults are filled from; None when not yet
    asked."""
    filled = FilledManifest(doc)
    if filled.uri is None or filled.profile_name is None:
        return None
    profile = Profile.objects.filter(organization=organization, name=filled.profile_name).first()
    answer = checks.known(filled.uri, profile, filled.format) if profile is not None else None
    return model_facts(answer) if answer is not None else None


def check_inputs(filled: FilledManifest) -> dict:
    """What Check model is asked besides the uri and the profile, from the manifest."""
    return {
        "context_tokens": filled.context_tokens,
        "concurrency": filled.concurrency or 1,
        "format": filled.format,
        "gpu_memory_utilization": filled.gpu_memory_utilization,
        # The local backend runs a replica on GPUs with vLLM, else on a CPU runtime.
        "wants_gpu": bool(filled.on_gpu),
        # On a CPU without bfloat16 instructions vLLM's `auto` holds the weights in float32.
        "dtype": filled.dtype,
    }


def _check_model(
    result, organization, checks: CheckModelCalls, uri: str | None = None
) -> CheckResult | None:
    """Check model for the manifest's artifact (or `uri`) on its profile, unless its inputs are
    wrong."""
    if result.manifest is None or any(
        p.path in CHECK_CONTAINERS or p.path.startswith(CHECK_INPUTS) for p in result.refusals
    ):
        return None
    filled = FilledManifest(result.manifest)
    if filled.source_type != "Model" or filled.uri is None:
        return None
    profile = Profile.objects.filter(organization=organization, name=filled.profile_name).first()
    if profile is None:
        return None
    return checks.ask(uri or filled.uri, profile, **check_inputs(filled))


def _on_target(run: DryRun, organization, server_side: bool) -> None:
    """Render for a Kubernetes profile, and ask the profile's backend whether it can run it
    (the server-side dry run on a cluster, when asked; vLLM and GPUs on this machine)."""
    spec = run.manifest["spec"]
    profile = Profile.objects.select_related("cluster").get(
        organization=organization, name=spec["profileName"]
    )
    run.target_backend = profile.cluster.backend
    if profile.cluster.backend == profile.cluster.Backend.KUBERNETES:
        try:
            run.objects = render_for_profile(run.manifest, profile)
        except RenderError as error:
            run.refusals.append(
                mf.Problem("spec", f"cannot be rendered for Kubernetes: {error}", origin="target")
            )
            return
        if not server_side:
            return
        run.server_side = True
    # The backend's answers are Problems of origin target that name their field themselves.
    preflight = backend_for(profile).preflight(run.manifest, run.objects)
    run.refusals += preflight.refusals
    run.warnings += preflight.warnings


def _add_check_problems(run: DryRun, checked: CheckResult) -> None:
    """Check model's verdict and warnings, each once, at the uri; and whether the GPUs the
    manifest reserves hold the model, by its sizing."""
    verdict = (
        checked.verdict if checked.verdict.endswith((".", "?", "!")) else checked.verdict + "."
    )
    said = f"{verdict} {checked.next_step}".strip()
    if checked.inconclusive:
        run.warnings.append(mf.Problem(URI, said, "warning", "check-model"))
    elif not checked.can_serve and not _context_refused(run, checked):
        run.refusals.append(mf.Problem(URI, said, "refusal", "check-model"))
    # Whether the uri is pinned is the manifest rule's decision (it warns at the uri): Check
    # model's own pin warning, which it marks, is not said a second time.
    run.warnings += [
        mf.Problem(URI, warning, "warning", "check-model")
        for warning in checked.warnings
        if warning != checked.pin_warning
    ]
    filled = run.filled
    if filled is not None:
        layout = layout_refusal(checked, filled.gpu_kind, filled.gpu_count, filled.nodes)
        if layout is not None:
            run.refusals.append(mf.Problem(layout.path, layout.message, origin="check-model"))


def _add_model_id_problems(run: DryRun, organization, manifest: dict) -> None:
    """A model id is the organisation's once, whatever Check model says: an adapter may not take
    another application's name or adapter's, nor this application another's adapter's."""
    filled = FilledManifest(manifest)
    others = Application.objects.filter(organization=organization).exclude(name=filled.name)
    rows = list(others.values_list("name", "manifest"))
    names = {name for name, _ in rows}
    adapters_of_others = set(model_ids(rows)) - names
    if filled.name in adapters_of_others:
        run.refusals.append(
            mf.Problem(
                "spec.name",
                f"{filled.name!r} is the name of another application's LoRA adapter, a model id "
                "clients already call; accepts a name no application or adapter has. Choose "
                "another name.",
                "refusal",
                "check-model",
            )
        )
    items = _adapter_items(run, manifest)
    taken = names | adapters_of_others
    for adapter in mf_adapters.read(items, filled.name, Out()):
        if adapter.name in taken:
            what = "an application" if adapter.name in names else "another application's adapter"
            run.refusals.append(
                mf.Problem(
                    f"{mf_adapters.PATH}[{adapter.index}].name",
                    f"{adapter.name!r} is the name of {what} of the organisation, a model id "
                    "clients already call; accepts a name no application or adapter has. Rename "
                    "the adapter.",
                    "refusal",
                    "check-model",
                )
            )


def _adapter_items(run: DryRun, manifest: dict) -> list:
    """The manifest's adapters, once its own rules passed them (else none)."""
    found = dig(manifest, "spec", "source", "model", "adapters")
    refused = any(p.path.startswith(mf_adapters.PATH) for p in run.refusals)
    return found if isinstance(found, list) and not refused else []


def _add_adapter_problems(run: DryRun, organization, manifest: dict, model_checked: bool) -> None:
    """Check model of each LoRA adapter (its adapter_config.json against the model), read with
    the profile's token and storage access. When the model's own check was not conclusive, the
    adapters are not read either, and a warning at the adapters says so."""
    filled = FilledManifest(manifest)
    items = _adapter_items(run, manifest)
    if not items:
        return
    if not model_checked:
        if run.refusals:  # refused anyway: the adapters are moot until the model is served
            return
        run.warnings.append(
            mf.Problem(
                mf_adapters.PATH,
                "the adapters' adapter_config.json were not read, as Check model could not say "
                "the model itself is served (see its findings): their base model, rank and "
                "target modules are unchecked. Run the dry run again once it can.",
                "warning",
                "check-model",
            )
        )
        return
    profile = Profile.objects.filter(organization=organization, name=filled.profile_name).first()
    if profile is None or filled.uri is None:
        return
    try:
        base = parse_uri(filled.uri)
    except UriError:
        return
    found = mf_adapters.read(items, filled.name, Out())
    storage = profile_credentials(profile, settings.SERVEDECK_MACHINE_CREDENTIALS)
    for path, sentence in check_adapters(
        found, base, hf_token=profile_token(profile), storage=storage or ANONYMOUS
    ):
        run.refusals.append(mf.Problem(path, sentence, "refusal", "check-model"))


def _add_access_problem(run: DryRun, organization, checked: CheckResult) -> None:
    """A private artifact on a Kubernetes profile that gives its cluster nothing to read it
    with is refused now, at the profile, naming the profile's fields to set: not minutes
    later, by a storage initializer that cannot download it."""
    spec = run.manifest["spec"]
    profile = Profile.objects.select_related("cluster").get(
        organization=organization, name=spec["profileName"]
    )
    if profile.cluster.backend != Cluster.Backend.KUBERNETES:
        return
    scheme = checked.uri.partition("://")[0]
    refusal = cluster_access_refusal(scheme, ClusterAccess.of(profile), profile.name)
    if refusal is not None:
        message = f"{checked.uri.partition('?')[0]}: {refusal}"
        run.refusals.append(mf.Problem("spec.profileName", message, "refusal", "check-model"))


def _add_download_cost(run: DryRun, organization) -> None:
    """A warning, at the uri, when the model's bucket is in another region than the cluster's
    nodes (jobs.download_cost): asked with the server-side dry run only (Review and Deploy),
    not at each step of the wizard."""
    filled = run.filled
    if filled is None or filled.uri is None:
        return
    profile = Profile.objects.select_related("cluster", "organization").get(
        organization=organization, name=filled.profile_name
    )
    cached = filled.model_get("cache", "enabled") is True
    said = download_cost_warning(filled.uri, profile, cache_enabled=cached)
    if said is not None:
        run.warnings.append(mf.Problem(URI, said, "warning", "target"))


def _context_refused(run: DryRun, checked: CheckResult) -> bool:
    """The context limit is the manifest rule's decision, at its field: Check model refusing
    for the same reason is not said again at the uri."""
    filled = run.filled
    asked = filled.context_tokens if filled is not None else None
    return mf.context_over_limit(asked, checked.max_context_tokens)


# ---- Check model on a profile ----
# The plain inputs models_catalog.check takes (the machine catalog, the Hugging Face token, the
# vLLM version, and on the local profile the organisation's GPU profiles) are built from the
# profile here, in jobs, so that models_catalog never reads a Profile.


def check_for_profile(
    uri: str,
    profile,
    *,
    context_tokens: int | None = None,
    concurrency: int = 1,
    format: str | None = None,
    gpu_memory_utilization: float | None = None,
    wants_gpu: bool | None = None,
    dtype: str | None = None,
) -> CheckResult:
    """Check model of `uri` on `profile`. `wants_gpu`: whether the manifest's replica asks for
    a GPU (resources.accelerator), which decides the local backend's server; None when there
    is no manifest yet. `dtype`: the manifest's engine.dtype."""
    if uri.startswith("file://") and profile.cluster.backend != "local":
        # A folder on the console's machine is the local profile's: Check model on another
        # profile does not read the console's disk for whoever asks.
        why, fix = file_on_kubernetes(uri, profile.name)
        return CheckResult(uri=uri, can_serve=False, verdict=f"uri: {why}", next_step=fix)
    # The local backend chooses the server on this machine (SERVEDECK_LOCAL_COMMAND, when set,
    # names one itself): Check model says which, and that it fits the free memory.
    local = profile.cluster.backend == "local" and configured_template() == DEFAULT_TEMPLATE
    storage = profile_credentials(profile, settings.SERVEDECK_MACHINE_CREDENTIALS)
    if storage is None and uri.startswith(("s3://", "gs://", "https://")):
        why = credentials_unusable(profile.name, profile.storage_credentials_ref)
        return CheckResult(uri=uri, can_serve=False, verdict=why, next_step="", about_storage=True)
    result = check_model(
        uri,
        on_this_machine=local,
        # This machine's memory as it is now: the CPU runtimes serve the model beside
        # whatever else runs here.
        free_memory=free_memory() if local else None,
        wants_gpu=wants_gpu,
        dtype=dtype if local else None,
        # Where a model this machine cannot serve would run: named in the refusal.
        gpu_profiles=kubernetes_catalogs(profile.organization_id) if local else None,
        catalog=profile.machine_catalog,
        vllm_version=profile.vllm_version,
        hf_token=profile_token(profile),
        context_tokens=context_tokens,
        concurrency=concurrency,
        format=format,
        gpu_memory_utilization=gpu_memory_utilization,
        storage=storage or ANONYMOUS,
    )
    if result.about_storage and profile.cluster.backend == Cluster.Backend.KUBERNETES:
        result.next_step += (
            f" The cluster reads it with the profile's {SERVICE_ACCOUNT_FIELD} or "
            f"{SECRET_FIELD}, which the console does not read."
        )
    if (
        not result.can_serve
        and profile.hf_token_ref.startswith("secret/")
        and "gated" in (result.verdict.lower())
    ):
        result.next_step += (
            f" The profile's token is the Kubernetes Secret {profile.hf_token_ref[7:]}, which "
            "the console does not read; give the profile an env/ token reference for Check model."
        )
    return result


def kubernetes_catalogs(organization_id: int) -> dict[str, list]:
    """The machine catalogs of the organisation's Kubernetes profiles, by profile name (Check
    model keeps those with an NVIDIA GPU kind that holds the model)."""
    profiles = Profile.objects.filter(
        organization_id=organization_id, cluster__backend=Cluster.Backend.KUBERNETES
    ).only("name", "machine_catalog")
    return {p.name: p.machine_catalog for p in profiles}
