from django.urls import path

import jobs.views.wizard as wizard
from jobs.views import applications, clusters

app_name = "jobs"
urlpatterns = [
    path("models/<slug:name>/", applications.detail, name="application-detail"),
    path("models/<slug:name>/health/", applications.health, name="application-health"),
    path("models/<slug:name>/rollback/", applications.rollback, name="application-rollback"),
    path("models/<slug:name>/deploy/", applications.deploy, name="application-deploy"),
    path("models/<slug:name>/delete/", applications.delete, name="application-delete"),
    path("models/<slug:name>/restart/", applications.restart, name="application-restart"),
    path("models/<slug:name>/stop/", applications.stop, name="application-stop"),
    path("models/<slug:name>/start/", applications.start, name="application-start"),
    path("deploy/yaml/", applications.deploy_from_yaml, name="deploy-yaml"),
    path("deploy/yaml/dry-run/", applications.deploy_from_yaml_dry_run, name="deploy-yaml-dry-run"),
    path("deploy/yaml/apply/", applications.deploy_from_yaml_apply, name="deploy-yaml-apply"),
    path("models/<slug:name>/edit/", wizard.edit, name="application-edit"),
    path("deploy/", wizard.start, name="wizard"),
    path("deploy/name/", wizard.name_status, name="wizard-name"),
    path("deploy/hub/", wizard.hub_search, name="wizard-hub"),
    path("deploy/hub/pick/", wizard.hub_pick, name="wizard-hub-pick"),
    path("deploy/drafts/discard/", wizard.discard_all, name="wizard-discard-all"),
    path("deploy/drafts/<slug:key>/", wizard.resume, name="wizard-resume"),
    path("deploy/drafts/<slug:key>/discard/", wizard.discard, name="wizard-discard"),
    path("deploy/drafts/<slug:key>/model/", wizard.model_step, name="wizard-model"),
    path("deploy/drafts/<slug:key>/check/", wizard.check_step, name="wizard-check"),
    path("deploy/drafts/<slug:key>/compute/", wizard.compute_step, name="wizard-compute"),
    path("deploy/drafts/<slug:key>/compute/memory/", wizard.compute_memory, name="wizard-memory"),
    path("deploy/drafts/<slug:key>/access/", wizard.access_step, name="wizard-access"),
    path("deploy/drafts/<slug:key>/api/", wizard.api_step, name="wizard-api"),
    path("deploy/drafts/<slug:key>/review/", wizard.review_step, name="wizard-review"),
    path("deploy/drafts/<slug:key>/manifest.yaml", wizard.download, name="wizard-download"),
    path("deploy/drafts/<slug:key>/deploy/", wizard.deploy, name="wizard-deploy"),
    path("clusters/", clusters.index, name="clusters"),
    path("clusters/add/", clusters.cluster_add, name="cluster-add"),
    path("clusters/<slug:name>/", clusters.cluster_edit, name="cluster-edit"),
    path("clusters/<slug:name>/discover/", clusters.cluster_discover, name="cluster-discover"),
    path("profiles/add/", clusters.profile_add, name="profile-add"),
    path("profiles/<slug:name>/", clusters.profile_edit, name="profile-edit"),
    path("profiles/<slug:name>/discover/", clusters.profile_discover, name="profile-discover"),
]
