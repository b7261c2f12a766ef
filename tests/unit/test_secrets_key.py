"""The secrets key: VG_SECRETS_KEY wins; else a key file made once (owner-only) and read on
every later start; an unreadable or corrupt file is an error naming it, never a new key."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from voice_gateway.secrets_key import SecretsKeyError, secrets_key
from voice_gateway.settings import Settings
from voice_gateway.tool_isolation import stdio_outside


def test_key_file_made_once_and_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "data" / "secrets.key"
    with caplog.at_level(logging.WARNING):
        first = secrets_key(None, path)
    assert path.stat().st_mode & 0o777 == 0o600 and len(first) >= 32
    assert [r for r in caplog.records if str(path) in r.getMessage()]  # logged once
    caplog.clear()
    assert secrets_key(None, path) == first
    assert not caplog.records  # read, not made again
    assert secrets_key("from-the-environment-" * 2, path) == "from-the-environment-" * 2
    assert path.read_text().strip() == first


@pytest.mark.parametrize("content", ["", "short", "x" * 40 + " spaces inside", "é" * 40])
def test_corrupt_key_file_is_an_error_naming_it(tmp_path: Path, content: str) -> None:
    path = tmp_path / "secrets.key"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(SecretsKeyError) as err:
        secrets_key(None, path)
    assert str(path) in str(err.value) and "VG_SECRETS_KEY" in str(err.value)
    assert path.read_text(encoding="utf-8") == content  # left as it was


def test_unreadable_key_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    path.mkdir()  # exists, cannot be read as a file (chmod 000 binds no root)
    with pytest.raises(SecretsKeyError, match="cannot be read") as err:
        secrets_key(None, path)
    assert str(path) in str(err.value)


def test_data_dir_is_the_databases(tmp_path: Path) -> None:
    s = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'db' / 'vg.db'}")
    assert s.secrets_key_path == tmp_path / "db" / "secrets.key"
    pg = Settings(database_url="postgresql+asyncpg://u@h/db", secrets_key_file=tmp_path / "k")
    assert pg.secrets_key_path == tmp_path / "k"
    assert Settings(database_url="postgresql+asyncpg://u@h/db").data_dir == Path("./data")


def test_stdio_paths_outside_the_readable_directories(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text("print('hi')\n")
    assert stdio_outside("/bin/sh", ["-c", "true"], []) is None  # a system directory
    assert stdio_outside(sys.executable, ["-V"], []) is None  # the Python runtime
    assert stdio_outside(sys.executable, [str(script)], []) == str(script)
    assert stdio_outside(sys.executable, [str(script)], [str(tmp_path)]) is None
    assert stdio_outside(str(script), [], []) == str(script)
    s = Settings(mcp_stdio_dirs=f"{tmp_path}:/opt/servers")
    assert s.mcp_stdio_paths == [str(tmp_path.resolve()), "/opt/servers"]
