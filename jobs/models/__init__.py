"""The jobs app's models: what is served (serving.py) and what serving measured (usage.py)."""

from jobs.status.phases import Phase

from .serving import (
    ADDONS,
    Application,
    ApplicationQuerySet,
    Cluster,
    ClusterQuerySet,
    Draft,
    DraftQuerySet,
    Event,
    Profile,
    ProfileQuerySet,
    Revision,
    Rollout,
    Wake,
    dns_label,
    new_draft_key,
)
from .usage import (
    Benchmark,
    BenchmarkLevel,
    ReplicaClock,
    ReplicaDay,
    UsageMinute,
)

__all__ = [
    "ADDONS",
    "Application",
    "ApplicationQuerySet",
    "Benchmark",
    "BenchmarkLevel",
    "Cluster",
    "ClusterQuerySet",
    "Draft",
    "DraftQuerySet",
    "Event",
    "Phase",
    "Profile",
    "ProfileQuerySet",
    "ReplicaClock",
    "ReplicaDay",
    "Revision",
    "Rollout",
    "UsageMinute",
    "Wake",
    "dns_label",
    "new_draft_key",
]
