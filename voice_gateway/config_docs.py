"""docs/configuration.md, rendered from the fields of `Settings`.

`python -m voice_gateway.config_docs` prints the page; `--write` writes it; `--check` exits 1
when the file differs from what the settings say (tests/unit/test_configuration_docs.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Literal, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import AliasChoices
from pydantic.fields import FieldInfo

from voice_gateway.settings import Settings

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
REGENERATE = "python -m voice_gateway.config_docs --write"

# each section of the page, in the page's order, by its first field: a section runs to the next
# one's first field in `Settings.model_fields` order, where voice_gateway/provider_keys.py's
# fields (a base class's) come before settings.py's own
SECTIONS = {
    "host": "Server",
    "stt": "Providers",
    "anthropic_api_key": "More LLM providers",
    "voice": "Voice pipeline and turn-taking",
    "idle_timeout_s": "Calls and speech providers",
    "max_steps": "Agent loop",
    "tool_timeout_s": "Tools",
    "llm_voice_timeout_s": "Provider faults",
    "sleeptime_every_turns": "Sleeptime and the transcript bus",
    "schedule_tick_s": "Scheduled messages",
    "max_body_bytes": "HTTP, shutdown and the runtime",
    "rate_limit_rps": "Rate limits and quotas",
    "process_max_calls": "Admission control",
}

HEADER = f"""# Configuration

Every setting is an environment variable (prefix `VG_`; a few also by the name other tools
use, such as `OPENAI_API_KEY`). `voice_gateway/settings.py` is the only module that reads the
environment; this page is generated from its field descriptions:
`{REGENERATE}`. A value of the wrong type or out of bounds stops the gateway at
start with a validation error naming the field (`port` for `VG_PORT`).

Types: `int`, `float`, `str`; `bool` takes `1`/`0`, `true`/`false`; `a | b` is one of the
values listed; `... | None` is unset unless given. Turn-taking is explained in
[turn_taking.md](turn_taking.md), operating the gateway in [operations.md](operations.md)."""


def env_names(name: str, field: FieldInfo) -> list[str]:
    """The variables a field is read from, first the one to prefer."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    return [f"VG_{name.upper()}"]


def bounds(field: FieldInfo) -> str:
    out: list[str] = []
    for item in field.metadata:
        if isinstance(item, Ge):
            out.append(f">= {item.ge}")
        elif isinstance(item, Gt):
            out.append(f"> {item.gt}")
        elif isinstance(item, Le):
            out.append(f"<= {item.le}")
        elif isinstance(item, Lt):
            out.append(f"< {item.lt}")
    return ", ".join(out)


def default(field: FieldInfo) -> str:
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def entry(name: str, field: FieldInfo, annotation: str) -> str:
    names = " / ".join(f"`{n}`" for n in env_names(name, field))
    facts = [f"`{annotation}`", f"default {default(field)}"]
    if limits := bounds(field):
        facts.append(limits)
    description = (field.description or "—").strip()
    return f"- {names} ({'; '.join(facts)})  \n  {description}"


def type_name(field: FieldInfo) -> str:
    """`int`, `str | None`, or a Literal's values: `auto | vad | smart`."""
    kind = field.annotation
    if get_origin(kind) is Literal:
        return " | ".join(str(value) for value in get_args(kind))
    return str(kind).replace("typing.", "") if get_args(kind) else getattr(kind, "__name__", "")


def sections() -> list[tuple[str, list[str]]]:
    """Each section's title and the names of its fields, in the page's order."""
    fields: dict[str, list[str]] = {}
    current: list[str] = []
    for name in Settings.model_fields:
        if name in SECTIONS:
            current = fields[name] = []
        elif not fields:
            raise ValueError(f"setting {name!r} comes before the first field of any section")
        current.append(name)
    return [(title, fields[first]) for first, title in SECTIONS.items()]


def render() -> str:
    parts = [HEADER]
    for title, names in sections():
        parts.append(f"\n## {title}\n")
        for name in names:
            field = Settings.model_fields[name]
            parts.append(entry(name, field, type_name(field)))
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m voice_gateway.config_docs", description=__doc__)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {PAGE.name}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 if {PAGE.name} is stale")
    args = p.parse_args(argv)
    text = render()
    if args.write:
        PAGE.write_text(text, encoding="utf-8")
        return 0
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE} is stale: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
