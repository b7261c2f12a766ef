"""From a parsed agent file to what memory/agent_import.py writes: names, model and embedding
(with the import options), blocks, tools (custom ones checked like `POST /v1/tools/`), tool
rules and messages. Every check runs here, before anything is written; a problem is an
ApiError naming it (docs/rest_api.md "Agent files")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from agents.tools import REGISTRY
from agents.tools.call_tools import check_call_tools, check_targets
from agents.tools.custom import SourceError, parse_source
from memory.agent_import import AgentPlan, FilePlan, FolderPlan, ToolPlan
from memory.embeddings import validate_handle
from memory.files import FILE_TOOLS
from memory.ids import new_id
from memory.models import BlockSpec, MessageData, ToolCallData
from voice_gateway.agent_file_sources import agent_sources, file_plans, folder_plans
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway
from voice_gateway.protocol.agent_file import AgentFile, AgentIn, BlockIn, MessageIn, ToolIn
from voice_gateway.protocol.agent_file_out import EXTRAS_KEY
from voice_gateway.protocol.letta import MAX_CONTEXT_WINDOW
from voice_gateway.tool_isolation import refuse_if_unisolated

SKIPPED_KEY = "import_skipped_tools"  # Letta built-in tools this server does not have


@dataclass
class ImportOptions:
    """The form fields of `POST /v1/agents/import` (letta-client's `agents.import_file`)."""

    name: str | None = None
    append_copy_suffix: bool = False
    model: str | None = None
    embedding: str | None = None
    strip_messages: bool = False
    override_existing_tools: bool = True

    @classmethod
    def from_form(cls, form: dict[str, str], header_embedding: str | None) -> ImportOptions:
        def flag(key: str, default: bool) -> bool:
            raw = form.get(key)
            if raw is None or raw == "":
                return default
            if raw.lower() in ("true", "1"):
                return True
            if raw.lower() in ("false", "0"):
                return False
            raise ApiError(422, f"form field '{key}' must be true or false")

        return cls(
            name=form.get("name") or form.get("override_name") or None,
            append_copy_suffix=flag("append_copy_suffix", False),
            model=form.get("model") or form.get("override_model_handle") or None,
            embedding=(
                form.get("embedding")
                or form.get("override_embedding_handle")
                or header_embedding
                or None
            ),
            strip_messages=flag("strip_messages", False),
            override_existing_tools=flag("override_existing_tools", True),
        )


@dataclass
class Planner:
    gw: Gateway
    af: AgentFile
    opts: ImportOptions
    folders: list[FolderPlan] = field(default_factory=list)  # the file's sources, planned
    files: list[FilePlan] = field(default_factory=list)

    def plan(self) -> tuple[list[AgentPlan], list[ToolPlan]]:
        tools = self._custom_tools()
        self.folders = folder_plans(self.gw, self.af, self.opts.embedding)
        self.files = file_plans(self.af)
        return [self._agent(i, a, tools) for i, a in enumerate(self.af.agents)], list(
            {t.name: t for t in tools.values()}.values()
        )

    def _custom_tools(self) -> dict[str, ToolPlan]:
        """file tool id -> plan, for the custom tools (those with source the agents use)."""
        used = {ref for a in self.af.agents for ref in a.tool_ids or []}
        out: dict[str, ToolPlan] = {}
        for j, t in enumerate(self.af.tools):
            if t.id in used and REGISTRY.get(t.name) is None and t.source_code is not None:
                out[t.id] = self._tool(j, t)
        return out

    def _tool(self, j: int, t: ToolIn) -> ToolPlan:
        where = f"tools.{j} ({t.name})"
        if t.source_type not in (None, "python"):
            raise ApiError(422, f"{where}: source_type '{t.source_type}' is not supported")
        if t.pip_requirements or t.npm_requirements:
            raise ApiError(422, f"{where}: pip/npm requirements are not supported")
        refuse_if_unisolated(self.gw)
        try:
            parsed = parse_source(
                t.source_code or "",
                json_schema=t.json_schema,
                args_json_schema=t.args_json_schema,
                description=t.description,
            )
        except SourceError as exc:
            raise ApiError(422, f"{where}: {exc}") from exc
        schema = parsed.json_schema
        return ToolPlan(
            parsed.name,
            schema["description"],
            schema,
            t.source_code or "",
            t.tags or [],
            t.return_char_limit,
        )

    def _agent(self, i: int, a: AgentIn, custom: dict[str, ToolPlan]) -> AgentPlan:
        tools_by_id = {t.id: t for t in self.af.tools}
        names, skipped = [], []
        for ref in a.tool_ids or []:
            if ref in custom:
                names.append(custom[ref].name)
            elif REGISTRY.get(tools_by_id[ref].name) is not None:
                names.append(tools_by_id[ref].name)
            else:
                skipped.append(tools_by_id[ref].name)
        metadata = dict(a.metadata or {})
        extras = metadata.pop(EXTRAS_KEY, None) or {}
        if not isinstance(extras, dict):
            extras = {}
        if skipped:
            metadata[SKIPPED_KEY] = skipped
        if a.max_files_open is not None:
            metadata["max_files_open"] = a.max_files_open
        window = a.context_window_limit
        if window is not None and not 500 <= window <= MAX_CONTEXT_WINDOW:
            raise ApiError(422, f"agents.{i}.context_window_limit: out of range")
        name = self.opts.name or a.name or "agent"
        fields = {
            "name": (name + "_copy" if self.opts.append_copy_suffix else name)[:200],
            "system": a.system or "",
            "description": a.description,
            "model": self._model(i, a),
            "embedding": self._embedding(a),
            "tool_names": list(dict.fromkeys(names)),
            "tags": a.tags or [],
            "metadata": metadata,
            # enforced by the agent loop (agents/tools/rules.py)
            "tool_rules": [r.model_dump(exclude_none=True) for r in a.tool_rules or []],
            "context_window": window,
            "greeting": extras.get("greeting"),
            "voice_default": bool(extras.get("voice_default")),
            **call_control(i, extras),
        }
        messages = [] if self.opts.strip_messages else self._messages(a)
        folder_keys, opened = agent_sources(a, self.files)
        if folder_keys:  # an agent with folders has the file tools (as on attach)
            tool_names = list(dict.fromkeys([*names, *FILE_TOOLS]))
            fields["tool_names"] = tool_names
        return AgentPlan(fields, self._blocks(i, a), messages, folder_keys, opened)

    def _model(self, i: int, a: AgentIn) -> str:
        cfg = a.llm_config
        handle = self.opts.model or a.model or (cfg.handle if cfg else None)
        if handle is None and cfg is not None and cfg.model:
            handle = f"{cfg.model_endpoint_type or 'openai'}/{cfg.model}"
        handle = handle or self.gw.default_model()
        try:
            self.gw.llms.validate(handle)
        except ValueError as exc:
            raise ApiError(
                422, f"agents.{i}: model '{handle}': {exc}; pass `model` to import onto another"
            ) from exc
        return str(handle)

    def _embedding(self, a: AgentIn) -> str:
        if self.opts.embedding is not None:
            try:
                validate_handle(self.opts.embedding)
            except ValueError as exc:
                raise ApiError(422, f"embedding: {exc}") from exc
            return self.opts.embedding
        cfg = a.embedding_config
        handle = a.embedding or (cfg.handle if cfg else None)
        try:  # the file's own: a handle this server lacks falls back to the default
            validate_handle(handle or "")
            return str(handle)
        except ValueError:
            return str(self.gw.settings.default_embedding)

    def _blocks(self, i: int, a: AgentIn) -> list[BlockSpec]:
        by_id = {b.id: b for b in self.af.blocks}
        found = [(f"blocks.{self.af.blocks.index(by_id[r])}", by_id[r]) for r in a.block_ids or []]
        for k, raw in enumerate(a.memory_blocks or []):
            where = f"agents.{i}.memory_blocks.{k}"
            try:
                block = (
                    raw if isinstance(raw, BlockIn) else BlockIn.model_validate({"id": "", **raw})
                )
            except ValidationError as exc:
                raise ApiError(422, f"{where}: {exc.errors()[0].get('msg')}") from exc
            found.append((where, block))
        specs, labels = [], set()
        for where, b in found:
            if b.label in labels:
                raise ApiError(422, f"{where}: a second block labelled '{b.label}' on agents.{i}")
            labels.add(b.label)
            meta = b.metadata or {}
            scope = meta.get("scope") if meta.get("scope") in ("agent", "caller") else None
            limit = b.limit or max(5000, len(b.value))
            if len(b.value) > limit or limit > 1_000_000:
                raise ApiError(
                    422, f"{where} ({b.label}): value of {len(b.value)} chars, limit {limit}"
                )
            specs.append(
                BlockSpec(
                    label=b.label,
                    value=b.value,
                    limit=limit,
                    description=b.description,
                    read_only=b.read_only,
                    sleeptime_editable=bool(meta.get("sleeptime_editable")),
                    scope=scope,
                )
            )
        return specs

    def _messages(self, a: AgentIn) -> list[MessageData]:
        live = set(a.in_context_message_ids)
        out: list[MessageData] = []
        for n, m in enumerate(a.messages):
            if (n == 0 and m.role == "system") or m.role == "approval":
                continue  # the compiled system prompt (rebuilt here); approvals: not kept
            out += _message(m, in_context=not live or m.id in live)
        return out


def _message(m: MessageIn, *, in_context: bool) -> list[MessageData]:
    base: dict[str, Any] = {"agent_id": "", "in_context": in_context, "created_at": m.created_at}
    if m.role == "tool":
        returns = m.tool_returns or []
        if len(returns) > 1:  # parallel calls answered in one message: one message each here
            return [
                MessageData(
                    id=new_id("message"),
                    role="tool",
                    content=r.func_response or "",
                    tool_call_id=r.tool_call_id,
                    tool_name=m.name,
                    tool_status=r.status,
                    **base,
                )
                for r in returns
            ]
        first = returns[0] if returns else None
        return [
            MessageData(
                id=new_id("message"),
                role="tool",
                content=m.text() or (first.func_response if first else "") or "",
                tool_call_id=m.tool_call_id or (first.tool_call_id if first else None),
                tool_name=m.name,
                tool_status=first.status if first else "success",
                **base,
            )
        ]
    calls = [
        ToolCallData(id=c.id, name=c.function.name, arguments=c.function.text())
        for c in m.tool_calls or []
    ]
    return [
        MessageData(
            id=new_id("message"),
            role=m.role,
            content=m.text(),
            reasoning=m.reasoning() if m.role == "assistant" else None,
            tool_calls=calls if m.role == "assistant" else [],
            otid=m.otid,
            **base,
        )
    ]


def call_control(i: int, extras: dict[str, Any]) -> dict[str, Any]:
    """An imported agent's call-control fields (docs/call_control.md), checked as REST checks
    them: a bad value is a 422 naming the agent."""
    try:
        targets = check_targets(dict(extras.get("transfer_targets") or {}))
        tools = check_call_tools(extras.get("call_tools"))
    except (TypeError, ValueError) as exc:
        raise ApiError(422, f"agents[{i}]: {exc}") from exc
    message = extras.get("voicemail_message")
    if message is not None and not (isinstance(message, str) and 0 < len(message) <= 2000):
        raise ApiError(422, f"agents[{i}]: voicemail_message must be 1 to 2000 characters")
    return {"transfer_targets": targets, "call_tools": tools, "voicemail_message": message}
