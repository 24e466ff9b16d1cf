"""Two organisations on one cluster, the same application name in the same namespace, against
the Kubernetes API emulator with the real client: a manifest goes only to a namespace its
profile allows, rendered objects say whose they are, and no verb of one organisation replaces,
restarts, stops, deletes or reports the other's objects."""

import pytest

from jobs import deploy as verbs
from jobs.backends.kubernetes.backend import client_for, forget_clients
from jobs.backends.kubernetes.kinds import INFERENCE_SERVICE
from jobs.models import Application, Profile
from jobs.render.common import APP_LABEL, ORGANIZATION_ANNOTATION, ORGANIZATION_LABEL
from tests.fakes.kube_objects import PROD_NAMESPACE, emulator_profile, predictor_pod, with_status
from tests.helpers import SHORTEST, make_member

NS = PROD_NAMESPACE
MANIFEST = SHORTEST.replace("profileName: local", "profileName: prod")


@pytest.fixture
def shared(org, other_org, kube):
    """acme and globex each have a profile "prod" on the same cluster, same namespace."""
    forget_clients()
    emulator_profile(org, kube)
    emulator_profile(other_org, kube)
    yield kube
    forget_clients()


@pytest.fixture
def globex(other_org, django_user_model):
    return make_member(django_user_model, other_org, "gus", "deployer")


def isvc(kube):
    return kube.get("InferenceService", "bge-embed", NS)


def in_namespace(namespace: str) -> str:
    return MANIFEST.replace(
        "  profileName: prod\n", f"  profileName: prod\n  namespace: {namespace}\n"
    )


# ---- the namespace a manifest may name ---------------------------------------------------------


def test_a_namespace_the_profile_does_not_allow_is_refused(shared, org):
    run = verbs.dry_run(in_namespace("kube-system"), org)
    (problem,) = [p for p in run.refusals if p.path == "spec.namespace"]
    assert "'kube-system' is not a namespace profile prod may deploy to" in problem.message
    assert f"accepts {NS}" in problem.message
    assert "Remove spec.namespace" in problem.message and "Other namespaces" in problem.message
    assert shared.get("InferenceService", "bge-embed", "kube-system") is None


def test_an_admin_allows_another_namespace_on_the_profile(shared, org, deployer):
    Profile.objects.filter(organization=org, name="prod").update(extra_namespaces=["team-b"])
    applied = verbs.apply(in_namespace("team-b"), deployer)
    assert applied.application.manifest["spec"]["namespace"] == "team-b"
    assert shared.get("InferenceService", "bge-embed", "team-b") is not None
    run = verbs.dry_run(in_namespace("kube-system"), org)
    assert any(
        p.path == "spec.namespace" and f"accepts {NS}, team-b" in p.message for p in run.refusals
    )


def test_the_profile_form_and_command_set_other_namespaces(shared, org, admin):
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    out = StringIO()
    call_command("profile", "edit", "prod", "--org", "acme", "--namespace-allowed", "team-b",
                 stdout=out)  # fmt: skip
    assert f"namespaces {NS}, team-b" in out.getvalue()
    assert Profile.objects.get(organization=org, name="prod").extra_namespaces == ["team-b"]
    with pytest.raises(CommandError, match="'Team_B' is not a namespace name"):
        call_command("profile", "edit", "prod", "--org", "acme", "--namespace-allowed", "Team_B")
    call_command("profile", "edit", "prod", "--org", "acme", "--no-other-namespaces",
                 stdout=StringIO())  # fmt: skip
    assert Profile.objects.get(organization=org, name="prod").extra_namespaces == []


# ---- whose an object is ------------------------------------------------------------------------


def test_rendered_objects_carry_the_organisation(shared, deployer):
    verbs.apply(MANIFEST, deployer)
    meta = isvc(shared)["metadata"]
    assert meta["labels"][ORGANIZATION_LABEL] == "acme"
    assert meta["labels"][APP_LABEL] == "bge-embed"
    assert meta["annotations"][ORGANIZATION_ANNOTATION] == "Acme"


def test_the_same_name_of_another_organisation_is_not_replaced(shared, deployer, globex):
    verbs.apply(MANIFEST, deployer)
    before = isvc(shared)
    with pytest.raises(verbs.Refused) as refused:
        verbs.apply(MANIFEST, globex)
    message = str(refused.value)
    assert f"InferenceService {NS}/bge-embed belongs to organisation Acme's application " in (
        message
    )
    assert "Pick another application name, or deploy it to a namespace of your own" in message
    assert isvc(shared) == before  # not one field changed
    assert not Application.objects.filter(organization=globex.organization).exists()


