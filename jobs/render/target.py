"""What rendering needs beyond the manifest: the cluster facts of the profile, as frozen data.

`RenderTarget.from_profile` is the one place that reads a Profile; everything after it is pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobs.machine_catalog import gpu_kind_named, newest_known_vllm_version

DEFAULT_NAMESPACE = "default"
# Karpenter's well-known label; EKS managed node groups use eks.amazonaws.com/capacityType and
# GKE cloud.google.com/gke-spot, so a profile can name its own (profile.defaults).
DEFAULT_CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
DEFAULT_GATEWAY_NAME = "servedeck-gateway"
DEFAULT_GATEWAY_NAMESPACE = "servedeck"
# ServeDeck's own gateway (the `/v1` ASGI application) as a Service: Domain exposure routes
# there, not to the predictor, so keys and access policies apply to every request.
DEFAULT_GATEWAY_SERVICE = "servedeck/servedeck-gateway:8000"
# prometheus-operator's Service for every Prometheus it runs; KEDA reads vLLM's queue there.
DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
PARAKEET_IMAGE_REPOSITORY = "ghcr.io/servedeck/parakeet-server"
PARAKEET_VERSION = "0.1.0"
PARAKEET_IMAGE = f"{PARAKEET_IMAGE_REPOSITORY}:{PARAKEET_VERSION}"

# The container disks a KubeVirt virtual machine boots: a guest image with the runtime
# installed (vLLM with Ray and huggingface_hub; or the parakeet server), python3 and the NVIDIA
# driver. The vLLM one is tagged with the profile's vLLM version.
VLLM_VM_IMAGE_REPOSITORY = "ghcr.io/servedeck/vllm-vm"
PARAKEET_VM_IMAGE = f"ghcr.io/servedeck/parakeet-vm:{PARAKEET_VERSION}"

SECRET_PREFIX = "secret/"

# The keys of Profile.defaults that tune rendering, and the RenderTarget field each sets.
PROFILE_DEFAULT_KEYS = {
    "capacityTypeLabel": "capacity_type_label",
    "gatewayName": "gateway_name",
    "gatewayNamespace": "gateway_namespace",
    "prometheusUrl": "prometheus_url",
    "parakeetImage": "parakeet_image",
    "vmImage": "vm_image",
    "parakeetVmImage": "parakeet_vm_image",
    "weightsStorageClass": "weights_storage_class",
}


@dataclass(frozen=True)
class RenderTarget:
    """The cluster a manifest is rendered for."""

    namespace: str = DEFAULT_NAMESPACE
    # Entries like {"name": "l4", "vendor": "nvidia", "nodeLabels": {...}, ...}:
    # jobs/machine_catalog.py.
    machine_catalog: tuple[Mapping[str, Any], ...] = ()
    addons: frozenset[str] = frozenset()
    # "secret/<name>": a Secret in the namespace with key HF_TOKEN. "env/<VAR>" lives on the
    # console's host and "" means none: neither gives the cluster anything to reference.
    hf_token_ref: str = ""
    # Private artifacts (jobs/storage_access.py): names of the cluster's objects, never their
    # contents. The predictor runs as the ServiceAccount (its secrets, or its cloud role, read
    # s3://, gs:// and Azure Blob); the storage Secret is KServe's (its s3-* annotations and
    # keys); the pull Secret pulls an oci:// model image (a modelcar).
    storage_service_account: str = ""
    storage_secret: str = ""
    image_pull_secret: str = ""
    capacity_type_label: str = DEFAULT_CAPACITY_TYPE_LABEL
    gateway_name: str = DEFAULT_GATEWAY_NAME
    gateway_namespace: str = DEFAULT_GATEWAY_NAMESPACE
    prometheus_url: str = DEFAULT_PROMETHEUS_URL
    parakeet_image: str = PARAKEET_IMAGE
    gateway_service: str = DEFAULT_GATEWAY_SERVICE  # namespace/name:port
    # The organisation's slug and name, written on every object; "" renders without them
    # (a preview outside any organisation), which the Kubernetes backend will not apply.
    organization: str = ""
    organization_name: str = ""
    # KubeVirt: the container disk images (empty: the defaults above), the storage class of the
    # weight volumes (empty: the cluster's default), the profile's vLLM version for the tag.
    vm_image: str = ""
    parakeet_vm_image: str = PARAKEET_VM_IMAGE
    weights_storage_class: str = ""
    vllm_version: str = ""
    # The namespaces whose pods may call a virtual machine's serving port (the gateway's);
    # ("*",): any source.
    vm_caller_namespaces: tuple[str, ...] = (DEFAULT_GATEWAY_SERVICE.partition("/")[0],)

    @classmethod
    def from_profile(cls, profile: Any) -> RenderTarget:
        """Read a jobs.models.Profile (its cluster's add-ons, its organisation); no database
        query beyond the profile's cluster and organisation."""
        defaults = profile.defaults if isinstance(profile.defaults, Mapping) else {}
        overrides = {
            field: defaults[key].strip()
            for key, field in PROFILE_DEFAULT_KEYS.items()
            if isinstance(defaults.get(key), str) and defaults[key].strip()
        }
        catalog = profile.machine_catalog or ()
        cluster = profile.cluster
        from django.conf import settings

        callers = getattr(settings, "SERVEDECK_VM_CALLER_NAMESPACES", None)
        return cls(
            gateway_service=getattr(settings, "SERVEDECK_GATEWAY_SERVICE", DEFAULT_GATEWAY_SERVICE),
            vm_caller_namespaces=tuple(callers or cls.vm_caller_namespaces),
            namespace=profile.namespace or DEFAULT_NAMESPACE,
            machine_catalog=tuple(k for k in catalog if isinstance(k, Mapping)),
            addons=frozenset(cluster.addons or ()),
            hf_token_ref=profile.hf_token_ref or "",
            storage_service_account=getattr(profile, "storage_service_account", "") or "",
            storage_secret=getattr(profile, "storage_secret", "") or "",
            image_pull_secret=getattr(profile, "image_pull_secret", "") or "",
            organization=profile.organization.slug,
            organization_name=profile.organization.name,
            vllm_version=getattr(profile, "vllm_version", "") or "",
            **overrides,
        )

    @property
    def hf_secret_name(self) -> str | None:
        """The Secret holding HF_TOKEN, when the token lives on the cluster."""
        ref = self.hf_token_ref.strip()
        if ref.startswith(SECRET_PREFIX):
            return ref[len(SECRET_PREFIX) :].strip() or None
        return None

    @property
    def vllm_vm_image(self) -> str:
        """The vLLM container disk: the profile's own, else the default for its vLLM version."""
        if self.vm_image:
            return self.vm_image
        return f"{VLLM_VM_IMAGE_REPOSITORY}:v{self.vllm_version or newest_known_vllm_version()}"

    def gpu_kind(self, name: Any) -> Mapping[str, Any] | None:
        """The machine catalog entry of a GPU model, or None (any GPU, or not in the catalog)."""
        return gpu_kind_named(self.machine_catalog, name)


def service_ref(text: str) -> tuple[str, str, int]:
    """`namespace/name:port` as (namespace, name, port); ValueError says what is accepted."""
    namespace, _, rest = text.strip().partition("/")
    name, _, port = rest.partition(":")
    if not (namespace and name and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(
            f"{text[:80]!r} is not a Service reference; accepts namespace/name:port, "
            f"e.g. {DEFAULT_GATEWAY_SERVICE}"
        )
    return namespace, name, int(port)
