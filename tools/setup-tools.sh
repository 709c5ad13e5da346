#!/usr/bin/env bash
# Installs what the scripts under tools/ need (not the product): Debian packages only.
#   python3-reportlab   PDF rendering for the sample generator (tools/samples/)
#   fonts-dejavu-core   DejaVu TrueType fonts embedded in the generated PDFs (ő, ű and other Latin-2 letters)
#   fonts-liberation2, fonts-freefont-ttf   more type faces for the free-layout training PDFs
#   poppler-utils       pdftotext, used to check that generated PDFs show the expected values
#   python3-regex       Unicode property classes for the BPE in tools/samples/estimate_check.py
#   wamerican wngerman wfrench witalian wspanish wpolish wdutch hunspell-hu
#                       word lists of eight languages: dictionary-word party names in the training data
# usage: tools/setup-tools.sh
set -euo pipefail
packages=(python3 python3-reportlab python3-regex fonts-dejavu-core fonts-liberation2 fonts-freefont-ttf poppler-utils
          wamerican wngerman wfrench witalian wspanish wpolish wdutch hunspell-hu)
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/lib/apt-install.sh"
apt_install_missing setup-tools "${packages[@]}"
