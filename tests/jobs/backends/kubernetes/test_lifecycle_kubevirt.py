"""An application in KubeVirt virtual machines, end to end against the API emulator with
KubeVirt's resources: the dry run (refused without KubeVirt or with a device KubeVirt does not
permit, else the server's dry run of every object), deploy, the reconciler's watches from
Pending to Running node by node, restart keeping the volumes, stop freeing the GPUs, delete
removing everything of this application and nothing of another's, rollback, discovery."""

import pytest

from jobs import deploy as verbs
from jobs.backends.kubernetes.backend import (
    describe_addons,
    discover,
    discovery_warnings,
    forget_clients,
)
from jobs.models import Application, Cluster, Profile
from jobs.reconciler.watching import KINDS, VM_KINDS, ClusterFollower
from tests.fakes.kube_objects import (
    PROD_NAMESPACE,
    instance_of,
    kubevirt_cr,
    launcher_pod,
    now,
)

NS = PROD_NAMESPACE
H100 = "nvidia.com/GH100_H100_SXM5_80GB"
L4 = "nvidia.com/AD104GL_L4"
COMMIT = "24668f3e831ec22a450368581ff8806f933c208f"


def manifest(nodes: int = 1, memory: str = "64Gi", gpu: str = "h100", count: int = 8) -> str:
    return f"""\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: llama
  profileName: vm
  source:
    type: Model
    model:
      uri: hf://Qwen/Qwen2.5-7B-Instruct:{COMMIT}
      runtime:
        isolation: VirtualMachine
      resources:
        memory: {memory}
        nodesPerReplica: {nodes}
        accelerator:
          gpu:
            model: {gpu}
            countPerReplica: {count}
"""


@pytest.fixture
def vm_cluster(org, kube):
    """Cluster "vm" on the emulator with KServe and KubeVirt discovered, KubeVirt permitting
    H100s; its profile "vm" deploys into PROD_NAMESPACE."""
    forget_clients()
    cluster = Cluster.objects.create(
        organization=org,
        name="vm",
        backend="kubernetes",
        kubeconfig_path=str(kube.kubeconfig_path),
        context="emulator",
        addons=["kserve", "kubevirt"],
        kubevirt_devices=[H100],
    )
    Profile.objects.create(organization=org, name="vm", cluster=cluster, namespace=NS)
    yield cluster
    forget_clients()


@pytest.fixture
def follower(vm_cluster):
    follower = ClusterFollower(vm_cluster, watch_timeout=1)
    for kind in follower.kinds:
        follower.relist(kind)
    return follower


def settle(follower) -> None:
    for kind in follower.kinds:
        follower.watch_round(kind)
    follower.drain()


def names(kube, kind) -> list[str]:
    return [o["metadata"]["name"] for o in kube.objects(kind, NS)]


def boot(kube, name, *, ready=True, phase="Running"):
    """KubeVirt's part: the instance of machine `name`, and its virt-launcher pod."""
    vmi = kube.put(instance_of(kube.get("VirtualMachine", name, NS), phase, ready=ready))
    kube.put(launcher_pod(vmi, ready=ready))
    return vmi


def test_discovery_reads_kubevirt_and_the_devices_it_permits(vm_cluster, kube):
    kube.put(kubevirt_cr(H100, L4))
    discover(vm_cluster)
    vm_cluster.refresh_from_db()
    assert "kubevirt" in vm_cluster.addons
    assert vm_cluster.kubevirt_devices == sorted([H100, L4])
    kube.uninstall("kubevirt")
    discover(vm_cluster)
    vm_cluster.refresh_from_db()
    assert "kubevirt" not in vm_cluster.addons and vm_cluster.kubevirt_devices is None


