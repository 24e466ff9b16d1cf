"""Form pieces every app's forms share: an organisation's object with a unique name, and a
bounded YAML field. Here, not in one app's forms, so no app imports another app's forms."""

import math

from django import forms

from jobs.manifest.bounded import DocumentError, Limits, load_bounded
from jobs.manifest.problems import kind_of


class OrganizationScopedForm(forms.ModelForm):
    """A ModelForm for an object of one organisation: names are unique within it."""

    def __init__(self, *args, organization, **kwargs):
        super().__init__(*args, **kwargs)
        self.organization = organization
        self.instance.organization = organization

    def clean_name(self):
        name = self.cleaned_data["name"]
        model = self._meta.model
        clash = model.objects.filter(organization=self.organization, name=name)
        if self.instance.pk:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            noun = model._meta.verbose_name
            raise forms.ValidationError(
                f"A {noun} named {name!r} exists already; pick another name."
            )
        return name


# A form's YAML field holds a short mapping or list: much smaller bounds than a manifest's.
FORM_YAML_LIMITS = Limits(
    max_bytes=64 * 1024,
    max_depth=16,
    max_nodes=5_000,
    max_aliases=20,
    max_expanded_bytes=128 * 1024,
    what="a form field",
    hint="shorten it",
)


def load_yaml_field(text: str, field: str, expect: type, limits: Limits = FORM_YAML_LIMITS):
    """A form field's YAML (or JSON) as `expect` (dict or list), read by the bounded loader;
    raises ValidationError naming the field and never quoting more than a few characters."""
    if not text.strip():
        return expect()
    try:
        value = load_bounded(text, field, limits)
    except DocumentError as error:
        # Problems inside the text (a key given twice) are named under the field.
        raise forms.ValidationError(
            [str(p) if p.path == field else f"{field}: {p}" for p in error.problems]
        ) from None
    if not isinstance(value, expect):
        noun = "mapping" if expect is dict else "list"
        raise forms.ValidationError(f"{field} must be a YAML {noun}; {kind_of(value)} was given.")
    where = not_finite(value)
    if where is not None:
        # JSON, where the value is stored, has no NaN or infinity.
        raise forms.ValidationError(
            f"{field}: {where or 'the value'} is not a finite number (.nan or .inf); "
            "give a number, or leave the key out."
        )
    return value


def not_finite(value, path: str = "") -> str | None:
    """The path of the first NaN or infinity in a loaded document, or None. The loader bounds
    depth and size, so the walk is bounded too."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        label = (
            f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))
        )
        found = not_finite(item, label[:200])
        if found is not None:
            return found
    return None
