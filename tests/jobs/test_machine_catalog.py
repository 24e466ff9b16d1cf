"""A local profile's machine catalog is this machine as it is: readings to a catalog (pure,
by tables), nvidia-smi's answer parsed, and `bootstrap` / `profile discover` making it from
this machine, with nvidia-smi a script on PATH (present, absent) through the real subprocess."""

import os
import re
import stat
from io import StringIO

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from accesspolicies.models import Organization
from jobs.backends.local.machine_check import machine, parse_gpu_query, read_machine
from jobs.machine_catalog import (
    CPU_MACHINE,
    GPU_PRODUCT_LABEL,
    GpuReading,
    MachineReadings,
    cpu_machines,
    default_machine_catalog,
    describe_catalog,
    gpu_kind_name,
    gpu_kinds,
    is_default_catalog,
    machine_catalog,
)
from jobs.models import Cluster, Profile

# "t4" as a word, not inside a CSRF token or a draft key that happens to hold it
T4 = re.compile(r"(?<![\w-])t4(?![\w-])")

GIB = 2**30
L4 = GpuReading("NVIDIA L4", 23034)


def cpu_entry(cores: str, memory: str) -> dict:
    return {
        "name": CPU_MACHINE,
        "gpusPerNode": 0,
        "nodes": 1,
        "nodeCpu": cores,
        "nodeMemory": memory,
    }


def gpu_entry(name, product, memory, count, cores, node_memory) -> dict:
    return {
        "name": name,
        "vendor": "nvidia",
        "gpuMemory": memory,
        "gpusPerNode": count,
        "nodes": 1,
        "nodeCpu": cores,
        "nodeMemory": node_memory,
        "nodeLabels": {GPU_PRODUCT_LABEL: product},
    }


READINGS = [
    # (what was read, the catalog made from it)
    pytest.param(
        MachineReadings(cores=2, memory_bytes=8 * GIB),
        [cpu_entry("2", "8192Mi")],
        id="cpu-only",
    ),
    pytest.param(
        MachineReadings(cores=0, memory_bytes=-1),
        [cpu_entry("1", "0Mi")],
        id="nonsense-readings-are-clamped",
    ),
    pytest.param(
        MachineReadings(cores=16, memory_bytes=64 * GIB + 123, gpus=(L4,)),
        [gpu_entry("l4", "NVIDIA-L4", "23034Mi", 1, "16", "65536Mi"), cpu_entry("16", "65536Mi")],
        id="one-l4",
    ),
    pytest.param(
        MachineReadings(
            cores=64,
            memory_bytes=512 * GIB,
            gpus=(GpuReading("NVIDIA H100 80GB HBM3", 81559),) * 4,
        ),
        [
            gpu_entry("h100", "NVIDIA-H100-80GB-HBM3", "81559Mi", 4, "64", "524288Mi"),
            cpu_entry("64", "524288Mi"),
        ],
        id="four-h100-named-as-the-default-catalog",
    ),
    pytest.param(
        MachineReadings(
            cores=24,
            memory_bytes=128 * GIB,
            gpus=(
                GpuReading("NVIDIA GeForce RTX 4090", 24564),
                GpuReading("NVIDIA GeForce RTX 3090", 24576),
                GpuReading("NVIDIA GeForce RTX 4090", 24000),
            ),
        ),
        [
            gpu_entry(
                "geforce-rtx-4090", "NVIDIA-GeForce-RTX-4090", "24000Mi", 2, "24", "131072Mi"
            ),
            gpu_entry(
                "geforce-rtx-3090", "NVIDIA-GeForce-RTX-3090", "24576Mi", 1, "24", "131072Mi"
            ),
            cpu_entry("24", "131072Mi"),
        ],
        id="mixed-products-one-kind-each-smallest-memory",
    ),
]


@pytest.mark.parametrize(("readings", "catalog"), READINGS)
def test_readings_make_the_catalog(readings, catalog):
    assert machine_catalog(readings) == catalog


@pytest.mark.parametrize(
    ("product", "name"),
    [
        ("Tesla T4", "t4"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("NVIDIA Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
        ("  ", "gpu"),
    ],
)
def test_gpu_kind_names(product, name):
    assert gpu_kind_name(product) == name


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        ("NVIDIA L4, 23034\n", (L4,)),
        ("NVIDIA L4, 23034\nNVIDIA L4, 23034\n", (L4, L4)),
        ("NVIDIA GeForce RTX 4090, 24564", (GpuReading("NVIDIA GeForce RTX 4090", 24564),)),
        ("", ()),
        ("No devices were found\n", ()),
        ("NVIDIA L4, [N/A]\n", ()),
        ("GPU 0: NVIDIA L4 (UUID: GPU-00000000)\n", ()),  # the -L format is not this one
    ],
)
def test_nvidia_smi_query_parsed(text, gpus):
    assert parse_gpu_query(text) == gpus


