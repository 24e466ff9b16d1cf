"""What is served: clusters, profiles, applications, revisions (deploy history), rollouts,
wakes, events and the wizard's drafts."""

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from accesspolicies.models import Organization
from accesspolicies.scope import MemberQuerySet
from jobs.machine_catalog import default_machine_catalog, newest_known_vllm_version
from jobs.manifest.view import FilledManifest, dig
from jobs.status.phases import Phase

dns_label = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Use a DNS label: 1-63 lowercase letters, digits and '-', starting and ending with a "
    "letter or digit.",
)

# The cluster add-ons that manifest rules depend on, in the words the add-on docs use.
ADDONS = {
    "kserve": "Model serving (KServe)",
    "keda": "Workload autoscaling (KEDA)",
    "kueue": "Workload queueing (Kueue)",
    "gatewayApi": "Gateway API",
    "certManager": "Certificates (cert-manager)",
    "localModelCache": "Weight cache (KServe LocalModelCache)",
    "kubevirt": "Virtual machines (KubeVirt)",
}


class ClusterQuerySet(MemberQuerySet):
    what = "clusters"


class ProfileQuerySet(MemberQuerySet):
    what = "profiles"
    related = ("cluster",)


class ApplicationQuerySet(MemberQuerySet):
    what = "applications"
    related = ("profile__cluster", "organization")  # the local backend keys by its slug


class DraftQuerySet(MemberQuerySet):
    """A draft is its author's alone, and an application not deployed yet: deployers' business
    (another member's draft is not found)."""

    what = "applications"
    lookup_field = "key"
    view_action = "deploy"
    related = ("application__profile",)

    def scoped(self, membership) -> MemberQuerySet:
        return self.filter(organization=membership.organization, author=membership.user)

    def not_found(self, membership, shown: str) -> str:
        return f"You have no draft {shown} in {membership.organization}."


class Cluster(models.Model):
    class Backend(models.TextChoices):
        LOCAL = "local", "Local (processes on this machine)"
        KUBERNETES = "kubernetes", "Kubernetes"

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="clusters"
    )
    name = models.CharField(max_length=63, validators=[dns_label])
    backend = models.CharField(max_length=16, choices=Backend.choices, default=Backend.LOCAL)
    kubeconfig_path = models.CharField(
        max_length=500, blank=True, help_text="Path of a kubeconfig file on the console's host."
    )
    context = models.CharField(max_length=200, blank=True, help_text="kubeconfig context to use.")
    in_cluster = models.BooleanField(
        default=False, help_text="Use the service account of the pod the console runs in."
    )
    addons = models.JSONField(default=list, blank=True)
    queues = models.JSONField(default=list, blank=True)
    cache_node_groups = models.JSONField(default=dict, blank=True)
    # The device names KubeVirt's CR permits to pass through (permittedHostDevices), as
    # discovered; a VirtualMachine application's GPUs must be among them. None: unknown (not
    # discovered, or the CR could not be read), which the dry run does not take for "none".
    kubevirt_devices = models.JSONField(null=True, blank=True, default=None)
    created_at = models.DateTimeField(default=timezone.now)
    # Why the reconciler cannot follow the cluster (a refused watch names the rule to grant);
    # empty while it follows it.
    watch_error = models.TextField(blank=True, default="")
    watch_error_at = models.DateTimeField(null=True, blank=True)

    objects = ClusterQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="cluster_name_per_org")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def connection(self) -> str:
        if self.backend == self.Backend.LOCAL:
            return "this machine"
        if self.in_cluster:
            return "in-cluster service account"
        context = f" (context {self.context})" if self.context else ""
        return f"{self.kubeconfig_path}{context}"


