"""Readers for `jobs.status`: raw Kubernetes dicts in, a small typed `View` out, plus the
parsers for the scheduler's, the quota admission's and the model server's messages.

Every reader accepts any JSON-like value. Cluster objects are written by other controllers'
versions and sometimes by hand, so a wrong type is read as "absent", never as an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from jobs.manifest.view import dig

STORAGE_INITIALIZER = "storage-initializer"
MAIN_CONTAINER = "kserve-container"
# Containers riding along with the model server; they do not tell whether the model serves.
SIDECARS = frozenset({"queue-proxy", "istio-proxy", "linkerd-proxy", "agent"})
STOP_ANNOTATION = "serving.kserve.io/stop"
# As jobs.render writes it on a predictor scaled to zero (scaling.minReplicas 0, idle).
SLEEPING_ANNOTATION = "servedeck.io/sleeping"
KUEUE_GATE = "kueue.x-k8s.io/admission"
APP_LABELS = ("servedeck.io/application", "serving.kserve.io/inferenceservice")
# Serverless pods carry the Knative revision; raw deployments the ReplicaSet's template hash.
REVISION_LABELS = ("serving.knative.dev/revision", "pod-template-hash")
# Kubernetes keeps events for an hour and re-emits live problems every few minutes; anything
# older than this describes a state that has since moved on.
EVENT_MAX_AGE = timedelta(minutes=15)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SMALL_INT = r"\d{1,9}"  # bounded, so a garbage message cannot feed int() a huge number


def as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list:
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def aware(value: Any) -> datetime | None:
    """In UTC; naive times are taken as UTC. None for a non-time or one UTC cannot hold."""
    if not isinstance(value, datetime):
        return None
    try:
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    except (OverflowError, ValueError):  # year 1 with a positive offset, for one
        return None


def parse_time(value: Any) -> datetime | None:
    text = as_str(value)
    try:
        return aware(datetime.fromisoformat(text)) if 0 < len(text) <= 64 else None
    except ValueError:
        return None


def duration(start: datetime | None, now: datetime | None) -> str:
    """'3m' style age, or '' when either end is unknown."""
    if start is None or now is None or now < start:
        return ""
    minutes = int((now - start).total_seconds() // 60)
    if minutes < 60:
        return f"{minutes}m" if minutes else "under a minute"
    return f"{minutes // 60}h {minutes % 60}m"


def last_line(message: str, limit: int = 200) -> str:
    """The last non-empty line: a termination message is often a traceback ending in the error."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def quoted(message: str) -> str:
    """The first double-quoted word of a message: the image of 'Failed to pull image "x"'."""
    found = re.search(r'"([^"\s]{1,300})"', message)
    return found.group(1) if found else ""


@dataclass(frozen=True)
class Condition:
    status: str  # "True", "False", "Unknown", or "" when absent or unreadable
    reason: str = ""
    message: str = ""

    def said(self, kind: str) -> str:
        """' (PredictorReady False, Reason: message)', or '' when it says nothing."""
        words = ": ".join(x for x in (self.reason, last_line(self.message).rstrip(".")) if x)
        return f" ({kind} {self.status or '?'}, {words})" if words else ""


NO_CONDITION = Condition("")


def read_conditions(status: Any) -> dict[str, Condition]:
    found = {}
    for raw in map(as_dict, as_list(as_dict(status).get("conditions"))):
        if kind := as_str(raw.get("type")):
            found[kind] = Condition(*(as_str(raw.get(k)) for k in ("status", "reason", "message")))
    return found


