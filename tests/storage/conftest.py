"""The storage service in-process on 127.0.0.1:0 over a real gRPC channel, against the
session's MongoDB-protocol server (one fresh database per test module) and real Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from engram_api.admin.v1 import admin_pb2_grpc
from engram_api.storage.v1 import storage_pb2_grpc
from engram_core.transport import Transport
from engram_core.taskq import redis_prefix
from storage_service.deps import Deps
from storage_service.server import create
from storage_service.settings import StorageSettings
from tests.storage.helpers import ADMIN_TOKEN, AUDIENCE, HOST_REGISTRY, Storage, host_registry


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def storage(mongo_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory,
                  request: pytest.FixtureRequest) -> AsyncIterator[Storage]:
    tmp: Path = tmp_path_factory.mktemp("storage")
    tag = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_") + "_" + uuid.uuid4().hex[:8]
    settings = StorageSettings(
        grpc_host="127.0.0.1", grpc_port=0, mongo_url=mongo_url, mongo_db=f"st_{tag}",
        redis_url=redis_url, deployment=f"st-{tag.replace('_', '-')}", task_queue="engram", keyring=tmp / "keyring.json",
        dev_keyring=True, admin_token=ADMIN_TOKEN, relay_interval_seconds=0.05,
        # The storage logic tests call every method from one client; the access check has its
        # own tests with mutual TLS (tests/storage/test_internal_plane.py).
        grpc_plaintext=True, host_registry=str(HOST_REGISTRY), audience=AUDIENCE,
    )
    running, close, deps = await create(settings, host_registry=host_registry())
    chan = Transport.plaintext().channel(f"127.0.0.1:{running.port}", "storage")
    yield Storage(storage_pb2_grpc.StorageServiceStub(chan), admin_pb2_grpc.AdminServiceStub(chan), deps,
                  f"127.0.0.1:{running.port}", settings)
    await chan.close()
    await running.stop(0)
    await deps.store.client.drop_database(settings.mongo_db)
    await close()
    redis = aioredis.Redis.from_url(redis_url)
    # Nobody consumes the relayed test tasks: drop every key of this module's deployment.
    keys = [key async for key in redis.scan_iter(match=redis_prefix(settings.deployment) + "*", count=500)]
    if keys:
        await redis.delete(*keys)
    await redis.aclose()


@pytest.fixture
def deps(storage: Storage) -> Deps:
    return storage.deps
