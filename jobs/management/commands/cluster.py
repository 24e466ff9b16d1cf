"""`manage.py cluster add|list`: clusters from scripts, through the same form as the page."""

from django.core.management.base import CommandError

from accesspolicies import audit
from accesspolicies.cli import ServeDeckCommand, acting_membership, add_verb
from jobs import cluster_audit
from jobs.backends.kubernetes.backend import describe_addons, discover, discovery_warnings
from jobs.backends.kubernetes.errors import BackendError
from jobs.forms import ClusterForm
from jobs.management.commands._setup import save_form, write_table
from jobs.models import ADDONS, Cluster


class Command(ServeDeckCommand):
    help = "Add or list clusters: how ServeDeck reaches each one."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
        add = add_verb(sub, "add", help="add a cluster")
        add.add_argument("name")
        how = add.add_mutually_exclusive_group(required=True)
        how.add_argument("--kubeconfig", metavar="FILE", help="reach it with this kubeconfig")
        how.add_argument("--in-cluster", action="store_true", help="the pod's service account")
        how.add_argument("--local", action="store_true", help="model servers on this machine")
        add.add_argument("--context", default="", help="kubeconfig context")
        add.add_argument(
            "--addon",
            action="append",
            default=[],
            choices=sorted(ADDONS),
            help="an add-on the cluster has installed (repeat for several)",
        )
        add.add_argument("--queue", action="append", default=[], help="a declared ClusterQueue")
        add_verb(sub, "list", help="list clusters")
        discover = add_verb(sub, "discover", help="read a Kubernetes cluster's add-ons and queues")
        discover.add_argument("name")

    def handle(self, *args, verb, org, user, **options):
        membership = acting_membership(org, user, "admin", "clusters")
        with audit.cli_origin():
            self.act(membership, verb, options)

    def act(self, membership, verb: str, options: dict) -> None:
        if verb == "list":
            clusters = Cluster.objects.for_member(membership, "admin")
            rows = [("NAME", "BACKEND", "CONNECTION", "ADD-ONS")]
            rows += [(c.name, c.backend, c.connection, ",".join(c.addons) or "-") for c in clusters]
            write_table(self.stdout, rows)
            return
        if verb == "discover":
            self.discover(membership, options["name"])
            return
        backend = Cluster.Backend.LOCAL if options["local"] else Cluster.Backend.KUBERNETES
        data = {
            "name": options["name"],
            "backend": backend,
            "kubeconfig_path": options["kubeconfig"] or "",
            "context": options["context"],
            "in_cluster": options["in_cluster"],
            "addons": options["addon"],
            "queues": ",".join(options["queue"]),
            "cache_node_groups": "",
        }
        form = ClusterForm(
            data, organization=membership.organization, trusted=True, actor=membership.user
        )
        cluster = save_form(form, f"cluster {options['name']}")
        self.stdout.write(f"cluster/{cluster.name} added ({cluster.backend}: {cluster.connection})")

    def discover(self, membership, name: str) -> None:
        cluster = Cluster.objects.for_member(membership, "admin").filter(name=name).first()
        if cluster is None:
            raise CommandError(f"No cluster named {name!r}; `cluster list` shows them.")
        if cluster.backend != Cluster.Backend.KUBERNETES:
            raise CommandError(f"{name} runs on the local backend: nothing to discover.")
        before = cluster_audit.snapshot(cluster)
        try:
            discover(cluster)
        except BackendError as error:
            raise CommandError(f"{name}: {error.reason} {error.next_step}") from None
        cluster_audit.record_saved(cluster, before, membership.user, "discover")
        self.stdout.write(f"cluster/{name}: {describe_addons(cluster)}")
        for said in discovery_warnings(cluster):
            self.stderr.write(self.style.WARNING(f"warning: {said}"))
