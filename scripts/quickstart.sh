#!/usr/bin/env bash
# Quick start: set up whatever is missing, then start the service on its embedded defaults.
# Extra arguments go to `atelier serve` (for example --port 7421).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bin/atelier serve "$@"
