"""OpenAPI operations of scheduled messages (routes/rest_schedule.py), merged into the
document by openapi.py like the table in openapi_schemas.py."""

from __future__ import annotations

from voice_gateway.protocol.letta_schedule import ScheduleCreate
from voice_gateway.routes.openapi_schemas import (
    BOOL,
    NSTR,
    OBJ,
    STR,
    Op,
    Schema,
    arr,
    limit,
    obj,
    q,
    ref,
)

SCHEDULE_RESPONSES: dict[str, Schema] = {
    "ScheduledMessage": obj(
        {
            "id": STR,
            "agent_id": STR,
            "message": obj({"messages": arr(OBJ)}),
            "schedule": OBJ,
        },
        {"next_scheduled_time": NSTR},
    ),
}
SCHEDULE_OPS: dict[tuple[str, str], Op] = {
    ("create_schedule", "post"): Op(
        ScheduleCreate, response=obj({"id": STR}, {"next_scheduled_at": NSTR})
    ),
    ("list_schedules", "get"): Op(
        query=(q("after", STR), limit()),
        response=obj({"has_next_page": BOOL, "scheduled_messages": arr(ref("ScheduledMessage"))}),
    ),
    ("get_schedule", "get"): Op(response=ref("ScheduledMessage")),
    ("delete_schedule", "delete"): Op(response=obj({"success": {"const": True}})),
}
