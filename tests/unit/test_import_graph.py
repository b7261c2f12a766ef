"""`app.py` only composes: no module of the package imports it back (the shared state lives in
voice_gateway/gateway.py). The command line is the one importer: it starts the app."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "voice_gateway"
ALLOWED = {"cli.py"}


def importers_of_app(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = str(path.relative_to(package))
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if "voice_gateway.app" in names and rel not in ALLOWED:
                found.append(f"{rel}:{node.lineno}")
    return found


def test_nothing_imports_app_back() -> None:
    assert importers_of_app() == []


def test_the_check_sees_an_import(tmp_path: Path) -> None:
    (tmp_path / "routes").mkdir()
    (tmp_path / "routes" / "x.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from voice_gateway.app import Gateway\n"
    )
    (tmp_path / "y.py").write_text("import voice_gateway.app\n")
    (tmp_path / "cli.py").write_text("from voice_gateway.app import create_app\n")
    assert importers_of_app(tmp_path) == ["routes/x.py:3", "y.py:1"]
