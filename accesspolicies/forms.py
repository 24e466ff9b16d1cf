from django import forms


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. ci-deploys.")
    expires_in_days = forms.IntegerField(
        min_value=1, max_value=366, required=False, initial=90,
        help_text="Leave empty for a token that does not expire.",
    )
