#!/usr/bin/env bash
# Installs what ndtrain needs from Debian's packages (skipping what is
# present), then configures and builds Release into build/.
#   scripts/setup.sh          build dependencies, datasets, build
#   scripts/setup.sh --bench  also PyTorch and matplotlib (benchmarks only)
#   scripts/setup.sh --fuzz   also clang, libFuzzer and the sanitizer
#                             runtimes (scripts/fuzz.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake make pkg-config libgtest-dev
  libopenblas-openmp-dev libdnnl-dev openmpi-bin libopenmpi-dev
  libyaml-cpp-dev nlohmann-json3-dev zlib1g-dev libdeflate-dev libcli11-dev
  dataset-fashion-mnist fortunes python3)
for arg in "$@"; do
  case $arg in
    --bench) packages+=(python3-torch python3-numpy python3-matplotlib) ;;
    --fuzz) packages+=(clang libclang-rt-14-dev libomp-dev) ;;
    *) echo "setup: unknown option $arg" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 \
  || { cat build.log; exit 1; }
cmake --build build -j"$(nproc)" >> build.log 2>&1 \
  || { tail -50 build.log; exit 1; }
rm -f build.log
echo "setup: built build/ndtrain"
