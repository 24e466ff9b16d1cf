"""Forms for clusters and profiles; the pages and the `cluster`/`profile` commands share them."""

import yaml
from django import forms
from django.conf import settings

from console.form_fields import OrganizationScopedForm, load_yaml_field
from jobs import cluster_audit
from jobs.backends.kubernetes.kubeconfig import KubeconfigRefused, resolve_kubeconfig
from jobs.machine_catalog import is_default_catalog, newest_known_vllm_version
from jobs.manifest.problems import listing, show
from jobs.manifest.quantity import parse_quantity
from jobs.models import ADDONS, Cluster, Profile, dns_label
from jobs.storage_access import (
    PULL_SECRET_FIELD,
    SECRET_FIELD,
    SERVICE_ACCOUNT_FIELD,
    credentials_problem,
    object_name_problem,
)
from jobs.token_refs import allowed_variables, reference_problem
from jobs.usage.cost import PRICE_KEY, price_problem

MAX_EXTRA_NAMESPACES = 20
# A Kubernetes profile's references to its cluster's objects, by the names the API says.
PROFILE_CLUSTER_ACCESS = {
    "storage_service_account": SERVICE_ACCOUNT_FIELD,
    "storage_secret": SECRET_FIELD,
    "image_pull_secret": PULL_SECRET_FIELD,
}
CATALOG_KEYS = {
    "name", "vendor", "gpuMemory", "gpusPerNode", "nodes", "nodeCpu", "nodeMemory", "nodeLabels",
    PRICE_KEY,
}  # fmt: skip


def _yaml_field(label, help_text):
    return forms.CharField(
        label=label,
        required=False,
        help_text=help_text,
        widget=forms.Textarea(attrs={"rows": 12, "class": "code", "spellcheck": "false"}),
    )


# What only a Kubernetes cluster has: the page shows these only for one (console.js), and a
# local cluster's page ignores what they hold (a local cluster has no kubeconfig or add-ons).
KUBERNETES_ONLY = (
    "kubeconfig_path",
    "context",
    "in_cluster",
    "addons",
    "queues",
    "cache_node_groups",
)


