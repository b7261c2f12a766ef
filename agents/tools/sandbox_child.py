"""The child side of the tool sandbox: `python -I -B sandbox_child.py <result_fd>`.

Standard library only (it is run by path in isolated mode, not imported by the server). Order:
read the request (JSON on stdin) -> kernel isolation (sandbox_jail) -> resource limits -> audit
hook -> run the user's function -> write {"ok", "value" | "error", "kind", "layers"} as JSON on
the result descriptor (its own pipe, so the tool's prints on stdout cannot corrupt it) -> exit.
A return longer than `return_char_limit` characters is cut with Letta's truncation note; an
exception comes back as `<ExceptionType>: <message>` with the tool's own traceback beside it.
Never pickle: the request and the result are JSON.

The audit hook (sys.addaudithook, installed before user code, cannot be removed) is the second
layer: it refuses opening files for writing outside the scratch directory and reading outside
the runtime, system directories and scratch; creating, renaming, removing or linking files
outside the scratch directory; socket connect/bind/send; subprocesses, exec, fork, spawn,
os.system and kill; and every ctypes call (so libc cannot be reached to undo the rest).
"""

from __future__ import annotations

import builtins
import inspect
import json
import linecache
import os
import resource
import sys
import traceback
import types
import typing
from typing import Any

DENIED = {
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill",
    "os.killpg", "os.startfile", "subprocess.Popen", "pty.spawn", "signal.pthread_kill",
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
}  # fmt: skip
PATH_EVENTS = {  # event -> indexes of its path arguments
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1),
    "os.link": (0, 1), "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,),
    "os.chown": (0,), "os.utime": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
}  # fmt: skip
LIST_EVENTS = {"os.listdir", "os.scandir"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _inside(path: Any, roots: list[str]) -> bool:
    if isinstance(path, int):
        return True  # an already open descriptor
    real = os.path.realpath(os.fsdecode(path))
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def make_hook(scratch: str, readable: list[str]) -> Any:
    writable = [os.path.realpath(scratch)]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event in DENIED or event.startswith("ctypes."):
            raise PermissionError(f"sandbox: {event} is not allowed in a tool")
        if event == "open":
            path, mode, flags = args
            if path is None:
                return
            write = any(c in (mode or "") for c in "wax+") or bool((flags or 0) & WRITE_FLAGS)
            if not _inside(path, writable if write else readable):
                what = "writing" if write else "reading"
                raise PermissionError(f"sandbox: {what} {path!r} is not allowed in a tool")
        elif event in LIST_EVENTS:
            if args and args[0] is not None and not _inside(args[0], readable):
                raise PermissionError(f"sandbox: listing {args[0]!r} is not allowed in a tool")
        elif event in PATH_EVENTS:
            for i in PATH_EVENTS[event]:
                if i < len(args) and args[i] is not None and not _inside(args[i], writable):
                    raise PermissionError(f"sandbox: {event} on {args[i]!r} is not allowed")

    return hook


def set_limits(lim: dict[str, int]) -> None:
    mb = 1024 * 1024
    for res, soft, hard in (
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_CPU, lim["cpu_s"], lim["cpu_s"] + 1),  # SIGXCPU, then SIGKILL
        (resource.RLIMIT_AS, lim["memory_mb"] * mb, lim["memory_mb"] * mb),
        (resource.RLIMIT_FSIZE, lim["file_size_mb"] * mb, lim["file_size_mb"] * mb),
        (resource.RLIMIT_NOFILE, lim["max_files"], lim["max_files"]),
        (resource.RLIMIT_NPROC, 0, 0),  # no new processes (not enforced for root)
    ):
        resource.setrlimit(res, (soft, hard))


def user_traceback(exc: BaseException, filename: str) -> str:
    """The traceback lines of the tool's own code, then the exception."""
    te = traceback.TracebackException.from_exception(exc)
    frames = [f for f in te.stack if f.filename == filename]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    return "".join([*lines, *te.format_exception_only()]).rstrip()


