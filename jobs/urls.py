from django.urls import path

from jobs.views import applications, clusters

app_name = "jobs"
urlpatterns = [
    path("models/<slug:name>/", applications.detail, name="application-detail"),
    path("models/<slug:name>/rollback/", applications.rollback, name="application-rollback"),
    path("models/<slug:name>/deploy/", applications.deploy, name="application-deploy"),
    path("models/<slug:name>/delete/", applications.delete, name="application-delete"),
    path("models/<slug:name>/restart/", applications.restart, name="application-restart"),
    path("models/<slug:name>/stop/", applications.stop, name="application-stop"),
    path("models/<slug:name>/start/", applications.start, name="application-start"),
    path("deploy/yaml/", applications.deploy_from_yaml, name="deploy-yaml"),
    path("deploy/yaml/dry-run/", applications.deploy_from_yaml_dry_run, name="deploy-yaml-dry-run"),
    path("deploy/yaml/apply/", applications.deploy_from_yaml_apply, name="deploy-yaml-apply"),
    path("clusters/", clusters.index, name="clusters"),
    path("clusters/add/", clusters.cluster_add, name="cluster-add"),
    path("clusters/<slug:name>/", clusters.cluster_edit, name="cluster-edit"),
    path("profiles/add/", clusters.profile_add, name="profile-add"),
    path("profiles/<slug:name>/", clusters.profile_edit, name="profile-edit"),
]