class AuditedForm(OrganizationScopedForm):
    """A cluster's or profile's form whose save `actor` makes is in the audit log (which
    settings changed: cluster_audit), from a page or the command line alike."""

    def __init__(self, *args, actor=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.actor = actor
        # Before any data is bound to it: validation writes into the instance.
        self.before = cluster_audit.snapshot(self.instance) if self.instance.pk else None

    def save(self, commit=True):
        saved = super().save(commit)
        if commit:
            cluster_audit.record_saved(saved, self.before, self.actor)
        return saved


class ClusterForm(AuditedForm):
    addons = forms.MultipleChoiceField(
        label="Add-ons",
        choices=list(ADDONS.items()),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="What the cluster has installed; manifest rules that need an add-on check this.",
    )
    queues = forms.CharField(
        required=False, help_text="ClusterQueues Kueue declares, separated by commas."
    )
    cache_node_groups = _yaml_field(
        "Cached node groups", "One line per node group that caches weights: `gpu-a: 500Gi`."
    )

    class Meta:
        model = Cluster
        fields = ["name", "backend", "kubeconfig_path", "context", "in_cluster", "addons"]

    def __init__(self, *args, trusted: bool = False, **kwargs):
        """`trusted`: an operator on the console's host (the command line), not a web page."""
        super().__init__(*args, **kwargs)
        self.trusted = trusted
        for name in KUBERNETES_ONLY:
            self.fields[name].shown_when = "backend:kubernetes"
        if self.is_bound and not trusted and self.data.get("backend") == Cluster.Backend.LOCAL:
            # Hidden on the page for a local cluster: whatever they still hold is not read.
            # (The command line, `trusted`, is told instead: an operator typed them.)
            data = self.data.copy()
            for name in KUBERNETES_ONLY:
                data.pop(name, None)
            self.data = data
        if self.instance.pk and not self.is_bound:
            self.initial["queues"] = ", ".join(self.instance.queues)
            self.initial["cache_node_groups"] = yaml.safe_dump(self.instance.cache_node_groups)

    def clean_kubeconfig_path(self):
        path = self.cleaned_data["kubeconfig_path"].strip()
        if not path or self.cleaned_data.get("backend") == Cluster.Backend.LOCAL:
            return path  # (a local cluster with a path is refused as a whole, in clean)
        # The operator's command line too: the client set-up applies the same rule.
        try:
            return resolve_kubeconfig(path, settings.SERVEDECK_KUBECONFIG_DIR)
        except KubeconfigRefused as refused:
            raise forms.ValidationError(str(refused)) from None

    def clean_in_cluster(self):
        in_cluster = self.cleaned_data["in_cluster"]
        if in_cluster and not self.trusted and not settings.SERVEDECK_ALLOW_IN_CLUSTER:
            raise forms.ValidationError(
                "The console's own service account is for operators: set "
                "SERVEDECK_ALLOW_IN_CLUSTER=true, or use `manage.py cluster add --in-cluster`."
            )
        return in_cluster

    def clean_queues(self):
        return [q.strip() for q in self.cleaned_data["queues"].split(",") if q.strip()]

    def clean_cache_node_groups(self):
        groups = load_yaml_field(self.cleaned_data["cache_node_groups"], "Cached node groups", dict)
        sizes = {}
        for name, size in groups.items():
            try:
                sizes[str(name)] = int(parse_quantity(str(size)))
            except ValueError as error:
                raise forms.ValidationError(f"Node group {str(name)[:60]}: {error}") from None
        return sizes

    def clean(self):
        data = super().clean()
        backend = data.get("backend")
        path, in_cluster = data.get("kubeconfig_path"), data.get("in_cluster")
        if backend == Cluster.Backend.KUBERNETES and bool(path) == bool(in_cluster):
            raise forms.ValidationError(
                "A Kubernetes cluster is reached either from a kubeconfig file or in-cluster: "
                "give a kubeconfig path, or tick in-cluster, not both."
            )
        if backend == Cluster.Backend.LOCAL and (path or in_cluster or data.get("context")):
            raise forms.ValidationError(
                "The local backend runs on this machine: leave kubeconfig, context and "
                "in-cluster empty, or choose the Kubernetes backend."
            )
        return data

    def save(self, commit=True):
        self.instance.queues = self.cleaned_data["queues"]
        self.instance.cache_node_groups = self.cleaned_data["cache_node_groups"]
        return super().save(commit)


def validate_catalog(catalog: list) -> list:
    """The machine catalog as given, or a ValidationError naming the entry and key at fault."""
    errors, seen = [], set()
    for index, kind in enumerate(catalog):
        where = f"entry {index + 1}"
        if not isinstance(kind, dict) or not isinstance(kind.get("name"), str):
            errors.append(f"{where}: each GPU kind is a mapping with a name.")
            continue
        where = kind["name"][:60]
        if kind["name"] in seen:
            errors.append(f"{where}: listed twice; keep one.")
        seen.add(kind["name"])
        unknown = set(kind) - CATALOG_KEYS
        if unknown:
            errors.append(
                f"{where}: unknown keys {listing(show(k) for k in unknown)}; accepted "
                f"{sorted(CATALOG_KEYS)}."
            )
        for key in ("gpuMemory", "nodeCpu", "nodeMemory"):
            try:
                if key in kind:
                    parse_quantity(str(kind[key]))
            except ValueError as error:
                errors.append(f"{where}.{key}: {error}")
        per_node = kind.get("gpusPerNode", 1)
        if not isinstance(per_node, int) or isinstance(per_node, bool) or not 0 <= per_node <= 64:
            errors.append(
                f"{where}.gpusPerNode: {show(per_node)} is not a whole number from 0 to 64 "
                "(0 for a machine without GPUs)."
            )
        elif per_node == 0 and "gpuMemory" in kind:
            errors.append(
                f"{where}.gpuMemory: set on a machine without GPUs (gpusPerNode 0); remove it, "
                "or set gpusPerNode to its GPUs."
            )
        elif per_node and "gpuMemory" not in kind:
            errors.append(f"{where}: gpuMemory is required, for example 24Gi.")
        nodes = kind.get("nodes", 1)
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            errors.append(
                f"{where}.nodes: {show(nodes)} is not a whole number of nodes, 1 or more "
                "(leave it out when a replica may span as many as it needs)."
            )
        if kind.get("vendor", "nvidia") not in ("nvidia", "amd"):
            errors.append(f"{where}.vendor: {show(kind['vendor'])}; accepted nvidia, amd.")
        if PRICE_KEY in kind and (problem := price_problem(kind[PRICE_KEY])):
            errors.append(f"{where}.{PRICE_KEY}: {problem}")
        if not isinstance(kind.get("nodeLabels", {}), dict):
            errors.append(f"{where}.nodeLabels: must be a mapping of label to value.")
    if errors:
        raise forms.ValidationError(errors)
    return catalog


class ProfileForm(AuditedForm):
    machine_catalog_yaml = _yaml_field(
        "Machine catalog",
        "The machines this profile offers, as YAML: GPU kinds with name, gpuMemory, gpusPerNode, "
        "nodeCpu, nodeMemory, nodeLabels; a machine without GPUs has gpusPerNode 0 and no "
        "gpuMemory. hourlyPrice (optional) is what one GPU (or, without GPUs, one CPU core) "
        "costs an hour: the model pages' Cost is worked out from it.",
    )
    defaults_yaml = _yaml_field("Defaults", "Defaults for applications on this profile, as YAML.")
    extra_namespaces_text = forms.CharField(
        label="Other namespaces",
        required=False,
        max_length=2000,
        help_text="Namespaces besides the profile's own that a manifest's spec.namespace may "
        "name, separated by commas. Organisations may share a cluster: allow only your own.",
    )

    class Meta:
        model = Profile
        fields = [
            "name", "cluster", "namespace", "hf_token_ref", "storage_credentials_ref",
            "storage_service_account", "storage_secret", "image_pull_secret", "vllm_version",
        ]  # fmt: skip

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["cluster"].queryset = Cluster.objects.filter(organization=self.organization)
        vllm = self.fields["vllm_version"]
        vllm.label = "vLLM version"  # as written: the model field's label is capitalised "VLLM"
        vllm.required = False
        vllm.help_text = (
            "The vLLM its runtime image carries. Leave empty to read it from the cluster's vLLM "
            "serving runtime image, or where that cannot be read, "
            f"{newest_known_vllm_version()} (the newest version ServeDeck knows)."
        )
        if not self.is_bound:
            if self.instance.pk is None:
                self.initial["vllm_version"] = ""
            self.initial["machine_catalog_yaml"] = yaml.safe_dump(
                self.instance.machine_catalog, sort_keys=False
            )
            self.initial["defaults_yaml"] = yaml.safe_dump(self.instance.defaults or {})
            self.initial["extra_namespaces_text"] = ", ".join(self.instance.extra_namespaces or [])

    def clean(self):
        cleaned = super().clean()
        # Left empty: what the cluster's serving runtime runs, else the newest version known.
        if not (cleaned.get("vllm_version") or "").strip():
            from jobs.backends.kubernetes.backend import (
                discovered_vllm_version,  # the client loads lazily
            )

            cluster, namespace = cleaned.get("cluster"), cleaned.get("namespace")
            found = discovered_vllm_version(cluster, namespace) if cluster and namespace else None
            cleaned["vllm_version"] = found or newest_known_vllm_version()
            self.instance.vllm_version = cleaned["vllm_version"]
        cluster = cleaned.get("cluster")
        if (
            cluster is not None
            and cluster.backend == Cluster.Backend.LOCAL
            and is_default_catalog(cleaned.get("machine_catalog_yaml"))
        ):
            # The shipped default is a cluster's GPU kinds, never this machine's: a local
            # profile left with it gets the machine as it is.
            from jobs.backends.local.machine_check import discovered_catalog

            cleaned["machine_catalog_yaml"] = discovered_catalog()[0]
        if cluster is not None and cluster.backend == Cluster.Backend.LOCAL:
            for name, label in PROFILE_CLUSTER_ACCESS.items():
                if cleaned.get(name):
                    self.add_error(
                        name,
                        f"{label}: a local profile runs on this machine, where no Kubernetes "
                        "object is read; leave it empty, and give storageCredentials instead.",
                    )
        return cleaned

    def _object_name(self, name: str) -> str:
        value = self.cleaned_data[name].strip()
        problem = object_name_problem(value, PROFILE_CLUSTER_ACCESS[name])
        if problem:
            raise forms.ValidationError(problem)
        return value

    def clean_storage_service_account(self):
        return self._object_name("storage_service_account")

    def clean_storage_secret(self):
        return self._object_name("storage_secret")

    def clean_image_pull_secret(self):
        return self._object_name("image_pull_secret")

    def clean_storage_credentials_ref(self):
        # Read again where it is used (Check model, the local backend's downloads): taking a
        # variable or the machine's chain back takes effect there at once.
        ref = self.cleaned_data["storage_credentials_ref"].strip()
        org = self.organization
        problem = credentials_problem(
            ref, org.token_variables or [], org.slug, settings.SERVEDECK_MACHINE_CREDENTIALS
        )
        if problem:
            raise forms.ValidationError(problem)
        return ref

    def clean_hf_token_ref(self):
        # env/ may name only variables the operator allowed for this organisation: the value
        # is sent to the Hub and to model servers as a token.
        ref = self.cleaned_data["hf_token_ref"].strip()
        org = self.organization
        problem = reference_problem(ref, allowed_variables(org.token_variables), org.slug)
        if problem:
            raise forms.ValidationError(problem)
        return ref

    def clean_extra_namespaces_text(self):
        names = [n.strip() for n in self.cleaned_data["extra_namespaces_text"].split(",")]
        names = list(dict.fromkeys(n for n in names if n))
        if len(names) > MAX_EXTRA_NAMESPACES:
            raise forms.ValidationError(
                f"{len(names)} namespaces; accepts at most {MAX_EXTRA_NAMESPACES}."
            )
        for name in names:
            try:
                dns_label(name)
            except forms.ValidationError:
                shown = name if len(name) <= 70 else name[:70] + "…"
                raise forms.ValidationError(
                    f"{shown!r} is not a namespace name: use a DNS label, 1-63 lowercase "
                    "letters, digits and '-', starting and ending with a letter or digit."
                ) from None
        return names

    def clean_machine_catalog_yaml(self):
        catalog = load_yaml_field(
            self.cleaned_data["machine_catalog_yaml"], "Machine catalog", list
        )
        return validate_catalog(catalog)

    def clean_defaults_yaml(self):
        return load_yaml_field(self.cleaned_data["defaults_yaml"], "Defaults", dict)

    def save(self, commit=True):
        self.instance.machine_catalog = self.cleaned_data["machine_catalog_yaml"]
        self.instance.defaults = self.cleaned_data["defaults_yaml"]
        self.instance.extra_namespaces = self.cleaned_data["extra_namespaces_text"]
        return super().save(commit)
