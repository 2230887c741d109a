"""The datastores engram up starts are durable: an acknowledged write survives a SIGKILL of
the server and its restart on the same port and data directory."""

from __future__ import annotations

from pathlib import Path

import pymongo
import redis

from engram_cli import datastores


def test_secantus_keeps_acknowledged_writes_across_kill_9(tmp_path: Path) -> None:
    child = datastores.start_secantus(tmp_path / "mongo")
    try:
        assert "--sync-on-commit" in child.argv
        with pymongo.MongoClient(child.url, serverSelectionTimeoutMS=5000) as client:
            client.durable.docs.insert_one({"_id": "acked", "n": 1})
        child.proc.kill()
        child.proc.wait()
        child.start()
        assert child.url.endswith(f":{child.port}/?directConnection=true")
        with pymongo.MongoClient(child.url, serverSelectionTimeoutMS=5000) as client:
            assert client.durable.docs.find_one({"_id": "acked"}) == {"_id": "acked", "n": 1}
    finally:
        child.stop()


def test_redis_with_a_data_dir_keeps_its_data_across_kill_9(tmp_path: Path) -> None:
    child = datastores.start_redis(data_dir=tmp_path / "redis")
    try:
        client = redis.Redis.from_url(child.url)
        client.rpush("queue", "task-1")
        client.close()
        child.proc.kill()
        child.proc.wait()
        child.start()
        client = redis.Redis.from_url(child.url)
        assert client.lrange("queue", 0, -1) == [b"task-1"]
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        client.close()
    finally:
        child.stop()
    assert (tmp_path / "redis" / "appendonlydir").is_dir()


def test_redis_without_a_data_dir_is_throwaway() -> None:
    child = datastores.start_redis()
    try:
        client = redis.Redis.from_url(child.url)
        assert client.config_get("appendonly") == {"appendonly": "no"}
        assert datastores.redis_ping(child.url)
        client.close()
    finally:
        child.stop()
    assert not datastores.redis_ping(child.url)
