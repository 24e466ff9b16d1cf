"""What a user sees of an application on Kubernetes: `derive_status` turns its InferenceService,
pods and events into a phase, a reason in plain words and the next step.

A pure function (data in, data out): the reconciler fetches the objects, this decides, and the
tests feed it tables of real shapes. The priority is written once, in `_PRIORITY`: Deleting
beats everything, a stop beats the rest, a failure beats progress, and progress is reported as
Updating or Running while an earlier revision or other replicas still serve.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from jobs.status.phases import Phase
from jobs.status.readers import (
    STOP_ANNOTATION,
    Container,
    Pod,
    View,
    as_int,
    as_str,
    duration,
    explain_quota,
    explain_unschedulable,
    hint,
    last_line,
    plural,
    quoted,
    read_view,
)

__all__ = ["INTERNAL_ERROR", "Status", "derive_status"]

logger = logging.getLogger(__name__)
INTERNAL_ERROR = "ServeDeck could not read the cluster's status objects"
# Past this, a delete still waiting on a finalizer is stuck rather than slow.
STUCK_DELETE = timedelta(minutes=10)
PULL_ERRORS = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"}
CREATE_ERRORS = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
# Condition reasons that report a failure, not a start still under way.
FAILED_CONDITIONS = {"RevisionFailed", "ProgressDeadlineExceeded", "ContainerMissing", "ExitCode"}
SPEC_FAILURES = {
    "RuntimeNotRecognized": (
        "{what} names a serving runtime the cluster does not have",
        "Pick a runtime the cluster has in runtime.engine (or leave it out to choose by "
        "format), or ask an admin to install that ServingRuntime.",
    ),
    "NoSupportingRuntime": (
        "No serving runtime on the cluster supports the model format of {what}",
        "Set format (or runtime.engine) to one the cluster serves, or ask an admin to install "
        "a runtime for it.",
    ),
    "RuntimeDisabled": (
        "The serving runtime of {what} is disabled on the cluster",
        "Pick another runtime in runtime.engine, or ask an admin to enable it.",
    ),
    "InvalidPredictorSpec": (
        "KServe refuses the predictor of {what}",
        "Fix the field the message names and deploy again; a dry run shows the rendered "
        "InferenceService.",
    ),
}
PULL_STEP = (
    "Check the image name and tag (the runtime's image, from its model master) and that the "
    "registry credentials (imagePullSecrets) in {where} can pull it."
)
ROLL_BACK = "fix the setting it names and deploy again, or roll back from Deploy history."
NOTHING = "Nothing to do."


@dataclass(frozen=True)
class Status:
    """What the console shows: one phase, why, what to do, and the numbers behind it."""

    phase: Phase
    reason: str
    next_step: str
    ready_replicas: int = 0
    desired_replicas: int = 0
    endpoint: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Keys named like the Application fields the reconciler updates; plain values."""
        return {**asdict(self), "phase": str(self.phase.value)}


@dataclass(frozen=True)
class _Finding:
    phase: Phase
    reason: str
    next_step: str = NOTHING
    blocking: bool = False  # someone has to act: waiting alone will not clear it


def _said(text: str, detail: str = "") -> str:
    """'text: detail.' with exactly one full stop, whatever the detail ends with."""
    text = f"{text}: {detail}" if detail else text
    return text if text.endswith((".", "!", "?", "…")) else f"{text}."


def _failure(reason: str, step: str) -> _Finding:
    return _Finding(Phase.FAILED, reason, step, blocking=True)


def derive_status(
    isvc: dict | None,
    pods: list[dict],
    events: list[dict],
    *,
    desired_replicas: int,
    stopped: bool = False,
    deleting: bool = False,
    gpu_resource: str = "nvidia.com/gpu",
    now: datetime | None = None,
) -> Status:
    """The status of one application from its InferenceService (None when it is not on the
    cluster), its pods and the events of its namespace. Never raises: odd input gives a Status.

    `now` ages events and stuck deletes; without it, events are aged against the newest one.
    """
    desired = max(as_int(desired_replicas) or 0, 0)
    try:
        gpu = as_str(gpu_resource) or "nvidia.com/gpu"
        view = read_view(isvc, pods, events, desired, gpu, now, stopped is True, deleting is True)
        found = next(f for check in _PRIORITY if (f := check(view)) is not None)
        return Status(
            found.phase, found.reason, found.next_step, view.ready_count, desired, view.endpoint
        )
    except Exception:
        # A status that crashes the reconciler hides every other application too: log, say so.
        logger.exception("derive_status failed on its input")
        return Status(
            Phase.PENDING,
            f"{INTERNAL_ERROR}; the application itself was not changed.",
            "Report it to the ServeDeck maintainers with the reconciler's log.",
            desired_replicas=desired,
        )


