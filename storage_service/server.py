"""``engram storage``: the StorageService and AdminService process, with the outbox relay."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from pymongo.errors import ConnectionFailure

from engram_api.admin.v1 import admin_pb2_grpc
from engram_api.storage.v1 import storage_pb2_grpc
from engram_core import logs
from engram_core.crypto import FileKeyProvider, Keyring
from engram_core.grpc_errors import on_unreachable
from engram_core.grpc_server import RunningServer, create_server, run_until_signal
from engram_core.scope_changes import ChangePublisher
from engram_core.taskq import make_celery, redis_prefix
from engram_core.transport import Transport
from engram_core.hosts import HostRegistry
from storage_service.admin import AdminServicer
from storage_service.admission import Admissions
from storage_service.authority import HostAuthority
from storage_service.operator import OperatorMoves
from storage_service.deps import Deps
from storage_service.outbox import Relay
from storage_service.service import StorageServicer
from storage_service.settings import StorageSettings
from storage_service.store import Store

log = logging.getLogger("engram.storage")


def load_keyring(settings: StorageSettings) -> Keyring:
    path = str(settings.keyring)
    return Keyring.ensure_dev_file(path) if settings.dev_keyring else Keyring.load(path)


async def create(settings: StorageSettings, *, host_registry: HostRegistry | None = None
                 ) -> tuple[RunningServer, Callable[[], Awaitable[None]], Deps]:
    """Connect MongoDB, ensure indexes, start the relay and bind the gRPC server
    (``host_registry``: one already loaded instead of ``settings.host_registry``)."""
    store = Store.connect(settings.mongo_url, settings.mongo_db)
    await store.ping()
    await store.ensure_indexes()
    relay: Relay | None = None
    if settings.relay_enabled:
        relay = Relay(
            store, make_celery(settings),
            interval=settings.relay_interval_seconds, resend_after=settings.relay_resend_after_seconds,
            max_attempts=settings.relay_max_attempts, resend_max=settings.relay_resend_max_seconds,
        )
    registry = host_registry if host_registry is not None else HostRegistry.load(settings.host_registry)
    authority = HostAuthority(registry, settings.audience, store)
    changes = ChangePublisher.connect(settings.redis_url, redis_prefix(settings.deployment))
    await changes.start()
    deps = Deps(store, FileKeyProvider(load_keyring(settings)), authority, settings.ledger_retention_days,
                on_commit=relay.wake if relay else (lambda: None),
                decision_backstop_seconds=settings.relay_resend_after_seconds, changes=changes)
    storage = StorageServicer(deps)
    admissions = Admissions(deps)
    admin = AdminServicer(store, deps.policies, settings.admin_token.get_secret_value(), OperatorMoves(deps),
                          admissions)
    if relay is not None:
        relay.on_dead_decision = admissions.hold_undecidable

    def register(server: object) -> None:
        storage_pb2_grpc.add_StorageServiceServicer_to_server(storage, server)
        admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)

    running = await create_server(settings, register, Transport.from_settings(settings))
    running.follow(store.mongo)
    on_unreachable(ConnectionFailure, lambda: store.mongo.failed("operation_failed"))
    if relay is not None:
        relay.start()

    async def close() -> None:
        if relay is not None:
            await relay.stop()
        await changes.close()
        await store.close()

    return running, close, deps


async def serve(settings: StorageSettings) -> None:
    running, close, _ = await create(settings)
    log.info("storage service listening on port %d", running.port)
    await run_until_signal(running, settings.stop_grace_seconds, close)


def main() -> int:
    settings = StorageSettings()  # type: ignore[call-arg]
    logs.configure("storage", settings.log_level)
    asyncio.run(serve(settings))
    return 0
