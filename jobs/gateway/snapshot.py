"""What the gateway knows without a database query per request: keys by lookup (a rotated
key's previous secret too, until its grace ends), access policies, and routes (application
name -> phase, reason, upstream address, ready replicas), loaded from the database in a thread
and reloaded when the change counter moved (read at most once a second; a Redis pub/sub nudge
makes it sooner when REDIS_URL is set). A call the snapshot would refuse in a way a change could
undo (an unknown key, a model unknown, not running or not granted) looks for a change first, so
a key just made and a model just Running work on their first call, whichever process made them.

`Snapshot` is immutable once built and replaced whole, so a request reads one consistent view
without locks. `Snapshot.grant` caches per (key, application) what the rules decide.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

# redis is imported with this module, never first inside the listener's thread: two threads
# importing it at once (this one and channels_redis on the event loop) deadlocked on redis's
# module locks and stopped the server's start-up.
import redis

from accesspolicies.secrets import API_KEY, BENCHMARK
from jobs.kube_names import predictor_url
from jobs.manifest import adapters as mf_adapters
from jobs.manifest.view import dig

from . import split
from .errors import GatewayError

logger = logging.getLogger(__name__)

RUNNING = "Running"
# A call the snapshot would refuse looks for a change at most this often (per process): it
# reads the change counter, one small query, and reloads only when the counter moved.
LOOK_GAP_SECONDS = 0.1
# last_used_at is written at most this often per key.
TOUCH_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Limits:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None


@dataclass(frozen=True, slots=True)
class Key:
    id: int
    organization_id: int
    name: str
    secret_hash: str
    expires_at: float | None  # epoch seconds
    all_applications: bool
    applications: frozenset[str]
    limits: Limits
    # A benchmark's credential (jobs/benchmark/), not a member's key: its one application
    # only, no policy's limits or networks, metered apart and never as a key's usage.
    benchmark: bool = False
    # A benchmark's revision: during a Canary rollout its load goes to that revision only
    # (split.pick), the stable one or the canary, whichever it measures.
    revision: int | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    id: int
    name: str
    all_keys: bool
    key_ids: frozenset[int]
    limits: Limits
    networks: tuple[Any, ...]  # ipaddress networks; empty allows any client


@dataclass(frozen=True, slots=True)
class Route:
    id: int
    organization_id: int
    name: str
    phase: str
    reason: str
    upstream: str  # base URL the public /v1/... path is appended to ("" when not running)
    # The model server behind it, whose dialect the gateway speaks (dialects.py): what the
    # backend recorded (Application.runtime: "infinity", "faster-whisper", ...), else the
    # manifest's runtime.engine ("vllm", "parakeet").
    runtime: str
    policy_name: str | None
    policy: Policy | None
    created: int
    # The base URL of each ready replica, sorted (routing.py picks one per request); the
    # upstream alone where the backend did not say (a Kubernetes Service, a virtual machine).
    replicas: tuple[str, ...] = ()
    # Scale to zero: minReplicas 0, so a request while it sleeps or wakes is held (waking.py);
    # and its recent wakes' mean time in seconds (None before its first), for Retry-After.
    sleeps: bool = False
    wake_seconds: float | None = None
    # A Canary rollout's split (split.py), None without one.
    canary: Any = None
    # A LoRA adapter's route: `name` is the adapter's model id, served by the replicas of the
    # application named here (the same id, upstream and policy); "" for an application's own.
    base: str = ""

    @property
    def running(self) -> bool:
        return self.phase == RUNNING and bool(self.upstream)


@dataclass(frozen=True, slots=True)
class Check:
    """One limit on one counter: kind "r" (requests/min), "t" (tokens/min), "c" (concurrent)."""

    kind: str
    counter: str
    limit: int


@dataclass(frozen=True, slots=True)
class Grant:
    """What the rules say about one key calling one application."""

    refusal: GatewayError | None
    networks: tuple[Any, ...]
    checks: tuple[Check, ...]


@dataclass(slots=True)
class Secret:
    key: Key
    digest: str
    until: float | None  # a previous secret's end of grace (epoch), else None


@dataclass
class Snapshot:
    secrets: dict[str, Secret] = field(default_factory=dict)  # lookup -> secret
    benchmarks: dict[str, Secret] = field(default_factory=dict)  # running benchmarks' lookups
    routes: dict[tuple[int, str], Route] = field(default_factory=dict)  # (org, name) -> route
    hosts: dict[str, Route] = field(default_factory=dict)  # "<app>.<domain>" -> route
    version: int = -1
    _grants: dict[tuple[int, int, str], Grant] = field(default_factory=dict)
    _models: dict[int, bytes] = field(default_factory=dict)

    def authenticate(self, presented: str, now: float) -> Key | None:
        """The live key `presented` is, or None; unknown, wrong, revoked and expired look alike."""
        if presented.startswith(BENCHMARK.prefix):
            secret = BENCHMARK.recognise(presented, self.benchmarks.get, lambda f: f.digest)
        else:
            secret = API_KEY.recognise(presented, self.secrets.get, lambda f: f.digest)
        if secret is None:
            return None
        key = secret.key
        if secret.until is not None and secret.until <= now:
            return None
        if key.expires_at is not None and key.expires_at <= now:
            return None
        return key

    def grant(self, key: Key, route: Route) -> Grant:
        # An application and its adapters share an id; a key may be granted one of them alone.
        at = (key.id, route.id, route.name)
        cached = self._grants.get(at)
        if cached is None:
            cached = self._grants[at] = decide(key, route)
        return cached

    def may_change_for(self, key: Key, model: str | None, host: str) -> bool:
        """Whether a change not loaded yet could answer this call that the snapshot would
        refuse: its host or model is unknown, not running, or not granted to the key."""
        route = self.hosts.get(host) if host else None
        if route is None:
            if not model:
                return False
            route = self.routes.get((key.organization_id, model))
        return route is None or not route.running or self.grant(key, route).refusal is not None

    def callable_routes(self, key: Key) -> list[Route]:
        return [
            r
            for (org, _), r in self.routes.items()
            if org == key.organization_id and self.grant(key, r).refusal is None
        ]


def decide(key: Key, route: Route) -> Grant:
    """May `key` call `route`, from which networks, under which limits (pure)."""
    if not key.all_applications and route.name not in key.applications:
        return Grant(
            GatewayError(
                403,
                f"This API key ({key.name}) is not allowed to call the model '{route.name}'. "
                "An admin can add the application to the key under Team.",
                "model",
            ),
            (),
            (),
        )
    if key.benchmark:
        # The console's own bounded load (jobs/benchmark/plan.py): no caller's limits apply,
        # and it comes from the console's host, not a caller's network.
        return Grant(None, (), ())
    policy = route.policy
    if route.policy_name and policy is None:
        return Grant(
            GatewayError(
                403,
                f"The model '{route.name}' names the access policy '{route.policy_name}', "
                "which does not exist, so no key may call it. An admin can create the policy "
                "under Team.",
                "model",
            ),
            (),
            (),
        )
    if policy is not None and not policy.all_keys and key.id not in policy.key_ids:
        return Grant(
            GatewayError(
                403,
                f"This API key ({key.name}) is not allowed to call the model '{route.name}': "
                f"its access policy '{policy.name}' does not list the key.",
                "model",
            ),
            (),
            (),
        )
    checks = []
    for kind, attr in (
        ("r", "requests_per_minute"),
        ("t", "tokens_per_minute"),
        ("c", "concurrent_requests"),
    ):
        # A policy's limit is per caller of the policy's applications; the key's own is shared
        # by everything the key calls.
        limit = getattr(policy.limits, attr) if policy is not None else None
        scope = f"k{key.id}p{policy.id}" if limit is not None else f"k{key.id}"
        if limit is None:
            limit = getattr(key.limits, attr)
        if limit is not None:
            checks.append(Check(kind, f"{kind}:{scope}", limit))
    return Grant(None, policy.networks if policy is not None else (), tuple(checks))


def models_body(snapshot: Snapshot, key: Key) -> bytes:
    """GET /v1/models for this key: what it may call, in OpenAI's list shape (cached)."""
    body = snapshot._models.get(key.id)
    if body is None:
        import json

        data = [
            {"id": r.name, "object": "model", "created": r.created, "owned_by": "servedeck"}
            for r in sorted(snapshot.callable_routes(key), key=lambda r: r.name)
        ]
        body = snapshot._models[key.id] = json.dumps({"object": "list", "data": data}).encode()
    return body


