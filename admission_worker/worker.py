"""``engram worker``: the Celery worker (thread pool: gRPC channels do not survive fork) plus a
grpc.health.v1 server for Kubernetes probes."""

from __future__ import annotations

import logging
import os
import sys
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from admission_worker.settings import WorkerSettings
from admission_worker import watchdog
from admission_worker.tasks import TaskClients, register_tasks
from engram_core import logs
from engram_core.access import SyncAccessInterceptor
from engram_core.dependency import Dependency
from engram_core.grpc_server import LIVENESS_SERVICE
from engram_core.taskq import make_celery
from engram_core.transport import Transport

log = logging.getLogger("engram.worker")


def say_as_json(msg: str, f: Any = sys.__stderr__) -> None:
    """Celery's ``safe_say`` (its shutdown notices, written from a signal handler straight to a
    file descriptor, ``--quiet`` or not) as one JSON log line on stderr."""
    try:
        os.write(2, logs.line("worker", "celery.worker", msg.strip()))
    except OSError:
        pass


def quiet_celery() -> None:
    import celery.apps.worker

    celery.apps.worker.safe_say = say_as_json  # type: ignore[assignment]


def start_health_server(transport: Transport, host: str, port: int,
                        probe_port: int = 0) -> tuple[list[grpc.Server], health.HealthServicer, int]:
    """The health service on ``port`` (mutual TLS and the access check, like every server) and,
    when ``probe_port``, on a plaintext health-only port for kubelet probes."""
    servicer = health.HealthServicer()
    interceptors = [SyncAccessInterceptor()] if transport.secure else []
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), interceptors=interceptors)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = transport.add_port(server, f"{host}:{port}")
    if bound == 0:
        raise RuntimeError(f"cannot bind gRPC port {host}:{port}")
    servers = [server]
    if probe_port:
        probe = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        health_pb2_grpc.add_HealthServicer_to_server(servicer, probe)
        if probe.add_insecure_port(f"{host}:{probe_port}") == 0:
            raise RuntimeError(f"cannot bind the probe port {host}:{probe_port}")
        servers.append(probe)
    for each in servers:
        each.start()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    servicer.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    return servers, servicer, bound


def follow_broker(servicer: health.HealthServicer, broker: Dependency) -> None:
    """Readiness ("") is NOT_SERVING while the broker does not answer; liveness stays."""
    def changed(available: bool) -> None:
        servicer.set("", health_pb2.HealthCheckResponse.SERVING if available
                     else health_pb2.HealthCheckResponse.NOT_SERVING)

    broker.on_change = changed


def main() -> int:
    settings = WorkerSettings()
    logs.configure("worker", settings.log_level)
    app = make_celery(settings)
    transport = Transport.from_settings(settings)
    register_tasks(app, TaskClients.connect(transport, settings.storage_addr, settings.search_addr,
                                           settings.task_rpc_seconds, settings.search_replicas),
                   settings.screening_budget_seconds)
    health_servers, servicer, port = start_health_server(transport, settings.grpc_host, settings.grpc_port,
                                                         settings.probe_port)
    log.info("worker health on port %d, queue %s", port, settings.task_queue)

    broker = Dependency("broker", log)
    follow_broker(servicer, broker)

    def on_stall() -> None:
        broker.on_change = None
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        servicer.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        watchdog.exit_stalled()

    watchdog.install(app, settings.task_queue, settings.worker_concurrency, settings.worker_stall_seconds, on_stall,
                     broker)
    quiet_celery()
    try:
        app.worker_main(
            [
                "--quiet",  # celery's own option: no banner on stdout (every line of the log is JSON)
                "worker",
                "--pool=threads",
                f"--concurrency={settings.worker_concurrency}",
                f"--queues={settings.task_queue}",
                "--loglevel=WARNING",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ]
        )
    finally:
        broker.on_change = None
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        servicer.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        for server in health_servers:
            server.stop(settings.stop_grace_seconds)
    return 0