@dataclass(frozen=True)
class Container:
    name: str
    image: str
    init: bool
    ready: bool
    restarts: int
    state: str  # "running", "waiting", "terminated", or "" when not reported yet
    reason: str
    message: str
    exit_code: int | None
    started: datetime | None
    last_reason: str
    last_message: str
    last_exit_code: int | None
    memory_limit: str

    @property
    def crashed(self) -> bool:
        """Failing to run, seen at any point of a crash loop (waiting, dead, or briefly up)."""
        if self.ready:
            return False
        if self.state == "waiting":
            return self.reason == "CrashLoopBackOff"
        if self.state == "terminated":
            abnormal = {"OOMKilled", "Error", "ContainerCannotRun", "StartError"}
            return self.reason in abnormal or self.exit_code not in (None, 0)
        # Between restarts a crash-looping container runs for a moment; its last termination
        # says what keeps happening.
        return self.restarts > 0 and (
            self.last_reason in {"OOMKilled", "Error"} or self.last_exit_code not in (None, 0)
        )

    @property
    def death(self) -> tuple[str, str, int | None]:
        """Reason, message and exit code of the termination that explains a crash."""
        if self.state == "terminated":
            return self.reason, self.message, self.exit_code
        return self.last_reason, self.last_message, self.last_exit_code


def _read_container(status: dict, spec: dict, init: bool) -> Container:
    state = as_dict(status.get("state"))
    kind = next((k for k in ("running", "waiting", "terminated") if k in state), "")
    now, last = as_dict(state.get(kind)), as_dict(dig(status, "lastState", "terminated"))
    memory = dig(spec, "resources", "limits", "memory")
    return Container(
        name=as_str(spec.get("name")) or as_str(status.get("name")),
        image=as_str(spec.get("image")) or as_str(status.get("image")),
        init=init,
        ready=status.get("ready") is True,
        restarts=max(as_int(status.get("restartCount")) or 0, 0),
        state=kind,
        reason=as_str(now.get("reason")),
        message=as_str(now.get("message")),
        exit_code=as_int(now.get("exitCode")),
        started=parse_time(now.get("startedAt")),
        last_reason=as_str(last.get("reason")),
        last_message=as_str(last.get("message")),
        last_exit_code=as_int(last.get("exitCode")),
        memory_limit=as_str(memory) or str(as_int(memory) or ""),
    )


def _read_containers(spec: dict, status: dict, init: bool) -> tuple[Container, ...]:
    keys = (
        ("initContainers", "initContainerStatuses") if init else ("containers", "containerStatuses")
    )
    specs = {as_str(dig(c, "name")): as_dict(c) for c in as_list(spec.get(keys[0]))}
    statuses = {as_str(dig(s, "name")): as_dict(s) for s in as_list(status.get(keys[1]))}
    names = dict.fromkeys(n for n in [*specs, *statuses] if n)
    return tuple(_read_container(statuses.get(n, {}), specs.get(n, {}), init) for n in names)


def _gpus(value: Any) -> int:
    """A device count from a resource map: 2 or "2" (other quantities do not name devices)."""
    text = str(value) if as_int(value) is not None else as_str(value)
    return int(text) if re.fullmatch(_SMALL_INT, text) else 0


@dataclass(frozen=True)
class Pod:
    name: str
    phase: str
    node: str
    ready: bool
    terminating: bool
    replica: bool  # one serving replica (not a multi-node worker, transformer or explainer)
    revision: str
    app: str
    created: datetime | None
    scheduled: Condition
    queue_gated: bool  # Kueue holds it until its workload is admitted
    queue: str
    gpus: int
    memory: str
    containers: tuple[Container, ...]

    @property
    def main(self) -> Container | None:
        """The model server: KServe's container, else the first that is not a sidecar."""
        regular = [c for c in self.containers if not c.init]
        named = [c for c in regular if c.name == MAIN_CONTAINER]
        return (named or [c for c in regular if c.name not in SIDECARS] or regular or [None])[0]

    @property
    def downloader(self) -> Container | None:
        return next((c for c in self.containers if c.init and c.name == STORAGE_INITIALIZER), None)

    @property
    def unplaced(self) -> bool:
        return self.phase in {"Pending", ""} and not self.node


