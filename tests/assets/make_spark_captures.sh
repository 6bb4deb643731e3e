#!/bin/bash
# Regenerate tests/assets/spark43-{plain,crypto,sasl,saslenc}.pcap: a real Spark standalone cluster (pyspark 4.3's
# own Master, Worker and executor JVMs) on 127.0.0.1, one reduceByKey job per mode, captured on loopback.
#   plain    no authentication
#   crypto   spark.authenticate + spark.network.crypto.enabled (AuthEngine, then TransportCipher)
#   sasl     spark.authenticate over SASL DIGEST-MD5, no SASL encryption
#   saslenc  … with spark.authenticate.enableSaslEncryption
# Only the Spark transport's flows are kept (the py4j gateway and the Python worker sockets are dropped), cut to
# 160 bytes a packet. Needs root (tcpdump on lo), Java 17, the project's .venv and editcap. Usage: MODE OUT.pcap
set -u
mode=$1; outp=$2; root=$(cd "$(dirname "$0")/../.." && pwd); work=$(mktemp -d)
export SPARK_HOME=$root/.venv/lib/python3.11/site-packages/pyspark SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON=$root/.venv/bin/python SPARK_LOG_DIR=$work/logs SPARK_WORKER_DIR=$work/w SPARK_LOCAL_DIRS=$work/l
opts=""
case $mode in
  crypto) opts="-Dspark.authenticate=true -Dspark.authenticate.secret=rf -Dspark.network.crypto.enabled=true";;
  sasl) opts="-Dspark.authenticate=true -Dspark.authenticate.secret=rf";;
  saslenc) opts="-Dspark.authenticate=true -Dspark.authenticate.secret=rf -Dspark.authenticate.enableSaslEncryption=true";;
esac
pids=()
tcpdump -i lo -w "$work/all.pcap" -s 256 'tcp and portrange 17000-65535' >/dev/null 2>&1 & pids+=($!)
sleep 1
SPARK_MASTER_OPTS="$opts" "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master --host 127.0.0.1 \
  --port 17077 --webui-port 18080 > "$work/master.log" 2>&1 & pids+=($!)
sleep 8
SPARK_WORKER_OPTS="$opts" "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker spark://127.0.0.1:17077 \
  --host 127.0.0.1 --cores 1 --memory 768m --webui-port 18081 > "$work/worker.log" 2>&1 & pids+=($!)
sleep 8
MODE=$mode timeout 180 "$root/.venv/bin/python" - <<'PY'
import os
from pyspark.sql import SparkSession
mode = os.environ["MODE"]
b = SparkSession.builder.master("spark://127.0.0.1:17077").config("spark.executor.memory", "512m")
b = b.config("spark.driver.host", "127.0.0.1").config("spark.ui.enabled", "false")
if mode != "plain":
    b = b.config("spark.authenticate", "true").config("spark.authenticate.secret", "rf")
if mode == "crypto":
    b = b.config("spark.network.crypto.enabled", "true")
if mode == "saslenc":
    b = b.config("spark.authenticate.enableSaslEncryption", "true")
s = b.getOrCreate()
print(sorted(s.sparkContext.parallelize(range(200000), 4).map(lambda x: (x % 10, x)).reduceByKey(lambda a, c: a + c).collect())[:2])
s.stop()
PY
sleep 1
for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
sleep 2
for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
ports=$("$root/.venv/bin/ringfence" flows "$work/all.pcap" --format jsonl | python3 -c "
import json, sys
print(' or '.join('tcp port %d' % r['sport'] for r in map(json.loads, sys.stdin) if r['protocol'] == 'spark'))")
tcpdump -r "$work/all.pcap" -w "$work/spark.pcap" "$ports" 2>/dev/null
editcap -s 160 "$work/spark.pcap" "$outp"
rm -rf "$work"