class Profile(models.Model):
    """What `profileName` names: a cluster, a namespace, a machine catalog and defaults."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="profiles"
    )
    name = models.CharField(max_length=63, validators=[dns_label])
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="profiles")
    namespace = models.CharField(max_length=63, default="default", validators=[dns_label])
    # Further namespaces a manifest's spec.namespace may name; by default only `namespace`.
    extra_namespaces = models.JSONField(default=list, blank=True)
    machine_catalog = models.JSONField(default=default_machine_catalog)
    hf_token_ref = models.CharField(
        "Hugging Face token",
        max_length=200,
        blank=True,
        help_text="Where the token lives, never the token: secret/<name> (a Secret in the "
        "profile's namespace, key HF_TOKEN) or env/<VARIABLE> (on the console's host).",
    )
    # Private artifacts, by reference only (jobs/storage_access.py): the cluster's objects
    # KServe reads them with, and what the console itself reads them with.
    storage_service_account = models.CharField(
        "Storage service account",
        max_length=253,
        blank=True,
        help_text="A ServiceAccount in the profile's namespace that the predictor runs as: its "
        "secrets (KServe's storage Secret) or its cloud role read s3://, gs:// and Azure Blob.",
    )
    storage_secret = models.CharField(
        "Storage secret",
        max_length=253,
        blank=True,
        help_text="The name of KServe's storage Secret in the profile's namespace (its "
        "serving.kserve.io/s3-* annotations and keys), never its contents.",
    )
    image_pull_secret = models.CharField(
        "Image pull secret",
        max_length=253,
        blank=True,
        help_text="The name of a Secret in the profile's namespace that pulls oci:// model "
        "images (modelcars) from a private registry.",
    )
    storage_credentials_ref = models.CharField(
        "Storage credentials",
        max_length=100,
        blank=True,
        help_text="What the console reads private buckets with (Check model; the local "
        "backend's downloads), never a key: env/<PREFIX> (<PREFIX>_ACCESS_KEY_ID and "
        "<PREFIX>_SECRET_ACCESS_KEY on the console's host, allowed by the operator) or machine "
        "(this machine's own credentials chain, where the operator allows it).",
    )
    vllm_version = models.CharField(
        "vLLM version",
        max_length=20,
        default=newest_known_vllm_version,
        help_text="The vLLM its runtime image carries (read from the cluster's serving runtime "
        "image where it can be, else the newest version ServeDeck knows).",
    )
    defaults = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ProfileQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="profile_name_per_org")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def facts(self):
        """The plain data the manifest rules need about this profile and its cluster."""
        from jobs.manifest.context import ProfileFacts

        cluster = self.cluster
        return ProfileFacts(
            name=self.name,
            namespace=self.namespace,
            backend=cluster.backend,
            machine_catalog=tuple(self.machine_catalog),
            addons=frozenset(cluster.addons),
            queues=tuple(cluster.queues),
            cache_node_groups=dict(cluster.cache_node_groups),
            vllm_version=self.vllm_version,
            extra_namespaces=tuple(
                n for n in (self.extra_namespaces or []) if isinstance(n, str) and n
            ),
            kubevirt_devices=(
                None if cluster.kubevirt_devices is None else tuple(cluster.kubevirt_devices)
            ),
        )


class Application(models.Model):
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="applications"
    )
    name = models.CharField(max_length=63, validators=[dns_label])
    profile = models.ForeignKey(Profile, on_delete=models.PROTECT, related_name="applications")
    manifest = models.JSONField(help_text="The filled-in manifest of the current revision.")
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.PENDING)
    reason = models.TextField(blank=True)
    next_step = models.TextField(blank=True)
    endpoint = models.CharField(max_length=500, blank=True)
    # The model server the backend runs it with, as the backend recorded it (the local
    # backend: vllm, transformers, infinity, faster-whisper); empty where the backend does not
    # say, and then the manifest's runtime.engine holds. The gateway speaks its dialect.
    runtime = models.CharField(max_length=32, blank=True)
    ready_replicas = models.PositiveIntegerField(default=0)
    desired_replicas = models.PositiveIntegerField(default=0)
    # The base URL of each ready replica (local: its loopback port; Kubernetes: the
    # predictor's ready endpoints from its EndpointSlices), which the gateway routes across.
    replica_endpoints = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    deployed_at = models.DateTimeField(null=True, blank=True)
    served_at = models.DateTimeField(
        null=True, blank=True, help_text="When it first reached Running; fixes some fields."
    )
    # Scale to zero (minReplicas 0): the latest request through the gateway, written by the
    # meter's flush (at most once a second, never per request), which the reconciler puts to
    # sleep by; and the first request's claim to wake it, set by one gateway process only.
    last_request_at = models.DateTimeField(null=True, blank=True)
    wake_requested_at = models.DateTimeField(null=True, blank=True)

    objects = ApplicationQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "name"], name="application_name_per_org"
            )
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def serving_runtime(self) -> str:
        """The model server it runs with: as the backend recorded it, else the manifest's
        runtime.engine (what the gateway's dialect and the metrics scrape go by)."""
        engine = dig(self.manifest, "spec", "source", "model", "runtime", "engine")
        return self.runtime or (engine if isinstance(engine, str) else "")

    @property
    def model_uri(self) -> str:
        model = self.manifest["spec"]["source"].get("model") or {}
        return model.get("uri", "InferenceService (YAML)")


class Wake(models.Model):
    """One wake of a sleeping application: when the first request asked, when it was Running
    (null until then). The model page's wake count and times, the gateway's Retry-After."""

    application = models.ForeignKey(Application, on_delete=models.CASCADE, related_name="wakes")
    requested_at = models.DateTimeField(default=timezone.now)
    ready_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at"]

    def __str__(self) -> str:
        return f"{self.application} woken at {self.requested_at:%Y-%m-%d %H:%M:%S}"

    @property
    def seconds(self) -> float | None:
        if self.ready_at is None:
            return None
        return (self.ready_at - self.requested_at).total_seconds()


class Revision(models.Model):
    """One saved change of an application: its deploy history."""

    class Outcome(models.TextChoices):
        APPLIED = "Applied"
        WAITING = "Waiting for Deploy"
        PENDING = "Pending"
        FAILED = "Failed"

    application = models.ForeignKey(Application, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    manifest = models.JSONField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    outcome = models.CharField(max_length=32, choices=Outcome.choices, default=Outcome.PENDING)
    message = models.TextField(blank=True)
    rolled_back_from = models.PositiveIntegerField(null=True, blank=True)
    # What a Canary rollout made of it (jobs/rollouts): empty for a revision that replaced the
    # one before at once.
    release = models.CharField(max_length=16, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["application", "number"], name="revision_number_per_app"
            )
        ]
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"{self.application.name} revision {self.number}"


class Rollout(models.Model):
    """A Canary rollout: the canary revision serving a share of the requests beside the stable
    one, step by step, until it is promoted (the stable one stops) or rolled back (the canary
    stops). Everything the reconciler and the gateway need is here, never in a process's
    memory: a restarted gateway keeps the split, a restarted reconciler the judge's state."""

    class State(models.TextChoices):
        STARTING = "Starting"  # the canary's replicas are starting; no share yet
        PROGRESSING = "Progressing"  # serving steps[step] percent, judged at the step's end
        PROMOTING = "Promoting"  # the canary takes every request while the stable one becomes it
        PROMOTED = "Promoted"
        ROLLED_BACK = "RolledBack"  # by the judge, or a canary that failed to start
        ABORTED = "Aborted"  # by hand

    ACTIVE = (State.STARTING, State.PROGRESSING, State.PROMOTING)

    application = models.ForeignKey(Application, on_delete=models.CASCADE, related_name="rollouts")
    stable_revision = models.PositiveIntegerField()
    canary_revision = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.STARTING)
    # The plan it runs by (jobs.manifest.rollout.RolloutPlan.as_dict), fixed at its start.
    plan = models.JSONField(default=dict)
    step = models.PositiveIntegerField(default=0)  # index into plan["steps"]
    weight = models.PositiveIntegerField(default=0)  # percent of requests to the canary now
    step_started_at = models.DateTimeField(null=True, blank=True)
    canary_phase = models.CharField(max_length=16, blank=True, default="")
    canary_reason = models.TextField(blank=True, default="")
    # The canary's ready replicas' base URLs, which the gateway splits to.
    canary_endpoints = models.JSONField(default=list, blank=True)
    # Each decision: {"at", "step", "weight", "decision", "by", "reason", "figures"}.
    decisions = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Promoting: the stable replicas are being replaced by the canary's revision (once the
    # gateway processes sent every request to the canary for a moment).
    stable_replaced = models.BooleanField(default=False)
    # The canary's processes are gone (after the gateway stopped sending it requests).
    canary_removed = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["application"],
                condition=models.Q(state__in=["Starting", "Progressing", "Promoting"]),
                name="one_active_rollout_per_application",
            )
        ]

    def __str__(self) -> str:
        return (
            f"{self.application.name}: revision {self.canary_revision} over "
            f"{self.stable_revision} ({self.state})"
        )

    @property
    def active(self) -> bool:
        return self.state in self.ACTIVE


