"""An invitation link carries its secret in the path (/access/join/sdi_…/): the access log
keeps the path without it, as it keeps query strings without their values, so whoever reads
the logs cannot join the organisation with the link's role."""

import pytest

from console.serve import redact_path


@pytest.mark.parametrize(
    "path, logged",
    [
        ("/access/join/sdi_0123456789abTOPSECRET/", "/access/join/sdi_…/"),
        ("/access/join/sdi_0123456789abTOPSECRET", "/access/join/sdi_…"),
        ("/x/sdk_0123456789abTOPSECRET/y?token=sdp_s", "/x/sdk_…/y?token=…"),
        ("/access/members/", "/access/members/"),
        ("/models/sdi/", "/models/sdi/"),
    ],
)
def test_secrets_in_the_path_are_hidden(path, logged):
    assert redact_path(path) == logged