def test_gpu_kinds_and_machines_split_the_catalog():
    catalog = machine_catalog(MachineReadings(cores=8, memory_bytes=32 * GIB, gpus=(L4,)))
    assert [k["name"] for k in gpu_kinds(catalog)] == ["l4"]
    assert [k["name"] for k in cpu_machines(catalog)] == [CPU_MACHINE]
    assert [k["name"] for k in gpu_kinds(default_machine_catalog())][0] == "t4"
    assert cpu_machines(default_machine_catalog()) == []
    assert gpu_kinds([None, {"name": 3}, "x"]) == []


@pytest.mark.parametrize(
    ("catalog", "text"),
    [
        ([cpu_entry("2", "8192Mi")], "none (CPU only: 2 cores, 8192Mi)"),
        ([], "none (CPU only)"),
        (default_machine_catalog()[:2], "t4, l4"),
    ],
)
def test_catalog_described(catalog, text):
    assert describe_catalog(catalog) == text


def test_only_the_shipped_default_is_the_default():
    assert is_default_catalog(default_machine_catalog())
    edited = default_machine_catalog()[:1]
    assert not is_default_catalog(edited)
    assert not is_default_catalog([cpu_entry("2", "8192Mi")])


# ---- this machine, read through nvidia-smi on PATH ----


@pytest.fixture
def no_nvidia_smi(tmp_path, monkeypatch):
    """A machine without NVIDIA's tools: nothing named nvidia-smi on PATH."""
    folder = tmp_path / "empty-bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))


@pytest.fixture
def two_l4(tmp_path, monkeypatch):
    """A machine with two L4s: nvidia-smi answers the query the catalog is made from."""
    folder = tmp_path / "bin"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--query-gpu=name,memory.total*) '
        "printf 'NVIDIA L4, 23034\\nNVIDIA L4, 23034\\n';; "
        "*) echo 'GPU 0: NVIDIA L4 (UUID: GPU-0)'; echo 'GPU 1: NVIDIA L4 (UUID: GPU-1)';; esac\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_a_machine_without_nvidia_smi_reads_as_cpu_only(no_nvidia_smi):
    readings, problem = read_machine()
    here = machine()
    assert readings == MachineReadings(cores=here.cores, memory_bytes=here.memory)
    assert problem == "nvidia-smi is not on the console host's PATH"


def test_a_machine_with_gpus_reads_them(two_l4):
    readings, problem = read_machine()
    assert problem is None
    assert readings.gpus == (L4, L4)
    assert [k["name"] for k in gpu_kinds(machine_catalog(readings))] == ["l4"]


def bootstrap() -> str:
    out = StringIO()
    call_command("bootstrap", "--org", "first", "--admin", "root", stdout=out)
    return out.getvalue()


def test_bootstrap_makes_the_local_profile_from_this_machine(db, no_nvidia_smi, monkeypatch):
    monkeypatch.setenv("SERVEDECK_ADMIN_PASSWORD", "a-long-and-unusual-password-7")
    bootstrap()
    profile = Profile.objects.get(organization__slug="first", name="local")
    here = machine()
    assert profile.machine_catalog == [cpu_entry(str(here.cores), f"{here.memory // 2**20}Mi")]
    assert not T4.search(str(profile.machine_catalog))


def test_bootstrap_corrects_local_profiles_with_the_default_catalog(db, two_l4, monkeypatch):
    """Local profiles made before discovery carry the default (a cluster's) catalog: bootstrap
    sets them to this machine; a Kubernetes profile, and a local catalog an admin edited, stay."""
    monkeypatch.setenv("SERVEDECK_ADMIN_PASSWORD", "a-long-and-unusual-password-7")
    org = Organization.objects.create(slug="old", name="Old")
    local = Cluster.objects.create(organization=org, name="here")
    kube = Cluster.objects.create(
        organization=org, name="eks", backend=Cluster.Backend.KUBERNETES, kubeconfig_path="/x"
    )
    stale = Profile.objects.create(organization=org, name="stale", cluster=local)
    edited = Profile.objects.create(
        organization=org, name="edited", cluster=local, machine_catalog=[cpu_entry("1", "1Gi")]
    )
    cluster_profile = Profile.objects.create(organization=org, name="gpus", cluster=kube)
    assert is_default_catalog(stale.machine_catalog)
    out = bootstrap()
    stale.refresh_from_db()
    edited.refresh_from_db()
    cluster_profile.refresh_from_db()
    assert [k["name"] for k in stale.machine_catalog] == ["l4", CPU_MACHINE]
    assert stale.machine_catalog[0]["gpusPerNode"] == 2
    assert edited.machine_catalog == [cpu_entry("1", "1Gi")]
    assert is_default_catalog(cluster_profile.machine_catalog)
    assert "old/stale" in out and "2 x NVIDIA L4" in out
    first = Profile.objects.get(organization__slug="first", name="local")
    assert [k["name"] for k in first.machine_catalog] == ["l4", CPU_MACHINE]
    # Run again: nothing left to correct, nothing said about it.
    assert "Machine catalog" not in bootstrap()


