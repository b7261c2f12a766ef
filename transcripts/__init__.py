"""The transcript bus and its workers: finished turns go from the outbox onto the Redis stream
`vg:transcripts` (or, without Redis, to an in-process sink), and sleeptime workers read them in
order per memory, under turn leases shared by every instance. Above agents/ (it runs the
sleeptime agent) and below voice_gateway/ (which starts it)."""
