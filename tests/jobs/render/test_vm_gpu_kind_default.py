"""Issue 21, finding 17: Parakeet in a virtual machine with `gpu.countPerReplica: 1` and no
`gpu.model` was refused ("gpu.model: None; ... Set gpu.model") though every field has a
default. A virtual machine's GPUs of no kind now get the GPU kind Check model's sizing prefers
(fewest nodes, fewest GPUs, smallest GPU) among the profile catalog's kinds that hold the model
and that KubeVirt passes through; where none can be chosen, the refusal says so in words, never
with Python's None.

Through the REST API's dry run, on a cluster of the Kubernetes API emulator with KubeVirt (the
server-side dry run of every object included); Check model reads the fake Hub."""

import pytest

from jobs.backends.kubernetes.backend import forget_clients
from jobs.models import Cluster, Profile
from tests.fakes.kube_objects import PROD_NAMESPACE
from tests.helpers import bearer, problems

T4 = "nvidia.com/TU104GL_Tesla_T4"
L4 = "nvidia.com/AD104GL_L4"
H100 = "nvidia.com/GH100_H100_SXM5_80GB"

PARAKEET = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: speech
  profileName: vm
  source:
    type: Model
    model:
      uri: hf://nvidia/parakeet-tdt-0.6b-v3
      runtime:
        isolation: VirtualMachine
      resources:
        accelerator:
          gpu:
            countPerReplica: 1
"""


@pytest.fixture
def vm_profile(org, kube):
    """Profile "vm" (the default machine catalog) on the emulator's cluster, with KubeVirt; the
    test says which devices KubeVirt permits."""
    forget_clients()
    cluster = Cluster.objects.create(
        organization=org,
        name="vm",
        backend="kubernetes",
        kubeconfig_path=str(kube.kubeconfig_path),
        context="emulator",
        addons=["kserve", "kubevirt"],
    )
    Profile.objects.create(organization=org, name="vm", cluster=cluster, namespace=PROD_NAMESPACE)
    yield cluster
    forget_clients()


def dry_run(client, deployer, text=PARAKEET):
    response = client.post(
        "/api/v1/applications?dryRun=true",
        text,
        content_type="application/yaml",
        **bearer(deployer),
    )
    assert response.status_code in (200, 400), response.content
    return response


def gpu_of(body) -> dict:
    return body["manifest"]["spec"]["source"]["model"]["resources"]["accelerator"]["gpu"]


@pytest.mark.parametrize(
    "permitted, chosen",
    [
        ([T4, L4, H100], "t4"),  # the smallest GPU that holds it
        ([L4, H100], "l4"),  # the smallest that KubeVirt passes through
        (None, "t4"),  # KubeVirt's devices not read: the catalog's kinds with a device name
    ],
)
def test_parakeet_in_a_vm_gets_the_gpu_kind_that_holds_it(
    client, deployer, vm_profile, permitted, chosen
):
    vm_profile.kubevirt_devices = permitted
    vm_profile.save()
    response = dry_run(client, deployer)
    body = response.json()
    assert response.status_code == 200 and body["ok"], body.get("refusals")
    assert gpu_of(body)["model"] == chosen and gpu_of(body)["countPerReplica"] == 1
    machines = [o for o in body["objects"] if o["kind"] == "VirtualMachine"]
    assert machines, [o["kind"] for o in body["objects"]]
    assert not any("None" in p["message"] for p in body["warnings"])


def test_a_kind_given_is_kept(client, deployer, vm_profile):
    vm_profile.kubevirt_devices = [T4, H100]
    vm_profile.save()
    text = PARAKEET.replace("countPerReplica: 1", "countPerReplica: 1\n            model: h100")
    body = dry_run(client, deployer, text).json()
    assert body["ok"] and gpu_of(body)["model"] == "h100"


def test_a_vm_whose_gpus_kubevirt_passes_none_of_says_so_without_none(client, deployer, vm_profile):
    vm_profile.kubevirt_devices = []
    vm_profile.save()
    response = dry_run(client, deployer)
    assert response.status_code == 400
    said = [p["message"] for p in problems(response)]
    assert any("gpu.model: not set" in m and "Set gpu.model to one of t4, l4" in m for m in said)
    assert not any("None" in m for m in said), said
