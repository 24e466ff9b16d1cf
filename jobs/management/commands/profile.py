"""`manage.py profile add|edit|discover|list`: deployment profiles from scripts, through the
page's form."""

from django.core.management.base import CommandError

from accesspolicies import audit
from accesspolicies.cli import ServeDeckCommand, acting_membership, add_verb
from jobs import cluster_audit
from jobs.backends.local.machine_check import discovered_catalog
from jobs.forms import ProfileForm
from jobs.machine_catalog import default_machine_catalog, describe_catalog
from jobs.management.commands._setup import catalog_yaml, save_form, write_table
from jobs.models import Cluster, Profile


class Command(ServeDeckCommand):
    help = "Add or list profiles: a cluster, a namespace, a machine catalog and defaults."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
        add = add_verb(sub, "add", help="add a profile")
        add.add_argument("name")
        add.add_argument("--cluster", required=True, help="the cluster it deploys to")
        add.add_argument("--namespace", default="default")
        add.add_argument(
            "--hf-token",
            default="",
            metavar="REF",
            help="secret/<name> or env/<VARIABLE>: where the Hugging Face token is",
        )
        add.add_argument(
            "--vllm-version",
            default="",
            help="default: read from the cluster's vLLM serving runtime image, else the newest "
            "version ServeDeck knows",
        )
        _namespace_allowed(add)
        _storage_access(add, "")
        edit = add_verb(
            sub, "edit", help="change a profile's token, storage access or allowed namespaces"
        )
        edit.add_argument("name")
        edit.add_argument("--hf-token", metavar="REF", help="as for add; '' removes it")
        _storage_access(edit, None)
        _namespace_allowed(edit)
        edit.add_argument(
            "--no-other-namespaces",
            action="store_true",
            help="allow only the profile's own namespace again",
        )
        discover = add_verb(
            sub,
            "discover",
            help="set a local profile's machine catalog to this machine (GPUs, cores, memory)",
        )
        discover.add_argument("name")
        add_verb(sub, "list", help="list profiles")

    def handle(self, *args, verb, org, user, **options):
        membership = acting_membership(org, user, "admin", "profiles")
        with audit.cli_origin():
            self.act(membership, verb, options)

    def act(self, membership, verb: str, options: dict) -> None:
        organization = membership.organization
        if verb == "list":
            profiles = Profile.objects.for_member(membership, "admin").select_related("cluster")
            rows = [("NAME", "CLUSTER", "NAMESPACE", "GPU KINDS", "VLLM")]
            for p in profiles:
                kinds = describe_catalog(p.machine_catalog).replace(", ", ",")
                namespaces = ",".join(p.facts().allowed_namespaces)
                rows.append((p.name, p.cluster.name, namespaces, kinds, p.vllm_version))
            write_table(self.stdout, rows)
            return
        if verb == "edit":
            self.edit(membership, options)
            return
        if verb == "discover":
            self.discover(membership, options["name"])
            return
        clusters = Cluster.objects.for_member(membership, "admin")
        cluster = clusters.filter(name=options["cluster"]).first()
        if cluster is None:
            known = ", ".join(clusters.values_list("name", flat=True)) or "none"
            raise CommandError(
                f"--cluster {options['cluster']}: no such cluster; known: {known}. "
                "Add it first with `manage.py cluster add`."
            )
        data = {
            "name": options["name"],
            "cluster": cluster.pk,
            "namespace": options["namespace"],
            "hf_token_ref": options["hf_token"],
            **{field: options[field] for field in STORAGE_OPTIONS},
            "vllm_version": options["vllm_version"],
            # The form gives a local profile this machine instead of the default.
            "machine_catalog_yaml": catalog_yaml(default_machine_catalog()),
            "defaults_yaml": "",
            "extra_namespaces_text": ",".join(options["namespace_allowed"]),
        }
        form = ProfileForm(data, organization=organization, actor=membership.user)
        profile = save_form(form, f"profile {options['name']}")
        self.stdout.write(
            f"profile/{profile.name} added (cluster {profile.cluster.name}, "
            f"namespace {profile.namespace}, vLLM {profile.vllm_version})"
        )

    def discover(self, membership, name: str) -> None:
        profile = _profile(membership, name)
        if profile.cluster.backend != Cluster.Backend.LOCAL:
            raise CommandError(
                f"profile/{profile.name} deploys to cluster {profile.cluster.name}, a Kubernetes "
                "cluster: only a local profile's catalog is this machine. Edit its catalog on "
                "the profile's page (the GPU kinds of its node groups) instead."
            )
        before = cluster_audit.snapshot(profile)
        profile.machine_catalog, read = discovered_catalog()
        profile.save(update_fields=["machine_catalog"])
        cluster_audit.record_saved(profile, before, membership.user, "discover")
        self.stdout.write(f"profile/{profile.name} machine catalog set to this machine ({read})")

    def edit(self, membership, options) -> None:
        organization = membership.organization
        profile = _profile(membership, options["name"])
        others = list(profile.extra_namespaces or [])
        if options["no_other_namespaces"]:
            others = []
        others += [n for n in options["namespace_allowed"] if n not in others]
        hf_token = options["hf_token"]
        data = {
            "name": profile.name,
            "cluster": profile.cluster_id,
            "namespace": profile.namespace,
            "hf_token_ref": profile.hf_token_ref if hf_token is None else hf_token,
            **{
                field: getattr(profile, field) if options[field] is None else options[field]
                for field in STORAGE_OPTIONS
            },
            "vllm_version": profile.vllm_version,
            "machine_catalog_yaml": catalog_yaml(profile.machine_catalog),
            "defaults_yaml": catalog_yaml(profile.defaults or {}),
            "extra_namespaces_text": ",".join(others),
        }
        form = ProfileForm(data, instance=profile, organization=organization, actor=membership.user)
        profile = save_form(form, f"profile {profile.name}")
        allowed = ", ".join(profile.facts().allowed_namespaces)
        self.stdout.write(f"profile/{profile.name} saved (namespaces {allowed})")


def _profile(membership, name: str) -> Profile:
    profiles = Profile.objects.for_member(membership, "admin")
    profile = profiles.filter(name=name).first()
    if profile is None:
        known = ", ".join(profiles.values_list("name", flat=True))
        raise CommandError(f"No profile named {name!r}; known: {known or 'none'}.")
    return profile


# The profile's storage access (jobs/storage_access.py): model field -> option and help.
STORAGE_OPTIONS = {
    "storage_credentials_ref": (
        "--storage-credentials",
        "REF",
        "env/<PREFIX> or machine: what the console reads private buckets with",
    ),
    "storage_service_account": (
        "--storage-service-account",
        "NAME",
        "a ServiceAccount in the namespace the predictor runs as (Kubernetes profiles)",
    ),
    "storage_secret": (
        "--storage-secret",
        "NAME",
        "KServe's storage Secret in the namespace (Kubernetes profiles)",
    ),
    "image_pull_secret": (
        "--image-pull-secret",
        "NAME",
        "a Secret in the namespace that pulls oci:// model images (Kubernetes profiles)",
    ),
}


def _storage_access(parser, default) -> None:
    for field, (option, metavar, text) in STORAGE_OPTIONS.items():
        more = "" if default is not None else "; '' removes it"
        parser.add_argument(option, dest=field, default=default, metavar=metavar, help=text + more)


def _namespace_allowed(parser) -> None:
    parser.add_argument(
        "--namespace-allowed",
        action="append",
        default=[],
        metavar="NAMESPACE",
        help="another namespace spec.namespace may name (repeat for several)",
    )