def test_a_kubevirt_cr_the_console_may_not_read_leaves_the_devices_unknown_not_none(
    vm_cluster, org, kube
):
    """A 403 on the KubeVirt CR is no answer about devices: the dry run does not refuse every
    GPU machine ("it permits none"), it warns that it could not check and says why."""
    kube.put(kubevirt_cr(H100))
    kube.fail_next(403, verb="list", resource="kubevirts")
    discover(vm_cluster)
    vm_cluster.refresh_from_db()
    assert "kubevirt" in vm_cluster.addons and vm_cluster.kubevirt_devices is None
    assert "KubeVirt devices unknown (the KubeVirt CR could not be read: grant list on " in (
        describe_addons(vm_cluster)
    )
    run = verbs.dry_run(manifest(gpu="l4", count=1, memory="16Gi"), org)
    assert run.ok, run.refusals
    (warning,) = [w for w in run.warnings if "KubeVirt" in w.message]
    assert f"Whether KubeVirt on cluster vm permits passing through {L4}" in warning.message
    assert "could not read the KubeVirt CR" in warning.message
    assert "grant list on kubevirts.kubevirt.io" in warning.message.lower()
    assert warning.about == "spec.source.model.resources.accelerator.gpu.model"
    # Read again with the right: known, and checked.
    discover(vm_cluster)
    vm_cluster.refresh_from_db()
    assert vm_cluster.kubevirt_devices == [H100]
    (problem,) = verbs.dry_run(manifest(gpu="l4", count=1, memory="16Gi"), org).refusals
    assert f"does not permit passing through {L4}" in problem.message


def test_discovery_names_the_catalogs_gpu_kinds_kubevirt_does_not_permit(
    vm_cluster, admin, as_admin, kube
):
    from io import StringIO

    from django.core.management import call_command
    from django.urls import reverse

    kube.put(kubevirt_cr(H100, L4))
    out, err = StringIO(), StringIO()
    call_command("cluster", "discover", "vm", stdout=out, stderr=err)
    assert out.getvalue().startswith("cluster/vm: add-ons")
    (warning,) = err.getvalue().splitlines()
    assert warning.startswith("warning: KubeVirt on cluster vm does not permit the GPU kinds ")
    assert "t4 (nvidia.com/TU104GL_Tesla_T4), a10g (nvidia.com/GA102GL_A10G)" in warning
    assert "b200 (no device name)" in warning and "of profile vm's machine catalog" in warning
    assert "h100" not in warning and "l4 (" not in warning.replace("t4 (", "")
    vm_cluster.refresh_from_db()
    assert discovery_warnings(vm_cluster) == [warning.removeprefix("warning: ")]
    page = as_admin.post(reverse("jobs:cluster-discover", args=["vm"]), follow=True)
    assert "does not permit the GPU kinds t4" in page.content.decode()


def test_virtual_machines_on_a_cluster_without_kubevirt_are_refused(vm_cluster, org, kube):
    kube.uninstall("kubevirt")
    discover(vm_cluster)
    run = verbs.dry_run(manifest(), org)
    (problem,) = run.refusals
    assert problem.path == "spec.source.model.runtime.isolation"
    assert "KubeVirt add-on" in problem.message and "Container" in problem.message


def test_a_device_kubevirt_does_not_permit_is_refused_at_the_dry_run(vm_cluster, org, kube):
    run = verbs.dry_run(manifest(gpu="l4", count=1, memory="16Gi"), org)
    (problem,) = run.refusals
    assert f"does not permit passing through {L4}" in problem.message
    assert f"it permits {H100}" in problem.message
    assert problem.about == "spec.source.model.resources.accelerator.gpu.model"


def test_the_dry_run_asks_the_cluster_about_every_object(vm_cluster, org, kube):
    run = verbs.dry_run(manifest(nodes=2), org)
    assert run.ok, run.refusals
    kinds = [o["kind"] for o in run.objects]
    assert kinds == [
        "PersistentVolumeClaim",
        "ConfigMap",
        "Service",
        "Service",
        "NetworkPolicy",
        "NetworkPolicy",
        "VirtualMachine",
        "VirtualMachine",
    ]
    assert names(kube, "VirtualMachine") == [] and names(kube, "Service") == []
    dry = [r.path for r in kube.requests if r.query.get("dryRun") == "All"]
    assert any("/virtualmachines/llama-r0-n1" in p for p in dry)
    assert any("/persistentvolumeclaims/llama-weights-r0" in p for p in dry)
    kube.fail_next(
        422, "spec.template.spec.domain: Invalid value: no such device", resource="virtualmachines"
    )
    run = verbs.dry_run(manifest(nodes=2), org)
    assert any("no such device" in p.message for p in run.refusals)