def _model_of(tp: Any) -> Any:
    """The validator of a pydantic model annotation (duck-typed: this file imports no
    third-party code), or of the items of list[Model]; None for anything else."""
    if callable(getattr(tp, "model_validate", None)):
        return tp.model_validate
    inner = getattr(tp, "__args__", None)
    if getattr(tp, "__origin__", None) is list and inner:
        item = _model_of(inner[0])
        return (lambda v: [item(x) for x in v]) if item is not None else None
    return None


def validated(fn: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Arguments annotated with pydantic models (nested ones included) validated into them;
    invalid ones raise the model's ValidationError (reported as the tool's error)."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: leave the arguments as given
        hints = {}
    for name, value in args.items():
        check = _model_of(hints.get(name))
        if check is not None:
            args[name] = check(value)
    return args


def call(req: dict[str, Any]) -> dict[str, Any]:
    name, source = req["name"], req["source"]
    filename = f"<tool {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        # a real module (pydantic resolves a model's annotations through sys.modules), and
        # the tool's own __future__ imports only (not this file's postponed annotations)
        module = types.ModuleType("__tool__")
        module.__dict__["__builtins__"] = builtins
        sys.modules["__tool__"] = module
        namespace: dict[str, Any] = module.__dict__
        exec(compile(source, filename, "exec", dont_inherit=True), namespace)
        fn = namespace.get(name)
        if not callable(fn):
            return {"ok": False, "kind": "exception", "error": f"no function named '{name}'"}
        args = validated(fn, dict(req["args"]))
        if "agent_state" in inspect.signature(fn).parameters:
            args.setdefault("agent_state", None)
        value = fn(**args)
    except MemoryError:
        return {"ok": False, "kind": "memory", "error": "MemoryError"}
    except SystemExit as exc:
        return {"ok": False, "kind": "exception", "error": f"the tool called exit({exc.code})"}
    except BaseException as exc:
        trace = user_traceback(exc, filename)
        error = f"{type(exc).__name__}: {exc}"
        return {"ok": False, "kind": "exception", "error": error, "traceback": trace}
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        kind = type(value).__name__
        return {"ok": False, "kind": "not_json", "error": f"{kind} is not JSON-serializable: {exc}"}
    limit = int(req.get("return_char_limit") or 0)
    if limit and len(text) > limit:  # as Letta: cut, and say so
        value = (
            f"{text[:limit]}... [NOTE: function output was truncated since it exceeded the "
            f"character limit ({len(text)} > {limit})]"
        )
    return {"ok": True, "value": value}


def send(fd: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    while data:
        data = data[os.write(fd, data) :]
    os.close(fd)


def main() -> None:
    fd = int(sys.argv[1])
    req = json.loads(sys.stdin.buffer.read())
    layers: list[str] = []
    notes: list[str] = []
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, here)
        import sandbox_jail

        sys.path.remove(here)
        readable = sandbox_jail.readable_paths(req["scratch"])
        jail = sandbox_jail.Jail(req["scratch"])
        try:
            jail.setup(bool(req["namespaces"]))
        finally:
            layers, notes = jail.layers, jail.notes
        set_limits(req["limits"])
        layers.append("rlimits")
        del jail, sandbox_jail
        if req.get("audit_hook", True):
            sys.addaudithook(make_hook(req["scratch"], readable))
            layers.append("audit-hook")
    except Exception as exc:
        error = f"sandbox setup failed: {exc}"
        send(fd, {"ok": False, "kind": "setup", "error": error, "layers": layers, "notes": notes})
        os._exit(0)
    result = call(req)
    result["layers"] = layers
    result["notes"] = notes
    sys.stdout.flush()
    sys.stderr.flush()
    send(fd, result)
    os._exit(0)


if __name__ == "__main__":
    main()