# --- loading from the database -------------------------------------------------------------


def _epoch(moment) -> float | None:
    return moment.timestamp() if moment is not None else None


def _limits(row) -> Limits:
    return Limits(row.requests_per_minute, row.tokens_per_minute, row.concurrent_requests)


def _networks(values: Any, policy: str) -> tuple[Any, ...]:
    out = []
    for value in values if isinstance(values, list) else []:
        try:
            out.append(ipaddress.ip_network(str(value), strict=False))
        except ValueError:
            # Fail closed: a policy with a broken network allows none rather than any.
            logger.warning("access policy %s: ignoring the invalid network %r", policy, value)
            out.append(ipaddress.ip_network("0.0.0.0/32"))
    return tuple(out)


def upstream_of(
    application, backend: str, namespace: str, engine: str, api: str, isolation: str = ""
) -> str:
    """Where the gateway sends this application's requests. Local: the model server's loopback
    port the backend recorded. Kubernetes: the predictor's cluster-local Service (the recorded
    status URL may be the public host name, which can lead back to this gateway), under
    KServe's /openai prefix for the Hugging Face (vLLM) server; virtual machines run vLLM
    itself behind that Service, at its own /v1."""
    if not application.endpoint:
        return ""
    if backend != "kubernetes":
        return application.endpoint.rstrip("/")
    base = predictor_url(application.name, namespace)
    kserve_prefix = isolation != "VirtualMachine" and engine == "vllm" and api in ("", "OpenAI")
    return base + ("/openai" if kserve_prefix else "")


