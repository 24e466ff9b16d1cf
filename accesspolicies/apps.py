from django.apps import AppConfig


class AccessPoliciesConfig(AppConfig):
    name = "accesspolicies"
    verbose_name = "Team"

    def ready(self) -> None:
        from accesspolicies import signals

        signals.connect()