# --- Deleting and Stopped: what the user asked for comes first ------------------------------


def _deleting(view: View) -> _Finding | None:
    if not (view.delete_requested or view.deleted_at):
        return None
    left = len(view.pods) + len(view.leaving)
    if not view.found and not left:
        return _Finding(Phase.DELETING, "Gone from the cluster; the console removes its record.")
    reason = f"Deleting {view.what}" + (f" and {plural(left, 'pod')}." if left else ".")
    waited = view.now - view.deleted_at if view.now and view.deleted_at else None
    if waited and waited > STUCK_DELETE and view.finalizers:
        return _Finding(
            Phase.DELETING,
            f"{reason} It has waited {duration(view.deleted_at, view.now)} on the "
            f"finalizer {', '.join(view.finalizers)}.",
            "Ask an admin to check that the controller owning that finalizer (usually "
            "KServe's) runs; it must remove the finalizer before the delete can finish.",
        )
    return _Finding(
        Phase.DELETING, reason, "Nothing to do: it disappears once the cluster has removed it."
    )


def _stopped(view: View) -> _Finding | None:
    if not (view.stop_requested or view.stop_annotation or view.cond("Stopped").status == "True"):
        return None
    outside = "" if view.stop_requested else f" (by the annotation {STOP_ANNOTATION})"
    if left := len(view.pods) + len(view.leaving):
        return _Finding(
            Phase.STOPPED,
            f"Stopping {view.what}{outside}: {plural(left, 'pod')} still shutting down.",
            "Nothing to do: it shows Stopped when they are gone.",
        )
    return _Finding(
        Phase.STOPPED,
        f"{view.what[0].upper()}{view.what[1:]} is stopped{outside}: no replicas run and its "
        "endpoint does not answer; settings and caches are kept.",
        "Start it to serve again."
        if view.stop_requested
        else f"Start it from the console, or remove the annotation {STOP_ANNOTATION}.",
    )


def _sleeping(view: View) -> _Finding | None:
    """Scaled to zero by ServeDeck (minReplicas 0, idle): Sleeping, once its pods are gone
    as while they go; the next request through the gateway wakes it."""
    if not view.asleep:
        return None
    if left := len(view.pods) + len(view.leaving):
        return _Finding(
            Phase.SLEEPING,
            f"{view.what[0].upper()}{view.what[1:]} is going to sleep (scaled to zero): "
            f"{plural(left, 'pod')} still shutting down.",
            "Nothing to do: the next request through the gateway wakes it.",
        )
    return _Finding(
        Phase.SLEEPING,
        f"{view.what[0].upper()}{view.what[1:]} is sleeping: its predictor is scaled to zero, "
        "no replica runs and none holds a GPU.",
        "Nothing to do: the next request through the gateway wakes it.",
    )


# --- Failed: a signal that will not clear by waiting ----------------------------------------


def _spec_failure(view: View) -> _Finding | None:
    m = view.model
    blocked = m.transition in {"InvalidSpec", "BlockedByFailedLoad"} or m.target == "FailedToLoad"
    if not (blocked and m.failure in SPEC_FAILURES) and m.transition != "InvalidSpec":
        return None
    text, step = SPEC_FAILURES.get(m.failure, SPEC_FAILURES["InvalidPredictorSpec"])
    label = text.format(what=view.what) + f" ({m.failure or 'InvalidSpec'})"
    return _failure(_said(label[0].upper() + label[1:], last_line(m.message)), step)