def read_pod(raw: Any, gpu: str) -> Pod:
    meta, spec, status = (as_dict(dig(raw, k)) for k in ("metadata", "spec", "status"))
    labels, name = as_dict(meta.get("labels")), as_str(meta.get("name"))
    gates = {as_str(dig(g, "name")) for g in as_list(spec.get("schedulingGates"))}
    resources = [as_dict(dig(c, "resources")) for c in as_list(spec.get("containers"))]
    memory = [dig(r, k, "memory") for r in resources for k in ("requests", "limits")]
    conditions = read_conditions(status)
    return Pod(
        name=name,
        phase=as_str(status.get("phase")),
        node=as_str(spec.get("nodeName")),
        ready=conditions.get("Ready", NO_CONDITION).status == "True",
        terminating=bool(meta.get("deletionTimestamp")),
        replica=as_str(labels.get("component")) in {"", "predictor"} and "-worker-" not in name,
        revision=next((as_str(labels[k]) for k in REVISION_LABELS if k in labels), ""),
        app=next((v for v in (as_str(labels.get(k)) for k in APP_LABELS) if v), ""),
        created=parse_time(meta.get("creationTimestamp")),
        scheduled=conditions.get("PodScheduled", NO_CONDITION),
        queue_gated=KUEUE_GATE in gates,
        queue=as_str(labels.get("kueue.x-k8s.io/queue-name")),
        gpus=max(
            (_gpus(dig(r, k, gpu)) for r in resources for k in ("limits", "requests")), default=0
        ),
        memory=next((m for m in memory if isinstance(m, str) and m), ""),
        containers=_read_containers(spec, status, True) + _read_containers(spec, status, False),
    )


@dataclass(frozen=True)
class Event:
    kind: str  # of the object the event is about
    name: str
    namespace: str
    reason: str
    message: str
    when: datetime | None

    def not_before(self, other: Event | None) -> bool:
        """At or after `other`; when either time is unknown, assume so."""
        return other is None or self.when is None or other.when is None or self.when >= other.when


def read_event(raw: Any) -> Event:
    # core/v1 events say involvedObject/message; events.k8s.io/v1 say regarding/note.
    about = as_dict(dig(raw, "involvedObject")) or as_dict(dig(raw, "regarding"))
    stamps = [dig(raw, k) for k in ("lastTimestamp", "deprecatedLastTimestamp", "eventTime")]
    stamps += [dig(raw, "series", "lastObservedTime"), dig(raw, "firstTimestamp")]
    return Event(
        kind=as_str(about.get("kind")),
        name=as_str(about.get("name")),
        namespace=as_str(about.get("namespace")),
        reason=as_str(dig(raw, "reason")),
        message=as_str(dig(raw, "message")) or as_str(dig(raw, "note")),
        when=next((t for t in map(parse_time, stamps) if t), None),
    )


def relevant_events(
    raw: Any, app: str, namespace: str, pods: set[str], now: datetime | None
) -> tuple[Event, ...]:
    """The events about this application's objects, recent ones only, the latest per object
    and reason, newest first."""
    prefixes = tuple(f"{app}-{part}" for part in ("predictor", "transformer", "explainer"))

    def ours(e: Event) -> bool:
        if not e.reason or (namespace and e.namespace and e.namespace != namespace):
            return False
        if e.kind == "Pod":
            return e.name in pods
        if e.kind == "Workload":  # Kueue names a pod's workload pod-<pod name>-<hash>
            return any(p in e.name for p in pods) or bool(app) and e.name.startswith("pod-" + app)
        if e.kind == "InferenceService":
            return bool(app) and e.name == app
        return bool(app) and e.name.startswith(prefixes)  # Deployment, ReplicaSet, Revision

    events = [e for e in map(read_event, as_list(raw)) if ours(e)]
    times = [e.when for e in events if e.when]
    reference = now or max(times, default=None)
    if reference is not None:
        events = [e for e in events if e.when is None or reference - e.when <= EVENT_MAX_AGE]
    latest = {(e.kind, e.name, e.reason): e for e in sorted(events, key=lambda e: e.when or EPOCH)}
    return tuple(sorted(latest.values(), key=lambda e: e.when or EPOCH, reverse=True))


