"""ServeDeck settings: everything comes from the environment, with defaults that run one machine.

Embedded defaults: a SQLite file and the in-memory channel layer. Production sets DATABASE_URL
(PostgreSQL), REDIS_URL, SECRET_KEY, ALLOWED_HOSTS and HTTPS=true.
"""

import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from console.env import (
    env_bool,
    env_choice,
    env_host_port,
    env_int,
    env_list,
    env_namespaces,
    env_networks,
    env_str,
    env_url,
)

# Everything this process creates (the SQLite database and its journal, the secret key, the
# local backend's state and logs) is private to the user that runs it, from its first byte.
os.umask(0o077)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("SERVEDECK_VAR_DIR", str(BASE_DIR / "var")))


def _private_var_dir() -> None:
    """VAR_DIR exists and only its owner may enter it (a folder an earlier version made 0755
    is closed too, which also hides the files it made 0644)."""
    VAR_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    if VAR_DIR.stat().st_uid == os.getuid() and VAR_DIR.stat().st_mode & 0o077:
        VAR_DIR.chmod(0o700)


DEBUG = env_bool("DEBUG", False)


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated once and kept in VAR_DIR."""
    key = env_str("SECRET_KEY")
    if key:
        if len(key) < 50:
            raise ImproperlyConfigured(
                "SECRET_KEY is shorter than 50 characters; use a random one."
            )
        return key
    path = VAR_DIR / "secret-key"
    if not path.exists():
        _private_var_dir()
        # Created 0600: the key is never readable by another user, not even for a moment.
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process started at the same moment wrote it
        else:
            with os.fdopen(descriptor, "w") as handle:
                handle.write(secrets.token_urlsafe(64))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "django_tables2",
    "ninja",  # its Swagger UI files, served from here (no CDN)
    "console",
    "accesspolicies",
    "jobs",
    "models_catalog",
]

MIDDLEWARE = [
    "console.middleware.HealthCheckMiddleware",
    "console.api_errors.ApiErrorShapeMiddleware",
    "console.middleware.QueryStringCredentialsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "console.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "console.middleware.LoginRequiredMiddleware",
    "accesspolicies.middleware.MembershipMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "accesspolicies.middleware.OrganizationGuardMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accesspolicies.context_processors.membership",
            ],
            # {% page_organization %} sits next to {% csrf_token %} in every POST form.
            "builtins": ["accesspolicies.templatetags.organization"],
        },
    },
]

DATABASE_URL = env_url(
    "DATABASE_URL",
    {"sqlite", "postgres", "postgresql", "pgsql"},
    default=f"sqlite:///{VAR_DIR / 'servedeck.sqlite3'}",
)
if DATABASE_URL.startswith("sqlite:///"):
    _private_var_dir()
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Concurrent writers: a write transaction takes the write lock when it begins (IMMEDIATE),
    # so it never fails half-way on upgrading a read lock; a writer waits up to `timeout`
    # seconds for the lock instead of failing at once; WAL lets readers run beside a writer.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME") or None}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_url("REDIS_URL", {"redis", "rediss", "unix"})
# Connections each Redis pool of a process may open (the channel layer's, the gateway's limits):
# redis-py refuses a call past its default of 100 rather than waiting for one. 200 pages opened
# at once are 200 group joins at once (bench/live_bench.py).
SERVEDECK_REDIS_MAX_CONNECTIONS = env_int("SERVEDECK_REDIS_MAX_CONNECTIONS", 1000)
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # A socket's receive blocks in Redis for up to 5 s (BZPOPMIN): redis-py's own
                # read timeout, 5 s too, cut it off on a busy console and closed the page
                # (1011). Reads wait longer than the block; connecting stays quick to fail.
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "max_connections": SERVEDECK_REDIS_MAX_CONNECTIONS,
                        "socket_timeout": 30,
                        "socket_connect_timeout": 5,
                    }
                ],
                "prefix": env_str("REDIS_PREFIX", "servedeck"),
            },
        }
    }
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env_str("REDIS_PREFIX", "servedeck"),
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# The in-memory layer reaches only its own process: on the embedded defaults the reconciler runs
# inside the console's process (started once, on the first request or socket, stopped at
# exit), so its status announcements reach the live pages. With Redis, `manage.py reconcile`
# runs as its own process (or several consoles would each run one).
SERVEDECK_RECONCILER_IN_PROCESS = env_bool("SERVEDECK_RECONCILER_IN_PROCESS", not REDIS_URL)
# Several `manage.py reconcile` replicas in a cluster: set to the namespace they run in, and
# they elect one leader on a coordination.k8s.io Lease there (through the pod's service
# account); only the leader acts, and another takes over within the lease's duration.
SERVEDECK_LEADER_ELECTION_NAMESPACE = env_str("SERVEDECK_LEADER_ELECTION_NAMESPACE").strip()
SERVEDECK_LEADER_ELECTION_LEASE = env_str("SERVEDECK_LEADER_ELECTION_LEASE", "servedeck-reconciler")
SERVEDECK_LEADER_ELECTION_LEASE_SECONDS = env_int("SERVEDECK_LEADER_ELECTION_LEASE_SECONDS", 15)
if SERVEDECK_LEADER_ELECTION_LEASE_SECONDS < 3:
    raise ImproperlyConfigured(
        f"SERVEDECK_LEADER_ELECTION_LEASE_SECONDS={SERVEDECK_LEADER_ELECTION_LEASE_SECONDS} is "
        "below 3; set the seconds a reconciler's Lease holds without renewal, such as 15."
    )
# Live sockets (model pages, the dashboard) one user may hold open in one console process; past
# it a page's socket is closed with 4429 and the page says why (jobs/live/consumers.py).
SERVEDECK_LIVE_SOCKETS_PER_USER = env_int("SERVEDECK_LIVE_SOCKETS_PER_USER", 50)
if SERVEDECK_LIVE_SOCKETS_PER_USER < 1:
    raise ImproperlyConfigured(
        f"SERVEDECK_LIVE_SOCKETS_PER_USER={SERVEDECK_LIVE_SOCKETS_PER_USER} is below 1; "
        "set a whole number of live pages one user may keep open, such as 50."
    )

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Failed logins per account and per client address within the window (seconds), counted in
# the cache; past either limit, logins from there wait for the window's end unhashed.
SERVEDECK_LOGIN_FAILURES_PER_ACCOUNT = env_int("SERVEDECK_LOGIN_FAILURES_PER_ACCOUNT", 5)
SERVEDECK_LOGIN_FAILURES_PER_ADDRESS = env_int("SERVEDECK_LOGIN_FAILURES_PER_ADDRESS", 30)
# The proxies (addresses or CIDRs) whose X-Forwarded-For is read: the client's address is then
# the rightmost hop that is not one of them; from anyone else the header is ignored. It is the
# address access policies' allowedNetworks, the per-address login limit and the audit see.
SERVEDECK_TRUSTED_PROXIES = env_networks("SERVEDECK_TRUSTED_PROXIES")
SERVEDECK_LOGIN_FAILURE_WINDOW = env_int("SERVEDECK_LOGIN_FAILURE_WINDOW", 900)
# An admin's password reset link works once, for a day.
PASSWORD_RESET_TIMEOUT = env_int("PASSWORD_RESET_TIMEOUT", 86400)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "console.static_finders.PackagedFilesFinder",  # vendor/plotly.min.js from the plotly package
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the app and package folders, so a fresh clone needs no collectstatic.
WHITENOISE_USE_FINDERS = True

DJANGO_TABLES2_TEMPLATE = "django_tables2/table.html"

# Behind TLS (production): secure cookies, HSTS and a redirect to HTTPS.
HTTPS = env_bool("HTTPS", False)
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", HTTPS)
if env_bool("TRUST_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# No inline scripts, handlers or styles anywhere (pages say what they need with data-
# attributes for static/console/*.js; htmx's own indicator styles are off, see base.html).
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

# The local backend: model servers as processes on this machine. The command template has
# {model} {port} {name} {args} placeholders; empty means vLLM's own `vllm serve`.
SERVEDECK_LOCAL_COMMAND = env_str("SERVEDECK_LOCAL_COMMAND")
# Engine flags the operator's model server takes beyond the platform's list, as
# "--name=kind ..." (kind: bool, int, float, text, json). Flags that set host, port, host
# paths, downloads or remote code stay refused whatever this says.
SERVEDECK_EXTRA_ENGINE_FLAGS = env_str("SERVEDECK_EXTRA_ENGINE_FLAGS")
# A deploy wizard draft nobody saved a step of for this many days is discarded (pruned when
# drafts are listed, on the Deploy model page).
SERVEDECK_DRAFT_DAYS = env_int("SERVEDECK_DRAFT_DAYS", 14)
SERVEDECK_LOCAL_STATE_DIR = Path(env_str("SERVEDECK_LOCAL_STATE_DIR", str(VAR_DIR / "local")))
# Without vLLM the local backend runs CPU model servers, one virtualenv each in this folder
# (scripts/cpu_runtimes.sh installs them), on model folders under SERVEDECK_MODELS_DIR: a
# file:// source may name a folder there and nowhere else on this machine.
SERVEDECK_RUNTIMES_DIR = Path(env_str("SERVEDECK_RUNTIMES_DIR", str(VAR_DIR / "runtimes")))
SERVEDECK_MODELS_DIR = Path(env_str("SERVEDECK_MODELS_DIR", str(VAR_DIR / "models")))
# hf:// models served by a CPU runtime are downloaded here first (one folder for the console,
# the Hugging Face cache layout, each snapshot at its commit).
SERVEDECK_DOWNLOADS_DIR = Path(env_str("SERVEDECK_DOWNLOADS_DIR", str(VAR_DIR / "downloads")))
# vLLM's CPU build keeps each model's compiled kernels here, one folder per vLLM version and
# model: a restart or a second replica starts warm (minutes of compiling saved on a small CPU).
SERVEDECK_VLLM_CACHE_DIR = Path(env_str("SERVEDECK_VLLM_CACHE_DIR", str(VAR_DIR / "vllm-cache")))
# "off": chat and embeddings never run on vLLM's CPU build, transformers serve and infinity-emb
# serve them (an operator's way back, and the benchmark's way to compare both); "auto": vLLM's
# CPU build wherever it can.
SERVEDECK_VLLM_CPU = env_str("SERVEDECK_VLLM_CPU", "auto").strip().lower()
# The free disk the downloads folder keeps (bytes, with Ki/Mi/Gi/Ti, or a percentage of its
# file system); empty: the larger of 5 GiB and 10%. A download that would eat into it is
# refused. A bad value stops the start (jobs' AppConfig checks it with the local backend's
# own reading).
SERVEDECK_DOWNLOADS_RESERVE = env_str("SERVEDECK_DOWNLOADS_RESERVE").strip()
# A cluster's kubeconfig is one regular file an operator put in this folder (checked when the
# cluster is saved and again when its client is made: never a path list, `~` or a file
# elsewhere on the host). The console's own service account (in-cluster) is for the
# `cluster add` command, run by an operator on the host, or for the pages when this is on.
SERVEDECK_KUBECONFIG_DIR = Path(env_str("SERVEDECK_KUBECONFIG_DIR", str(VAR_DIR / "kubeconfigs")))
SERVEDECK_ALLOW_IN_CLUSTER = env_bool("SERVEDECK_ALLOW_IN_CLUSTER", False)
# The gateway (/v1): seconds to open a connection to a model server, and for a whole answer (a
# stream: the longest wait between two chunks) before the client gets 504.
SERVEDECK_GATEWAY_CONNECT_TIMEOUT = env_int("SERVEDECK_GATEWAY_CONNECT_TIMEOUT", 5)
SERVEDECK_GATEWAY_READ_TIMEOUT = env_int("SERVEDECK_GATEWAY_READ_TIMEOUT", 600)
# How long a request (not a stream) to a sleeping model waits for it to wake before a 503.
SERVEDECK_WAKE_WAIT = env_int("SERVEDECK_WAKE_WAIT", 120)
# Which media links (image_url, audio_url, video_url, file_url) a request may hold: "data"
# (only data: URLs, the default) or "public" (http(s) links to hosts that resolve to public
# addresses only). The model server fetches a link from its own host and network.
SERVEDECK_GATEWAY_MEDIA_URLS = env_choice(
    "SERVEDECK_GATEWAY_MEDIA_URLS", ("data", "public"), "data"
)
# Domain verification asks this DNS server (host:port) for the TXT record; unset means the
# system's resolvers. Each lookup gives up after SERVEDECK_DNS_TIMEOUT seconds.
SERVEDECK_DNS_RESOLVER = env_host_port("SERVEDECK_DNS_RESOLVER", 53)
SERVEDECK_DNS_TIMEOUT = env_int("SERVEDECK_DNS_TIMEOUT", 5)
# Where an HTTPRoute of Domain exposure sends requests: ServeDeck's gateway Service
# (namespace/name:port), so the access policy applies to every request.
SERVEDECK_GATEWAY_SERVICE = env_str("SERVEDECK_GATEWAY_SERVICE", "servedeck/servedeck-gateway:8000")
# The namespaces whose pods may call a virtual machine's model server (its NetworkPolicy opens
# the serving port to them only): the gateway's by default, where the console runs too. "*":
# any source, for a gateway outside the cluster's pod network.
SERVEDECK_VM_CALLER_NAMESPACES = env_namespaces(
    "SERVEDECK_VM_CALLER_NAMESPACES", [SERVEDECK_GATEWAY_SERVICE.partition("/")[0] or "servedeck"]
)
# The organisations (slugs, comma-separated; "*" for every one) whose profiles may read private
# artifacts with this machine's own credentials chain (storageCredentials: machine): the
# operator's credentials, never a member's choice (jobs/storage_access.py).
SERVEDECK_MACHINE_CREDENTIALS = env_list("SERVEDECK_MACHINE_CREDENTIALS", [])
# Where KServe's CRDs are read from to validate rendered objects (tests; optional elsewhere).
KSERVE_CRD_DIR = env_str("KSERVE_CRD_DIR")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Bounded: a request's text that reaches a message or traceback never makes a huge line;
    # and a secret of the console's (an invitation link's in a refused path) is cut to its prefix.
    "formatters": {
        "plain": {
            "()": "console.logs.ConsoleFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s: %(message)s",
        }
    },
    "filters": {"one_line_4xx": {"()": "console.logs.OneLineClientErrors"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # Every Hub call and readiness probe would be a line otherwise.
        **{name: {"level": "WARNING"} for name in ("httpx", "httpx2", "huggingface_hub")},
        "django.request": {"filters": ["one_line_4xx"]},
    },
}
