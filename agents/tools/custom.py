"""Custom tools from Python source (the Letta way): the JSON schema is read from the source with
`ast` (the code is never executed here), and the tool runs in the sandbox (agents.tools.sandbox).

Schema rules: the tool is the top-level `def` whose name the caller gave (json_schema.name), else
the only one, else the last one (helpers may come first). Parameters need annotations: str, int,
float, bool, list[...] / tuple[...] / set[...], dict[...], Optional[...], Union[...],
Literal[...], `X | None` and pydantic models (BaseModel subclasses) defined in the source, nested
ones too (agents/tools/model_schema.py; the sandbox validates the arguments into the models); a
default makes a parameter optional. With `args_json_schema` (Letta's `args_schema`) the
parameters need no annotations, and its `$defs` are inlined. The summary and `Args:` of a
Google-style docstring give the descriptions. A parameter named `agent_state` (Letta injects the
agent there) is left out of the schema and receives None.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.tools.model_schema import (
    Models,
    SourceError,
    inline_refs,
    model_classes,
    model_schema,
)
from agents.tools.registry import (
    PRE_EXEC_MSG,
    REGISTRY,
    Tool,
    ToolContext,
    ToolError,
    parse_docstring,
)

if TYPE_CHECKING:
    from agents.tools.sandbox import Sandbox, SandboxResult
    from memory.tools import ToolData

MAX_SOURCE_CHARS = 100_000
INJECTED = ("agent_state",)
NAME_RE = re.compile(r"[A-Za-z_]\w{0,63}")
_SIMPLE = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
_ARRAYS = {"list", "List", "tuple", "Tuple", "set", "Set", "Sequence", "Iterable", "FrozenSet"}
_OBJECTS = {"dict", "Dict", "Mapping"}
_SUPPORTED = (
    "str, int, float, bool, list[...], dict, Optional[...], Literal[...], X | None or a "
    "pydantic model of the source"
)


@dataclass(slots=True)
class ParsedTool:
    name: str
    json_schema: dict[str, Any]  # {"name", "description", "parameters"}: as built-in tools


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr  # typing.Optional -> Optional
    return None


def _union(
    members: list[ast.expr], where: str, models: Models, seen: tuple[str, ...]
) -> dict[str, Any]:
    kept = [m for m in members if not (isinstance(m, ast.Constant) and m.value is None)]
    kept = [m for m in kept if _dotted(m) != "None" and _dotted(m) != "NoneType"]
    if not kept:
        raise SourceError(f"{where}: a parameter cannot be only None")
    schemas = [annotation_schema(m, where, models, seen) for m in kept]
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def _bitor(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _bitor(node.left) + _bitor(node.right)
    return [node]


def _literal(args: list[ast.expr], where: str) -> dict[str, Any]:
    values = [a.value for a in args if isinstance(a, ast.Constant)]
    if len(values) != len(args) or not values:
        raise SourceError(f"{where}: Literal[...] needs constant values")
    if all(isinstance(v, str) for v in values):
        return {"type": "string", "enum": values}
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return {"type": "integer", "enum": values}
    raise SourceError(f"{where}: Literal[...] values must be all strings or all integers")


def annotation_schema(
    node: ast.expr, where: str, models: Models | None = None, seen: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The JSON schema of one annotation (`models`: the source's pydantic model classes);
    SourceError names what is not supported."""
    models = models or {}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # "str" forward refs
        try:
            parsed = ast.parse(node.value, mode="eval").body
        except (SyntaxError, ValueError, RecursionError) as exc:
            raise SourceError(f"{where}: cannot parse annotation {node.value!r}") from exc
        return annotation_schema(parsed, where, models, seen)
    if isinstance(node, ast.BinOp):
        return _union(_bitor(node), where, models, seen)
    name = _dotted(node.value if isinstance(node, ast.Subscript) else node)
    if isinstance(node, ast.Subscript):
        args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if name == "Optional" or name == "Union":
            return _union(args, where, models, seen)
        if name == "Literal":
            return _literal(args, where)
        if name in _ARRAYS:
            return {"type": "array", "items": annotation_schema(args[0], where, models, seen)}
        if name in _OBJECTS:
            return {"type": "object"}
    elif name in models:
        return model_schema(models[name], models, annotation_schema, seen)
    elif name in _SIMPLE:
        return {"type": _SIMPLE[name]}
    elif name in _ARRAYS:
        return {"type": "array", "items": {}}
    elif name in _OBJECTS:
        return {"type": "object"}
    raise SourceError(f"{where}: unsupported annotation '{ast.unparse(node)}' (use {_SUPPORTED})")


def _parameters(fn: ast.FunctionDef, arg_docs: dict[str, str], models: Models) -> dict[str, Any]:
    a = fn.args
    if a.vararg or a.kwarg:
        raise SourceError(f"function '{fn.name}' takes *args or **kwargs, which a tool cannot")
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = list(zip(positional, defaults, strict=True))
    params += list(zip(a.kwonlyargs, a.kw_defaults, strict=True))
    props: dict[str, Any] = {}
    required: list[str] = []
    for arg, default in params:
        where = f"parameter '{arg.arg}' of '{fn.name}'"
        if arg.arg in INJECTED:
            continue
        if arg.arg == PRE_EXEC_MSG:
            raise SourceError(f"{where}: the name is reserved for voice filler phrases")
        if arg.annotation is None:
            raise SourceError(f"{where} has no type annotation (use {_SUPPORTED})")
        schema = annotation_schema(arg.annotation, where, models)
        if arg.arg in arg_docs:
            schema["description"] = arg_docs[arg.arg]
        props[arg.arg] = schema
        if default is None:
            required.append(arg.arg)
    return {"type": "object", "properties": props, "required": required}


