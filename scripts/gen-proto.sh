#!/usr/bin/env bash
# Generates the Python gRPC stubs from proto/ into horizon_broker/broker/_proto (not committed;
# built here).
set -euo pipefail
python_bin=${1:-python3}
out=horizon_broker/broker/_proto
rm -rf "$out"
mkdir -p "$out"
shopt -s globstar nullglob
sources=(proto/**/*.proto)
if ((${#sources[@]} == 0)); then
  touch "$out/__init__.py"
  exit 0
fi
"$python_bin" -m grpc_tools.protoc -Iproto --python_out="$out" --pyi_out="$out" \
  --grpc_python_out="$out" "${sources[@]}"
# Make the generated tree a package whose imports resolve inside horizon_broker.broker._proto.
find "$out" -type d -exec touch {}/__init__.py \;
"$python_bin" - "$out" <<'PY'
import pathlib, re, sys
root = pathlib.Path(sys.argv[1])
for path in root.rglob("*.py"):
    text = path.read_text()
    fixed = re.sub(r"^from (horizon|arrow)(\.| )", r"from horizon_broker.broker._proto.\1\2", text, flags=re.M)
    fixed = re.sub(r"^import (horizon|arrow)\.", r"import horizon_broker.broker._proto.\1.", fixed, flags=re.M)
    if fixed != text:
        path.write_text(fixed)
PY
