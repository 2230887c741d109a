"""Each engram process gets exactly the settings its settings class reads; secrets are only ever
referenced (environment from Secret keys, files from Secret volumes), never literal values; the
dev overlay's generated Secret files are ones the processes accept."""

from __future__ import annotations

import json
import posixpath
import stat
import subprocess
import sys
from pathlib import Path

import yaml
from pydantic_settings import BaseSettings

from admission_worker.beat import BeatSettings
from admission_worker.settings import AdmissionSettings, WorkerSettings
from engram_core.crypto import Keyring
from engram_core.pki import server_name
from engram_core.transport import Transport
from engram_core.hosts import parse_registry
from gateway.settings import GatewaySettings
from search_service.settings import SearchSettings
from storage_service.settings import StorageSettings

from .manifests import CONFIG_MAP, all_containers, container_env, engram_deployments, find_named, pod_spec, workloads
from .rendering import DEPLOY, IN_CLUSTER, Rendered

SETTINGS: dict[str, type[BaseSettings]] = {
    "gateway": GatewaySettings,
    "storage": StorageSettings,
    "search": SearchSettings,
    "admission": AdmissionSettings,
    "worker": WorkerSettings,
    "beat": BeatSettings,
}
DATASTORES = "engram-datastores"
# Settings read from Secret keys, per process: (Secret, key).
SECRET_ENV: dict[str, dict[str, tuple[str, str]]] = {
    "gateway": {"ENGRAM_REDIS_URL": (DATASTORES, "redis-url")},
    "storage": {
        "ENGRAM_MONGO_URL": (DATASTORES, "mongo-url"),
        "ENGRAM_REDIS_URL": (DATASTORES, "redis-url"),
        "ENGRAM_ADMIN_TOKEN": ("engram-admin-token", "token"),
    },
    "search": {"ENGRAM_CURSOR_KEY": ("engram-cursor-key", "key")},
    "admission": {"ENGRAM_REDIS_URL": (DATASTORES, "redis-url")},
    "worker": {"ENGRAM_REDIS_URL": (DATASTORES, "redis-url")},
    "beat": {"ENGRAM_REDIS_URL": (DATASTORES, "redis-url")},
}
# Settings that name a file, per process: the file is a key of a Secret mounted as a volume.
SECRET_FILES: dict[str, dict[str, tuple[str, str]]] = {
    "gateway": {"ENGRAM_HOST_REGISTRY": ("engram-host-registry", "host-registry.json")},
    "storage": {"ENGRAM_KEYRING": ("engram-keyring", "keyring.json"),
                "ENGRAM_HOST_REGISTRY": ("engram-host-registry", "host-registry.json")},
}
# Each component's service identity on the internal gRPC plane: a whole Secret (ca.crt,
# tls.crt, tls.key) mounted as the directory ENGRAM_TLS_DIR names. Beat is part of the worker
# plane and wears the worker's identity (as under `engram up`); it has none of its own.
IDENTITIES = {name: "worker" if name == "beat" else name for name in SETTINGS}
TLS_SECRETS = {name: f"engram-tls-{identity}" for name, identity in IDENTITIES.items()}
OPERATOR_SECRETS = {"engram-host-registry", "engram-keyring", "engram-admin-token", "engram-cursor-key", DATASTORES,
                    *TLS_SECRETS.values()}
IN_CLUSTER_SECRETS = {"engram-mongodb-auth", "engram-redis-auth"}
KNOWN_SECRETS = OPERATOR_SECRETS | IN_CLUSTER_SECRETS
# Variables that must never carry a literal value anywhere.
SECRET_VARIABLES = {name for table in SECRET_ENV.values() for name in table} | {
    "MONGO_INITDB_ROOT_PASSWORD",
    "REDIS_PASSWORD",
    "REDISCLI_AUTH",
}


def _secret_name(name: str) -> str:
    """The kustomize name of a Secret (the dev overlay's generated ones carry a hash suffix)."""
    return name if name in KNOWN_SECRETS else name.rsplit("-", 1)[0]


def _env_name(field: str) -> str:
    return "ENGRAM_" + field.upper()


def _referenced_secrets(manifests: Rendered) -> dict[str, set[str | None]]:
    """Secret name (as rendered) -> keys referenced (None: the whole Secret as a volume)."""
    refs: dict[str, set[str | None]] = {}
    for workload in workloads(manifests):
        for volume in pod_spec(workload).get("volumes", []):
            if "secret" in volume:
                items = volume["secret"].get("items")
                keys = {i["key"] for i in items} if items else {None}
                refs.setdefault(volume["secret"]["secretName"], set()).update(keys)
        for container in all_containers(workload):
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    refs.setdefault(ref["name"], set()).add(ref["key"])
    return refs


def test_processes_get_their_required_settings_and_only_real_ones(manifests: Rendered) -> None:
    for name, deployment in engram_deployments(manifests).items():
        fields = SETTINGS[name].model_fields
        (container,) = pod_spec(deployment)["containers"]
        given = set(container_env(manifests, container))
        required = {_env_name(f) for f, info in fields.items() if info.is_required()}
        assert required <= given, f"{name} lacks {sorted(required - given)}"
        unknown = {item["name"] for item in container.get("env", [])} - {_env_name(f) for f in fields}
        assert not unknown, f"{name} sets settings it does not read: {sorted(unknown)}"


