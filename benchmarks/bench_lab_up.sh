#!/bin/sh
# Lab start-up time, this tree against another (e.g. the commit before Slurm ran the lab's job), alternated so a
# load change on a shared machine falls on both. Each run: `ringfence lab up` (until every traffic class flows),
# timed, then `lab down` (untimed). Needs root.
#   mkdir /tmp/base && git archive 1661618 src | tar -x -C /tmp/base
#   benchmarks/bench_lab_up.sh /tmp/base/src [runs]
set -eu
base=$1; runs=${2:-3}; here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
i=1
while [ "$i" -le "$runs" ]; do
  for v in b n; do
    if [ $v = b ]; then pp=$base; else pp=$here/src; fi
    name=$(printf %.8s "rf$v$i$$")  # short: interface names carry it
    s=$(date +%s.%N)
    rc=0; PYTHONPATH=$pp "$py" -m ringfence.cli lab up --name "$name" >/dev/null 2>&1 || rc=$?
    e=$(date +%s.%N)
    echo "$( [ $v = b ] && echo base || echo this ) run $i rc=$rc $(echo "$e - $s" | bc) s load=$(cut -d' ' -f1 /proc/loadavg)"
    PYTHONPATH=$pp "$py" -m ringfence.cli lab down --name "$name" >/dev/null 2>&1 || true
  done
  i=$((i + 1))
done
