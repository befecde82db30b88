#!/usr/bin/env bash
# Installs Debian's chromium when /usr/bin/chromium is missing, for the
# headless-browser test of the HTML report (loadgen/render). Needs root
# (or sudo) and the Debian package mirrors; does nothing when chromium is
# already there.
set -euo pipefail

if [[ -x /usr/bin/chromium ]]; then
	exit 0
fi
sudo=""
if [[ $(id -u) -ne 0 ]]; then
	if ! command -v sudo >/dev/null; then
		echo "ensure-chromium: /usr/bin/chromium is missing and this is not root (no sudo either)" >&2
		exit 1
	fi
	sudo="sudo"
fi
echo "ensure-chromium: installing chromium with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq chromium
/usr/bin/chromium --version >&2
