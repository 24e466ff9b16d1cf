"""The access app's pages, one module per resource: members and invitations, personal tokens,
API keys, access policies, verified domains and the audit log. Logging in and passwords are in
accesspolicies/passwords.py, which the console's own URLs import (another app may not import
these views)."""
