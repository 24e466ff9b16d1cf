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

from jobs.models import UsageMinute
from jobs.usage.counters import COUNTER_FIELDS, figures
from jobs.usage.readers import SUMS, sums_of

# (organization_id, application_id, api_key_id, minute as epoch seconds, revision, adapter);
# the revision is None but during a Canary rollout, the adapter "" but for a request to one of
# the application's LoRA adapters (a shorter tuple is read as None and "")
Key = tuple


def scope_of(
    organization_id: int | None,
    application_id: int | None,
    key_id: int | None,
    revision: int | None = None,
    adapter: str = "",
) -> str:
    def part(value: int | None) -> str:
        return "-" if value is None else str(value)

    scope = f"o{part(organization_id)}.a{part(application_id)}.k{part(key_id)}"
    scope = scope if revision is None else f"{scope}.r{revision}"
    return f"{scope}.m{adapter}" if adapter else scope


def _parts(key: tuple) -> tuple:
    org, app, api_key, minute = key[:4]
    revision = key[4] if len(key) > 4 else None
    return org, app, api_key, minute, revision, (key[5] if len(key) > 5 else "")


def minute_at(epoch_seconds: int) -> datetime:
    return datetime.fromtimestamp(epoch_seconds, tz=UTC)


ID_FIELDS = (
    "minute", "scope", "organization_id", "application_id", "api_key_id", "revision", "adapter",
)  # fmt: skip
# Rows per statement: 500 x 32 parameters stays under SQLite's and PostgreSQL's limits.
ROWS_PER_STATEMENT = 500


def _upsert_sql(rows: int) -> str:
    quote = connection.ops.quote_name
    table = quote(UsageMinute._meta.db_table)
    columns = ", ".join(quote(name) for name in (*ID_FIELDS, *COUNTER_FIELDS))
    row = "(" + ", ".join(["%s"] * (len(ID_FIELDS) + len(COUNTER_FIELDS))) + ")"
    adds = ", ".join(
        f"{quote(name)} = {table}.{quote(name)} + excluded.{quote(name)}" for name in COUNTER_FIELDS
    )
    return (
        f"INSERT INTO {table} ({columns}) VALUES {', '.join([row] * rows)} "  # noqa: S608
        f"ON CONFLICT ({quote('scope')}, {quote('minute')}) DO UPDATE SET {adds}"
    )


def _float_columns() -> list[int]:
    floats = {f.column for f in UsageMinute._meta.fields if f.get_internal_type() == "FloatField"}
    return [i for i, name in enumerate((*ID_FIELDS, *COUNTER_FIELDS)) if name in floats]


def _upsert_unnest_sql() -> str:
    """PostgreSQL: the rows as one array per column, so a flush of any size is one statement
    with 31 parameters (adapting thousands of scalar parameters costs more than the upsert)."""
    quote = connection.ops.quote_name
    table = quote(UsageMinute._meta.db_table)
    names = (*ID_FIELDS, *COUNTER_FIELDS)
    types = {"minute": "timestamptz", "scope": "text", "adapter": "text"}
    floats = {names[index] for index in _float_columns()}
    arrays = ", ".join(
        f"%s::{types.get(name, 'double precision' if name in floats else 'bigint')}[]"
        for name in names
    )
    adds = ", ".join(
        f"{quote(name)} = {table}.{quote(name)} + excluded.{quote(name)}" for name in COUNTER_FIELDS
    )
    return (
        f"INSERT INTO {table} ({', '.join(quote(name) for name in names)}) "  # noqa: S608
        f"SELECT * FROM unnest({arrays}) "
        f"ON CONFLICT ({quote('scope')}, {quote('minute')}) DO UPDATE SET {adds}"
    )


def write(batch: Mapping[Key, list]) -> None:
    """Add every entry's counters to its row (made when missing), all or nothing, in one
    transaction: one statement on PostgreSQL, one per ROWS_PER_STATEMENT entries elsewhere.
    Each (scope, minute) comes once per statement, as an upsert requires."""
    if not batch:
        return
    postgres = connection.vendor == "postgresql"
    adapt = (lambda value: value) if postgres else connection.ops.adapt_datetimefield_value
    rows = [
        (
            adapt(minute_at(minute)),
            scope_of(org, app, key, rev, adapter),
            *(org, app, key, rev, adapter),
            *counters,
        )
        for (org, app, key, minute, rev, adapter), counters in (
            (_parts(k), v) for k, v in batch.items()
        )
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        if postgres:
            columns = [list(column) for column in zip(*rows, strict=True)]
            for index in _float_columns():  # one type per array: 0 and 0.5 both as floats
                columns[index] = [float(value) for value in columns[index]]
            cursor.execute(_upsert_unnest_sql(), columns)
            return
        for start in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[start : start + ROWS_PER_STATEMENT]
            cursor.execute(_upsert_sql(len(chunk)), [value for row in chunk for value in row])


def latest_minute_per_application(batch: Iterable[Key]) -> dict[int, dict[str, Any]]:
    """For each application in `batch`: its name and the figures of the latest minute the batch
    touched, summed over keys (what a live overview shows after this flush)."""
    latest: dict[int, int] = {}
    for _org, app, _key, minute, _revision, _adapter in map(_parts, batch):
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