def replicas_of(
    application, upstream: str, backend: str, engine: str, api: str, isolation: str = ""
) -> tuple[str, ...]:
    """The base URL of each ready replica the backend recorded (with KServe's /openai prefix
    where the upstream has it), sorted; the upstream alone when none is recorded."""
    if not upstream:
        return ()
    recorded = [e for e in application.replica_endpoints or [] if isinstance(e, str) and e]
    if not recorded or (backend == "kubernetes" and isolation == "VirtualMachine"):
        return (upstream,)
    return with_prefix(recorded, backend, engine, api)


def with_prefix(endpoints, backend: str, engine: str, api: str) -> tuple[str, ...]:
    """Replicas' base URLs as the gateway calls them: under KServe's /openai prefix for its
    Hugging Face (vLLM) server on Kubernetes, sorted. A Canary rollout's canary replicas too."""
    kserve_prefix = backend == "kubernetes" and engine == "vllm" and api in ("", "OpenAI")
    suffix = "/openai" if kserve_prefix else ""
    return tuple(sorted({e.rstrip("/") + suffix for e in endpoints if isinstance(e, str) and e}))


def adapter_names(spec: Any) -> list[str]:
    """The LoRA adapters' names of a filled manifest's spec."""
    return mf_adapters.names({"spec": spec}) if isinstance(spec, dict) else []


