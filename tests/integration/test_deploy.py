"""The docker-compose deployment validates (`docker compose config`) and wires what scale-out
needs: PostgreSQL, Redis, two gateways behind nginx with WebSocket upgrades, two workers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def compose_cmd() -> list[str] | None:
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


@pytest.fixture(scope="module")
def compose() -> list[str]:
    cmd = compose_cmd()
    if cmd is None:
        pytest.skip("no Docker Compose client (docker compose / docker-compose) on this machine")
    return cmd


def config(compose: list[str], env_file: Path | None) -> subprocess.CompletedProcess[str]:
    args = [*compose, "-f", str(ROOT / "docker-compose.yml")]
    if env_file is not None:
        args += ["--env-file", str(env_file)]
    return subprocess.run(
        [*args, "config"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_compose_file_validates_with_the_example_env(compose: list[str]) -> None:
    res = config(compose, ROOT / ".env.example")
    assert res.returncode == 0, res.stderr
    import yaml  # compose printed the normalised file (PyYAML: a dependency of uvicorn[standard])

    doc = yaml.safe_load(res.stdout)
    services = doc["services"]
    assert {
        "postgres",
        "redis",
        "migrate",
        "gateway-1",
        "gateway-2",
        "worker-1",
        "worker-2",
        "nginx",
    } <= set(services)
    for name in ("gateway-1", "gateway-2", "worker-1", "worker-2"):
        env = services[name]["environment"]
        assert env["VG_DATABASE_URL"].startswith("postgresql://")
        assert env["VG_REDIS_URL"] == "redis://redis:6379/0"
    assert services["worker-1"]["command"][-1] != services["worker-2"]["command"][-1]  # consumers
    for name in ("postgres", "redis", "gateway-1", "gateway-2", "nginx"):
        assert "healthcheck" in services[name], name
    assert set(doc["volumes"]) >= {"pgdata", "redisdata"}


def test_missing_secrets_fail_with_a_clear_message(compose: list[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.env"
    empty.write_text("")
    res = config(compose, empty)
    assert res.returncode != 0
    assert "POSTGRES_PASSWORD" in res.stderr or "VG_API_KEY" in res.stderr


def test_nginx_passes_websocket_upgrades_to_both_gateways() -> None:
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    assert "server gateway-1:8283" in conf and "server gateway-2:8283" in conf
    assert "proxy_set_header Upgrade $http_upgrade" in conf
    assert "proxy_set_header Connection $connection_upgrade" in conf
    assert "proxy_http_version 1.1" in conf and "least_conn" in conf
