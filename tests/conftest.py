"""Fixtures that several test modules share: the loopback S3 server of tests/s3server.py."""

from tests.s3server import s3, s3_server  # noqa: F401
