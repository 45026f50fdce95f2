"""Fixtures that several test modules share: the loopback S3 server of tests/s3server.py."""

import pytest

# Their asserts report the values compared, as a test module's do.
pytest.register_assert_rewrite("tests.helpers", "tests.s3server")

from tests.s3server import s3, s3_server  # noqa: E402, F401