def _container_failure(view: View) -> _Finding | None:
    """Containers the kubelet cannot even start: the image or its configuration."""
    for pod in view.pods:
        for c in (c for c in pod.containers if c.state == "waiting"):
            if c.reason in PULL_ERRORS:
                # The kubelet's "Failed" event carries the registry's answer; the back-off
                # state only says it waits to retry.
                failed = view.event("Failed", pod=pod.name)
                said = failed.message if failed and "image" in failed.message else c.message
                why = _pull_trouble(said.lower()) or (
                    "the image name is not valid"
                    if c.reason == "InvalidImageName"
                    else last_line(said) or "no detail from the kubelet"
                )
                return _failure(
                    f"Pod {pod.name} cannot pull the image {c.image or quoted(said) or '(unnamed)'}"
                    f" for container {c.name} ({c.reason}: {why}).",
                    PULL_STEP.format(where=view.where),
                )
            if c.reason in CREATE_ERRORS:
                return _failure(
                    _said(f"Pod {pod.name} cannot start container {c.name} ({c.reason})",
                          last_line(c.message)),
                    f"Create the Secret it names in {view.where}, or fix the profile's "
                    "credentials reference."
                    if "secret" in c.message.lower()
                    else "Fix what the message names and deploy again.",
                )  # fmt: skip
    return None


def _pull_trouble(said: str) -> str:
    if any(x in said for x in ("not found", "manifest unknown", "does not exist")):
        return "the image or its tag does not exist"
    if any(x in said for x in ("401", "403", "unauthorized", "denied", "authoriz")):
        return "the registry refused access"
    return ""


def _download_failure(view: View) -> _Finding | None:
    for pod in view.pods:
        if (d := pod.downloader) is None or not d.crashed:
            continue
        _, said, code = d.death
        meaning = hint(said)
        reason = f"Downloading the model failed on pod {pod.name}: storage-initializer exited"
        reason += (f" with code {code}" if code is not None else "") + _restarts(d)
        return _failure(
            _said(reason + (f"; {meaning[0]}" if meaning else ""), last_line(said)),
            meaning[1]
            if meaning
            else "Check spec.source.model.uri and that the profile's credentials can read it; "
            f"the log says more (kubectl logs {pod.name} -c storage-initializer).",
        )
    return None


def _restarts(c: Container) -> str:
    return f" ({plural(c.restarts, 'restart')})" if c.restarts else ""


def _crash(view: View) -> _Finding | None:
    for pod in view.pods:
        main, downloader = pod.main, pod.downloader
        for c in sorted(pod.containers, key=lambda c: (c is not main, not c.init)):
            if c.crashed and c is not downloader:
                return _crash_finding(
                    pod, c, "The model server" if c is main else f"Container {c.name}"
                )
    return None


def _crash_finding(pod: Pod, c: Container, who: str) -> _Finding:
    cause, said, code = c.death
    if "OOMKilled" in (c.reason, c.last_reason):
        limit = f", limit {c.memory_limit}" if c.memory_limit else ""
        return _failure(
            f"{who} ran out of memory (OOMKilled{limit}) on pod {pod.name}{_restarts(c)}.",
            "Raise resources.memory, or lower serving.maxContextTokens or serving.kvCacheSize.",
        )
    meaning = hint(said)
    exits = ", ".join(x for x in (f"exit code {code}" if code is not None else "", cause) if x)
    reason = f"{who} keeps exiting on pod {pod.name} ({exits or 'no exit code'}"
    reason += f", {plural(c.restarts, 'restart')})" if c.restarts else ")"
    return _failure(
        _said(reason + (f"; {meaning[0]}" if meaning else ""), last_line(said)),
        meaning[1]
        if meaning
        else f"Read its log (kubectl logs {pod.name} -c {c.name} --previous), {ROLL_BACK}",
    )


def _queue_failure(view: View) -> _Finding | None:
    for pod in (p for p in view.pods if p.queue_gated):
        said = view.event("Pending", "QuotaReserved", "Admitted", pod=pod.name, kind="Workload")
        text = said.message.lower() if said and said.reason == "Pending" else ""
        if any(x in text for x in ("doesn't exist", "does not exist", "is inactive", "stopped")):
            return _failure(
                _said(f"Queue {pod.queue or '(unnamed)'} cannot admit pod {pod.name}",
                      last_line(said.message)),
                f"Ask an admin to create or reactivate queue {pod.queue or '(unnamed)'}; "
                "queue.name cannot change once the application exists.",
            )  # fmt: skip
    return None