def test_another_organisations_object_is_never_restarted_stopped_or_deleted(
    shared, deployer, globex
):
    # globex deployed bge-embed; its objects went (kubectl delete); then acme deployed its own.
    theirs = verbs.apply(MANIFEST, globex).application
    client_for(theirs.profile.cluster).api.delete(INFERENCE_SERVICE, "bge-embed", NS)
    verbs.apply(MANIFEST, deployer)
    shared.put(with_status(isvc(shared), True))
    shared.put(predictor_pod("bge-embed", NS, organization="acme"))
    before = isvc(shared)
    for verb in (verbs.restart, verbs.stop, verbs.start):
        with pytest.raises(verbs.ActionError, match="belongs to organisation Acme's application"):
            verb(theirs, globex)
    assert isvc(shared) == before  # no stop annotation, nothing changed
    assert len(shared.objects("Pod", NS)) == 1  # the pod was not deleted
    observed = verbs.backend_for(theirs.profile).observe(theirs)
    assert observed.phase != "Running"  # acme's Running model is not globex's status
    verbs.delete(theirs, globex)
    assert isvc(shared) == before  # globex's delete left acme's objects alone
    assert not Application.objects.filter(pk=theirs.pk).exists()


def test_an_object_not_created_by_servedeck_is_left_alone(shared, deployer):
    shared.put(
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "bge-embed", "namespace": NS},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}}}},
        }
    )
    before = isvc(shared)
    with pytest.raises(verbs.Refused, match="was not created by ServeDeck"):
        verbs.apply(MANIFEST, deployer)
    assert isvc(shared) == before


def test_an_object_without_an_organisation_label_says_how_to_claim_it(shared, deployer):
    verbs.apply(MANIFEST, deployer)
    unlabelled = isvc(shared)
    del unlabelled["metadata"]["labels"][ORGANIZATION_LABEL]  # as an earlier version made it
    shared.put(unlabelled)
    with pytest.raises(verbs.Refused) as refused:
        verbs.apply(MANIFEST.replace("bge-m3", "bge-m3\n      engine: {dtype: float16}"), deployer)
    assert "without an organisation label" in str(refused.value)
    assert f"kubectl label -n {NS} inferenceservices bge-embed {ORGANIZATION_LABEL}=acme" in str(
        refused.value
    )


def test_an_admin_sets_other_namespaces_on_the_profile_page(shared, org, as_admin):
    from django.urls import reverse

    page = as_admin.get(reverse("jobs:profile-edit", args=["prod"])).content.decode()
    assert "Other namespaces" in page
    profile = Profile.objects.get(organization=org, name="prod")
    form = {
        "name": "prod",
        "cluster": profile.cluster.pk,
        "namespace": NS,
        "hf_token_ref": "",
        "vllm_version": "0.13.0",
        "machine_catalog_yaml": "[]",
        "defaults_yaml": "",
        "extra_namespaces_text": "team-b, team-c, team-b",
    }
    response = as_admin.post(reverse("jobs:profile-edit", args=["prod"]), form)
    assert response.status_code == 302, response.content.decode()
    assert Profile.objects.get(pk=profile.pk).extra_namespaces == ["team-b", "team-c"]
    many = ", ".join(f"ns-{i}" for i in range(21))
    response = as_admin.post(
        reverse("jobs:profile-edit", args=["prod"]), {**form, "extra_namespaces_text": many}
    )
    assert "21 namespaces; accepts at most 20." in response.content.decode()


def test_the_reconciler_never_takes_another_organisations_status(shared, deployer, globex):
    from jobs.reconciler.watching import KINDS, ClusterFollower

    theirs = verbs.apply(MANIFEST, globex).application
    client_for(theirs.profile.cluster).api.delete(INFERENCE_SERVICE, "bge-embed", NS)
    ours = verbs.apply(MANIFEST, deployer).application
    shared.put(with_status(isvc(shared), True))
    shared.put(predictor_pod("bge-embed", NS, organization="acme"))
    for application in (ours, theirs):
        follower = ClusterFollower(application.profile.cluster, watch_timeout=1)
        for kind in KINDS:
            follower.relist(kind)
        follower.drain()
        application.refresh_from_db()
    assert ours.phase == "Running"
    assert theirs.phase != "Running" and theirs.endpoint == ""
