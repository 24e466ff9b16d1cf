"""Numbers for people on the models catalog pages."""

from django import template

from models_catalog.sizing import human_bytes

register = template.Library()


@register.filter(name="bytes")
def bytes_(value):
    return human_bytes(value)


@register.filter
def params(value):
    """8030261248 -> "8.0B"; 567754752 -> "568M"."""
    if not value:
        return "unknown"
    if value >= 10**9:
        return f"{value / 10**9:.1f}B"
    return f"{value / 10**6:.0f}M"
