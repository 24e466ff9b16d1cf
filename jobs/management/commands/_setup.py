"""What the `cluster` and `profile` commands share: save through the pages' forms, print tables."""

import yaml
from django.core.management.base import CommandError


def save_form(form, what: str):
    if not form.is_valid():
        lines = []
        for field, errors in form.errors.items():
            label = "" if field == "__all__" else f"{field}: "
            lines.extend(f"  {label}{error}" for error in errors)
        raise CommandError(f"{what} not saved:\n" + "\n".join(lines))
    return form.save()


def write_table(stdout, rows) -> None:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        stdout.write("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def catalog_yaml(catalog) -> str:
    return yaml.safe_dump(catalog, sort_keys=False)