@dataclass(frozen=True)
class ModelStatus:
    active: str
    target: str
    transition: str
    failure: str
    message: str
    exit_code: int | None
    location: str
    copies: int


@dataclass(frozen=True)
class View:
    """Everything the status checks read, already made safe to read."""

    name: str
    namespace: str
    found: bool  # the InferenceService exists
    has_status: bool
    deleted_at: datetime | None
    finalizers: tuple[str, ...]
    stop_annotation: bool
    asleep: bool  # ServeDeck scaled the predictor to zero (scale to zero)
    conditions: dict[str, Condition]
    model: ModelStatus
    latest_created: str
    latest_ready: str
    behind: bool  # its spec changed and KServe has not caught up yet
    endpoint: str
    pods: tuple[Pod, ...]  # live: neither finished nor terminating
    leaving: tuple[Pod, ...]  # terminating
    events: tuple[Event, ...]  # relevant and recent, newest first
    gpu: str
    desired: int
    now: datetime | None
    stop_requested: bool
    delete_requested: bool

    def cond(self, kind: str) -> Condition:
        return self.conditions.get(kind, NO_CONDITION)

    @property
    def replicas(self) -> list[Pod]:
        return [p for p in self.pods if p.replica]

    @property
    def ready(self) -> list[Pod]:
        return [p for p in self.replicas if p.ready]

    @property
    def ready_count(self) -> int:
        if self.pods or self.leaving:
            return len(self.ready)
        # No pods were given: trust KServe's own count of loaded copies.
        return self.model.copies if self.cond("Ready").status == "True" else 0

    @property
    def what(self) -> str:
        return f"InferenceService {self.name}" if self.name else "the InferenceService"

    @property
    def where(self) -> str:
        return f"namespace {self.namespace}" if self.namespace else "the profile's namespace"

    def rollout(self) -> tuple[list[Pod], list[Pod]] | None:
        """(the new revision's pods, the old revision's ready pods) while a new revision rolls
        out and an old one still serves, else None."""
        replicas, ready, is_ready = self.replicas, self.ready, self.cond("Ready").status == "True"
        if not ready:
            return None
        new_revision = ""
        if self.latest_created and self.latest_ready and self.latest_created != self.latest_ready:
            new_revision = self.latest_created  # serverless: Knative names the revisions
        elif len({p.revision for p in replicas}) > 1:
            # The newest pod belongs to the new revision (Deployments and Knative create new
            # pods before removing old ones); a tie goes to the pod that is not ready.
            new_revision = max(replicas, key=lambda p: (p.created or EPOCH, not p.ready)).revision
        if new_revision:
            new = [p for p in replicas if p.revision == new_revision]
            old_ready = [p for p in ready if p.revision != new_revision]
            if old_ready and sum(p.ready for p in new) < max(self.desired, 1):
                return new, old_ready
        # Not KServe's model states: they follow the pods, so a scale-up would look the same.
        latest = self.cond("LatestDeploymentReady").status in {"False", "Unknown"}
        if is_ready and (latest or self.behind):
            return [p for p in replicas if not p.ready], ready
        return None

    def event(self, *reasons: str, pod: str | None = None, kind: str = "") -> Event | None:
        """The newest event with one of these reasons (about this pod, or of this kind)."""
        for e in self.events:
            about_pod = pod is None or e.name == pod or (e.kind == "Workload" and pod in e.name)
            if e.reason in reasons and (not kind or e.kind == kind) and about_pod:
                return e
        return None


