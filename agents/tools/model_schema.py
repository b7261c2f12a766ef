"""JSON schemas of pydantic models in a custom tool's source, read with `ast` (never run):
a parameter annotated with a `BaseModel` subclass of the same source (nested models, list[Model]
and subclasses of models too) becomes an inline object schema with the fields' types,
`Field(description=...)` descriptions, defaults and numeric/length bounds. And the `$defs` /
`$ref` of a schema made by pydantic's `model_json_schema()` (Letta's `args_schema`) inlined,
so the model sees the whole structure."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from agents.tools.registry import parse_docstring

Models = dict[str, ast.ClassDef]
AnnotationSchema = Callable[[ast.expr, str, Models, tuple[str, ...]], dict[str, Any]]
BOUNDS = {
    "gt": "exclusiveMinimum",
    "ge": "minimum",
    "lt": "exclusiveMaximum",
    "le": "maximum",
    "min_length": "minLength",
    "max_length": "maxLength",
}
MAX_DEPTH = 32


class SourceError(ValueError):
    """The source cannot become a tool; the message says why (returned to the caller)."""


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def model_classes(tree: ast.Module) -> Models:
    """The top-level classes that are pydantic models (BaseModel, or a model defined before)."""
    models: Models = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(
            _base_name(b) == "BaseModel" or _base_name(b) in models for b in node.bases
        ):
            models[node.name] = node
    return models


def _field_call(value: ast.expr | None) -> ast.Call | None:
    if isinstance(value, ast.Call) and _base_name(value.func) == "Field":
        return value
    return None


def _field(value: ast.expr | None, schema: dict[str, Any]) -> bool:
    """Apply a `Field(...)` (description, bounds) to `schema`; whether the field is required."""
    call = _field_call(value)
    if call is None:
        return value is None
    required = not call.args or (
        isinstance(call.args[0], ast.Constant) and call.args[0].value is Ellipsis
    )
    for kw in call.keywords:
        if kw.arg in ("default", "default_factory"):
            required = False
        elif isinstance(kw.value, ast.Constant):
            if kw.arg == "description" and isinstance(kw.value.value, str):
                schema["description"] = kw.value.value
            elif kw.arg in BOUNDS and isinstance(kw.value.value, int | float):
                schema[BOUNDS[kw.arg]] = kw.value.value
    return required


def model_schema(
    cls: ast.ClassDef,
    models: Models,
    annotation_schema: AnnotationSchema,
    seen: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The object schema of a model class (its model parents' fields first)."""
    if cls.name in seen:
        raise SourceError(f"model '{cls.name}' contains itself; tools take finite arguments")
    seen = (*seen, cls.name)
    props: dict[str, Any] = {}
    required: list[str] = []
    for base in cls.bases:
        parent = models.get(_base_name(base) or "")
        if parent is not None:
            inherited = model_schema(parent, models, annotation_schema, seen)
            props.update(inherited["properties"])
            required += inherited["required"]
    for node in cls.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        name = node.target.id
        if name.startswith("_") or name == "model_config" or "ClassVar" in ast.unparse(node):
            continue
        where = f"field '{name}' of model '{cls.name}'"
        schema = dict(annotation_schema(node.annotation, where, models, seen))
        if _field(node.value, schema) and name not in required:
            required.append(name)
        props[name] = schema
    out: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    summary, _ = parse_docstring(ast.get_docstring(cls) or "")
    if summary:
        out["description"] = summary
    return out


def inline_refs(schema: Any, defs: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """`schema` with every local `$ref` replaced by its definition and `$defs` dropped."""
    if depth > MAX_DEPTH:
        raise SourceError("args_json_schema nests too deeply (a recursive $ref?)")
    if isinstance(schema, list):
        return [inline_refs(s, defs, depth + 1) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if defs is None:
        defs = schema.get("$defs") or schema.get("definitions") or {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")):
        target = defs.get(ref.rsplit("/", 1)[1])
        if not isinstance(target, dict):
            raise SourceError(f"args_json_schema: $ref {ref!r} has no definition")
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return inline_refs({**target, **rest}, defs, depth + 1)
    return {
        k: inline_refs(v, defs, depth + 1)
        for k, v in schema.items()
        if k not in ("$defs", "definitions")
    }
