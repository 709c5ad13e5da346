# Sourced by scripts/setup.sh and tools/setup-tools.sh.
# apt_install_missing LABEL PACKAGE...: installs with apt-get the packages that dpkg does not list as
# installed (nothing when all are there); uses sudo when not root.
apt_install_missing() {
  local label=$1
  shift
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "$label: installing ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
