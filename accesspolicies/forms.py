"""Forms of the Access pages. They only shape the input: the verbs validate it (names, limits,
applications, networks), and `show_invalid` puts their error on the field it names."""

from django import forms

from accesspolicies import limits
from accesspolicies.models import Role
from accesspolicies.problems import Invalid

# The verbs name fields as the REST API does; the forms use Python names.
FIELD_OF = {
    "requestsPerMinute": "requests_per_minute",
    "tokensPerMinute": "tokens_per_minute",
    "concurrentRequests": "concurrent_requests",
    "expiresInDays": "expires_in_days",
    "graceMinutes": "grace_minutes",
    "allowedNetworks": "allowed_networks",
}


def show_invalid(form: forms.Form, error: Invalid) -> None:
    field = FIELD_OF.get(error.field, error.field)
    form.add_error(field if field in form.fields else None, error.message)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. ci-deploys.")
    expires_in_days = forms.IntegerField(
        min_value=1,
        max_value=366,
        required=False,
        initial=90,
        help_text="Leave empty for a token that does not expire.",
    )


class InviteForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)
    note = forms.CharField(
        max_length=200, required=False, help_text="Who it is for, e.g. Nina from support."
    )
    expires_in_days = forms.IntegerField(
        min_value=1, max_value=30, initial=7, help_text="The link stops working after this."
    )


class JoinForm(forms.Form):
    username = forms.CharField(max_length=150)
    password = forms.CharField(widget=forms.PasswordInput)
    password_again = forms.CharField(widget=forms.PasswordInput, label="Password (again)")

    def clean(self):
        data = super().clean()
        if data.get("password") != data.get("password_again"):
            self.add_error("password_again", "The two passwords differ; type the same twice.")
        return data


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


def _limit(name: str, help_text: str) -> forms.IntegerField:
    high = limits.LIMITS[name][0]
    return forms.IntegerField(min_value=1, max_value=high, required=False, help_text=help_text)


class APIKeyForm(forms.Form):
    name = forms.CharField(
        max_length=63, help_text="Who calls with it, e.g. support-bot (lowercase, digits, -)."
    )
    applications = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every application of the organisation, now and later.",
    )
    requests_per_minute = _limit("requestsPerMinute", "Empty: no limit.")
    tokens_per_minute = _limit("tokensPerMinute", "Prompt and completion tokens; empty: no limit.")
    concurrent_requests = _limit("concurrentRequests", "Empty: no limit.")
    expires_in_days = forms.IntegerField(
        min_value=1,
        max_value=limits.MAX_EXPIRES_IN_DAYS,
        required=False,
        help_text="Empty: the key does not expire.",
    )

    def __init__(self, *args, application_names=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["applications"].choices = [(n, n) for n in application_names]


class RotateForm(forms.Form):
    grace_minutes = forms.IntegerField(
        min_value=0,
        max_value=limits.MAX_GRACE_MINUTES,
        initial=60,
        help_text="How long the old secret keeps working.",
    )


class PolicyForm(forms.Form):
    name = forms.CharField(
        max_length=63, help_text="What applications name in spec.access.accessPolicy."
    )
    keys = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every key of the organisation.",
    )
    requests_per_minute = _limit("requestsPerMinute", "Per caller; overrides the key's.")
    tokens_per_minute = _limit("tokensPerMinute", "Per caller; overrides the key's.")
    concurrent_requests = _limit("concurrentRequests", "Per caller; overrides the key's.")
    allowed_networks = forms.CharField(
        required=False,
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Client networks as CIDRs, one a line (e.g. 10.0.0.0/8). Empty: any client.",
    )

    def __init__(self, *args, key_names=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["keys"].choices = [(n, n) for n in key_names]


class DomainForm(forms.Form):
    domain = forms.CharField(max_length=253, help_text="e.g. models.example.com")
