"""``engram worker``: the Celery worker (thread pool: gRPC channels do not survive fork) plus a
grpc.health.v1 server for Kubernetes probes."""

from __future__ import annotations

import logging
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from admission_worker.settings import WorkerSettings
from admission_worker import watchdog
from admission_worker.tasks import TaskClients, register_tasks
from engram_core import logs
from engram_core.taskq import make_celery

log = logging.getLogger("engram.worker")


def start_health_server(host: str, port: int) -> tuple[grpc.Server, health.HealthServicer, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    server.start()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    return server, servicer, bound


def main() -> int:
    settings = WorkerSettings()
    logs.configure("worker", settings.log_level)
    app = make_celery(settings)
    register_tasks(app, TaskClients.connect(settings.storage_addr, settings.search_addr, settings.task_rpc_seconds,
                                           settings.search_replicas))
    health_server, servicer, port = start_health_server(settings.grpc_host, settings.grpc_port)
    log.info("worker health on port %d, queue %s", port, settings.task_queue)

    def on_stall() -> None:
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        watchdog.exit_stalled()

    watchdog.install(app, settings.task_queue, settings.worker_concurrency, settings.worker_stall_seconds, on_stall)
    try:
        app.worker_main(
            [
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
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        health_server.stop(settings.stop_grace_seconds)
    return 0
