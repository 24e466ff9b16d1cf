"""`{% page_organization %}`: the hidden field that says which organisation a form was opened
for; put it next to `{% csrf_token %}` in every POST form (loaded as a builtin)."""

from django import template
from django.utils.html import format_html

from accesspolicies.middleware import PAGE_ORGANIZATION_FIELD

register = template.Library()


@register.simple_tag(takes_context=True)
def page_organization(context) -> str:
    membership = context.get("membership")
    if not membership:
        return ""
    return format_html(
        '<input type="hidden" name="{}" value="{}">',
        PAGE_ORGANIZATION_FIELD,
        membership.organization.slug,
    )