def test_the_shared_config_map_names_only_real_settings_and_no_secrets(manifests: Rendered) -> None:
    config = find_named(manifests, "ConfigMap", CONFIG_MAP)
    assert config is not None
    known = {_env_name(f) for cls in SETTINGS.values() for f in cls.model_fields}
    assert set(config["data"]) <= known, sorted(set(config["data"]) - known)
    file_settings = {variable for table in SECRET_FILES.values() for variable in table}
    assert not set(config["data"]) & (SECRET_VARIABLES | file_settings)


def test_secret_settings_come_from_the_documented_secret_keys(manifests: Rendered) -> None:
    for name, deployment in engram_deployments(manifests).items():
        (container,) = pod_spec(deployment)["containers"]
        from_secrets = {
            var: (_secret_name(src.secret[0]), src.secret[1])
            for var, src in container_env(manifests, container).items()
            if src.secret is not None
        }
        assert from_secrets == SECRET_ENV[name], name


def test_no_secret_variable_has_a_literal_value(manifests: Rendered) -> None:
    for workload in workloads(manifests):
        for container in all_containers(workload):
            for item in container.get("env", []):
                if item["name"] in SECRET_VARIABLES:
                    assert "value" not in item and "secretKeyRef" in item["valueFrom"], item["name"]


def test_file_settings_point_into_read_only_secret_volumes(manifests: Rendered) -> None:
    for name, deployment in engram_deployments(manifests).items():
        spec = pod_spec(deployment)
        (container,) = spec["containers"]
        env = container_env(manifests, container)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        secret_volumes = {_secret_name(v["secret"]["secretName"]) for v in volumes.values() if "secret" in v}
        expected = SECRET_FILES.get(name, {})
        assert secret_volumes == {secret for secret, _ in expected.values()} | {TLS_SECRETS[name]}, name
        for variable, (secret, key) in expected.items():
            path = env[variable].value or ""
            (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == posixpath.dirname(path)]
            # A whole-directory mount (no subPath) so that Secret updates reach the file.
            assert mount["readOnly"] is True and "subPath" not in mount, variable
            assert _secret_name(volumes[mount["name"]]["secret"]["secretName"]) == secret, variable
            assert posixpath.basename(path) == key, variable


def test_each_process_mounts_its_own_service_identity_as_its_tls_dir(manifests: Rendered) -> None:
    for name, deployment in engram_deployments(manifests).items():
        spec = pod_spec(deployment)
        (container,) = spec["containers"]
        env = container_env(manifests, container)
        assert "ENGRAM_GRPC_PLAINTEXT" not in env, name  # never plaintext, in any overlay
        tls_dir = env["ENGRAM_TLS_DIR"].value
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == tls_dir]
        assert mount["readOnly"] is True and "subPath" not in mount, name  # renewals reach the files
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        assert _secret_name(volume["secret"]["secretName"]) == TLS_SECRETS[name], name
        assert "items" not in volume["secret"] and volume["secret"]["defaultMode"] == 0o440, name


def test_workloads_reference_exactly_the_documented_secrets(manifests: Rendered) -> None:
    referenced = {_secret_name(name) for name in _referenced_secrets(manifests)}
    in_cluster = manifests.combination.datastores == IN_CLUSTER
    assert referenced == OPERATOR_SECRETS | (IN_CLUSTER_SECRETS if in_cluster else set())


def test_only_the_dev_overlay_generates_secrets_and_it_generates_every_referenced_one(manifests: Rendered) -> None:
    secrets = {s["metadata"]["name"]: s for s in manifests.of_kind("Secret")}
    if manifests.combination.overlay != "dev":
        assert secrets == {}
        return
    for name, keys in _referenced_secrets(manifests).items():
        assert name in secrets, name
        assert {k for k in keys if k} <= set(secrets[name]["data"]), name


def test_dev_secret_files_are_accepted_by_the_processes_and_kept_on_rerun(deploy_workdir: Path) -> None:
    overlay = deploy_workdir / "deploy" / "overlays" / "dev"
    directory = overlay / "secrets"
    Keyring.load(str(directory / "keyring.json"))
    assert parse_registry(json.loads((directory / "host-registry.json").read_text())) == {}
    SearchSettings(cursor_key=(directory / "cursor-key").read_text())
    assert len((directory / "admin-token").read_text()) >= 16
    assert len((directory / "mongodb-keyfile").read_text()) <= 1024
    for name in set(IDENTITIES.values()):
        assert Transport(directory / "tls" / name).identity == name
        assert stat.S_IMODE((directory / "tls" / name / "tls.key").stat().st_mode) == 0o600
    assert Transport(directory / "tls" / "operator").identity == "operator"

    def files() -> dict[str, bytes]:
        return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}

    before = files()
    subprocess.run([sys.executable, str(overlay / "gen-secrets.py")], check=True, capture_output=True, timeout=60)
    assert files() == before


def test_the_cert_manager_example_issues_each_identity_into_its_secret() -> None:
    documents = [d for d in yaml.safe_load_all((DEPLOY / "cert-manager" / "certificates.yaml").read_text()) if d]
    certificates = {d["metadata"]["name"]: d["spec"] for d in documents if d["kind"] == "Certificate"}
    assert set(certificates) == {*TLS_SECRETS.values(), "engram-tls-operator"}
    for secret, spec in certificates.items():
        identity = secret.removeprefix("engram-tls-")
        assert spec["secretName"] == secret
        assert spec["uris"] == [f"spiffe://engram/{identity}"] and spec["dnsNames"] == [server_name(identity)]
        assert set(spec["usages"]) == {"server auth", "client auth"}