def load_snapshot(version: int = -1) -> Snapshot:
    """Read keys, policies, domains and applications (a few queries, whatever their number)."""
    from django.utils import timezone

    from accesspolicies.models import AccessPolicy, APIKey, VerifiedDomain
    from jobs.models import Application, Rollout

    now = timezone.now()
    snap = Snapshot(version=version)
    for row in APIKey.objects.filter(revoked_at__isnull=True):
        key = Key(
            id=row.pk,
            organization_id=row.organization_id,
            name=row.name,
            secret_hash=row.secret_hash,
            expires_at=_epoch(row.expires_at),
            all_applications=row.all_applications,
            applications=frozenset(a for a in row.applications or [] if isinstance(a, str)),
            limits=_limits(row),
        )
        snap.secrets[row.lookup] = Secret(key, row.secret_hash, None)
        grace = row.previous_expires_at
        if row.previous_lookup and row.previous_secret_hash and grace and grace > now:
            snap.secrets[row.previous_lookup] = Secret(
                key, row.previous_secret_hash, grace.timestamp()
            )
    _load_benchmarks(snap, now)
    members: dict[int, set[int]] = {}
    for policy_id, key_id in AccessPolicy.keys.through.objects.values_list(
        "accesspolicy_id", "apikey_id"
    ):
        members.setdefault(policy_id, set()).add(key_id)
    policies = {
        (p.organization_id, p.name): Policy(
            id=p.pk,
            name=p.name,
            all_keys=p.all_keys,
            key_ids=frozenset(members.get(p.pk, ())),
            limits=_limits(p),
            networks=_networks(p.allowed_networks, p.name),
        )
        for p in AccessPolicy.objects.all()
    }
    verified = {
        (d.organization_id, d.domain.lower())
        for d in VerifiedDomain.objects.filter(verified_at__isnull=False)
    }
    wake_times = _wake_times()
    rollouts = {
        r.application_id: r for r in Rollout.objects.filter(state__in=Rollout.ACTIVE).order_by()
    }
    # By id: of two applications claiming one adapter id, the first made keeps it.
    for app in Application.objects.select_related("profile__cluster").order_by("id"):
        spec = dig(app.manifest, "spec") or {}
        access = spec.get("access") if isinstance(spec.get("access"), dict) else {}
        policy_name = (
            access.get("accessPolicy") if isinstance(access.get("accessPolicy"), str) else None
        )
        engine = dig(spec, "source", "model", "runtime", "engine")
        api = dig(spec, "source", "model", "serving", "apiFormat")
        isolation = dig(spec, "source", "model", "runtime", "isolation")
        namespace = spec.get("namespace") or app.profile.namespace
        backend = app.profile.cluster.backend
        engine = engine if isinstance(engine, str) else ""
        api = api if isinstance(api, str) else ""
        isolation = isolation if isinstance(isolation, str) else ""
        upstream = upstream_of(app, backend, str(namespace), engine, api, isolation)
        route = Route(
            id=app.pk,
            organization_id=app.organization_id,
            name=app.name,
            phase=app.phase,
            reason=app.reason,
            upstream=upstream,
            runtime=app.serving_runtime,
            policy_name=policy_name,
            policy=policies.get((app.organization_id, policy_name)) if policy_name else None,
            created=int(app.created_at.timestamp()),
            replicas=replicas_of(app, upstream, backend, engine, api, isolation),
            sleeps=dig(spec, "source", "model", "scaling", "minReplicas") == 0,
            wake_seconds=wake_times.get(app.pk),
        )
        rollout = rollouts.get(app.pk)
        if rollout is not None:
            route = split.with_rollout(
                route,
                rollout.stable_revision,
                rollout.canary_revision,
                rollout.weight,
                with_prefix(rollout.canary_endpoints or [], backend, engine, api),
                rollout.state,
            )
        snap.routes[(app.organization_id, app.name)] = route
        for adapter in adapter_names(spec):
            # Each LoRA adapter is a model id of its own on the base's replicas (vLLM answers
            # to it with --lora-modules); an application's own name is never taken over.
            snap.routes.setdefault(
                (app.organization_id, adapter), replace(route, name=adapter, base=app.name)
            )
        domain = access.get("domain")
        exposed = access.get("exposure") == "Domain" and isinstance(domain, str)
        if exposed and (app.organization_id, domain.lower()) in verified:
            snap.hosts[f"{app.name}.{domain.lower()}"] = route
    return snap


def _load_benchmarks(snap: Snapshot, now) -> None:
    """The credentials of the benchmarks running now, each for its one application."""
    from jobs.models import Benchmark

    running = Benchmark.objects.filter(state=Benchmark.State.RUNNING, deadline__gt=now)
    for row in running.exclude(lookup="").select_related("application", "revision"):
        key = Key(
            id=-row.pk,  # never an API key's id: no key's limits, last use or usage
            organization_id=row.application.organization_id,
            name=f"benchmark {row.pk}",
            secret_hash=row.secret_hash,
            expires_at=row.deadline.timestamp(),
            all_applications=False,
            applications=frozenset({row.application.name}),
            limits=Limits(),
            benchmark=True,
            revision=row.revision.number,
        )
        snap.benchmarks[row.lookup] = Secret(key, row.secret_hash, None)


# --- keeping it fresh --------------------------------------------------------------------------

NUDGE_CHANNEL = "servedeck:gateway:changed"


def read_counter() -> int:
    from accesspolicies.models import ChangeCounter

    return ChangeCounter.read()


def write_last_used(key_ids: set[int]) -> None:
    """One UPDATE for the keys used since the last write (not a save: no counter bump)."""
    from django.utils import timezone

    from accesspolicies.models import APIKey

    APIKey.objects.filter(pk__in=key_ids).update(last_used_at=timezone.now())


