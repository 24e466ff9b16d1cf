from django import forms

from accesspolicies.models import Role


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. ci-deploys.")
    expires_in_days = forms.IntegerField(
        min_value=1,
        max_value=366,
        required=False,
        initial=90,
        help_text="Leave empty for a token that does not expire.",
    )


class MemberForm(forms.Form):
    username = forms.RegexField(
        regex=r"^[\w.@+-]{1,150}$",
        help_text="An existing user joins with their own password; a new user gets a password "
        "shown once.",
        error_messages={"invalid": "Use letters, digits and @ . + - _ only."},
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
