#!/usr/bin/env bash
# Summarises the working tree's changes against HEAD (see SKILL.md). Read-only.
set -u
export GIT_PAGER=cat GIT_CONFIG_NOSYSTEM=1
if ! git rev-parse --git-dir >/dev/null 2>&1; then echo "not a git repository" >&2; exit 2; fi
base=HEAD
git rev-parse -q --verify HEAD >/dev/null || base=$(git hash-object -t tree /dev/null)
echo "== changed files (added/removed lines) =="
git -c core.hooksPath=/dev/null diff --numstat "$base" -- . | awk '{printf "  +%s -%s %s\n", $1, $2, $3}'
git ls-files --others --exclude-standard | sed 's/^/  new (untracked) /'
added=$(git -c core.hooksPath=/dev/null diff -U0 "$base" -- . | grep '^+' | grep -v '^+++' || true)
echo "== conflict markers =="
markers=$(git -c core.hooksPath=/dev/null diff --name-only "$base" -- . | while read -r f; do [ -f "$f" ] && grep -nE '^(<{7}|>{7})( |$)' -- "$f" | sed "s|^|  $f:|"; done)
echo "${markers:-  none}"
echo "== debug leftovers in added lines =="
echo "$added" | grep -nE 'console\.log|debugger;|pdb\.set_trace|dbg!\(|^\+\s*print\(' | sed 's/^/  /' || echo "  none"
echo "== TODO / FIXME in added lines =="
echo "$added" | grep -nE 'TODO|FIXME' | sed 's/^/  /' || echo "  none"
[ -n "$markers" ] && exit 1
exit 0
