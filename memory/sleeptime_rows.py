"""The sleeptime bookkeeping of `SleeptimeAgent.note_pending` straight on the driver: the
statements of its one read-decide-write transaction per bus drain (`Database.exchange`).

The in-process transcript bus runs that transaction on the gateway's event loop for every
drain; through an ORM session it would be the largest item of a turn's main-thread CPU
(docs/benchmarks.md, `voice_concurrency`). Rows are plain dicts; the schema stays the ORM's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memory.orm import SleeptimeState
from memory.raw import Codec, Row, Stmt

STATES = Codec(SleeptimeState.__table__)  # type: ignore[arg-type]


def _marks(n: int, mark: str = "?") -> str:
    return ", ".join([mark] * n)


def pending_reads(
    event_ids: Sequence[str], agent_ids: Sequence[str], keys: Sequence[tuple[str, str]]
) -> list[Stmt]:
    """Which events were applied already, which agents exist, and the (agent, caller) states,
    locked to the commit."""
    return [
        Stmt(
            f"SELECT event_id FROM processed_events WHERE event_id IN ({_marks(len(event_ids))})",
            list(event_ids),
            returns=True,
        ),
        Stmt(
            f"SELECT id FROM agents WHERE id IN ({_marks(len(agent_ids))})",
            list(agent_ids),
            returns=True,
        ),
        Stmt(
            f"SELECT {STATES.columns('s')} FROM sleeptime_state s "
            f"WHERE (s.agent_id, s.identity_id) IN (VALUES {_marks(len(keys), '(?, ?)')})",
            [v for key in keys for v in key],
            returns=True,
            lock=True,
        ),
    ]


def decode_states(rows: list[Row], *, sqlite: bool) -> list[Row]:
    return [STATES.decode(r, sqlite=sqlite) for r in rows]


def _state_rows(states: Sequence[Any]) -> tuple[str, list[Any]]:
    values = _marks(len(states), "(?, ?, ?, ?, 0)")
    params = [
        v for p in states for v in (p.agent_id, p.identity_id, p.pending_turns, p.pending_events)
    ]
    return values, params


_COLUMNS = "sleeptime_state (agent_id, identity_id, pending_turns, pending_events, runs)"


def pending_writes(
    new: Sequence[Any], old: Sequence[Any], processed: Sequence[tuple[str, str]], now: datetime
) -> list[Stmt]:
    """Insert the `new` states, set the pending turns of the `old` ones (rows that exist and
    are locked: the upsert always updates), record the `processed` (event id, agent id)s.
    A state is anything with agent_id, identity_id, pending_turns and pending_events."""
    out = []
    if new:
        values, params = _state_rows(new)
        out.append(Stmt(f"INSERT INTO {_COLUMNS} VALUES {values}", params))
    if old:
        values, params = _state_rows(old)
        out.append(
            Stmt(
                f"INSERT INTO {_COLUMNS} VALUES {values} "
                "ON CONFLICT (agent_id, identity_id) DO UPDATE SET "
                "pending_turns = excluded.pending_turns, pending_events = excluded.pending_events",
                params,
            )
        )
    if processed:
        out.append(
            Stmt(
                "INSERT INTO processed_events (event_id, agent_id, processed_at) "
                f"VALUES {_marks(len(processed), '(?, ?, ?)')}",
                [v for event_id, agent_id in processed for v in (event_id, agent_id, now)],
            )
        )
    return out