class SnapshotKeeper:
    """Holds the current Snapshot and a daemon thread that reloads it when the change counter
    moved; also writes keys' last use, at most once a minute each, off the request path."""

    def __init__(
        self,
        loader: Callable[[int], Snapshot] = load_snapshot,
        counter: Callable[[], int] = read_counter,
        touch_writer: Callable[[set[int]], None] = write_last_used,
        interval: float = 1.0,
        redis_url: str | None = None,
        look_gap: float = LOOK_GAP_SECONDS,
    ) -> None:
        self.loader = loader
        self.counter = counter
        self.touch_writer = touch_writer
        self.interval = interval
        self.redis_url = redis_url
        self.current = Snapshot()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._touched: dict[int, float] = {}
        self._pending_touch: set[int] = set()
        self._thread: threading.Thread | None = None
        self.reloads = 0
        self._refreshing = threading.Lock()  # one load at a time: a slow one never wins late
        self.look_gap = look_gap
        self.looks = 0
        self._looked_from = float("-inf")  # when the last finished look began (perf_counter)
        self._last_look = float("-inf")
        self._look: asyncio.Future | None = None

    def touch(self, key_id: int, now: float) -> None:
        """Note a use of the key; cheap, and a no-op within a minute of the last noted use."""
        last = self._touched.get(key_id)
        if last is None or now - last >= TOUCH_SECONDS:
            self._touched[key_id] = now
            self._pending_touch.add(key_id)

    def start(self) -> None:
        """Load once (blocking: call it from a thread) and start refreshing. Idempotent while
        it runs; after stop(), or in a process forked from one where it ran (the thread did
        not come along), it starts afresh."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._wake.clear()
        try:
            self._refresh(force=True)
        except Exception:
            # The console must still start (say, before its first migrate): every key is
            # unknown until a later check loads them.
            logger.exception("gateway: could not load keys and routes; retrying each second")
        self._thread = threading.Thread(target=self._run, name="gateway-snapshot", daemon=True)
        self._thread.start()
        if self.redis_url:
            threading.Thread(target=self._listen, name="gateway-nudge", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self._write_touches()

    async def fresh(self, since: float) -> Snapshot:
        """The snapshot after a look for a change that began at or after `since` (a
        time.perf_counter() reading: the call's arrival). Looks are shared: one at a time,
        and one at most each look_gap; a call waits for the next one that began after it."""
        loop = asyncio.get_running_loop()
        while self._looked_from < since:
            look = self._look
            if look is None or look.get_loop() is not loop:
                look = self._look = asyncio.ensure_future(self._look_once())
            await asyncio.shield(look)
        return self.current

    async def _look_once(self) -> None:
        try:
            wait = self._last_look + self.look_gap - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            began = self._last_look = time.perf_counter()
            self.looks += 1
            try:
                await asyncio.get_running_loop().run_in_executor(None, self._refresh)
            except Exception:
                # The call is refused on what is loaded; the refresher says why each second.
                logger.debug("gateway: a look for a change failed", exc_info=True)
            self._looked_from = max(self._looked_from, began)
        finally:
            self._look = None

    def _refresh(self, force: bool = False) -> None:
        from django.db import close_old_connections

        with self._refreshing:
            close_old_connections()
            try:
                version = self.counter()
                if force or version != self.current.version:
                    self.current = self.loader(version)
                    self.reloads += 1
            finally:
                close_old_connections()

    def _write_touches(self) -> None:
        if not self._pending_touch:
            return
        pending, self._pending_touch = self._pending_touch, set()
        try:
            self.touch_writer(pending)
        except Exception:
            logger.exception("could not write the last use of %d API keys", len(pending))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self._refresh()
                self._write_touches()
            except Exception:
                # Keep serving from the last snapshot; say so (once per failed check).
                logger.exception("gateway: could not reload keys and routes; keeping the last")

    def _listen(self) -> None:
        """Wake the refresher as soon as another process announces a change."""
        while not self._stop.is_set():
            try:
                client = redis.Redis.from_url(self.redis_url, socket_timeout=None)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(NUDGE_CHANNEL)
                self._wake.set()  # a change announced before the subscription was missed
                for message in pubsub.listen():
                    if self._stop.is_set():
                        return
                    if message.get("type") == "message":
                        self._wake.set()
            except Exception:
                logger.warning("gateway: Redis change announcements lost; retrying in 5 s")
                self._stop.wait(5)


def _wake_times(recent: int = 5) -> dict[int, float]:
    """Each application's mean time of its `recent` latest wakes from sleep, in seconds."""
    from jobs.models import Wake

    times: dict[int, list[float]] = {}
    for app_id, asked, ready in Wake.objects.filter(ready_at__isnull=False).values_list(
        "application_id", "requested_at", "ready_at"
    ):
        kept = times.setdefault(app_id, [])
        if len(kept) < recent:  # newest first (Wake's ordering)
            kept.append((ready - asked).total_seconds())
    return {app_id: sum(t) / len(t) for app_id, t in times.items()}
