#!/usr/bin/env bash
# Installs what the scripts under tools/ need (not the product): Debian packages only.
#   python3-reportlab   PDF rendering for the sample generator (tools/samples/)
#   fonts-dejavu-core   DejaVu TrueType fonts embedded in the generated PDFs (ő, ű and other Latin-2 letters)
#   poppler-utils       pdftotext, used to check that generated PDFs show the expected values
#   python3-regex       Unicode property classes for the BPE in tools/samples/estimate_check.py
# usage: tools/setup-tools.sh
set -euo pipefail
packages=(python3 python3-reportlab python3-regex fonts-dejavu-core poppler-utils)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-tools: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
