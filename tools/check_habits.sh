#!/usr/bin/env bash
# The project's habits, checked: ruff's lint and format (configured in pyproject.toml), and commit
# subjects of at most 72 characters (details in the body) for every commit since the layout commit
# that introduced this check (the history before it is left as written).
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
ruff format --check .
SINCE=fc7058e   # "Layer folders: core, sandbox, repo, grading, window, agents, analysis"
if git rev-parse -q --verify "$SINCE^{commit}" >/dev/null 2>&1; then
  range="$SINCE^..HEAD"
else
  range="-1"    # a shallow clone without that commit: the newest commit only
fi
long=$(git log --format='%s' $range | awk 'length($0) > 72')
if [ -n "$long" ]; then
  echo "commit subjects over 72 characters (put the details in the body):"
  echo "$long"
  exit 1
fi
echo "habits: ruff check, ruff format and commit subjects all pass"