def test_deploy_and_follow_a_multi_node_replica_node_by_node(vm_cluster, deployer, kube, follower):
    app = verbs.apply(manifest(nodes=2), deployer).application
    assert names(kube, "VirtualMachine") == ["llama-r0-n0", "llama-r0-n1"]
    assert names(kube, "PersistentVolumeClaim") == ["llama-weights-r0"]
    assert names(kube, "Service") == ["llama-nodes", "llama-predictor"]
    assert names(kube, "NetworkPolicy") == ["llama", "llama-peers-r0"]
    assert names(kube, "ConfigMap") == ["llama-guest"]
    boot(kube, "llama-r0-n1")
    kube.put(
        instance_of(
            kube.get("VirtualMachine", "llama-r0-n0", NS),
            "Scheduling",
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": f"0/4 nodes are available: 4 Insufficient {H100}.",
                }
            ],
        )
    )
    settle(follower)
    app.refresh_from_db()
    assert app.phase == "Scheduling"
    assert app.reason.startswith("1 of 2 VMIs of replica 1 are running; the first (llama-r0-n0)")
    assert "waits for a node with 8 free H100s" in app.reason
    boot(kube, "llama-r0-n0")
    settle(follower)
    app.refresh_from_db()
    assert app.phase == "Running", app.reason
    assert app.ready_replicas == 1
    assert app.endpoint == f"http://llama-predictor.{NS}.svc.cluster.local"


def test_a_replica_waiting_for_its_weight_volume_says_why(vm_cluster, deployer, kube, follower):
    """The reconciler follows the weight volumes too: a claim no storage class can provide
    (multi-node replicas share theirs, ReadWriteMany) is the reason, not "waits to be
    scheduled"."""
    app = verbs.apply(manifest(nodes=2), deployer).application
    claim = kube.get("PersistentVolumeClaim", "llama-weights-r0", NS)
    kube.put({**claim, "status": {"phase": "Pending"}})
    kube.put(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "llama-weights-r0.17f1", "namespace": NS},
            "involvedObject": {"kind": "PersistentVolumeClaim", "name": "llama-weights-r0"},
            "reason": "ProvisioningFailed",
            "message": "access mode ReadWriteMany is not supported",
            "lastTimestamp": now(),
        }
    )
    for name in ("llama-r0-n0", "llama-r0-n1"):
        kube.put(instance_of(kube.get("VirtualMachine", name, NS), "Pending"))
    settle(follower)
    app.refresh_from_db()
    assert app.phase == "Scheduling"
    assert "the first (llama-r0-n0) waits for its weight volume llama-weights-r0" in app.reason
    assert "ReadWriteMany filesystem volumes" in app.next_step
    # Bound: the instances are what it waits for again.
    kube.put({**claim, "status": {"phase": "Bound"}})
    settle(follower)
    app.refresh_from_db()
    assert "weight volume" not in app.reason and "waits to be scheduled" in app.reason


def test_restart_replaces_the_instances_and_keeps_the_volumes(vm_cluster, deployer, kube):
    app = verbs.apply(manifest(), deployer).application
    boot(kube, "llama-r0-n0")
    claim = kube.get("PersistentVolumeClaim", "llama-weights-r0", NS)["metadata"]["uid"]
    old = kube.get("VirtualMachineInstance", "llama-r0-n0", NS)["metadata"]["uid"]
    observed = verbs.restart(app, deployer)
    fresh = kube.get("VirtualMachineInstance", "llama-r0-n0", NS)
    assert fresh["metadata"]["uid"] != old  # a new instance, started by its machine
    assert kube.get("PersistentVolumeClaim", "llama-weights-r0", NS)["metadata"]["uid"] == claim
    assert names(kube, "VirtualMachine") == ["llama-r0-n0"]
    assert observed.phase == "Scheduling"


