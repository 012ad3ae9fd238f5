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
status=0
for template in cdk.out/kafkalake-*.template.json; do
  echo "[iac] cfn-lint $template"
  "$tools/bin/cfn-lint" -a cfn_lint_serverless.rules --non-zero-exit-code error -- "$template" || status=1
  echo "[iac] checkov $template"
  "$tools/bin/checkov" -f "$template" --framework cloudformation --quiet --compact --skip-download || status=1
done
exit $status
