#!/bin/bash
# Regenerate the real-service captures in tests/assets (Debian 12's packages, on 127.0.0.1, captured on lo with
# snaplen 160): redis7.pcap (redis-server 7.0 with requirepass; redis-cli SET/GET of a 3000-byte random value,
# INCR, a RESP3 HGETALL), redis7-cluster.pcap (three cluster nodes' bus while redis-cli creates the cluster), memcached16.pcap (memcached 1.6: text set/get/stats, binary set/get, a UDP stats
# request on 11211), zookeeper38.pcap (ZooKeeper 3.8 and zkCli: addauth digest, create, get, ls) and
# openvpn26-{plain,tls-auth,tls-crypt,tcp,cipher-none}.pcap (two OpenVPN 2.6 processes, --dev null, pinging each
# second, with a throwaway PKI), ptp4l31.pcap (two ptp4l 3.1) and frr84-bfd.pcap (two FRR 8.4 bfdd), each pair
# between two namespaces of its own. Needs root (tcpdump, namespaces) and: redis-server redis-tools memcached
# zookeeper openvpn openssl linuxptp frr.
# Usage: make_service_captures.sh OUTDIR
set -u
out=$(cd "$1" && pwd); work=$(mktemp -d); cd "$work"
pids=()
cap() { tcpdump -i lo -w "$out/$1" -s 160 "$2" >/dev/null 2>&1 & pids+=($!); sleep 1; }
stop() { sleep 1; for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; sleep 1; pids=(); }

cap redis7.pcap 'tcp port 16390'
redis-server --port 16390 --bind 127.0.0.1 --requirepass s3cret --save '' --appendonly no --dir "$work" >/dev/null 2>&1 &
pids+=($!); sleep 1
cli() { redis-cli -p 16390 -a s3cret --no-auth-warning "$@"; }
head -c 3000 /dev/urandom > blob
cli SET k1 hello >/dev/null; cli -x SET blob < blob >/dev/null; cli GET blob >/dev/null; cli INCR counter >/dev/null
cli -3 HGETALL nohash >/dev/null
stop

# three cluster-enabled redis-servers made one cluster by redis-cli --cluster create: the bus (port + 10000)
cap redis7-cluster.pcap 'tcp portrange 26400-26402'
for port in 16400 16401 16402; do
  mkdir -p "$port"
  (cd "$port" && exec redis-server --port $port --bind 127.0.0.1 --cluster-enabled yes --save '' --appendonly no \
    >/dev/null 2>&1) & pids+=($!)
done
sleep 2
redis-cli --cluster create 127.0.0.1:16400 127.0.0.1:16401 127.0.0.1:16402 --cluster-yes >/dev/null 2>&1
sleep 4
stop

cap memcached16.pcap 'port 11211'
memcached -u nobody -l 127.0.0.1 -p 11211 -U 11211 -m 64 >/dev/null 2>&1 & pids+=($!); sleep 1
python3 - <<'PY'
import os, socket, struct, time
def tcp(data):
    s = socket.create_connection(("127.0.0.1", 11211)); s.sendall(data); time.sleep(0.2); s.recv(65536); s.close()
blob = os.urandom(3000)
tcp(b"set model:7 0 3600 %d\r\n" % len(blob) + blob + b"\r\n"); tcp(b"get model:7\r\n"); tcp(b"stats\r\n")
key, val = b"bin:1", os.urandom(500)
tcp(struct.pack(">BBHBBHIIQ", 0x80, 1, len(key), 8, 0, 0, 8 + len(key) + len(val), 0x11, 0) + bytes(8) + key + val)
tcp(struct.pack(">BBHBBHIIQ", 0x80, 0, len(key), 0, 0, 0, len(key), 0x12, 0) + key)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)
u.sendto(struct.pack(">HHHH", 1, 0, 1, 0) + b"stats\r\n", ("127.0.0.1", 11211)); u.recvfrom(65536)
PY
stop

mkdir -p zk
printf 'tickTime=2000\ndataDir=%s/zk\nclientPort=12181\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n' \
  "$work" > zoo.cfg
cap zookeeper38.pcap 'tcp port 12181'
java -cp "$(ls /usr/share/java/*.jar | tr '\n' ':')" -Dzookeeper.log.dir="$work" \
  org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg >/dev/null 2>&1 & pids+=($!)
for _ in $(seq 60); do (exec 3<>/dev/tcp/127.0.0.1/12181) 2>/dev/null && break; sleep 0.5; done
printf 'addauth digest bob:s3cr3t\ncreate /rfjobs trainingdata\nget /rfjobs\nls /\nquit\n' | \
  timeout 60 /usr/share/zookeeper/bin/zkCli.sh -server 127.0.0.1:12181 >/dev/null 2>&1
stop

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 2 \
  -subj /CN=rf-ca >/dev/null 2>&1