def test_stop_frees_the_gpus_and_keeps_the_rest_also_across_a_redeploy(vm_cluster, deployer, kube):
    app = verbs.apply(manifest(nodes=2), deployer).application
    boot(kube, "llama-r0-n0")
    boot(kube, "llama-r0-n1")
    kept = {
        kind: names(kube, kind)
        for kind in ("PersistentVolumeClaim", "ConfigMap", "Service", "NetworkPolicy")
    }
    observed = verbs.stop(app, deployer)
    strategies = {o["spec"]["runStrategy"] for o in kube.objects("VirtualMachine", NS)}
    assert strategies == {"Halted"}
    # The instances and their virt-launcher pods, which held the GPUs, are gone ...
    assert names(kube, "VirtualMachineInstance") == [] and names(kube, "Pod") == []
    assert observed.phase == "Stopped" and "GPUs free" in observed.reason
    # ... and everything else is kept.
    for kind, were in kept.items():
        assert names(kube, kind) == were, kind
    assert names(kube, "PersistentVolumeClaim") == ["llama-weights-r0"]
    assert names(kube, "Service") == ["llama-nodes", "llama-predictor"]
    verbs.apply(manifest(nodes=2, memory="96Gi"), deployer)
    machines = kube.objects("VirtualMachine", NS)
    assert {o["spec"]["runStrategy"] for o in machines} == {"Halted"}
    memory = machines[0]["spec"]["template"]["spec"]["domain"]["resources"]["requests"]["memory"]
    assert memory == "96Gi"
    app.refresh_from_db()
    observed = verbs.start(app, deployer)
    assert {o["spec"]["runStrategy"] for o in kube.objects("VirtualMachine", NS)} == {"Always"}
    assert observed.phase in ("Scheduling", "Pending")


def test_delete_removes_machines_services_and_volumes_of_this_application_only(
    vm_cluster, deployer, kube, follower
):
    theirs = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": "llama-theirs",
            "namespace": NS,
            "labels": {"servedeck.io/application": "llama", "servedeck.io/organization": "other"},
        },
        "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}},
    }
    kube.put(theirs)
    app = verbs.apply(manifest(nodes=2), deployer).application
    boot(kube, "llama-r0-n0")
    verbs.delete(app, deployer)
    assert names(kube, "VirtualMachine") == ["llama-theirs"]
    for kind in ("PersistentVolumeClaim", "ConfigMap", "Service", "NetworkPolicy"):
        assert names(kube, kind) == [], kind
    # KubeVirt's garbage collector removes the instance; the reconciler then forgets the row.
    assert Application.objects.filter(name="llama").exists()
    kube.emit("DELETED", kube.get("VirtualMachineInstance", "llama-r0-n0", NS))
    settle(follower)
    assert not Application.objects.filter(name="llama").exists()


def test_an_object_of_another_application_is_never_taken_over(vm_cluster, deployer, kube):
    kube.put(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "llama-weights-r0", "namespace": NS, "labels": {}},
            "spec": {"accessModes": ["ReadWriteOnce"]},
        }
    )
    with pytest.raises(verbs.Refused) as refused:
        verbs.apply(manifest(), deployer)
    (problem,) = refused.value.dry_run.refusals
    assert "PersistentVolumeClaim models/llama-weights-r0" in problem.message
    assert "not created by ServeDeck" in problem.message
    assert names(kube, "VirtualMachine") == []


def test_rollback_applies_the_earlier_render(vm_cluster, deployer, kube):
    app = verbs.apply(manifest(memory="64Gi"), deployer).application
    verbs.apply(manifest(memory="96Gi"), deployer)

    def memory():
        vm = kube.get("VirtualMachine", "llama-r0-n0", NS)
        return vm["spec"]["template"]["spec"]["domain"]["resources"]["limits"]["memory"]

    assert memory() == "96Gi"
    verbs.rollback(app, 1, deployer)
    assert memory() == "64Gi"
    assert (
        kube.get("VirtualMachine", "llama-r0-n0", NS)["metadata"]["annotations"][
            "servedeck.io/revision"
        ]
        == "3"
    )


