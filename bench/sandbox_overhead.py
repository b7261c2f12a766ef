"""Per-call overhead of the custom-tool sandbox (agents/tools/sandbox.py).

One call = mkdtemp + spawn `python -I -B sandbox_child.py` + JSON request on stdin + kernel
isolation (namespaces, minimal root, uid nobody, where allowed) + rlimits + audit hook + running
a trivial tool + JSON result on its own pipe + process exit + scratch removal, timed from the
parent's `Sandbox.run` call to its return. Measured:
- sandbox: the full sandbox, as the gateway runs it;
- no_namespaces: the same without network/mount namespaces (VG_TOOL_NAMESPACES=false);
- bare_python: `python -I -B -c pass` started and awaited with asyncio (the floor: interpreter
  start-up), so isolation cost = sandbox - bare_python.
Calls run one at a time. 50 calls each (--quick: 20).
"""

from __future__ import annotations

import asyncio
import sys

from _common import Timer, emit, parser, summary

from agents.tools.sandbox import Sandbox, SandboxConfig

TOOL = "def add(a: int, b: int) -> int:\n    return a + b\n"


async def sandboxed(n: int, namespaces: bool) -> tuple[dict[str, float | int], list[str]]:
    box = Sandbox(SandboxConfig(namespaces=namespaces))
    await box.run(TOOL, "add", {"a": 1, "b": 2})  # warm the page cache
    samples, layers = [], []
    for i in range(n):
        with Timer() as t:
            res = await box.run(TOOL, "add", {"a": i, "b": 1})
        assert res.ok and res.value == i + 1, res.error
        samples.append(t.ms)
        layers = res.layers
    return summary(samples), layers


async def bare_python(n: int) -> dict[str, float | int]:
    samples = []
    for _ in range(n):
        with Timer() as t:
            proc = await asyncio.create_subprocess_exec(sys.executable, "-I", "-B", "-c", "pass")
            await proc.wait()
        samples.append(t.ms)
    return summary(samples)


async def main() -> None:
    args = parser(__doc__ or "").parse_args()
    n = 20 if args.quick else 50
    full, layers = await sandboxed(n, namespaces=True)
    plain, plain_layers = await sandboxed(n, namespaces=False)
    floor = await bare_python(n)
    emit(
        "sandbox_overhead",
        {
            "calls": n,
            "sandbox": full,
            "sandbox_layers": layers,
            "no_namespaces": plain,
            "no_namespaces_layers": plain_layers,
            "bare_python": floor,
            "isolation_cost_p50_ms": round(float(full["p50_ms"]) - float(floor["p50_ms"]), 3),
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
