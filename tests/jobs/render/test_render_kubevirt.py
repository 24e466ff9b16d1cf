"""The KubeVirt renderer: a table of VirtualMachine manifests (CPU, every GPU kind, several
replicas and nodes, parakeet, pvc://, capacity types, engine fields, Domain exposure) parsed,
rendered and validated against KubeVirt's OpenAPI definitions (../shared/reference/kubevirt)
with zero problems; the start plan in cloud-init carries exactly the manifest's arguments, and
hostile values never reach a shell.

Pure data: no database, no cluster.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.manifest import parse
from jobs.render import APP_LABEL, MANAGED_BY_LABEL, RenderError, render, validate
from jobs.render.cloud_init import (
    UNIT,
    USER_DATA_MAX,
    StartPlan,
    guest_files,
    launcher,
    plan_file,
    user_data,
)
from jobs.render.common import ORGANIZATION_LABEL
from tests.jobs.render.test_render import (
    CATALOG,
    CTX,
    GPU_KINDS,
    TARGETS,
    build,
    document,
    filled,
    gpu,
)

VM = {"runtime.isolation": "VirtualMachine"}
PARAKEET_URI = "hf://nvidia/parakeet-tdt-0.6b-v3:0123456789abcdef0123456789abcdef01234567"
ORG_TARGET = replace(TARGETS["prod"], organization="acme", organization_name="Acme")

CASES = {
    "cpu": {},
    "cpu-sized": {"resources.cpu": "4", "resources.memory": "16Gi"},
    "cpu-two-replicas": {"scaling.minReplicas": 2},
    **{f"gpu-{kind}": gpu(kind) for kind in GPU_KINDS if kind != "b200"},
    "gpu-h100-8": gpu("h100", 8),
    "gpu-spot": gpu("l4", 1, "Spot"),
    "gpu-on-demand": gpu("a10g", 2, "OnDemand"),
    "multinode-2": {**gpu("h100", 8), "resources.nodesPerReplica": 2},
    "multinode-3-two-replicas": {
        **gpu("a100-80gb", 4),
        "resources.nodesPerReplica": 3,
        "scaling.minReplicas": 2,
    },
    "multinode-4-pvc": {
        **gpu("h200", 8),
        "resources.nodesPerReplica": 4,
        "uri": "pvc://weights/llama-405b",
        "format": "vLLM",
    },
    "pvc-cpu": {"uri": "pvc://weights/qwen3", "format": "vLLM"},
    "engine-fields": {
        **gpu("l4", 2),
        "engine.dtype": "bfloat16",
        "engine.quantization": "fp8",
        "engine.gpuMemoryUtilization": 0.85,
        "engine.reasoningParser": "qwen3",
        "engine.toolCallParser": "hermes",
        "serving.maxContextTokens": 8192,
        "serving.maxConcurrentRequests": 64,
    },
    "extra-args": {**gpu("l4"), "engine.extraArgs": ["--seed=7", "--enforce-eager"]},
    "parakeet": {"uri": PARAKEET_URI},
    "parakeet-gpu": {"uri": PARAKEET_URI, **gpu("t4")},
    "domain": {
        "spec.access": {
            "exposure": "Domain",
            "domain": "models.example.com",
            "accessPolicy": "partners",
        }
    },
}


def vm_build(changes: dict, target=ORG_TARGET) -> list[dict]:
    return render(filled({**VM, **changes}), target, revision=4)


def machines(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] == "VirtualMachine"]


def instance(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def volumes_of(vm: dict) -> dict:
    return {v["name"]: v for v in instance(vm)["volumes"]}


def guest_of(objects: list[dict], vm: dict) -> dict[str, str]:
    """The guest files the machine reads: the ConfigMap its guest disk names."""
    name = volumes_of(vm)["guest"]["configMap"]["name"]
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
    return config["data"]


def plan_of(objects: list[dict], vm: dict) -> dict:
    return json.loads(guest_of(objects, vm)[plan_file(vm["metadata"]["name"])])


def user_data_of(vm: dict) -> dict:
    return yaml.safe_load(volumes_of(vm)["cloudinitdisk"]["cloudInitNoCloud"]["userData"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_rendered_object_passes_kubevirts_schema(case):
    objects = vm_build(CASES[case])
    assert validate(objects) == []
    assert machines(objects), [o["kind"] for o in objects]
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels[APP_LABEL] == "app"
        assert labels[MANAGED_BY_LABEL] == "servedeck"
        assert labels[ORGANIZATION_LABEL] == "acme"
        assert obj["metadata"]["annotations"]["servedeck.io/revision"] == "4"
    for vm in machines(objects):
        # The instances (and their virt-launcher pods) carry whose they are as well.
        template = vm["spec"]["template"]["metadata"]["labels"]
        assert template[APP_LABEL] == "app" and template[ORGANIZATION_LABEL] == "acme"
        # KubeVirt's webhook refuses inline user data above 2048 bytes.
        data = volumes_of(vm)["cloudinitdisk"]["cloudInitNoCloud"]["userData"]
        assert len(data.encode()) <= USER_DATA_MAX, len(data.encode())
    assert objects == vm_build(CASES[case])  # deterministic


def test_the_same_manifest_deploys_as_containers_or_machines_by_one_field():
    changes = gpu("l4", 2)
    containers = build(changes)
    vms = vm_build(changes)
    assert [o["kind"] for o in containers] == ["InferenceService"]
    assert [o["kind"] for o in vms] == [
        "PersistentVolumeClaim",
        "ConfigMap",
        "Service",
        "NetworkPolicy",
        "VirtualMachine",
    ]


def test_one_machine_per_node_of_each_replica_the_first_leads():
    objects = vm_build(CASES["multinode-3-two-replicas"])
    names = [vm["metadata"]["name"] for vm in machines(objects)]
    assert names == ["app-r0-n0", "app-r0-n1", "app-r0-n2", "app-r1-n0", "app-r1-n1", "app-r1-n2"]
    roles = [vm["metadata"]["labels"]["servedeck.io/role"] for vm in machines(objects)]
    assert roles == ["leader", "worker", "worker"] * 2
    claims = [o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert claims == ["app-weights-r0", "app-weights-r1"]  # one per replica, shared by its nodes
    for vm in machines(objects):
        spec = instance(vm)
        replica = vm["metadata"]["labels"]["servedeck.io/replica"]
        claim = next(v for v in spec["volumes"] if "persistentVolumeClaim" in v)
        assert claim["persistentVolumeClaim"]["claimName"] == f"app-weights-r{replica}"
        anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
        assert anti[0]["labelSelector"]["matchLabels"]["servedeck.io/replica"] == replica
        assert spec["subdomain"] == "app-nodes"
    pvc = next(o for o in objects if o["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    # Sized by the memory that holds the weights: 3 nodes x 4 GPUs x 80 GiB.
    assert pvc["spec"]["resources"]["requests"]["storage"] == "960Gi"


def test_a_single_node_cpu_replica_has_a_volume_of_its_memory():
    objects = vm_build(CASES["cpu-sized"])
    pvc = next(o for o in objects if o["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "16Gi"
    target = replace(ORG_TARGET, weights_storage_class="fast-rwx")
    pvc = next(o for o in vm_build({}, target) if o["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["storageClassName"] == "fast-rwx"


def test_gpus_pass_through_with_the_catalogs_device_name_and_placement():
    (vm,) = machines(vm_build(gpu("h100", 8, "OnDemand")))
    spec = instance(vm)
    assert spec["domain"]["devices"]["gpus"] == [
        {"name": f"gpu{i}", "deviceName": "nvidia.com/GH100_H100_SXM5_80GB"} for i in range(8)
    ]
    assert spec["domain"]["resources"]["requests"] == {"cpu": "24", "memory": "8Gi"}
    assert spec["domain"]["resources"]["limits"] == spec["domain"]["resources"]["requests"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expressions = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert {
        "key": "nvidia.com/gpu.product",
        "operator": "In",
        "values": ["NVIDIA-H100-80GB-HBM3"],
    } in expressions
    assert {
        "key": "karpenter.sh/capacity-type",
        "operator": "In",
        "values": ["on-demand"],
    } in expressions
    assert spec["readinessProbe"]["httpGet"] == {"path": "/v1/models", "port": 8000}
    disk = next(v for v in spec["volumes"] if "containerDisk" in v)
    assert disk["containerDisk"]["image"].startswith("ghcr.io/servedeck/vllm-vm:v")


def test_a_catalog_entry_names_its_own_device():
    catalog = [dict(k) for k in TARGETS["prod"].machine_catalog]
    for kind in catalog:
        if kind["name"] == "l4":
            kind["kubevirtDeviceName"] = "example.com/L4_PASSTHROUGH"
    target = replace(ORG_TARGET, machine_catalog=tuple(catalog))
    (vm,) = machines(vm_build(gpu("l4"), target))
    assert (
        instance(vm)["domain"]["devices"]["gpus"][0]["deviceName"] == "example.com/L4_PASSTHROUGH"
    )


def test_the_cloud_init_starts_vllm_with_exactly_the_manifests_arguments():
    objects = vm_build(CASES["engine-fields"] | {"engine.extraArgs": ["--seed=7"]})
    (vm,) = machines(objects)
    plan = plan_of(objects, vm)
    assert plan["exec"] == [
        "vllm",
        "serve",
        "/weights/model",
        "--host=0.0.0.0",
        "--port=8000",
        "--served-model-name=app",
        "--max-model-len=8192",
        "--tensor-parallel-size=2",
        "--pipeline-parallel-size=1",
        "--dtype=bfloat16",
        "--quantization=fp8",
        "--reasoning-parser=qwen3",
        "--tool-call-parser=hermes",
        "--enable-auto-tool-choice",
        "--gpu-memory-utilization=0.85",
        "--max-num-seqs=64",
        "--seed=7",
    ]
    assert plan["download"] == {
        "repo": "Qwen/Qwen3-8B",
        "to": "/weights/model",
        "revision": "5617a9f61b028005a4858fdac845db406aefb181",
    }
    # The token is read from the profile's Secret, mounted as a disk: never a value.
    assert plan["env"] == {
        "VLLM_MEDIA_URL_ALLOW_REDIRECTS": "0",
        "HF_HOME": "/weights/huggingface",
        "HF_TOKEN_PATH": "/run/servedeck/hf-token/HF_TOKEN",
    }
    volumes = {v["name"]: v for v in instance(vm)["volumes"]}
    assert volumes["hf-token"] == {"name": "hf-token", "secret": {"secretName": "hf-token"}}


def test_a_cpu_machine_starts_vllm_with_exactly_the_manifests_arguments_and_variables():
    changes = {
        "resources.memory": "16Gi",
        "serving.maxContextTokens": 4096,
        "serving.maxConcurrentRequests": 8,
        "serving.kvCacheSize": "6Gi",
        "engine.extraArgs": ["--seed=7"],
    }
    objects = vm_build(changes)
    (vm,) = machines(objects)
    plan = plan_of(objects, vm)
    assert plan["exec"] == [
        "vllm",
        "serve",
        "/weights/model",
        "--host=0.0.0.0",
        "--port=8000",
        "--served-model-name=app",
        "--max-model-len=4096",
        "--dtype=auto",  # parse's default on CPU: a manifest value like the others
        "--max-num-seqs=8",
        "--seed=7",
    ]
    # vLLM on CPU sizes its KV cache from a variable, not a flag.
    assert plan["env"] == {
        "VLLM_CPU_KVCACHE_SPACE": "6",
        "VLLM_MEDIA_URL_ALLOW_REDIRECTS": "0",
        "HF_HOME": "/weights/huggingface",
        "HF_TOKEN_PATH": "/run/servedeck/hf-token/HF_TOKEN",
    }
    # The same as the container gets from the same manifest (after KServe's own --backend).
    (isvc,) = [o for o in build(changes) if o["kind"] == "InferenceService"]
    container = isvc["spec"]["predictor"]["model"]
    assert container["args"] == ["--backend=vllm", *plan["exec"][6:]]
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "6"} in container["env"]


def test_multi_node_leader_and_workers_join_with_ray():
    objects = vm_build(CASES["multinode-2"])
    leader, worker = machines(objects)
    lead = plan_of(objects, leader)
    assert "--pipeline-parallel-size=2" in lead["exec"]
    assert "--tensor-parallel-size=8" in lead["exec"]
    assert "--distributed-executor-backend=ray" in lead["exec"]
    assert lead["steps"][-1][:3] == ["ray", "start", "--head"]
    work = plan_of(objects, worker)
    assert work["exec"][:3] == [
        "ray",
        "start",
        "--address=app-r0-n0.app-nodes.ml-serving.svc.cluster.local:6379",
    ]
    # Each machine advertises the address its name has in the headless Service: its launcher
    # checks the guest holds it (a bridged interface takes the pod's address; masquerade would
    # give every guest 10.0.2.2) and hands it to Ray and vLLM.
    assert lead["advertise"] == "app-r0-n0.app-nodes.ml-serving.svc.cluster.local"
    assert work["advertise"] == "app-r0-n1.app-nodes.ml-serving.svc.cluster.local"
    for vm in (leader, worker):
        assert instance(vm)["domain"]["devices"]["interfaces"] == [
            {"name": "default", "bridge": {}}
        ]
        assert instance(vm)["networks"] == [{"name": "default", "pod": {}}]
        assert instance(vm)["evictionStrategy"] == "None"  # no live migration to refuse
    assert lead["probe_port"] == 8000 and "probe_port" not in work
    assert lead["mounts"] == work["mounts"] == {"/weights": "weights"}
    assert "download" not in work and "readinessProbe" not in instance(worker)
    assert "hf-token" not in {v["name"] for v in instance(worker)["volumes"]}
    service = next(o for o in objects if o["metadata"]["name"] == "app-predictor")
    assert service["spec"]["selector"]["servedeck.io/role"] == "leader"
    assert service["spec"]["ports"][0]["port"] == 80
    peers_service = next(o for o in objects if o["metadata"]["name"] == "app-nodes")
    assert peers_service["spec"]["clusterIP"] == "None"


def test_single_node_opens_only_the_serving_port():
    objects = vm_build(gpu("l4"))
    (vm,) = machines(objects)
    # One machine has no peer to advertise to: the pod's NAT serves it.
    assert instance(vm)["domain"]["devices"]["interfaces"] == [
        {"name": "default", "masquerade": {}}
    ]
    assert "advertise" not in plan_of(objects, vm)
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"] == [SERVED]
    assert not any(o["metadata"]["name"] == "app-nodes" for o in objects)


GATEWAY_NAMESPACE = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "servedeck"}}
}
SERVED = {"ports": [{"protocol": "TCP", "port": 8000}], "from": [GATEWAY_NAMESPACE]}
APP = {"servedeck.io/application": "app", "servedeck.io/organization": "acme"}


def selected(policy: dict) -> dict:
    labels = policy["spec"]["podSelector"]["matchLabels"]
    return {k: v for k, v in labels.items() if k != "servedeck.io/namespace"}


def test_each_replica_is_open_to_its_own_machines_only_and_the_port_to_the_gateway():
    objects = vm_build(CASES["multinode-3-two-replicas"])
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "NetworkPolicy"}
    assert sorted(policies) == ["app", "app-peers-r0", "app-peers-r1"]
    # The serving port: on the leaders, from the gateway's namespace (the setting's default).
    assert selected(policies["app"]) == {**APP, "servedeck.io/role": "leader"}
    assert policies["app"]["spec"]["ingress"] == [SERVED]
    # Ray and NCCL: any port, between the machines of one replica.
    for replica in ("0", "1"):
        policy = policies[f"app-peers-r{replica}"]
        own = {**APP, "servedeck.io/replica": replica}
        assert selected(policy) == own
        (peers,) = policy["spec"]["ingress"]
        assert peers == {"from": [{"podSelector": policy["spec"]["podSelector"]}]}
        assert "ports" not in peers and policy["spec"]["policyTypes"] == ["Ingress"]
    # Every machine is selected by some policy, so nothing else comes in.
    for vm in machines(objects):
        labels = vm["spec"]["template"]["metadata"]["labels"]
        assert any(
            all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())
            for p in policies.values()
        ), vm["metadata"]["name"]


def test_the_callers_namespaces_are_a_setting():
    target = replace(ORG_TARGET, vm_caller_namespaces=("edge", "servedeck"))
    (policy,) = [o for o in vm_build(gpu("l4"), target) if o["kind"] == "NetworkPolicy"]
    (served,) = policy["spec"]["ingress"]
    assert [f["namespaceSelector"]["matchLabels"] for f in served["from"]] == [
        {"kubernetes.io/metadata.name": "edge"},
        {"kubernetes.io/metadata.name": "servedeck"},
    ]
    anyone = replace(ORG_TARGET, vm_caller_namespaces=("*",))
    (policy,) = [o for o in vm_build(gpu("l4"), anyone) if o["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8000}]}]


def test_parakeet_runs_its_speech_to_text_server():
    objects = vm_build(CASES["parakeet"])
    (vm,) = machines(objects)
    plan = plan_of(objects, vm)
    assert plan["exec"] == [
        "parakeet-server",
        "--model_name=app",
        "--model_dir=/weights/model",
        "--http_port=8080",
    ]
    spec = instance(vm)
    assert spec["readinessProbe"]["httpGet"]["port"] == 8080
    disk = next(v for v in spec["volumes"] if "containerDisk" in v)
    assert disk["containerDisk"]["image"].startswith("ghcr.io/servedeck/parakeet-vm:")
    service = next(o for o in objects if o["kind"] == "Service")
    assert service["spec"]["ports"][0]["targetPort"] == 8080


def test_a_pvc_artifact_is_mounted_read_only_without_a_weight_volume():
    objects = vm_build(CASES["pvc-cpu"])
    assert "PersistentVolumeClaim" not in [o["kind"] for o in objects]
    (vm,) = machines(objects)
    volumes = {v["name"]: v for v in instance(vm)["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "weights", "readOnly": True}
    assert plan_of(objects, vm)["exec"][2] == "/mnt/models/qwen3"
    assert "download" not in plan_of(objects, vm)


HOSTILE = [
    "--response-role=$(reboot); rm -rf / #'\"`id`",
    '--override-generation-config={"x": "\'; shutdown -h now; echo \'\\n runcmd: [reboot]"}',
]


def test_hostile_engine_values_reach_the_server_as_one_argument_each():
    objects = vm_build({"engine.extraArgs": HOSTILE})
    (vm,) = machines(objects)
    config = user_data_of(vm)
    assert sorted(config) == ["mounts", "runcmd"]
    assert config["runcmd"] == [
        [
            "cp",
            "/run/servedeck/guest/servedeck-model.service",
            "/etc/systemd/system/servedeck-model@.service",
        ],
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", "--now", "servedeck-model@app-r0-n0.service"],
    ]
    files = guest_of(objects, vm)
    assert sorted(files) == ["app-r0-n0.json", "launch.py", "servedeck-model.service"]
    assert files["launch.py"] == launcher()
    assert files["servedeck-model.service"] == UNIT
    assert json.loads(files["app-r0-n0.json"])["exec"][-2:] == HOSTILE


@pytest.mark.parametrize(
    "value",
    [
        "x\nruncmd: [[reboot]]",
        "x'\n- [sh, -c, reboot]",
        '"; reboot; "',
        "$(reboot)",
        "%h $HOME ${PATH} \\",
        "#cloud-config\nbootcmd: [reboot]",
    ],
)
def test_the_guest_files_hold_any_value_as_data(value):
    plan = StartPlan(exec=("vllm", "serve", value), env={"X": value}, steps=((value,),))
    files = guest_files({"app-r0-n0": plan})
    written = json.loads(files["app-r0-n0.json"])
    assert written["exec"] == ["vllm", "serve", value]
    assert written["env"] == {"X": value} and written["steps"] == [[value]]
    assert value not in files["servedeck-model.service"]
    # The user data names the machine only: no value of the plan is in it.
    data = user_data("app-r0-n0", weights=True, models=False, hf_token=False)
    assert value not in data and sorted(yaml.safe_load(data)) == ["mounts", "runcmd"]


def test_a_changed_plan_is_a_changed_machine():
    """The machines name the ConfigMap only: their template hash covers the files they read, so
    a new revision that changes only arguments still replaces their instances."""

    def hashes(changes):
        return [
            vm["spec"]["template"]["metadata"]["annotations"]["servedeck.io/template-hash"]
            for vm in machines(vm_build(changes))
        ]

    leader, worker = hashes(CASES["multinode-2"])
    changed = hashes(CASES["multinode-2"] | {"engine.extraArgs": ["--seed=7"]})
    assert changed[0] != leader  # the leader's plan changed
    assert changed[1] == worker  # the worker's did not


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"resources.accelerator": {"gpu": {"countPerReplica": 1}}}, "gpu.model", "device name"),
        ({"uri": "s3://bucket/model", "format": "vLLM"}, "model.uri", "hf://"),
        ({"scaling.minReplicas": 1, "scaling.maxReplicas": 3}, "maxReplicas", "fixed number"),
        ({"uri": "pvc://w/m", "format": "SKLearn"}, "runtime.engine", "vllm or parakeet"),
        (gpu("b200"), "gpu.model", "kubevirtDeviceName"),
        (
            {**gpu("l4"), "cache": {"enabled": True, "size": "20Gi", "nodeGroup": "gpu-l4"}},
            "cache.enabled",
            "own volume",
        ),
    ],
)
def test_what_a_virtual_machine_cannot_run_is_a_render_error_naming_the_field(changes, field, says):
    with pytest.raises(RenderError) as error:
        vm_build(changes)
    assert field in str(error.value) and says in str(error.value)


def test_the_schema_check_finds_what_kubevirt_would_refuse():
    objects = vm_build(CASES["multinode-2"])
    broken = copy.deepcopy(objects)
    vm = machines(broken)[0]
    instance(vm)["domain"]["devices"]["gpus"][0]["bogus"] = True
    instance(vm)["domain"]["devices"]["disks"].append({"name": "nowhere", "disk": {}})
    vm["spec"]["runStrategy"] = 3
    del instance(vm)["domain"]["devices"]["filesystems"][0]["virtiofs"]
    problems = validate(broken)
    assert any("gpus[0]: Additional properties are not allowed ('bogus'" in p for p in problems)
    assert any("spec.runStrategy: 3 is not of type 'string'" in p for p in problems)
    assert any("'nowhere' names no volume" in p for p in problems)
    assert any("'virtiofs' is a required property" in p for p in problems)
    assert all(p.startswith("VirtualMachine ml-serving/app-r0-n0:") for p in problems)


def test_the_emulators_kubevirt_objects_are_real_shapes():
    from tests.fakes.kube_objects import instance_of, kubevirt_cr

    (vm,) = machines(vm_build(gpu("l4")))
    assert validate([instance_of(vm)]) == []
    assert validate([kubevirt_cr("nvidia.com/AD104GL_L4")]) == []


PER_NODE = {kind["name"]: kind["gpusPerNode"] for kind in CATALOG}


@st.composite
def vm_manifests(draw: st.DrawFn) -> dict:
    """Manifests parse accepts, drawn from its rules: a GPU count the kind's nodes hold, engine
    arguments only for vLLM (parakeet takes none)."""
    changes: dict = dict(VM)
    if draw(st.booleans()):
        kind = draw(st.sampled_from([k for k in GPU_KINDS if k != "b200"]))
        capacity = draw(st.sampled_from([None, "OnDemand", "Spot", "Any"]))
        changes |= gpu(kind, draw(st.integers(1, PER_NODE[kind])), capacity)
        changes["resources.nodesPerReplica"] = draw(st.integers(1, 4))
    low = draw(st.integers(1, 3))
    changes["scaling"] = {"minReplicas": low, "maxReplicas": low}
    parakeet = False
    if draw(st.booleans()):
        changes["uri"] = draw(st.sampled_from([PARAKEET_URI, "pvc://store/models/m"]))
        parakeet = changes["uri"] == PARAKEET_URI
        if not parakeet:
            changes["format"] = "vLLM"
    if draw(st.booleans()):
        changes["serving.maxContextTokens"] = draw(st.integers(256, 32768))
    if not parakeet and draw(st.booleans()):
        changes["engine.extraArgs"] = draw(
            st.lists(st.sampled_from(["--enforce-eager", "--seed=1", "--response-role=$(id)"]))
        )
    if draw(st.booleans()):
        changes["spec.access"] = CASES["domain"]["spec.access"]
    return changes


# Every drawn manifest must parse: a refused one fails the test (with parse's reasons) instead
# of vanishing, so the property keeps covering what it claims to.
@settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(vm_manifests())
def test_every_accepted_virtual_machine_manifest_renders_to_valid_objects(changes):
    result = parse(document(changes), CTX)
    assert result.ok, [f"{p.path}: {p.message}" for p in result.refusals]
    objects = render(result.manifest, ORG_TARGET, revision=1)
    assert validate(objects) == []
    nodes = result.manifest["spec"]["source"]["model"]["resources"].get("nodesPerReplica", 1)
    replicas = result.manifest["spec"]["source"]["model"]["scaling"]["minReplicas"]
    assert len(machines(objects)) == nodes * replicas
    for vm in machines(objects):
        assert plan_of(objects, vm)["exec"]  # every machine starts something, from its plan


def test_services_volumes_guest_files_and_the_policy_are_checked_as_kubernetes_would():
    broken = copy.deepcopy(vm_build(CASES["multinode-2"]))
    by_name = {o["metadata"]["name"]: o for o in broken}
    by_name["app"]["spec"]["ingress"][0]["ports"][0]["bogus"] = 1
    by_name["app-predictor"]["spec"]["ports"][0]["port"] = "eighty"
    by_name["app-weights-r0"]["spec"]["accessMode"] = ["ReadWriteOnce"]
    by_name["app-guest"]["data"]["servedeck-model@.service"] = "[Unit]"
    problems = validate(broken)
    assert problems == [
        "PersistentVolumeClaim ml-serving/app-weights-r0: spec.accessMode: unknown field (not "
        "in V1PersistentVolumeClaimSpec)",
        "ConfigMap ml-serving/app-guest: data.servedeck-model@.service: not a ConfigMap key "
        "(letters, digits, '-', '_' and '.' only)",
        "Service ml-serving/app-predictor: port: Input should be a valid integer",
        "NetworkPolicy ml-serving/app: spec.ingress[0].ports[0].bogus: unknown field (not in "
        "V1NetworkPolicyPort)",
    ]