def _pick(tree: ast.Module, name: str | None) -> ast.FunctionDef:
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if name is not None:
        defs = [n for n in defs if n.name == name]
        if not defs:
            raise SourceError(f"source_code defines no top-level function named '{name}'")
    if not defs:
        raise SourceError("source_code defines no top-level function (`def name(...)`)")
    fn = defs[-1]
    if isinstance(fn, ast.AsyncFunctionDef):
        raise SourceError(f"'{fn.name}' is an async def; tools must be plain `def` functions")
    return fn


def check_name(name: str) -> None:
    if not NAME_RE.fullmatch(name):
        raise SourceError(f"'{name}' is not a valid tool name (a Python identifier, <= 64 chars)")
    if REGISTRY.get(name) is not None:
        raise SourceError(f"'{name}' is the name of a built-in tool; choose another name")


def _override(schema: dict[str, Any], what: str) -> dict[str, Any]:
    props = schema.get("properties")
    required = schema.get("required", [])
    if not isinstance(props, dict) or not isinstance(required, list):
        raise SourceError(f"{what} must be an object schema with 'properties' (and 'required')")
    if not set(required) <= set(props):
        raise SourceError(f"{what}: 'required' names parameters missing from 'properties'")
    return {"type": "object", "properties": props, "required": required}


def parse_source(
    source: str,
    *,
    json_schema: dict[str, Any] | None = None,
    args_json_schema: dict[str, Any] | None = None,
    description: str | None = None,
) -> ParsedTool:
    """Read a tool from source without running it. A caller's json_schema (name, description,
    parameters) or args_json_schema (parameters only) overrides what the source says."""
    if len(source) > MAX_SOURCE_CHARS:
        raise SourceError(f"source_code is longer than {MAX_SOURCE_CHARS} characters")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise SourceError(
            f"source_code has a syntax error at line {exc.lineno}: {exc.msg}"
        ) from exc
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        raise SourceError(f"source_code cannot be parsed: {type(exc).__name__}: {exc}") from exc
    given = dict(json_schema or {})
    wanted = given.get("name")
    if wanted is not None and not isinstance(wanted, str):
        raise SourceError("json_schema.name must be a string")
    fn = _pick(tree, wanted)
    check_name(fn.name)
    summary, arg_docs = parse_docstring(ast.get_docstring(fn) or "")
    if args_json_schema:  # Letta's args_schema: the parameters need no annotations then
        params = _override(inline_refs(args_json_schema), "args_json_schema")
    elif isinstance(given.get("parameters"), dict):
        params = _override(inline_refs(given["parameters"]), "json_schema.parameters")
    else:
        params = _parameters(fn, arg_docs, model_classes(tree))
    desc = description or given.get("description") or summary
    return ParsedTool(
        fn.name, {"name": fn.name, "description": str(desc or ""), "parameters": params}
    )


def envelope(res: SandboxResult) -> str:
    """What the model sees and the message stores (Letta's func_return, stdout, stderr)."""
    body: dict[str, Any] = {"status": "OK" if res.ok else "Failed"}
    if res.ok:
        body["func_return"] = res.value
    else:
        body["error"] = res.error
    body["stdout"] = [res.stdout] if res.stdout else []
    body["stderr"] = [s for s in (res.stderr, res.traceback) if s]
    return json.dumps(body, ensure_ascii=False)


def split_envelope(content: str) -> tuple[str, list[str], list[str]] | None:
    """(tool_return text, stdout, stderr) of a stored custom-tool result, None if not one."""
    if not content.startswith('{"status": '):
        return None
    try:
        body = json.loads(content)
    except ValueError:
        return None
    if not isinstance(body, dict) or not {"status", "stdout", "stderr"} <= set(body):
        return None
    value = body.get("func_return") if body["status"] == "OK" else body.get("error")
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text, list(body["stdout"]), list(body["stderr"])


def custom_tool(data: ToolData, sandbox: Sandbox) -> Tool:
    """A loop Tool whose function runs the stored source in the sandbox, one process per call."""
    source, name = data.source_code or "", data.name

    async def run(ctx: ToolContext, **kwargs: Any) -> str:
        res = await sandbox.run(source, name, kwargs, return_char_limit=data.return_char_limit)
        text = envelope(res)
        if not res.ok:
            raise ToolError(text)
        return text

    schema = data.json_schema or {}
    params = schema.get("parameters") or {}
    return Tool(
        name=name,
        fn=run,
        description=data.description or str(schema.get("description") or ""),
        parameters={
            "type": "object",
            "properties": dict(params.get("properties") or {}),
            "required": list(params.get("required") or []),
        },
        voice_safe=data.voice_safe,
        tags=list(data.tags),
    )
