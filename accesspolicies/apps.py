from django.apps import AppConfig


class AccessPoliciesConfig(AppConfig):
    name = "accesspolicies"
    verbose_name = "Access"