def _refused_pods(view: View) -> _Finding | None:
    refused, rollout = view.event("FailedCreate"), view.rollout()
    have = len(rollout[0]) if rollout else len(view.replicas)  # of the newest revision
    if refused is None or have >= view.desired or "exceeded quota" in refused.message:
        return None
    return _failure(
        _said(f"Kubernetes refuses to create pods for {view.what} ({refused.kind} "
              f"{refused.name})", last_line(refused.message)),
        "A policy or admission webhook of the namespace rejects the pod: fix what the message "
        "names, or ask an admin about the policy.",
    )  # fmt: skip


def _model_failure(view: View) -> _Finding | None:
    m = view.model
    if m.target != "FailedToLoad" and m.transition != "BlockedByFailedLoad":
        return None
    what = {
        "ModelLoadFailed": "The model failed to load",
        "RuntimeUnhealthy": "The serving runtime's containers fail to start or are unhealthy",
    }.get(m.failure, "KServe reports that the model failed to load")
    what += f" on {m.location}" if m.location else f" for {view.what}"
    what += f" (exit code {m.exit_code})" if m.exit_code else ""
    meaning = hint(m.message)
    return _failure(
        _said(what + (f"; {meaning[0]}" if meaning else ""), last_line(m.message)),
        meaning[1]
        if meaning
        else f"Read the model server's log on the model overview, {ROLL_BACK}",
    )


def _condition_failure(view: View) -> _Finding | None:
    for kind in ("Ready", "PredictorReady", "LatestDeploymentReady", "PredictorConfigurationReady"):
        c = view.cond(kind)
        if c.status == "False" and c.reason in FAILED_CONDITIONS:
            return _failure(
                _said(f"KServe reports {kind} False for {view.what} ({c.reason})",
                      last_line(c.message)),
                f"Read the model server's log on the model overview, {ROLL_BACK}",
            )  # fmt: skip
    return None


def _backoff_event(view: View) -> _Finding | None:
    """The kubelet's events alone, for when pods come without their container statuses."""
    for pod in (p for p in view.pods if p.main is None or p.main.state == ""):
        backoff = view.event("BackOff", pod=pod.name)
        if not pod.ready and backoff and "restarting failed container" in backoff.message:
            return _failure(
                _said(f"Pod {pod.name} keeps crashing", last_line(backoff.message)),
                f"Read its log (kubectl logs {pod.name} --previous), {ROLL_BACK}",
            )
    return None


_FAILURES: tuple[Callable[[View], _Finding | None], ...] = (
    _spec_failure,  # nothing can run until the spec or the runtime is fixed
    _container_failure,
    _download_failure,  # before the crash check: the model server never started
    _crash,
    _queue_failure,
    _refused_pods,
    _model_failure,  # KServe's summary; the pod checks above say more when pods are given
    _condition_failure,
    _backoff_event,
)


def _failed(view: View) -> _Finding | None:
    found = next((f for check in _FAILURES if (f := check(view)) is not None), None)
    if found is None or not view.ready:
        return found
    serving = f" Meanwhile {len(view.ready)} of {view.desired} replicas still serve requests."
    return _failure(found.reason + serving, found.next_step)


# --- Progress: what holds back the replicas that are not ready --------------------------------


def _quota(view: View, missing: int) -> _Finding | None:
    refused = view.event("FailedCreate")
    explained = explain_quota(refused.message, view.gpu) if refused and missing > 0 else None
    return _Finding(Phase.SCHEDULING, *explained, blocking=True) if explained else None


