"""Session fixtures: a real MongoDB-protocol server and a real Redis over real sockets.

ENGRAM_TEST_MONGO_URL points the suite at an existing MongoDB (replica set, for transactions);
otherwise SecantusDB is started as its own process. ENGRAM_TEST_REDIS_URL names a Redis;
otherwise redis://127.0.0.1:6379/0 is used if it answers, else a redis-server is started.
A datastore that cannot be had fails the session loudly: never a skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_cli import datastores


@pytest.fixture(scope="session")
def mongo_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    given = datastores.env_url("ENGRAM_TEST_MONGO_URL")
    if given:
        yield given
        return
    try:
        child = datastores.start_secantus(tmp_path_factory.mktemp("mongo"))
    except datastores.DatastoreError as exc:
        pytest.fail(f"cannot start the MongoDB-protocol server: {exc}")
    yield child.url
    child.stop()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = datastores.env_url("ENGRAM_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
    if datastores.redis_answers(url):
        yield url
        return
    try:
        child = datastores.start_redis()
    except datastores.DatastoreError as exc:
        pytest.fail(f"cannot reach or start Redis: {exc}")
    yield child.url
    child.stop()


@pytest.fixture
def unique() -> str:
    """A short unique token for database names, key prefixes and queue names."""
    return uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def session_tag() -> str:
    return f"t{os.getpid()}_{uuid.uuid4().hex[:6]}"


ROOT = Path(__file__).resolve().parent.parent
