"""The tool sandbox: every custom-tool call runs in a fresh, isolated process.

`Sandbox.run(source, name, args)` starts `python -I -B agents/tools/sandbox_child.py <fd>`, sends
{source, name, args, limits} as JSON on its stdin and reads the result as JSON from a pipe of its
own (descriptor <fd>, passed with pass_fds), so whatever the tool prints cannot corrupt it. The
tool's stdout and stderr are captured (each capped at max_output_bytes) and returned with the
result. Never pickle: a result that is not JSON-serializable is a tool error.

Isolation layers (the names appear in SandboxResult.layers and `isolation_layers()`):
- "python-isolated": `python -I` (no PYTHON* variables, no user site, no script/cwd on sys.path)
  and -B (no bytecode written).
- "clean-env": the child's environment is PATH, LANG, HOME and TMPDIR (HOME and TMPDIR are the
  scratch directory) and *_NUM_THREADS=1 (a tool is single-threaded: RLIMIT_NPROC=0 forbids new
  threads and processes): none of the server's variables or secrets.
- "scratch-dir": cwd is a fresh directory (mkdtemp), chowned to nobody when the server is root,
  removed after the call (or, if the server was killed mid-call, when the next one starts).
- "process-group": a new session/process group; on timeout or cancellation the whole group is
  killed with SIGKILL.
- "timeout": a wall-clock limit (asyncio) of timeout_s.
- in the child (agents/tools/sandbox_child.py, agents/tools/sandbox_jail.py): "rlimits"
  (RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE=0, RLIMIT_NPROC=0),
  "netns", "mountns", "minimal-root", "nobody" (or "userns" + "no-caps" when not root),
  "no-new-privs", "dies-with-server" and "audit-hook", each where the OS allows; what could
  not be applied is logged once (SandboxResult.notes says why).
Errors (timeout, CPU or memory limit, an exception in the tool, a non-JSON return value) come
back as ok=False with a clear message (an exception as Letta words it: `Error executing function
<name>: <ExceptionType>: <message>`, the traceback of the tool's own code in `traceback`); a
return longer than return_char_limit characters is cut with Letta's truncation note. The server
process is never at risk. At most max_concurrent calls run at once.

`check_isolation()` probes once which layers this machine allows. Without the kernel layers
(REQUIRED_LAYERS) the sandbox refuses every call with `refusal` as the tool error, unless
`allow_weak` says the operator accepts running tools with the remaining layers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CHILD = str(Path(__file__).with_name("sandbox_child.py"))
REQUIRED_LAYERS = ("netns", "mountns", "minimal-root")  # no network, no view of the server
PARENT_LAYERS = ["python-isolated", "clean-env", "scratch-dir", "process-group", "timeout"]
NOBODY = 65534
# RLIMIT_NPROC=0 also forbids threads: numerical libraries must not start thread pools
MAX_ERROR_CHARS = 500  # a tool's error message, as Letta caps it
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_seen: dict[str, list[str]] = {}


def isolation_layers() -> list[str] | None:
    """The layers applied to the last sandboxed call (None before the first call)."""
    return _seen.get("layers")


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    timeout_s: float = 10.0
    memory_mb: int = 256
    cpu_s: int = 5
    file_size_mb: int = 16
    max_files: int = 64
    max_output_bytes: int = 64_000  # stdout and stderr, each: the rest is dropped
    return_char_limit: int = 50_000  # a longer return is cut with a note (Letta's default)
    max_result_bytes: int = 1_000_000  # the result's JSON: larger is an error (never, if cut)
    max_concurrent: int = 4
    namespaces: bool = True  # network/mount namespaces where the OS allows
    audit_hook: bool = True  # off only to test the kernel layers on their own
    python: str = sys.executable


@dataclass(slots=True)
class SandboxResult:
    ok: bool
    value: Any = None
    error: str | None = None
    stdout: str = ""
    stderr: str = ""
    traceback: str = ""  # an exception's frames in the tool's own code
    layers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pid: int | None = None
    duration_ms: float = 0.0


async def _drain(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, int]:
    """Read to EOF, keeping the first `cap` bytes; returns (kept, total)."""
    kept, total = bytearray(), 0
    while chunk := await stream.read(65536):
        total += len(chunk)
        if len(kept) < cap:
            kept += chunk[: cap - len(kept)]
    return bytes(kept), total


def _text(data: bytes, total: int) -> str:
    text = data.decode("utf-8", errors="replace")
    return text + f"\n[... {total - len(data)} more bytes dropped]" if total > len(data) else text


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def sweep_stale(base: str | None = None) -> int:
    """Remove scratch directories left behind by servers that died mid-call (named
    vg-tool-<server pid>-...); returns how many."""
    removed = 0
    for path in Path(base or tempfile.gettempdir()).glob("vg-tool-*-*"):
        pid = path.name.split("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Sandbox:
    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._slots = asyncio.Semaphore(self.config.max_concurrent)
        self.refusal: str | None = None  # set by check_isolation: why tools are not run
        sweep_stale()

    async def probe(self) -> SandboxResult:
        """Run a trivial tool once (even when refusing): the layers this machine allows."""
        return await self._run(
            "def probe() -> str:\n    return 'ok'\n", "probe", {}, self.config.return_char_limit
        )

    async def check_isolation(self, allow_weak: bool = False) -> str | None:
        """Probe; None if every REQUIRED_LAYERS layer applies, else why not. Unless
        `allow_weak`, the reason becomes `refusal` and every later call is refused."""
        res = await self.probe()
        missing = [layer for layer in REQUIRED_LAYERS if layer not in res.layers]
        if res.ok and not missing:
            self.refusal = None
            return None
        off = [] if self.config.namespaces else ["namespaces are turned off"]
        why = "; ".join([*off, *res.notes]) or res.error or "unknown"
        reason = f"custom tools cannot be isolated here: no {', '.join(missing)} ({why})"
        self.refusal = None if allow_weak else reason
        return reason

    async def run(
        self, source: str, name: str, args: dict[str, Any], return_char_limit: int | None = None
    ) -> SandboxResult:
        """Run the tool; its return is cut at `return_char_limit` (the tool's own), else at the
        server's limit."""
        if self.refusal is not None:
            return SandboxResult(False, error=f"{name} was not run: {self.refusal}")
        return await self._run(
            source, name, args, return_char_limit or self.config.return_char_limit
        )

    async def _run(self, source: str, name: str, args: dict[str, Any], limit: int) -> SandboxResult:
        async with self._slots:
            scratch = tempfile.mkdtemp(prefix=f"vg-tool-{os.getpid()}-")
            try:
                if os.geteuid() == 0:
                    os.chown(scratch, NOBODY, NOBODY)
                request = {"source": source, "name": name, "args": args, "scratch": scratch,
                           "return_char_limit": limit}  # fmt: skip
                res = await self._spawn(scratch, request)
            finally:
                await asyncio.to_thread(shutil.rmtree, scratch, True)
        self._note_layers(res)
        return res

    def _request(self, request: dict[str, Any]) -> bytes:
        c = self.config
        limits = {"cpu_s": c.cpu_s, "memory_mb": c.memory_mb, "file_size_mb": c.file_size_mb,
                  "max_files": c.max_files}  # fmt: skip
        flags = {"namespaces": c.namespaces, "audit_hook": c.audit_hook}
        return json.dumps({**request, "limits": limits, **flags}).encode()

    async def _spawn(self, scratch: str, request: dict[str, Any]) -> SandboxResult:
        c, loop = self.config, asyncio.get_running_loop()
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": scratch,
               "TMPDIR": scratch, **ONE_THREAD}  # fmt: skip
        r, w = os.pipe()
        t0 = time.perf_counter()
        try:
            proc = await asyncio.create_subprocess_exec(
                c.python, "-I", "-B", CHILD, str(w),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, pass_fds=(w,), cwd=scratch, env=env,
                start_new_session=True,
            )  # fmt: skip
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        result_reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(result_reader), os.fdopen(r, "rb", buffering=0)
        )
        timed_out = False
        try:
            async with asyncio.timeout(c.timeout_s):
                out, err, res, _ = await asyncio.gather(
                    _drain(proc.stdout, c.max_output_bytes),  # type: ignore[arg-type]
                    _drain(proc.stderr, c.max_output_bytes),  # type: ignore[arg-type]
                    _drain(result_reader, c.max_result_bytes + 1),
                    self._feed(proc, self._request(request)),
                )
                await proc.wait()
        except TimeoutError:
            timed_out = True
        finally:
            _kill_group(proc.pid)
            transport.close()
            await asyncio.shield(proc.wait())
        ms = (time.perf_counter() - t0) * 1000
        if timed_out:
            error = f"{request['name']} timed out after {c.timeout_s:g}s"
            return SandboxResult(False, error=error, pid=proc.pid, duration_ms=ms)
        result = self._outcome(request["name"], proc.returncode, res, err)
        result.stdout, result.stderr = _text(*out), _text(*err)
        result.pid, result.duration_ms = proc.pid, ms
        return result

    async def _feed(self, proc: asyncio.subprocess.Process, data: bytes) -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(data)
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child died early; its exit status tells why

    def _outcome(
        self, name: str, rc: int | None, res: tuple[bytes, int], err: tuple[bytes, int]
    ) -> SandboxResult:
        c = self.config
        data, total = res
        if total > c.max_result_bytes:
            return SandboxResult(False, error=f"{name} returned more than {c.max_result_bytes} "
                                 "bytes of JSON; return something smaller")  # fmt: skip
        try:
            body = json.loads(data) if data else None
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return SandboxResult(False, error=self._died(name, rc, err[0]))
        layers = [*PARENT_LAYERS, *body.get("layers", [])]
        notes = list(body.get("notes", []))
        if body.get("ok"):
            return SandboxResult(True, value=body.get("value"), layers=layers, notes=notes)
        error = str(body.get("error"))
        if body.get("kind") == "memory":
            error = f"{name} exceeded its memory limit ({c.memory_mb} MB)"
        elif body.get("kind") == "exception":  # Letta's wording
            error = f"Error executing function {name}: {error}"[:MAX_ERROR_CHARS]
        elif body.get("kind") != "setup":
            error = f"{name} failed: {error}"
        trace = str(body.get("traceback") or "")
        return SandboxResult(False, error=error, traceback=trace, layers=layers, notes=notes)

    def _died(self, name: str, rc: int | None, stderr: bytes) -> str:
        c = self.config
        if rc in (-signal.SIGXCPU, -signal.SIGKILL):
            return f"{name} exceeded its CPU time limit ({c.cpu_s}s)"
        if b"MemoryError" in stderr:
            return f"{name} exceeded its memory limit ({c.memory_mb} MB)"
        if rc is not None and rc < 0:
            return f"{name} was killed by signal {signal.Signals(-rc).name}"
        tail = stderr.decode("utf-8", errors="replace").strip()[-500:]
        return f"{name}: the tool process exited with code {rc} without a result" + (
            f": {tail}" if tail else ""
        )

    def _note_layers(self, res: SandboxResult) -> None:
        if not res.layers or _seen.get("layers") == res.layers:
            return
        first = "layers" not in _seen
        _seen["layers"] = res.layers
        if first:
            log.info("tool sandbox isolation: %s", ", ".join(res.layers))
        if "netns" not in res.layers or "minimal-root" not in res.layers:
            log.warning(
                "tool sandbox runs without some kernel isolation: %s",
                "; ".join(res.notes) or "namespaces disabled",
            )