for n in server client; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $n.key -out $n.csr -subj /CN=rf-$n \
    >/dev/null 2>&1
  printf 'extendedKeyUsage=%sAuth\nkeyUsage=digitalSignature,keyAgreement\n' $n > $n.ext
  openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $n.crt -days 2 -extfile $n.ext \
    >/dev/null 2>&1
done
openvpn --genkey secret ta.key
vpn() {  # NAME PROTO(udp|tcp) SERVER-OPTIONS CLIENT-OPTIONS
  local sp=udp cp=udp; [ "$2" = tcp ] && sp=tcp-server cp=tcp-client
  cap "openvpn26-$1.pcap" 'port 11194'
  openvpn --dev null --proto $sp --local 127.0.0.1 --lport 11194 --tls-server --ca ca.crt --cert server.crt \
    --key server.key --dh none --ping 1 --verb 0 --ifconfig-noexec $3 >/dev/null 2>&1 & pids+=($!); sleep 1
  openvpn --dev null --proto $cp --remote 127.0.0.1 11194 --nobind --tls-client --ca ca.crt --cert client.crt \
    --key client.key --remote-cert-tls server --ping 1 --verb 0 $4 >/dev/null 2>&1 & pids+=($!); sleep 6
  stop
}
vpn plain udp "" ""
vpn tls-auth udp "--tls-auth ta.key 0" "--tls-auth ta.key 1"
vpn tls-crypt udp "--tls-crypt ta.key" "--tls-crypt ta.key"
vpn tcp tcp "" ""
vpn cipher-none udp "--data-ciphers none --cipher none" "--data-ciphers none --cipher none"
# ptp4l 3.1 (linuxptp) master and slave, software timestamping over UDPv4, between two namespaces of our own
ip netns add rfsvc-ptpa; ip netns add rfsvc-ptpb
ip link add rfsvc-ptp0 type veth peer name rfsvc-ptp1
ip link set rfsvc-ptp0 netns rfsvc-ptpa; ip link set rfsvc-ptp1 netns rfsvc-ptpb
ip -n rfsvc-ptpa addr add 10.250.7.1/24 dev rfsvc-ptp0; ip -n rfsvc-ptpb addr add 10.250.7.2/24 dev rfsvc-ptp1
ip -n rfsvc-ptpa link set rfsvc-ptp0 up; ip -n rfsvc-ptpb link set rfsvc-ptp1 up
ip netns exec rfsvc-ptpa tcpdump -i rfsvc-ptp0 -w "$out/ptp4l31.pcap" -s 160 'udp port 319 or udp port 320' \
  >/dev/null 2>&1 & pids+=($!); sleep 1
ip netns exec rfsvc-ptpa ptp4l -i rfsvc-ptp0 -S -4 -q --priority1 100 >/dev/null 2>&1 & pids+=($!)
ip netns exec rfsvc-ptpb ptp4l -i rfsvc-ptp1 -S -4 -q -s >/dev/null 2>&1 & pids+=($!)
sleep 12
stop
ip netns del rfsvc-ptpa; ip netns del rfsvc-ptpb
# FRR 8.4's bfdd, one single-hop session between two namespaces of our own (FRR's BFD has no authentication); it
# runs as user frr, so the work folder must let it in
chmod 755 "$work"
ip netns add rfsvc-bfda; ip netns add rfsvc-bfdb
ip link add rfsvc-bfd0 type veth peer name rfsvc-bfd1
ip link set rfsvc-bfd0 netns rfsvc-bfda; ip link set rfsvc-bfd1 netns rfsvc-bfdb
ip -n rfsvc-bfda addr add 10.250.8.1/24 dev rfsvc-bfd0; ip -n rfsvc-bfdb addr add 10.250.8.2/24 dev rfsvc-bfd1
ip -n rfsvc-bfda link set rfsvc-bfd0 up; ip -n rfsvc-bfdb link set rfsvc-bfd1 up
ip netns exec rfsvc-bfda tcpdump -i rfsvc-bfd0 -w "$out/frr84-bfd.pcap" -s 160 'udp port 3784' >/dev/null 2>&1 &
pids+=($!); sleep 1
for side in a:10.250.8.1:10.250.8.2 b:10.250.8.2:10.250.8.1; do
  IFS=: read -r s local peer <<< "$side"; mkdir -p "bfd$s"
  printf 'bfd\n peer %s local-address %s\n  transmit-interval 300\n  receive-interval 300\n !\n!\n' "$peer" "$local" \
    > "bfd$s/bfdd.conf"
  chown -R frr:frr "bfd$s"
  ip netns exec "rfsvc-bfd$s" /usr/lib/frr/bfdd -f "$work/bfd$s/bfdd.conf" -i "$work/bfd$s/pid" -u frr -g frr -P 0 \
    --vty_socket "$work/bfd$s" --bfdctl "$work/bfd$s/ctl" -z "$work/bfd$s/zserv" >/dev/null 2>&1 & pids+=($!)
done
sleep 8
stop
ip netns del rfsvc-bfda; ip netns del rfsvc-bfdb
cd /; rm -rf "$work"
