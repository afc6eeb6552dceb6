#!/usr/bin/env bash
# Gate: libraries never depend on a service. No file under libs/ or proto-msgs/ includes a service's header
# (kiln/<service>/..., for every services/<service>/include/kiln/<service>) or a path into services/, and
# no CMakeLists.txt there links a service's handler library (kiln::svc_*). One line per offending include;
# exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/../.."
services=()
for dir in services/*/include/kiln/*/; do
  [[ -d "${dir}" ]] && services+=("$(basename "${dir}")")
done
pattern="#[[:space:]]*include[[:space:]]*[\"<](kiln/($(IFS='|'; echo "${services[*]}"))/|([.][.]/)*services/)"
status=0
while IFS= read -r hit; do
  echo "layering gate: ${hit%%:*}: a library includes a service header: ${hit#*:*:}"
  status=1
done < <(grep -rnE "${pattern}" libs proto-msgs --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' || true)
while IFS= read -r hit; do
  echo "layering gate: ${hit%%:*}: a library links a service: ${hit#*:*:}"
  status=1
done < <(grep -rnE "kiln(::|_)svc_" libs proto-msgs --include='CMakeLists.txt' --include='*.cmake' || true)
checked=$(find libs proto-msgs -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \
  -o -name CMakeLists.txt -o -name '*.cmake' \) | wc -l)
echo "KILN-CHECKED ${checked} library files for service includes and links (${#services[@]} services)"
exit "${status}"
