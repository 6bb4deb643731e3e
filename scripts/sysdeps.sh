#!/usr/bin/env bash
# Install the system packages the lab and the tests need, once, on a fresh Debian machine.
# Only as root; only what is missing; `apt-get update` once, then --no-install-recommends
# (without it wireguard-tools pulls in a whole kernel image).
set -euo pipefail
need=()
want() { command -v "$1" >/dev/null 2>&1 || need+=("$2"); }
want ip iproute2
want nft nftables
want tcpdump tcpdump
want tshark tshark
want wireguard-go wireguard-go
want wg wireguard-tools
want stunnel4 stunnel4
want iperf3 iperf3
want sshd openssh-server
want ssh openssh-client
want softflowd softflowd
want nfcapd nfdump
want pkill procps
want java openjdk-17-jre-headless  # the Spark engine (--engine spark): Java 17+
[ -e /usr/lib/python3/dist-packages/nftables/nftables.py ] || need+=(python3-nftables)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "sysdeps: missing ${need[*]}; run as root (or install them) to use the lab" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
echo "sysdeps: installing ${need[*]}" >&2
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${need[@]}" >&2