def _queued(pods: list[Pod], view: View) -> _Finding | None:
    for pod in (p for p in pods if p.queue_gated):
        queue = pod.queue or "its queue"
        said = view.event("Pending", "QuotaReserved", "Admitted", pod=pod.name, kind="Workload")
        if said and said.reason != "Pending":
            return _Finding(
                Phase.SCHEDULING,
                f"Queue {queue} has admitted pod {pod.name}; it goes to the scheduler next.",
            )
        # Kueue prefixes its reason with "couldn't assign flavors to pod set main: ".
        detail = said.message.split("pod set ", 1)[-1].split(": ", 1)[-1] if said else ""
        return _Finding(
            Phase.SCHEDULING,
            _said(f"Pod {pod.name} waits in queue {queue} for quota", last_line(detail)),
            f"It starts by itself when {queue} has room. To start sooner, stop another "
            f"application that uses {queue}, lower countPerReplica, or ask an admin to raise "
            "the queue's quota.",
            blocking=True,
        )
    return None


def _unschedulable(pods: list[Pod], view: View) -> _Finding | None:
    for pod in (p for p in pods if p.unplaced and not p.queue_gated):
        c, failed = pod.scheduled, view.event("FailedScheduling", pod=pod.name)
        said = c.message if c.status == "False" and c.reason == "Unschedulable" else ""
        if not (said := said or (failed.message if failed else "")):
            continue
        reason, step = explain_unschedulable(said, pod, view.gpu) or (
            _said(f"The scheduler cannot place pod {pod.name}", last_line(said)),
            "Compare the resources, GPU model and node group the application asks for with the "
            "cluster's nodes.",
        )
        scale_up = view.event("TriggeredScaleUp", pod=pod.name)
        if scale_up and scale_up.not_before(failed):
            return _Finding(
                Phase.SCHEDULING,
                f"{reason} The cluster autoscaler is adding a node for it.",
                "Nothing to do: a new node takes a few minutes.",
            )
        return _Finding(Phase.SCHEDULING, reason, step, blocking=True)
    return None


def _unplaced(pods: list[Pod], view: View) -> _Finding | None:
    pod = next((p for p in pods if p.unplaced), None)
    return pod and _Finding(
        Phase.SCHEDULING, f"Pod {pod.name} waits for the scheduler to place it on a node."
    )


def _downloading(pods: list[Pod], view: View) -> _Finding | None:
    for pod in pods:
        if (d := pod.downloader) is not None and d.state == "running":
            took = duration(d.started, view.now)
            return _Finding(
                Phase.DOWNLOADING,
                f"Downloading the model to pod {pod.name} on node {pod.node or '?'}"
                + (f" (for {took})." if took else "."),
                "Nothing to do: large models take minutes. It moves on to Loading when the "
                "download ends.",
            )
    for pod in pods:
        pulling, pulled = (view.event(r, pod=pod.name) for r in ("Pulling", "Pulled"))
        if pulling and not (pulled and pulled.not_before(pulling)):
            return _Finding(
                Phase.DOWNLOADING,
                f"Pulling the image {quoted(pulling.message) or '(unnamed)'} on node "
                f"{pod.node or '?'} for pod {pod.name}.",
                "Nothing to do: a model server image is several gigabytes; its first pull on a "
                "node takes minutes.",
            )
    if "Downloading" in (view.model.target, view.model.active):
        return _Finding(Phase.DOWNLOADING, f"Downloading the model for {view.what}.")
    return None


def _loading(pods: list[Pod], view: View) -> _Finding | None:
    for pod in pods:
        if (main := pod.main) is not None and main.state == "running" and not pod.ready:
            took = duration(main.started, view.now)
            return _Finding(
                Phase.LOADING,
                f"Loading the model on pod {pod.name}: the model server has run"
                + (f" for {took}" if took else "")
                + " and is not ready yet.",
                "Nothing to do: it turns Running when the model server passes its readiness "
                "check; large models take several minutes.",
            )
    for pod in (p for p in pods if p.node and not p.ready):
        if mount := view.event("FailedMount", pod=pod.name):
            return _Finding(
                Phase.LOADING,
                _said(f"Pod {pod.name} cannot mount a volume", last_line(mount.message)),
                "Check that the Secret, ConfigMap or PersistentVolumeClaim it names exists in "
                f"{view.where}.",
                blocking=True,
            )
        return _Finding(Phase.LOADING, f"Starting pod {pod.name} on node {pod.node}.")
    if view.model.target == "Loading":
        return _Finding(Phase.LOADING, f"Loading the model for {view.what}.")
    return None


