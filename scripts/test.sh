#!/usr/bin/env bash
# Sets up whatever is missing, then runs every test (unit and end-to-end) and prints a closing
# "N passed, N failed, N skipped" line. Extra arguments go to vitest (e.g. a file filter).
set -euo pipefail
cd "$(dirname "$0")/.."
ATELIER_EXTRA_APT="${ATELIER_EXTRA_APT:-} chromium" bash scripts/setup.sh
report="$(mktemp -t atelier-vitest-XXXXXX.json)"
set +e
npx --no-install vitest run --reporter=default --reporter=json --outputFile.json="$report" "$@"
rc=$?
set -e
node -e '
  const fs = require("fs");
  let r; try { r = JSON.parse(fs.readFileSync(process.argv[1], "utf8")); } catch { console.log("0 passed, 1 failed"); process.exit(0); }
  const skipped = (r.numPendingTests || 0) + (r.numTodoTests || 0);
  console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped`);
' "$report"
rm -f "$report"
exit $rc