def read_view(
    isvc: Any, pods: Any, events: Any, desired: int, gpu: str, now: Any, stop: bool, delete: bool
) -> View:
    meta, status = as_dict(dig(isvc, "metadata")), as_dict(dig(isvc, "status"))
    model = as_dict(status.get("modelStatus"))
    failure, predictor = (
        as_dict(model.get("lastFailureInfo")),
        dig(status, "components", "predictor"),
    )
    # A pod without a name is not one the API server returned; it cannot be matched to events.
    everything = [p for p in (read_pod(raw, gpu) for raw in as_list(pods)) if p.name]
    live = [p for p in everything if p.phase not in {"Succeeded", "Failed"}]
    name = as_str(meta.get("name")) or next((p.app for p in everything if p.app), "")
    namespace = as_str(meta.get("namespace"))
    generation, observed = as_int(meta.get("generation")), as_int(status.get("observedGeneration"))
    moment = aware(now)
    return View(
        name=name,
        namespace=namespace,
        found=isinstance(isvc, dict),
        has_status=bool(status),
        deleted_at=parse_time(meta.get("deletionTimestamp")),
        finalizers=tuple(f for f in map(as_str, as_list(meta.get("finalizers"))) if f),
        stop_annotation=as_str(dig(meta, "annotations", STOP_ANNOTATION)).lower() == "true",
        asleep=as_str(dig(meta, "annotations", SLEEPING_ANNOTATION)).lower() == "true",
        conditions=read_conditions(status),
        model=ModelStatus(
            active=as_str(dig(model, "states", "activeModelState")),
            target=as_str(dig(model, "states", "targetModelState")),
            transition=as_str(model.get("transitionStatus")),
            failure=as_str(failure.get("reason")),
            message=as_str(failure.get("message")),
            exit_code=as_int(failure.get("exitCode")),
            location=as_str(failure.get("location")),
            copies=max(as_int(dig(model, "copies", "totalCopies")) or 0, 0),
        ),
        latest_created=as_str(dig(predictor, "latestCreatedRevision")),
        latest_ready=as_str(dig(predictor, "latestReadyRevision")),
        behind=generation is not None and observed is not None and generation > observed,
        endpoint=as_str(status.get("url")) or as_str(dig(status, "address", "url")),
        pods=tuple(p for p in live if not p.terminating),
        leaving=tuple(p for p in live if p.terminating),
        events=relevant_events(events, name, namespace, {p.name for p in everything}, moment),
        gpu=gpu,
        desired=desired,
        now=moment,
        stop_requested=stop,
        delete_requested=delete,
    )


# --- the scheduler's "0/3 nodes are available: 3 Insufficient nvidia.com/gpu." ---------------

_NODES = re.compile(rf"({_SMALL_INT})/({_SMALL_INT}) nodes are available:?(.*)", re.S)
_CAUSE = re.compile(rf"({_SMALL_INT})\s+(.+)", re.S)


def explain_unschedulable(message: str, pod: Pod, gpu: str) -> tuple[str, str] | None:
    """Reason and next step for the most telling cause the scheduler gives, or None."""
    found = _NODES.search(message)
    if not found:
        return None
    # What follows "preemption:" repeats the count for finding victims; it adds nothing here.
    body = found.group(3).split("preemption:")[0].strip().rstrip(".")
    causes = [
        (int(m.group(1)), m.group(2).strip().rstrip("."))
        for part in re.split(rf",\s*(?={_SMALL_INT}\s)", body)
        if (m := _CAUSE.match(part.strip()))
    ]
    nodes = f"{found.group(1)} of {found.group(2)} nodes"
    detail = "; ".join(f"{n} node(s): {text}" for n, text in causes) if len(causes) > 1 else ""
    tail = f" for pod {pod.name}" + (f" (scheduler: {detail})." if detail else ".")
    memory = f"{pod.memory} of memory free" if pod.memory else "enough free memory"
    gpus = f"{pod.gpus} free {gpu}" if pod.gpus > 1 else f"a free {gpu}"
    for needles, reason, step in (
        ((f"Insufficient {gpu}",), f"have {gpus}", _GPU_STEP),
        (("Insufficient memory",), f"have {memory}", _MEMORY_STEP),
        (("Insufficient cpu",), "have enough free CPU", _CPU_STEP),
        (("node affinity", "node selector"), "match the node selector", _SELECTOR_STEP),
        (("taint",), "accept the pod (the others carry taints it does not tolerate)", _TAINT_STEP),
        (("PersistentVolumeClaim", "volume node affinity"), "can attach its volume", _PVC_STEP),
    ):
        if any(x in text for _, text in causes for x in needles):
            return f"{nodes} {reason}{tail}", step
    return None


