"""`manage.py profile add|list`: deployment profiles from scripts, through the page's form."""

from django.core.management.base import BaseCommand, CommandError

from accesspolicies.cli import acting_membership, add_verb
from jobs.catalog import default_machine_catalog
from jobs.forms import ProfileForm
from jobs.management.commands._setup import catalog_yaml, save_form, write_table
from jobs.models import Cluster, Profile


class Command(BaseCommand):
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
        add.add_argument("--vllm-version", default="0.13.0")
        add_verb(sub, "list", help="list profiles")

    def handle(self, *args, verb, org, user, **options):
        membership = acting_membership(org, user, "admin", "profiles")
        organization = membership.organization
        if verb == "list":
            profiles = Profile.objects.filter(organization=organization).select_related("cluster")
            rows = [("NAME", "CLUSTER", "NAMESPACE", "GPU KINDS", "VLLM")]
            for p in profiles:
                kinds = ",".join(k.get("name", "?") for k in p.machine_catalog) or "cpu only"
                rows.append((p.name, p.cluster.name, p.namespace, kinds, p.vllm_version))
            write_table(self.stdout, rows)
            return
        clusters = Cluster.objects.filter(organization=organization)
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
            "vllm_version": options["vllm_version"],
            "machine_catalog_yaml": catalog_yaml(default_machine_catalog()),
            "defaults_yaml": "",
        }
        form = ProfileForm(data, organization=organization)
        profile = save_form(form, f"profile {options['name']}")
        self.stdout.write(
            f"profile/{profile.name} added (cluster {profile.cluster.name}, "
            f"namespace {profile.namespace})"
        )
