#!/usr/bin/env bash
# cfn-lint (with the serverless rules) and checkov on every synthesized template; exits non-zero on any error.
# The tools live in their own virtualenv in the download cache (their pins clash with the app's).
set -euo pipefail
cache="${KAFKALAKE_CACHE:-$HOME/.cache/kafkalake}"
tools="$cache/tools/iac-cfnlint1.58.0-checkov3.3.30"
if [ ! -x "$tools/bin/checkov" ]; then
  echo "[iac] installing cfn-lint and checkov into $tools"
  python3.11 -m venv "$tools"
  "$tools/bin/pip" install -q cfn-lint==1.58.0 cfn-lint-serverless==0.3.6 checkov==3.3.30
fi
# one template per process (cfn-lint and checkov are single-threaded), each one's report printed whole, in order
scan() {
  local failed=0
  echo "[iac] cfn-lint $1"
  "$tools/bin/cfn-lint" -a cfn_lint_serverless.rules --non-zero-exit-code error -- "$1" || failed=1
  echo "[iac] checkov $1"
  "$tools/bin/checkov" -f "$1" --framework cloudformation --quiet --compact --skip-download || failed=1
  return $failed
}
reports="$(mktemp -d)"
trap 'rm -rf "$reports"' EXIT
pids=()
templates=(cdk.out/kafkalake-*.template.json)
for i in "${!templates[@]}"; do
  scan "${templates[$i]}" > "$reports/$i" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!templates[@]}"; do
  wait "${pids[$i]}" || status=1
  cat "$reports/$i"
done
exit $status
