"""Makes the real-service fixtures available to the tests of this folder (see services.py)."""

from tests.support.services import (  # noqa: F401  (pytest finds fixtures by name)
    chromium_browser,
    chromium_session,
    postgres_database_factory,
    postgres_module_url,
    postgres_server,
    postgres_url,
    s3_bucket,
    s3_server,
)