def test_a_new_revision_or_a_rollback_replaces_the_instances_an_unchanged_one_does_not(
    vm_cluster, deployer, kube
):
    app = verbs.apply(manifest(memory="64Gi"), deployer).application

    def uid():
        return kube.get("VirtualMachineInstance", "llama-r0-n0", NS)["metadata"]["uid"]

    boot(kube, "llama-r0-n0")
    first = uid()
    verbs.apply(manifest(memory="64Gi"), deployer)  # nothing changed: nothing restarts
    assert uid() == first
    verbs.apply(manifest(memory="96Gi"), deployer)
    second = uid()
    assert second != first
    fresh = kube.get("VirtualMachineInstance", "llama-r0-n0", NS)
    assert fresh["spec"]["domain"]["resources"]["limits"]["memory"] == "96Gi"
    boot(kube, "llama-r0-n0")
    third = uid()
    verbs.rollback(app, 1, deployer)
    assert uid() != third
    assert (
        kube.get("VirtualMachineInstance", "llama-r0-n0", NS)["spec"]["domain"]["resources"][
            "limits"
        ]["memory"]
        == "64Gi"
    )


def test_the_follower_watches_kubevirt_only_where_it_is_installed(vm_cluster, org, kube):
    assert ClusterFollower(vm_cluster).kinds == KINDS + VM_KINDS
    vm_cluster.addons = ["kserve"]
    assert ClusterFollower(vm_cluster).kinds == KINDS


def test_restart_and_stop_leave_another_organisations_machines_alone(vm_cluster, deployer, kube):
    labels = {"servedeck.io/application": "llama", "servedeck.io/organization": "other"}
    theirs = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "llama-elsewhere", "namespace": NS, "labels": labels},
        "spec": {
            "runStrategy": "Always",
            "template": {"metadata": {"labels": labels}, "spec": {"domain": {"devices": {}}}},
        },
    }
    kube.put(theirs)
    kube.put(instance_of(kube.get("VirtualMachine", "llama-elsewhere", NS)))
    their_instance = kube.get("VirtualMachineInstance", "llama-elsewhere", NS)["metadata"]["uid"]
    app = verbs.apply(manifest(), deployer).application
    boot(kube, "llama-r0-n0")
    verbs.restart(app, deployer)
    verbs.stop(app, deployer)
    assert kube.get("VirtualMachine", "llama-elsewhere", NS)["spec"]["runStrategy"] == "Always"
    after = kube.get("VirtualMachineInstance", "llama-elsewhere", NS)["metadata"]["uid"]
    assert after == their_instance
    assert kube.get("VirtualMachine", "llama-r0-n0", NS)["spec"]["runStrategy"] == "Halted"


def test_restart_without_machines_says_to_deploy(vm_cluster, deployer, kube):
    app = verbs.apply(manifest(), deployer).application
    kube.emit("DELETED", kube.get("VirtualMachine", "llama-r0-n0", NS))
    with pytest.raises(verbs.ActionError, match="has no VirtualMachine in namespace models"):
        verbs.restart(app, deployer)


def test_a_container_application_beside_kubevirt_keeps_what_kserve_made(vm_cluster, deployer, kube):
    """Where KubeVirt is installed apply prunes Services too: KServe's own predictor Service
    (labelled like the application, owned by the InferenceService) is not ServeDeck's to prune."""
    containers = manifest(gpu="h100", count=1).replace(
        "        isolation: VirtualMachine\n", "        isolation: Container\n"
    )
    verbs.apply(containers, deployer)
    labels = {"servedeck.io/application": "llama", "servedeck.io/organization": "acme"}
    owner = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
             "name": "llama", "uid": "1", "controller": True}  # fmt: skip
    kube.put(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "llama-predictor",
                "namespace": NS,
                "labels": labels,
                "ownerReferences": [owner],
            },
            "spec": {"ports": [{"port": 80}]},
        }
    )
    verbs.apply(containers.replace("memory: 64Gi", "memory: 96Gi"), deployer)
    assert names(kube, "Service") == ["llama-predictor"]
    assert names(kube, "VirtualMachine") == []
