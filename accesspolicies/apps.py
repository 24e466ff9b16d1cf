from django.apps import AppConfig


class AccessPoliciesConfig(AppConfig):
    name = "accesspolicies"
    verbose_name = "Access"

    def ready(self) -> None:
        from accesspolicies import signals

        signals.connect()
