"""Where the meter's counts land: one upsert of many (organisation, application, key, minute)
rows in one short transaction, and the minute's figures per application for live pages.

The upsert adds to the stored counters in SQL (`ON CONFLICT ... DO UPDATE SET c = c +
excluded.c`, which SQLite and PostgreSQL both speak): the ORM's update_conflicts would overwrite
the counters instead of adding, and read-modify-write would lose counts between gateway
processes. Only our own table and column names are spliced in; every value is a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

from jobs.gateway.counters import COUNTER_FIELDS, figures
from jobs.models import UsageMinute
from jobs.usage import SUMS, sums_of

# (organization_id, application_id, api_key_id, minute as epoch seconds)
Key = tuple[int | None, int | None, int | None, int]


def scope_of(organization_id: int | None, application_id: int | None, key_id: int | None) -> str:
    def part(value: int | None) -> str:
        return "-" if value is None else str(value)

    return f"o{part(organization_id)}.a{part(application_id)}.k{part(key_id)}"


def minute_at(epoch_seconds: int) -> datetime:
    return datetime.fromtimestamp(epoch_seconds, tz=UTC)


def _upsert_sql() -> str:
    quote = connection.ops.quote_name
    table = quote(UsageMinute._meta.db_table)
    ids = ("minute", "scope", "organization_id", "application_id", "api_key_id")
    columns = ", ".join(quote(name) for name in (*ids, *COUNTER_FIELDS))
    values = ", ".join(["%s"] * (len(ids) + len(COUNTER_FIELDS)))
    adds = ", ".join(
        f"{quote(name)} = {table}.{quote(name)} + excluded.{quote(name)}" for name in COUNTER_FIELDS
    )
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({values}) "  # noqa: S608 (our own names only)
        f"ON CONFLICT ({quote('scope')}, {quote('minute')}) DO UPDATE SET {adds}"
    )


def write(batch: Mapping[Key, list]) -> None:
    """Add every entry's counters to its row (made when missing), all or nothing."""
    adapt = connection.ops.adapt_datetimefield_value
    params = [
        (
            adapt(minute_at(minute)),
            scope_of(org, app, key),
            org,
            app,
            key,
            *counters,
        )
        for (org, app, key, minute), counters in batch.items()
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(_upsert_sql(), params)


def latest_minute_per_application(batch: Iterable[Key]) -> dict[int, dict[str, Any]]:
    """For each application in `batch`: its name and the figures of the latest minute the batch
    touched, summed over keys (what a live overview shows after this flush)."""
    latest: dict[int, int] = {}
    for _org, app, _key, minute in batch:
        if app is not None and minute > latest.get(app, -1):
            latest[app] = minute
    if not latest:
        return {}
    rows = (
        UsageMinute.objects.filter(
            application_id__in=latest, minute__in={minute_at(m) for m in latest.values()}
        )
        .values("application_id", "application__name", "minute")
        .annotate(**SUMS)
        .order_by()
    )
    out: dict[int, dict[str, Any]] = {}
    for row in rows:
        app = row["application_id"]
        if row["minute"] != minute_at(latest[app]) or row["application__name"] is None:
            continue
        out[app] = {
            "name": row["application__name"],
            "minute": row["minute"].isoformat(),
            **figures(sums_of(row)),
        }
    return out
