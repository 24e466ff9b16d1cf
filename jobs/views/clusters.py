"""Clusters and profiles: admins list, create and edit them."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accesspolicies.access import require
from jobs import cluster_audit
from jobs.access import get_cluster, get_profile
from jobs.forms import ClusterForm, ProfileForm
from jobs.models import Cluster, Profile
from jobs.tables import ClusterTable, ProfileTable

WHAT = "clusters and profiles"


# The two tables of the page, by the id of their htmx target; each sorts by its own parameter.
TABLES = {"clusters": "", "profiles": "profiles-"}


def index(request):
    """The page, or for an htmx request (a sort header) the one table it targets."""
    membership = require(request.membership, "admin", WHAT)
    clusters = Cluster.objects.for_member(membership, "admin")
    context = {
        "clusters": ClusterTable(clusters, request=request, prefix=""),
        # The reconciler's refused or failing watches, with the rule to grant.
        "watch_errors": clusters.exclude(watch_error=""),
        "profiles": ProfileTable(
            Profile.objects.for_member(membership, "admin").select_related("cluster"),
            request=request,
            prefix=TABLES["profiles"],
        ),
    }
    if request.htmx:
        target = request.htmx.target if request.htmx.target in TABLES else "clusters"
        fragment = {"table": context[target], "table_id": target}
        return render(request, "inc/table_htmx.html", fragment)
    return render(request, "jobs/clusters.html", context)


def _edit(request, form_class, instance, noun):
    membership = require(request.membership, "admin", WHAT)
    form = form_class(
        request.POST or None,
        instance=instance,
        organization=membership.organization,
        actor=request.user,
    )
    if request.method == "POST" and form.is_valid():
        saved = form.save()
        messages.success(request, f"{noun.capitalize()} {saved.name} is saved.")
        return redirect("jobs:clusters")
    context = {"form": form, "noun": noun, "creating": instance is None}
    return render(request, "jobs/object_form.html", context)


def cluster_add(request):
    return _edit(request, ClusterForm, None, "cluster")


def cluster_edit(request, name):
    return _edit(request, ClusterForm, get_cluster(request.membership, name, "admin"), "cluster")


@require_POST
def cluster_discover(request, name):
    cluster = get_cluster(request.membership, name, "admin")
    if cluster.backend != Cluster.Backend.KUBERNETES:
        messages.error(request, f"{name} runs on the local backend: nothing to discover.")
        return redirect("jobs:cluster-edit", name=name)
    from jobs.backends.kubernetes.backend import describe_addons, discover, discovery_warnings
    from jobs.backends.kubernetes.errors import BackendError

    before = cluster_audit.snapshot(cluster)
    try:
        discover(cluster)
    except BackendError as error:
        messages.error(request, f"{name}: {error.reason} {error.next_step}")
    else:
        cluster_audit.record_saved(cluster, before, request.user, "discover")
        messages.success(request, f"{name}: {describe_addons(cluster)}.")
        for said in discovery_warnings(cluster):
            messages.warning(request, said)
    return redirect("jobs:cluster-edit", name=name)


def profile_add(request):
    return _edit(request, ProfileForm, None, "profile")


def profile_edit(request, name):
    return _edit(request, ProfileForm, get_profile(request.membership, name, "admin"), "profile")


@require_POST
def profile_discover(request, name):
    """A local profile's catalog read again from this machine (a GPU added, memory grown)."""
    profile = get_profile(request.membership, name, "admin")
    if profile.cluster.backend != Cluster.Backend.LOCAL:
        messages.error(
            request,
            f"{name} deploys to a Kubernetes cluster: its catalog is its node groups' GPU kinds; "
            "edit them below.",
        )
        return redirect("jobs:profile-edit", name=name)
    from jobs.backends.local.machine_check import discovered_catalog
    from jobs.usage.cost import keep_prices

    catalog, read = discovered_catalog()
    before = cluster_audit.snapshot(profile)
    profile.machine_catalog = keep_prices(profile.machine_catalog, catalog)
    profile.save(update_fields=["machine_catalog"])
    cluster_audit.record_saved(profile, before, request.user, "discover")
    messages.success(request, f"{name}: the machine catalog is this machine, {read}.")
    return redirect("jobs:profile-edit", name=name)