_GPU_STEP = "Lower countPerReplica, pick another GPU model, or add GPU nodes."
_MEMORY_STEP = "Lower resources.memory, stop another application there, or add larger nodes."
_CPU_STEP = "Lower resources.cpu, stop another application there, or add nodes."
_SELECTOR_STEP = "Pick a GPU model or node group the cluster has, or add nodes of that kind."
_TAINT_STEP = "Ask an admin which node group serves models, and pick that GPU model."
_PVC_STEP = (
    "Check that the PersistentVolumeClaim of spec.source.model.uri exists, is bound, and lives "
    "in the zone of the GPU nodes."
)

# --- ResourceQuota admission: "exceeded quota: q, requested: a=2, used: a=4, limited: a=4" -----

_QUOTA = re.compile(r"exceeded quota: ([^,]+), requested: (.*?), used: (.*?), limited: ([^\n]*)")


def explain_quota(message: str, gpu: str) -> tuple[str, str] | None:
    found = _QUOTA.search(message)
    if not found:
        return None
    quota = found.group(1).strip()
    asked, used, limit = (
        dict(p.split("=", 1) for p in found.group(i).split(",") if "=" in p) for i in (2, 3, 4)
    )
    key = next((k for k in asked if gpu in k), next(iter(asked), ""))
    field = next(
        (f for k, f in ((gpu, "countPerReplica"), ("memory", "resources.memory"),
                        ("cpu", "resources.cpu")) if k in key),
        "scaling.maxReplicas",
    )  # fmt: skip
    numbers = (
        f"it allows {key}={limit.get(key, '?')} with {used.get(key, '?')} in use, and one "
        f"replica asks for {asked[key]}"
        if key
        else "it is full"
    )
    return (
        f"The namespace's ResourceQuota {quota} refuses new replicas: {numbers}.",
        f"Stop or delete another application in this namespace, lower {field}, or ask an "
        f"admin to raise ResourceQuota {quota}.",
    )


# --- what a model server's or downloader's last words usually mean --------------------------

_HINTS = (
    (
        ("CUDA out of memory", "OutOfMemoryError", "CUDA error: out of memory"),
        "the model does not fit in GPU memory",
        "Raise countPerReplica, pick a GPU model with more memory or a quantized model, or "
        "lower serving.maxContextTokens.",
    ),
    (
        ("KV cache", "max_model_len", "No available memory for the cache blocks"),
        "the context window does not fit in the KV cache",
        "Lower serving.maxContextTokens, or raise engine.gpuMemoryUtilization or "
        "serving.kvCacheSize.",
    ),
    (
        ("401", "403", "Unauthorized", "Forbidden", "gated", "AccessDenied"),
        "the source refused access",
        "Set credentials on the profile (a Hugging Face token for hf://) and, for a gated "
        "model, accept its licence on the Hub with that account.",
    ),
    (
        ("404", "RepositoryNotFound", "NoSuchKey", "NoSuchBucket", "does not exist", "not found"),
        "the model artifact was not found",
        "Check spec.source.model.uri: the repository, path and revision must exist.",
    ),
    (
        ("No space left on device",),
        "the node's disk is full",
        "Ask an admin for nodes with more disk, or enable the weight cache (cache.enabled).",
    ),
)


def hint(message: str) -> tuple[str, str] | None:
    """What the message usually means and what to do about it, or None."""
    lowered = message.lower()
    for needles, meaning, step in _HINTS:
        if any(n.lower() in lowered for n in needles):
            return meaning, step
    return None