def profile_cli(*args) -> str:
    out = StringIO()
    call_command("profile", *args, "--org", "acme", "--user", "ada", stdout=out)
    return out.getvalue()


def test_profile_discover_resets_a_local_catalog(admin, no_nvidia_smi):
    profile = Profile.objects.get(organization=admin.organization, name="local")
    profile.machine_catalog = [cpu_entry("1", "1Gi")]
    profile.save()
    out = profile_cli("discover", "local")
    profile.refresh_from_db()
    assert [k["name"] for k in profile.machine_catalog] == [CPU_MACHINE]
    assert profile.machine_catalog[0]["nodeCpu"] == str(machine().cores)
    assert "no GPU (nvidia-smi is not on the console host's PATH)" in out
    assert "none (CPU only" in profile_cli("list")


def test_profile_discover_refuses_a_kubernetes_profile(admin):
    org = admin.organization
    kube = Cluster.objects.create(
        organization=org, name="eks", backend=Cluster.Backend.KUBERNETES, kubeconfig_path="/x"
    )
    Profile.objects.create(organization=org, name="gpus", cluster=kube)
    with pytest.raises(CommandError, match="only a local profile's catalog is this machine"):
        profile_cli("discover", "gpus")
    with pytest.raises(CommandError, match="No profile named 'nope'"):
        profile_cli("discover", "nope")


def test_profile_add_on_a_local_cluster_discovers_the_machine(admin, no_nvidia_smi):
    profile_cli("add", "laptop", "--cluster", "local", "--vllm-version", "0.13.0")
    profile = Profile.objects.get(organization=admin.organization, name="laptop")
    assert [k["name"] for k in profile.machine_catalog] == [CPU_MACHINE]


# ---- the profile page ----


def test_profile_page_discovers_this_machine(as_admin, admin, no_nvidia_smi):
    profile = Profile.objects.get(organization=admin.organization, name="local")
    page = as_admin.get(reverse("jobs:profile-edit", args=["local"])).content.decode()
    assert "Discover this machine" in page
    response = as_admin.post(reverse("jobs:profile-discover", args=["local"]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("jobs:profile-edit", args=["local"])
    body = response.content.decode()
    assert "local: the machine catalog is this machine" in body and "no GPU" in body
    profile.refresh_from_db()
    assert [k["name"] for k in profile.machine_catalog] == [CPU_MACHINE]


def test_profile_page_of_a_kubernetes_profile_has_no_machine_to_discover(as_admin, admin):
    org = admin.organization
    kube = Cluster.objects.create(
        organization=org, name="eks", backend=Cluster.Backend.KUBERNETES, kubeconfig_path="/x"
    )
    profile = Profile.objects.create(organization=org, name="gpus", cluster=kube)
    page = as_admin.get(reverse("jobs:profile-edit", args=["gpus"])).content.decode()
    assert "Discover this machine" not in page
    response = as_admin.post(reverse("jobs:profile-discover", args=["gpus"]), follow=True)
    assert "its catalog is its node groups" in response.content.decode()
    profile.refresh_from_db()
    assert is_default_catalog(profile.machine_catalog)


def test_profile_discover_needs_an_admin(as_deployer, admin):
    response = as_deployer.post(reverse("jobs:profile-discover", args=["local"]))
    assert response.status_code == 403


def test_the_profile_form_gives_a_local_profile_this_machine(as_admin, admin, no_nvidia_smi):
    """The page's form starts from the default catalog; saved so for a local cluster, the
    profile gets this machine instead (a catalog the admin changed is kept as typed)."""
    cluster = Cluster.objects.get(organization=admin.organization, name="local")
    form = {
        "cluster": cluster.pk,
        "namespace": "default",
        "vllm_version": "0.13.0",
        "defaults_yaml": "",
    }
    add = reverse("jobs:profile-add")
    default = yaml.safe_dump(default_machine_catalog(), sort_keys=False)
    as_admin.post(add, {**form, "name": "p2", "machine_catalog_yaml": default})
    mine = "- name: cpu\n  gpusPerNode: 0\n  nodeMemory: 2Gi\n"
    as_admin.post(add, {**form, "name": "p3", "machine_catalog_yaml": mine})
    made = {p.name: p.machine_catalog for p in Profile.objects.filter(name__in=["p2", "p3"])}
    assert [k["name"] for k in made["p2"]] == [CPU_MACHINE]
    assert made["p2"][0]["nodeCpu"] == str(machine().cores)
    assert made["p3"] == [{"name": "cpu", "gpusPerNode": 0, "nodeMemory": "2Gi"}]