_PROGRESS: tuple[Callable[[list[Pod], View], _Finding | None], ...] = (
    _queued,
    _unschedulable,
    _unplaced,
    _downloading,
    _loading,
)


def _progress(pods: list[Pod], view: View, missing: int) -> _Finding | None:
    """The first thing holding back these pods, or the replicas not even created yet."""
    found = _quota(view, missing)
    return found or next((f for check in _PROGRESS if (f := check(pods, view)) is not None), None)


# --- Updating, Running, starting, Pending -----------------------------------------------------


def _updating(view: View) -> _Finding | None:
    if (rollout := view.rollout()) is None:
        return None
    new, old_ready = rollout
    waiting = _progress([p for p in new if not p.ready], view, view.desired - len(new))
    reason = (
        f"Rolling out a new revision: {sum(p.ready for p in new)} of {view.desired} new replicas "
        f"ready; the previous revision still serves with {plural(len(old_ready), 'replica')}."
    )
    return _Finding(
        Phase.UPDATING,
        f"{reason} {waiting.reason}" if waiting else reason,
        waiting.next_step
        if waiting and waiting.blocking
        else "Nothing to do: traffic moves to the new revision when its replicas are ready. If "
        "it stays here, roll back from Deploy history.",
    )


def _running(view: View) -> _Finding | None:
    no_pods = not view.pods and not view.leaving
    serving = view.ready or (no_pods and view.cond("Ready").status == "True")
    if not serving or "True" not in (view.cond("Ready").status, view.cond("IngressReady").status):
        return None
    at = f" at {view.endpoint}" if view.endpoint else ""
    reason = f"Serving{at} with {view.ready_count} of {view.desired} replicas ready."
    if view.ready_count >= view.desired:
        call = f' with model "{view.name}"' if view.name else ""
        return _Finding(Phase.RUNNING, reason, f"Nothing to do: send requests{call}.")
    rest = [p for p in view.pods if not p.ready]
    waiting = _progress(rest, view, view.desired - len(view.replicas))
    return _Finding(
        Phase.RUNNING,
        f"{reason} {waiting.reason}" if waiting else reason,
        waiting.next_step
        if waiting and waiting.blocking
        else "Nothing to do: the other replicas join when they are ready.",
    )


def _starting(view: View) -> _Finding | None:
    if view.ready:  # ready pods, but KServe has not routed traffic to them yet
        return _Finding(
            Phase.LOADING,
            f"{len(view.ready)} of {view.desired} replicas are ready; waiting for the route to "
            f"{view.what}{view.cond('IngressReady').said('IngressReady')}.",
            "Nothing to do if it clears within a few minutes; otherwise ask an admin to check "
            "the cluster's ingress or gateway.",
        )
    return _progress(list(view.pods), view, view.desired - len(view.replicas))


def _pending(view: View) -> _Finding:
    what = f"{view.what[0].upper()}{view.what[1:]}"
    if not view.found:
        return _Finding(
            Phase.PENDING,
            f"{what} is not on the cluster.",
            "If it does not appear within a minute, deploy again from Deploy history; someone "
            "may have deleted it outside the console.",
        )
    if not view.has_status:
        return _Finding(
            Phase.PENDING,
            f"KServe has not reported on {view.what} yet.",
            "Nothing to do for a minute; if it stays Pending, ask an admin to check that the "
            "KServe controller runs.",
        )
    # KServe puts the telling reason on the component's condition, not always on Ready.
    said = view.cond("PredictorReady").said("PredictorReady") or view.cond("Ready").said("Ready")
    return _Finding(
        Phase.PENDING,
        f"{what} has no replicas yet{said}.",
        "Nothing to do for a minute; if it stays Pending, read the events on the model overview.",
    )


# The priority, highest first. Each check answers or passes; `_pending` always answers.
_PRIORITY: tuple[Callable[[View], _Finding | None], ...] = (
    _deleting,
    _stopped,
    _sleeping,
    _failed,
    _updating,
    _running,
    _starting,
    _pending,
)
