"""derive_status: each Kubernetes status shape and the phase, reason and next step it maps to.

The objects are built by the small helpers below in the shapes KServe, the kubelet, the
scheduler, the ReplicaSet controller and Kueue write (field names and message formats from
their documentation); the table says what the user should read for each.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.models import Phase
from jobs.status import INTERNAL_ERROR, Status, derive_status

NOW = datetime(2025, 6, 2, 12, 0, tzinfo=UTC)
NS = "ml-serving"
APP = "llama"
URL = "http://llama.ml-serving.example.com"
IMAGE = "vllm/vllm-openai:v0.13.0"
OLD, NEW = "5d8f7b9c4", "7c6b5a4d3"  # pod-template-hash of two revisions
P1, P2, P3 = (f"{APP}-predictor-{OLD}-{s}" for s in ("x7k2p", "q9w3e", "z8r5t"))
N1 = f"{APP}-predictor-{NEW}-m2n4b"
GPU_SHORT = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
    "available: 3 No preemption victims found for incoming pod."
)


# --- builders ---------------------------------------------------------------------------------


def ago(minutes: float) -> str:
    return (NOW - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    found = {"type": kind, "status": status, "lastTransitionTime": ago(5)}
    return (
        found | ({"reason": reason} if reason else {}) | ({"message": message} if message else {})
    )


READY = [cond(k) for k in ("IngressReady", "PredictorReady", "Ready", "LatestDeploymentReady")]


def model(active: str = "", target: str = "", transition: str = "", **failure: Any) -> dict:
    found: dict[str, Any] = {"transitionStatus": transition}
    if active or target:
        found["states"] = {"activeModelState": active, "targetModelState": target}
    if failure:
        found["lastFailureInfo"] = {"time": ago(2), **failure}
    return found


LOADED = model("Loaded", "Loaded", "UpToDate") | {"copies": {"failedCopies": 0, "totalCopies": 2}}


def isvc(
    *conditions: dict,
    status: bool = True,
    url: str = "",
    address: str = "",
    model_status: dict | None = None,
    annotations: dict | None = None,
    deleted: float | None = None,
    components: dict | None = None,
    extra_status: dict | None = None,
    generation: int = 2,
) -> dict:
    meta: dict[str, Any] = {"name": APP, "namespace": NS, "generation": generation, "uid": "0b5e"}
    meta["annotations"] = {
        "serving.kserve.io/deploymentMode": "Standard",
        **(annotations or {}),
    }
    if deleted is not None:
        meta |= {"deletionTimestamp": ago(deleted), "finalizers": ["inferenceservice.finalizers"]}
    obj = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": meta,
        "spec": {"predictor": {"model": {"modelFormat": {"name": "vLLM"}}}},
    }
    if status:
        found: dict[str, Any] = {"observedGeneration": 2, "conditions": list(conditions)}
        found |= {"url": url} if url else {}
        found |= {"address": {"url": address}} if address else {}
        found |= {"modelStatus": model_status} if model_status else {}
        found |= {"components": {"predictor": components}} if components else {}
        obj["status"] = found | (extra_status or {})
    return obj


def running(minutes: float = 3) -> dict:
    return {"running": {"startedAt": ago(minutes)}}


def waiting(reason: str, message: str = "") -> dict:
    return {"waiting": {"reason": reason} | ({"message": message} if message else {})}


def terminated(reason: str, code: int, message: str = "") -> dict:
    done = {"reason": reason, "exitCode": code, "startedAt": ago(4), "finishedAt": ago(3)}
    return {"terminated": done | ({"message": message} if message else {})}


def box(
    state: dict | None = None,
    *,
    name: str = "kserve-container",
    ready: bool = False,
    restarts: int = 0,
    last: dict | None = None,
    image: str = IMAGE,
) -> dict:
    """A containerStatuses entry."""
    found = {"name": name, "image": image, "ready": ready, "restartCount": restarts}
    found |= {"state": state or {}} | ({"lastState": last} if last else {})
    return found


def downloader(state: dict) -> dict:
    return box(state, name="storage-initializer", image="kserve/storage-initializer:v0.15.0")


DOWNLOADED = downloader(terminated("Completed", 0))


def pod(
    name: str,
    *containers: dict,
    init: tuple[dict, ...] = (DOWNLOADED,),
    phase: str = "Running",
    ready: bool = False,
    node: str = "gpu-node-1",
    revision: str = OLD,
    scheduled: dict | None = None,
    gated: str = "",
    created: float = 10,
    memory: str = "8Gi",
    gpus: int = 1,
    leaving: bool = False,
) -> dict:
    labels = {
        "serving.kserve.io/inferenceservice": APP,
        "servedeck.io/application": APP,
        "component": "predictor",
    }
    labels |= {"serving.knative.dev/revision": revision} if "-0000" in revision else {}
    labels |= {"pod-template-hash": revision} if "-0000" not in revision else {}
    labels |= {"kueue.x-k8s.io/queue-name": gated} if gated else {}
    limits = {"memory": memory} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    main = {"name": "kserve-container", "image": containers[0]["image"] if containers else IMAGE}
    spec: dict[str, Any] = {
        "containers": [main | {"resources": {"limits": limits, "requests": limits}}],
        "initContainers": [{"name": c["name"], "image": c["image"]} for c in init],
    }
    spec |= {"nodeName": node} if node else {}
    spec |= {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]} if gated else {}
    conditions = [cond("PodScheduled", "True")] if node else []
    conditions += [scheduled] if scheduled else []
    conditions += [cond("Ready", "True" if ready else "False")] if node else []
    meta = {"name": name, "namespace": NS, "labels": labels, "creationTimestamp": ago(created)}
    meta |= {"deletionTimestamp": ago(0.5)} if leaving else {}
    status = {"phase": phase, "conditions": conditions}
    status |= {"initContainerStatuses": list(init), "containerStatuses": list(containers)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def serving(name: str, revision: str = OLD, created: float = 60) -> dict:
    return pod(name, box(running(50), ready=True), ready=True, revision=revision, created=created)


def loading(name: str, revision: str = OLD, created: float = 5) -> dict:
    return pod(name, box(running(3)), revision=revision, created=created)


def unplaced(name: str, message: str = "", **kw: Any) -> dict:
    scheduled = cond("PodScheduled", "False", "Unschedulable", message) if message else None
    kw.setdefault("init", ())
    return pod(name, phase="Pending", node="", scheduled=scheduled, **kw)


def crashing(name: str, last: dict, restarts: int = 4, **kw: Any) -> dict:
    state = waiting("CrashLoopBackOff", f"back-off 2m40s restarting failed container={name}")
    return pod(name, box(state, restarts=restarts, last=last), **kw)


def event(
    kind: str, name: str, reason: str, message: str, minutes: float = 1, type_: str = "Warning"
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.17d2a", "namespace": NS},
        "involvedObject": {"kind": kind, "name": name, "namespace": NS},
        "type": type_,
        "reason": reason,
        "message": message,
        "count": 3,
        "firstTimestamp": ago(minutes + 5),
        "lastTimestamp": ago(minutes),
    }


def workload(reason: str, message: str, minutes: float = 1) -> dict:
    return event("Workload", f"pod-{P1}-3f2a1", reason, message, minutes, "Normal")


QUOTA_MESSAGE = (
    f'Error creating: pods "{APP}-predictor-{OLD}-abcde" is forbidden: exceeded quota: '
    "gpu-quota, requested: requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=4, "
    "limited: requests.nvidia.com/gpu=4"
)
PULL_NOT_FOUND = (
    'Failed to pull image "vllm/vllm-openai:v9.9.9": rpc error: code = NotFound desc = failed to '
    'pull and unpack image "docker.io/vllm/vllm-openai:v9.9.9": failed to resolve reference '
    '"docker.io/vllm/vllm-openai:v9.9.9": docker.io/vllm/vllm-openai:v9.9.9: not found'
)
KV_CACHE = (
    "Traceback (most recent call last):\n  ...\nValueError: The model's max seq len (131072) "
    "is larger than the maximum number of tokens that can be stored in KV cache (43264)."
)
OOM = terminated("OOMKilled", 137)


# --- the table --------------------------------------------------------------------------------


def case(id_: str, isvc_: Any, pods: list, events: list, phase: Phase, ready: int, reason: list,
         step: list, **kw: Any) -> Any:  # fmt: skip
    return pytest.param(isvc_, pods, events, kw, phase, ready, reason, step, id=id_)


STARTING = isvc(
    cond("PredictorReady", "False", "MinimumReplicasUnavailable", "Deployment does not have "
         "minimum availability."),
    cond("Ready", "False"),
)  # fmt: skip
CASES = [
    # Pending: nothing to look at yet
    case("fresh-isvc-no-status", isvc(status=False), [], [], Phase.PENDING, 0,
         ["not reported", "InferenceService llama"], ["KServe controller"]),
    case("missing-isvc", None, [], [], Phase.PENDING, 0,
         ["not on the cluster"], ["deploy again"]),
    case("reconciled-no-pods-yet", STARTING, [], [], Phase.PENDING, 0,
         ["no replicas yet", "PredictorReady False", "minimum availability"], ["events"]),
    case("garbage-in-status",
         isvc(extra_status={"conditions": "nope", "modelStatus": [1, 2], "url": 5,
                            "components": {"predictor": "x"}}),
         [None, 3, {"status": "x"}, {"metadata": {"name": 7}}], ["junk", {"involvedObject": 1}],
         Phase.PENDING, 0, ["no replicas yet"], ["Nothing to do"]),
    # Scheduling: the pod has no node, or no pod may be created
    case("waiting-for-scheduler", STARTING, [unplaced(P1)], [], Phase.SCHEDULING, 0,
         ["waits for the scheduler"], ["Nothing to do"]),
    case("insufficient-gpu", STARTING, [unplaced(P1, GPU_SHORT)],
         [event("Pod", P1, "FailedScheduling", GPU_SHORT)], Phase.SCHEDULING, 0,
         ["0 of 3 nodes have a free nvidia.com/gpu", P1],
         ["countPerReplica", "another GPU model", "add GPU nodes"]),
    case("insufficient-gpu-from-event-two-gpus", STARTING, [unplaced(P1, gpus=2)],
         [event("Pod", P1, "FailedScheduling", "0/5 nodes are available: 2 Insufficient "
                "nvidia.com/gpu, 3 node(s) didn't match Pod's node affinity/selector.")],
         Phase.SCHEDULING, 0, ["0 of 5 nodes have 2 free nvidia.com/gpu", "3 node(s)"],
         ["countPerReplica"]),
    case("latest-event-per-reason-wins", STARTING, [unplaced(P1)],
         [event("Pod", P1, "FailedScheduling", "0/3 nodes are available: 3 Insufficient memory.",
                minutes=9),
          event("Pod", P1, "FailedScheduling", GPU_SHORT, minutes=1)],
         Phase.SCHEDULING, 0, ["free nvidia.com/gpu"], ["countPerReplica"]),
    case("insufficient-memory", STARTING,
         [unplaced(P1, "0/3 nodes are available: 3 Insufficient memory.", memory="64Gi")], [],
         Phase.SCHEDULING, 0, ["0 of 3 nodes have 64Gi of memory free"], ["resources.memory"]),
    case("no-node-matches-selector", STARTING,
         [unplaced(P1, "0/4 nodes are available: 4 node(s) didn't match Pod's node "
                   "affinity/selector. preemption: 0/4 nodes are available: 4 Preemption is "
                   "not helpful for scheduling.")], [],
         Phase.SCHEDULING, 0, ["0 of 4 nodes match the node selector"], ["GPU model"]),
    case("autoscaler-adds-a-node", STARTING, [unplaced(P1, GPU_SHORT)],
         [event("Pod", P1, "FailedScheduling", GPU_SHORT, minutes=2),
          event("Pod", P1, "TriggeredScaleUp", "pod triggered scale-up: [{eks-l4 1->2 (max: 4)}]",
                minutes=1, type_="Normal")],
         Phase.SCHEDULING, 0, ["adding a node"], ["Nothing to do"]),
    case("resource-quota-exceeded", STARTING, [],
         [event("ReplicaSet", f"{APP}-predictor-{OLD}", "FailedCreate", QUOTA_MESSAGE)],
         Phase.SCHEDULING, 0, ["ResourceQuota gpu-quota", "requests.nvidia.com/gpu=4",
                               "with 4 in use", "asks for 2"],
         ["ResourceQuota gpu-quota", "countPerReplica"], desired_replicas=1),
    case("kueue-waiting-for-quota", STARTING,
         [unplaced(P1, gated="gpu-queue")],
         [workload("Pending", "couldn't assign flavors to pod set main: insufficient unused "
                   "quota for nvidia.com/gpu in flavor a10, 1 more needed")],
         Phase.SCHEDULING, 0, ["waits in queue gpu-queue", "insufficient unused quota", "a10"],
         ["when gpu-queue has room", "raise the queue's quota"]),
    case("kueue-admitted", STARTING, [unplaced(P1, gated="gpu-queue")],
         [workload("Pending", "couldn't assign flavors to pod set main: insufficient unused "
                   "quota for nvidia.com/gpu in flavor a10, 1 more needed", minutes=6),
          workload("QuotaReserved", "Quota reserved in ClusterQueue gpu-cq, wait time since "
                   "queued was 300s")],
         Phase.SCHEDULING, 0, ["has admitted"], ["Nothing to do"]),
    case("events-of-another-app-ignored", STARTING, [unplaced(P1)],
         [event("Pod", f"{APP}-2-predictor-{OLD}-x7k2p", "FailedScheduling", GPU_SHORT)],
         Phase.SCHEDULING, 0, ["waits for the scheduler"], ["Nothing to do"]),
    # Downloading and Loading
    case("storage-initializer-downloading", STARTING,
         [pod(P1, box(waiting("PodInitializing")), init=(downloader(running(3)),),
              phase="Pending")], [],
         Phase.DOWNLOADING, 0, ["Downloading the model", P1, "gpu-node-1", "3m"], ["Loading"]),
    case("pulling-runtime-image", STARTING, [pod(P1, box(waiting("ContainerCreating")))],
         [event("Pod", P1, "Pulled", "Successfully pulled image \"kserve/storage-initializer\"",
                minutes=3, type_="Normal"),
          event("Pod", P1, "Pulling", f'Pulling image "{IMAGE}"', minutes=2, type_="Normal")],
         Phase.DOWNLOADING, 0, [f"Pulling the image {IMAGE}", "gpu-node-1"], ["first pull"]),
    case("loading-the-model",
         isvc(cond("Ready", "False"), model_status=model("", "Loading", "InProgress")),
         [loading(P1)], [], Phase.LOADING, 0,
         ["Loading the model on pod", P1, "for 3m"], ["readiness"]),
    case("ready-but-no-route",
         isvc(cond("PredictorReady"), cond("IngressReady", "False", "IngressNotConfigured",
                                          "Ingress has not been configured yet.")),
         [serving(P1)], [], Phase.LOADING, 1,
         ["1 of 1 replicas are ready", "waiting for the route", "IngressNotConfigured"],
         ["ingress or gateway"], desired_replicas=1),
    # Running
    case("running-2-of-2", isvc(*READY, url=URL, model_status=LOADED),
         [serving(P1), serving(P2)], [], Phase.RUNNING, 2,
         [f"Serving at {URL}", "2 of 2 replicas ready"], ['model "llama"']),
    case("running-no-pods-given", isvc(*READY, url=URL, model_status=LOADED), [], [],
         Phase.RUNNING, 2, ["2 of 2 replicas ready"], ["Nothing to do"]),
    case("running-address-url-only",
         isvc(*READY, address="http://llama-predictor.ml-serving.svc.cluster.local"),
         [serving(P1)], [], Phase.RUNNING, 1,
         ["llama-predictor.ml-serving.svc.cluster.local", "1 of 1"], ["Nothing to do"],
         desired_replicas=1),
    case("running-partially-ready-rest-loading",
         # KServe's model states follow the pods: a scale-up reads Loaded -> Pending too.
         isvc(cond("IngressReady"), cond("PredictorReady", "False", "MinimumReplicasUnavailable"),
              cond("Ready", "False"), url=URL,
              model_status=model("Loaded", "Pending", "InProgress")),
         [serving(P1), loading(P2)], [], Phase.RUNNING, 1,
         ["1 of 2 replicas ready", f"Loading the model on pod {P2}"],
         ["other replicas join"]),
    case("running-scale-up-blocked", isvc(*READY, url=URL),
         [serving(P1), serving(P2), unplaced(P3, GPU_SHORT)], [], Phase.RUNNING, 2,
         ["2 of 3 replicas ready", "0 of 3 nodes have a free nvidia.com/gpu", P3],
         ["countPerReplica"], desired_replicas=3),
    case("stale-quota-event-ignored", isvc(*READY, url=URL),
         [serving(P1), serving(P2)],
         [event("ReplicaSet", f"{APP}-predictor-{OLD}", "FailedCreate", QUOTA_MESSAGE,
                minutes=120)],
         Phase.RUNNING, 2, ["2 of 2"], ["Nothing to do"]),
    case("old-failure-info-after-recovery",
         isvc(*READY, url=URL, model_status=LOADED | {"lastFailureInfo": {
             "reason": "ModelLoadFailed", "message": "boom", "exitCode": 1}}),
         [serving(P1), serving(P2)], [], Phase.RUNNING, 2, ["2 of 2"], ["Nothing to do"]),
    # Updating: a new revision rolls out while the old one serves
    case("updating-raw-deployment", isvc(*READY, url=URL, model_status=LOADED),
         [serving(P1), serving(P2), loading(N1, revision=NEW, created=2)], [],
         Phase.UPDATING, 2,
         ["0 of 2 new replicas ready", "still serves with 2 replicas", "Loading the model"],
         ["traffic moves to the new revision"]),
    case("updating-serverless-downloading",
         isvc(cond("IngressReady"), cond("PredictorReady"), cond("Ready"),
              cond("LatestDeploymentReady", "Unknown", "PredictorConfigurationReady not ready"),
              url=URL, components={"latestCreatedRevision": "llama-predictor-00002",
                                   "latestReadyRevision": "llama-predictor-00001"}),
         [serving("llama-predictor-00001-deployment-6f9c-abcde", "llama-predictor-00001"),
          pod("llama-predictor-00002-deployment-8d7e-fghij", box(waiting("PodInitializing")),
              init=(downloader(running(1)),), phase="Pending", revision="llama-predictor-00002",
              created=1)], [],
         Phase.UPDATING, 1, ["0 of 1 new replicas ready", "Downloading the model"],
         ["traffic moves"], desired_replicas=1),
    case("updating-new-revision-cannot-be-placed", isvc(*READY, url=URL),
         [serving(P1), unplaced(N1, GPU_SHORT, revision=NEW, created=1)], [],
         Phase.UPDATING, 1, ["still serves with 1 replica", "0 of 3 nodes"], ["countPerReplica"],
         desired_replicas=1),
    # Failed
    case("image-pull-backoff", STARTING,
         [pod(P1, box(waiting("ImagePullBackOff", 'Back-off pulling image "vllm/vllm-openai:'
                              'v9.9.9"'), image="vllm/vllm-openai:v9.9.9"))],
         [event("Pod", P1, "Failed", PULL_NOT_FOUND)], Phase.FAILED, 0,
         ["vllm/vllm-openai:v9.9.9", "does not exist", P1, "ImagePullBackOff"],
         ["image name and tag", "registry credentials", NS]),
    case("err-image-pull-unauthorized", STARTING,
         [pod(P1, box(waiting("ErrImagePull", 'failed to pull and unpack image "registry.corp/'
                              'vllm:1": failed to authorize: 401 Unauthorized'),
                      image="registry.corp/vllm:1"))], [],
         Phase.FAILED, 0, ["registry.corp/vllm:1", "refused access"], ["imagePullSecrets"]),
    case("oom-killed", STARTING, [crashing(P1, OOM)], [], Phase.FAILED, 0,
         ["ran out of memory", "OOMKilled, limit 8Gi", "4 restarts"],
         ["resources.memory", "serving.maxContextTokens", "serving.kvCacheSize"]),
    case("oom-seen-between-restarts", STARTING,
         [pod(P1, box(running(0.5), restarts=2, last=OOM), memory="16Gi")], [], Phase.FAILED, 0,
         ["OOMKilled, limit 16Gi", "2 restarts"], ["resources.memory"]),
    case("crash-kv-cache-too-small", STARTING,
         [crashing(P1, terminated("Error", 1, KV_CACHE))], [], Phase.FAILED, 0,
         ["exit code 1", "does not fit in the KV cache", "43264"], ["serving.maxContextTokens"]),
    case("crash-cuda-out-of-memory", STARTING,
         [crashing(P1, terminated("Error", 1, "torch.OutOfMemoryError: CUDA out of memory. "
                                  "Tried to allocate 2.00 GiB."))], [], Phase.FAILED, 0,
         ["GPU memory"], ["countPerReplica", "quantized"]),
    case("crash-generic-error", STARTING,
         [crashing(P1, terminated("Error", 2, "api_server.py: error: unrecognized arguments: "
                                  "--max-model-lenn 4096"), restarts=1)], [], Phase.FAILED, 0,
         ["exit code 2", "1 restart", "unrecognized arguments"], ["kubectl logs", "--previous"]),
    case("download-refused-gated-model", STARTING,
         [pod(P1, box(waiting("PodInitializing")), phase="Pending",
              init=(box(waiting("CrashLoopBackOff"), name="storage-initializer", restarts=3,
                        last=terminated("Error", 1, "huggingface_hub.errors.GatedRepoError: 401 "
                                        "Client Error. Access to model meta-llama/Llama-3.1-8B "
                                        "is restricted.")),))], [],
         Phase.FAILED, 0, ["Downloading the model failed", "exited with code 1", "refused access"],
         ["Hugging Face token"]),
    case("missing-secret", STARTING,
         [pod(P1, box(waiting("CreateContainerConfigError", 'secret "hf-token" not found')))], [],
         Phase.FAILED, 0, ['secret "hf-token" not found', P1], ["Create the Secret", NS]),
    case("model-load-failed-no-pods",
         isvc(cond("Ready", "False", "RevisionFailed"),
              model_status=model("", "FailedToLoad", "BlockedByFailedLoad",
                                 reason="ModelLoadFailed", exitCode=1, location=P1,
                                 message="RuntimeError: Engine core initialization failed.")),
         [], [], Phase.FAILED, 0, ["model failed to load", P1, "exit code 1", "Engine core"],
         ["log"]),
    case("runtime-not-recognized",
         isvc(cond("Ready", "False"), model_status=model(
             "", "FailedToLoad", "InvalidSpec", reason="RuntimeNotRecognized",
             message="Waiting for runtime to become available")), [], [], Phase.FAILED, 0,
         ["names a serving runtime the cluster does not have", "RuntimeNotRecognized"],
         ["runtime.engine"]),
    case("no-supporting-runtime",
         isvc(cond("Ready", "False"), model_status=model(
             "", "FailedToLoad", "InvalidSpec", reason="NoSupportingRuntime",
             message="No runtime found to support specified framework/version")), [], [],
         Phase.FAILED, 0, ["supports the model format"], ["format"]),
    case("invalid-predictor-spec",
         isvc(model_status=model("", "FailedToLoad", "InvalidSpec", reason="InvalidPredictorSpec",
                                 message="specified runtime does not support the model format")),
         [], [], Phase.FAILED, 0, ["refuses the predictor", "does not support"], ["dry run"]),
    case("runtime-unhealthy",
         isvc(model_status=model("", "FailedToLoad", "BlockedByFailedLoad",
                                 reason="RuntimeUnhealthy", message="container exited")),
         [], [], Phase.FAILED, 0, ["runtime's containers"], ["log"]),
    case("pods-refused-by-policy", STARTING, [],
         [event("ReplicaSet", f"{APP}-predictor-{OLD}", "FailedCreate",
                f'Error creating: pods "{APP}-predictor-{OLD}-abcde" is forbidden: violates '
                'PodSecurity "restricted:latest": allowPrivilegeEscalation != false')],
         Phase.FAILED, 0, ["refuses to create pods", "PodSecurity"], ["policy"]),
    case("serverless-revision-failed",
         isvc(cond("Ready", "False", "RevisionFailed", 'Revision "llama-predictor-00001" failed '
                   "with message: Container failed with: ValueError: bad dtype.")),
         [], [], Phase.FAILED, 0, ["RevisionFailed", "bad dtype"], ["roll back"]),
    case("backoff-event-only", STARTING, [pod(P1)],
         [event("Pod", P1, "BackOff", "Back-off restarting failed container kserve-container in "
                f"pod {P1}_{NS}(0b5e)")],
         Phase.FAILED, 0, ["keeps crashing", "Back-off restarting"], ["--previous"]),
    case("kueue-local-queue-missing", STARTING, [unplaced(P1, gated="gpu-queue")],
         [workload("Pending", "LocalQueue gpu-queue doesn't exist")], Phase.FAILED, 0,
         ["gpu-queue", "doesn't exist"], ["ask an admin", "queue.name"]),
    case("failed-beats-scheduling", STARTING, [crashing(P1, OOM), unplaced(P2, GPU_SHORT)], [],
         Phase.FAILED, 0, ["OOMKilled"], ["resources.memory"]),
    case("new-revision-crashes-old-serves", isvc(*READY, url=URL),
         [serving(P1), crashing(N1, OOM, revision=NEW, created=3)], [], Phase.FAILED, 1,
         ["OOMKilled", N1, "1 of 1 replicas still serve"], ["resources.memory"],
         desired_replicas=1),
    # Stopped and Deleting: what the user asked for beats what the cluster says
    case("stopped-from-console",
         isvc(cond("Stopped", "True", "Stopped"), cond("Ready", "False", "Stopped"),
              annotations={"serving.kserve.io/stop": "true"}), [], [], Phase.STOPPED, 0,
         ["is stopped", "no replicas run"], ["Start it"], stopped=True),
    case("stopped-on-the-cluster", isvc(annotations={"serving.kserve.io/stop": "true"}), [], [],
         Phase.STOPPED, 0, ["serving.kserve.io/stop"], ["remove the annotation"]),
    case("stopping-beats-failure", isvc(*READY), [crashing(P1, OOM), serving(P2, created=50)], [],
         Phase.STOPPED, 1, ["Stopping", "2 pods still shutting down"], ["Nothing to do"],
         stopped=True),
    case("deleting-beats-failure", isvc(*READY), [crashing(P1, OOM)], [], Phase.DELETING, 0,
         ["Deleting InferenceService llama and 1 pod"], ["Nothing to do"], deleting=True),
    case("delete-stuck-on-finalizer", isvc(deleted=30), [], [], Phase.DELETING, 0,
         ["waited 30m", "inferenceservice.finalizers"], ["admin"]),
    case("deleted-everything-gone", None, [], [], Phase.DELETING, 0, ["gone from the cluster"],
         ["Nothing to do"], deleting=True),
    case("deleting-beats-stopped", isvc(annotations={"serving.kserve.io/stop": "true"}), [], [],
         Phase.DELETING, 0, ["Deleting InferenceService llama."], ["Nothing to do"],
         deleting=True, stopped=True),
    # More shapes of the same phases
    case("scheduler-other-cause", STARTING,
         [unplaced(P1, "0/3 nodes are available: 3 Too many pods.")], [], Phase.SCHEDULING, 0,
         ["cannot place pod", "Too many pods"], ["cluster's nodes"]),
    case("starting-containers", STARTING, [pod(P1, box(waiting("ContainerCreating")))], [],
         Phase.LOADING, 0, ["Starting pod", "gpu-node-1"], ["Nothing to do"]),
    case("volume-mount-fails", STARTING, [pod(P1, box(waiting("ContainerCreating")))],
         [event("Pod", P1, "FailedMount", 'MountVolume.SetUp failed for volume "hf-cache" : '
                'persistentvolumeclaim "hf-cache" not found')],
         Phase.LOADING, 0, ["cannot mount a volume", "hf-cache"], ["PersistentVolumeClaim"]),
    case("kserve-downloading-no-pods-given",
         isvc(cond("Ready", "False"), model_status=model("", "Downloading", "InProgress")), [], [],
         Phase.DOWNLOADING, 0, ["Downloading the model for InferenceService llama"],
         ["Nothing to do"]),
    case("kserve-loading-no-pods-given",
         isvc(cond("Ready", "False"), model_status=model("", "Loading", "InProgress")), [], [],
         Phase.LOADING, 0, ["Loading the model for InferenceService llama"], ["Nothing to do"]),
    case("updating-spec-not-reconciled-yet", isvc(*READY, url=URL, generation=3),
         [serving(P1), serving(P2)], [], Phase.UPDATING, 2,
         ["0 of 2 new replicas ready", "still serves with 2 replicas"], ["traffic moves"]),
    case("crash-seen-before-backoff", STARTING,
         [pod(P1, box(terminated("Error", 1, "RuntimeError: Engine core initialization failed")))],
         [], Phase.FAILED, 0, ["keeps exiting", "exit code 1, Error)", "Engine core"], ["log"]),
    case("multi-node-worker-not-a-replica", isvc(*READY, url=URL),
         [serving(P1), serving(f"{APP}-predictor-worker-{OLD}-w1k9s")], [], Phase.RUNNING, 1,
         ["1 of 1 replicas ready"], ["Nothing to do"], desired_replicas=1),
]  # fmt: skip


@pytest.mark.parametrize(
    ("isvc_", "pods", "events", "kw", "phase", "ready", "reason", "step"), CASES
)
def test_status_table(isvc_, pods, events, kw, phase, ready, reason, step):
    kw = {"desired_replicas": 2, "now": NOW} | kw
    status = derive_status(isvc_, pods, events, **kw)
    assert status.phase == phase, status
    for words in reason:
        assert words.lower() in status.reason.lower(), (words, status.reason)
    for words in step:
        assert words.lower() in status.next_step.lower(), (words, status.next_step)
    assert status.ready_replicas == ready, status
    assert status.desired_replicas == kw["desired_replicas"]
    assert status.reason.endswith("."), status.reason


def test_endpoint_and_as_dict_for_a_running_application():
    status = derive_status(
        isvc(*READY, url=URL), [serving(P1), serving(P2)], [], desired_replicas=2, now=NOW
    )
    assert status.endpoint == URL
    plain = status.as_dict()
    assert plain == {
        "phase": "Running",
        "reason": status.reason,
        "next_step": status.next_step,
        "ready_replicas": 2,
        "desired_replicas": 2,
        "endpoint": URL,
    }
    assert type(plain["phase"]) is str
    json.dumps(plain)  # the reconciler sends it over the channel layer as it is
    with pytest.raises(AttributeError):
        status.phase = Phase.FAILED  # type: ignore[misc]


def test_endpoint_falls_back_to_address_and_is_empty_without_one():
    address = "http://llama-predictor.ml-serving.svc.cluster.local"
    assert derive_status(isvc(address=address), [], [], desired_replicas=1).endpoint == address
    assert derive_status(isvc(), [], [], desired_replicas=1).endpoint == ""


def test_events_age_against_the_newest_one_without_now():
    """Without `now`, an event long before the newest one describes a state that has passed."""
    events = [
        event("Pod", P1, "FailedScheduling", GPU_SHORT, minutes=60),
        event("Pod", P1, "Pulling", f'Pulling image "{IMAGE}"', minutes=1, type_="Normal"),
    ]
    status = derive_status(STARTING, [unplaced(P1)], events, desired_replicas=1)
    assert status.phase == Phase.SCHEDULING
    assert "waits for the scheduler" in status.reason


def test_events_of_another_namespace_are_ignored():
    other = event("Pod", P1, "FailedScheduling", GPU_SHORT)
    other["involvedObject"]["namespace"] = "someone-else"
    status = derive_status(STARTING, [unplaced(P1)], [other], desired_replicas=1, now=NOW)
    assert "waits for the scheduler" in status.reason


def test_a_bug_gives_a_pending_status_and_a_log_line(monkeypatch, caplog):
    def broken(*args: Any) -> None:
        raise KeyError("status")

    monkeypatch.setattr("jobs.status.derive.read_view", broken)
    status = derive_status(isvc(*READY), [], [], desired_replicas=3)
    assert (status.phase, status.desired_replicas, status.endpoint) == (Phase.PENDING, 3, "")
    assert INTERNAL_ERROR in status.reason and "Report it" in status.next_step
    assert "derive_status failed" in caplog.text


def test_inputs_are_not_changed():
    args = (isvc(*READY, url=URL), [serving(P1), crashing(N1, OOM, revision=NEW)], [])
    before = copy.deepcopy(args)
    derive_status(*args, desired_replicas=2, now=NOW)
    assert args == before


# --- property tests: any input gives a Status ------------------------------------------------

KEYS = [
    "metadata", "spec", "status", "conditions", "type", "status", "reason", "message", "name",
    "labels", "annotations", "containerStatuses", "initContainerStatuses", "state", "lastState",
    "waiting", "running", "terminated", "exitCode", "restartCount", "ready", "phase", "nodeName",
    "modelStatus", "states", "lastFailureInfo", "transitionStatus", "involvedObject", "kind",
    "lastTimestamp", "deletionTimestamp", "url", "address", "components", "predictor",
    "containers", "resources", "limits", "schedulingGates", "creationTimestamp", "copies",
]  # fmt: skip
WORDS = [
    "True", "False", "Unknown", "Ready", "PodScheduled", "Unschedulable", "Pending", "Running",
    "CrashLoopBackOff", "OOMKilled", "Error", "ImagePullBackOff", "FailedToLoad", "InvalidSpec",
    "BlockedByFailedLoad", "Loaded", "Loading", "kserve-container", "storage-initializer", "Pod",
    "FailedScheduling", "FailedCreate", "Workload", "2025-06-02T11:59:00Z",
    "0001-01-01T00:00:00+14:00",
    GPU_SHORT, QUOTA_MESSAGE, "0/99999999999 nodes are available: 9999999999 Insufficient x", P1,
]  # fmt: skip
leaf = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30)
    | st.sampled_from(WORDS)
)  # fmt: skip
garbage = st.recursive(
    leaf,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=40,
)
small = leaf | st.lists(leaf, max_size=2) | st.dictionaries(st.text(max_size=4), leaf, max_size=2)
moments = st.none() | st.datetimes() | st.datetimes(timezones=st.timezones()) | small
SEEDS = [(p.values[0], p.values[1], p.values[2]) for p in CASES]


def fast(examples: int) -> settings:
    # No example database: the suite writes nothing into the work tree.
    return settings(max_examples=examples, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])  # fmt: skip


def assert_a_status(status: Any) -> None:
    assert isinstance(status, Status)
    assert status.phase in set(Phase)
    assert status.reason and isinstance(status.reason, str)
    assert status.next_step and isinstance(status.next_step, str)
    assert INTERNAL_ERROR not in status.reason, "the safety net caught a crash"


@fast(300)
@given(garbage, garbage, garbage, small, small, small, small, moments)
def test_garbage_in_every_argument_gives_a_status(
    isvc_, pods, events, desired, stop, delete, gpu, now
):
    assert_a_status(
        derive_status(isvc_, pods, events, desired_replicas=desired, stopped=stop,
                      deleting=delete, gpu_resource=gpu, now=now)
    )  # fmt: skip


def _mutate(value: Any, data: st.DataObject, depth: int = 0) -> Any:
    """Replace one random subtree of a real-shaped object with garbage; mostly a deep one, where
    the readers look for one exact field."""
    if depth > 8 or not isinstance(value, (dict, list)) or not value:
        return data.draw(garbage)
    if data.draw(st.integers(0, 4)) == 0:
        return data.draw(garbage)
    value = copy.copy(value)
    key = data.draw(st.sampled_from(list(value) if isinstance(value, dict) else range(len(value))))
    value[key] = _mutate(value[key], data, depth + 1)
    return value


@fast(300)
@given(st.sampled_from(SEEDS), st.data())
def test_real_shapes_with_garbage_subtrees_give_a_status(seed, data):
    parts = list(seed)
    for _ in range(data.draw(st.integers(1, 4))):
        which = data.draw(st.integers(0, 2))
        parts[which] = _mutate(parts[which], data)
    assert_a_status(derive_status(*parts, desired_replicas=2, now=NOW))


ODD = [None, True, 7, -1.5, "x", "", [], {}, [None], {"x": None}, ["y"], 10**400]


def _paths(value: Any, prefix: tuple = ()) -> Any:
    yield prefix
    if isinstance(value, (dict, list)):
        for key, inner in value.items() if isinstance(value, dict) else enumerate(value):
            yield from _paths(inner, (*prefix, key))


def _replaced(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    value = copy.copy(value)
    value[path[0]] = _replaced(value[path[0]], path[1:], new)
    return value


@pytest.mark.parametrize("seed", SEEDS, ids=[p.id for p in CASES])
def test_every_field_of_a_real_shape_replaced_by_odd_values_gives_a_status(seed):
    """Systematic where the random tests above are not: each node of each object in turn."""
    for n, path in enumerate(_paths(list(seed))):
        for odd in (ODD[(2 * n) % len(ODD)], ODD[(2 * n + 1) % len(ODD)]):
            parts = _replaced(list(seed), path, odd)
            if isinstance(parts, list) and len(parts) == 3:
                assert_a_status(derive_status(*parts, desired_replicas=2, now=NOW))
