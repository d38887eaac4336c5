#!/usr/bin/env bash
# What a GPU machine with no network needs beyond its own PyTorch/Triton/transformers image, carried in.
#
#   bash benchmarks/gpu_offline_setup.sh download [DIR]   # here, with PyPI and Debian reachable
#   bash benchmarks/gpu_offline_setup.sh install  [DIR]   # there, as root, before gpu_first_run.sh
#
# DIR (default .device/, which .gitignore leaves out) holds the wheels of
# the project's pure-Python dependencies that such images lack (Hydra and its launcher, accelerate
# and peft, which the LM repos' train.py import) and the
# bubblewrap package with the libraries it links. `install` puts the wheels into the interpreter
# that runs (python3, or $PYTHON), installs this checkout editable without its dependencies, and
# copies the bwrap binary to /usr/local/bin; libraries it lacks on that system come from DIR.
set -euo pipefail
MODE="${1:?usage: gpu_offline_setup.sh download|install [DIR]}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="$(realpath -m "${2:-$ROOT/.device}")"
PY="${PYTHON:-python3}"
WHEELS=(hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3 hydra-submitit-launcher==1.2.0
        submitit==1.5.4 accelerate==1.16.0 peft==0.21.2)
DEBS=(bubblewrap libcap2 libselinux1 libpcre2-8-0)

case "$MODE" in
download)
  mkdir -p "$DIR/wheels" "$DIR/debs"
  "$PY" -m pip wheel -q --no-deps -w "$DIR/wheels" "${WHEELS[@]}"
  (cd "$DIR/debs" && apt-get download "${DEBS[@]}")
  ls -l "$DIR/wheels" "$DIR/debs"
  ;;
install)
  "$PY" -m pip install -q --no-index --no-deps "$DIR"/wheels/*.whl
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e "$ROOT"
  if ! command -v bwrap >/dev/null; then
    x="$(mktemp -d)"
    dpkg -x "$DIR"/debs/bubblewrap_*.deb "$x"
    install -m 0755 "$x/usr/bin/bwrap" /usr/local/bin/bwrap.bin
    if ldd /usr/local/bin/bwrap.bin | grep -q "not found"; then   # this system lacks a library bwrap links
      mkdir -p /usr/local/lib/ai4ai-bwrap
      for d in "$DIR"/debs/lib*.deb; do dpkg -x "$d" "$x"; done
      cp -a "$x"/lib/x86_64-linux-gnu/lib*.so* "$x"/usr/lib/x86_64-linux-gnu/lib*.so* /usr/local/lib/ai4ai-bwrap/ 2>/dev/null || true
      printf '#!/bin/sh\nLD_LIBRARY_PATH=/usr/local/lib/ai4ai-bwrap exec /usr/local/bin/bwrap.bin "$@"\n' > /usr/local/bin/bwrap
      chmod 0755 /usr/local/bin/bwrap
    else
      mv /usr/local/bin/bwrap.bin /usr/local/bin/bwrap
    fi
    rm -rf "$x"
  fi
  bwrap --version
  "$PY" -c 'import hydra, ai4ai, ai4ai_kernels; print("hydra", hydra.__version__, "ai4ai from", ai4ai.__file__)'
  ;;
*) echo "usage: gpu_offline_setup.sh download|install [DIR]" >&2; exit 2 ;;
esac
