"""The fake-AWS environment of runs without AWS (localrun.fakeaws): never a real account."""

from __future__ import annotations

import os

import boto3

from localrun.fakeaws import fake_aws_environment, use_fake_aws

DEVELOPER_SHELL = {
    "AWS_PROFILE": "production-admin",
    "AWS_SESSION_TOKEN": "real-session-token",
    "AWS_SECURITY_TOKEN": "real-security-token",
    "AWS_ACCESS_KEY_ID": "AKIAREALKEY",
    "AWS_SECRET_ACCESS_KEY": "real-secret",
    "AWS_DEFAULT_REGION": "eu-west-3",
    "MEMORY_HASH_KEY_SECRET": "arn:aws:secretsmanager:eu-west-3:123456789012:secret:hash",
    "PATH": "/usr/bin",
}


def test_a_developer_shell_loses_its_account_and_gets_fake_credentials() -> None:
    environ = dict(DEVELOPER_SHELL)
    use_fake_aws("a-person-hash-key-0123456789", environ)
    assert environ == {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
        "MEMORY_HASH_KEY": "a-person-hash-key-0123456789",
        "PATH": "/usr/bin",
    }


def test_the_environment_names_what_it_removes() -> None:
    environment = fake_aws_environment("a-person-hash-key-0123456789")
    removed = {name for name, value in environment.items() if value is None}
    assert removed == {
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "MEMORY_HASH_KEY_SECRET",
    }


def test_every_test_runs_in_it() -> None:
    """conftest's autouse fixture puts the same environment in place for every test."""
    for name, value in fake_aws_environment("test-person-hash-key-0123456789").items():
        assert os.environ.get(name) == value
    credentials = boto3.Session().get_credentials()
    assert credentials is not None and credentials.access_key == "testing"
