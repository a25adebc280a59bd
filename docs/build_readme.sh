#!/usr/bin/env bash
# README.md is assembled from docs/_head.md and the per-area sections in docs/sections/.
set -euo pipefail
cd "$(dirname "$0")"
{ cat _head.md; for f in sections/*.md; do echo; cat "$f"; done; } > ../README.md
