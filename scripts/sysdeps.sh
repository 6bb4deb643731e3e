#!/usr/bin/env bash
# Install the system packages the lab and the tests need, once, on a fresh Debian machine.
# Only as root; only what is missing; `apt-get update` once, then --no-install-recommends
# (without it wireguard-tools pulls in a whole kernel image).
set -euo pipefail
need=()
want() { command -v "$1" >/dev/null 2>&1 || need+=("$2"); }
want ip iproute2
want ethtool ethtool            # NIC offload facts (recommend --gather)
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
want swtpm swtpm                  # software TPM per lab node (attestation)
want swtpm_setup swtpm-tools
want tpm2_quote tpm2-tools
want ulogd ulogd2                 # firewall decisions from NFLOG (telemetry)
[ -e /usr/lib/x86_64-linux-gnu/ulogd/ulogd_output_JSON.so ] || need+=(ulogd2-json)
want conntrack conntrack          # connection events
want dnsmasq dnsmasq-base         # the lab's resolver, binary only (no system service)
want munged munge                 # Slurm authentication
want slurmctld slurmctld          # a real scheduler for the lab's jobs
want slurmd slurmd
want squeue slurm-client
want tinyproxy tinyproxy-bin      # the egress gateway, binary only (no system service)
want charon-systemd charon-systemd   # userspace IPsec (kernel-libipsec)
want swanctl strongswan-swanctl
[ -e /usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so ] || need+=(libcharon-extra-plugins)
[ -e /usr/lib/ipsec/plugins/libstrongswan-gcm.so ] || need+=(libstrongswan-standard-plugins)
[ -e /usr/lib/python3/dist-packages/nftables/nftables.py ] || need+=(python3-nftables)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "sysdeps: missing ${need[*]}; run as root (or install them) to use the lab" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
echo "sysdeps: installing ${need[*]}" >&2
# Packages such as munge and slurmd start their system service on install; the lab runs its own
# instances inside its namespaces, so no daemon may start on the host: deny starts for the install.
rc=/usr/sbin/policy-rc.d
saved=""
if [ -e "$rc" ]; then saved=$(mktemp); cp -p "$rc" "$saved"; fi
restore() { if [ -n "$saved" ]; then mv "$saved" "$rc"; else rm -f "$rc"; fi; }
trap restore EXIT
printf '#!/bin/sh\nexit 101\n' > "$rc"
chmod 755 "$rc"
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${need[@]}" >&2