class Event(models.Model):
    class Kind(models.TextChoices):
        NORMAL = "Normal"
        WARNING = "Warning"

    application = models.ForeignKey(Application, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.NORMAL)
    reason = models.CharField(max_length=64)
    message = models.TextField()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.application.name}: {self.reason}"


def new_draft_key() -> str:
    """A draft's public id in URLs: random, never the primary key."""
    import secrets

    return secrets.token_urlsafe(9)


class Draft(models.Model):
    """A deploy wizard's manifest in progress, private to its author in one organisation.

    The manifest is the only state: each wizard step edits it, and the step a draft resumes at
    is worked out from it. `application` is set when the draft changes a deployed model.
    """

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="drafts")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="deploy_drafts"
    )
    key = models.CharField(max_length=16, unique=True, default=new_draft_key, editable=False)
    application = models.ForeignKey(
        Application, null=True, blank=True, on_delete=models.CASCADE, related_name="drafts"
    )
    manifest = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = DraftQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["author", "application"],
                condition=models.Q(application__isnull=False),
                name="one_edit_draft_per_author_and_application",
            )
        ]

    def __str__(self) -> str:
        return f"draft {self.key} of {self.author}"

    @property
    def name(self) -> str:
        """The application name written so far ("" when none yet)."""
        return FilledManifest(self.manifest).name or ""

    @property
    def model_uri(self) -> str:
        return FilledManifest(self.manifest).uri or ""
