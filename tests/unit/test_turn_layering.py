"""voice_gateway/turns stands alone: its modules import no other part of the gateway but the
VAD interface (the settings build their turn fields from `TurnConfig`, never the other way),
have no import circle, and the VAD state machine imports no policy. The STT imports only the
transcript rules."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "voice_gateway"
TURNS = PACKAGE / "turns"
OUTSIDE_ALLOWED = {"voice_gateway.vad.base"}


def imports(path: Path) -> set[str]:
    """The voice_gateway modules a file imports (TYPE_CHECKING blocks included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "voice_gateway.turns":
                found |= {f"voice_gateway.turns.{a.name}" for a in node.names}
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m.startswith("voice_gateway.")}


def graph() -> dict[str, set[str]]:
    return {f"voice_gateway.turns.{p.stem}": imports(p) for p in TURNS.glob("*.py")}


def test_turns_imports_nothing_of_the_gateway_but_the_vad_interface() -> None:
    for module, deps in graph().items():
        outside = {d for d in deps if not d.startswith("voice_gateway.turns")}
        assert outside <= OUTSIDE_ALLOWED, (module, outside)


def find_circle(g: dict[str, set[str]]) -> list[str] | None:
    """An import circle of `g` (module -> what it imports), or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for dep in sorted(g.get(module, set())):
            if circle := visit(dep, [*path, module]):
                return circle
        done.add(module)
        return None

    return next((c for m in sorted(g) if (c := visit(m, []))), None)


def test_no_import_circle_in_turns() -> None:
    assert find_circle(graph()) is None


def test_the_check_sees_a_circle() -> None:
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None


def test_the_state_machine_knows_no_policy() -> None:
    deps = graph()["voice_gateway.turns.states"]
    assert deps == {"voice_gateway.turns.config", "voice_gateway.turns.events"}


def test_stt_takes_only_the_transcript_rules_from_turns() -> None:
    for path in (PACKAGE / "stt").glob("*.py"):
        turns = {d for d in imports(path) if d.startswith("voice_gateway.turns")}
        assert turns <= {"voice_gateway.turns.transcript"}, (path.name, turns)
