#!/bin/bash
# Leases on a busy host (docs/benchmarks.md, Leases on a busy host): 5
# ntmutexd nodes under `ftlab up`, one client per node looping
# `ftctl lock -- sh -c "sleep 1"`, with SPIN (8) spinning processes and
# WRITERS (2) writers fsyncing 128 MiB in a loop, for DUR seconds.
# Prints the holds and how many lost their lease (ftctl exit 69).
# Usage: scripts/busy-host.sh BIN_DIR DUR   (BIN_DIR: target/release)
# Lossy links instead (docs/benchmarks.md, Leases on lossy links):
#   DAEMON=tokenwatchd DROP=0.2 SPIN=0 WRITERS=0 scripts/busy-host.sh BIN_DIR DUR
# (DROP sets tokenwatchd's [chaos] drop_rate on every node).
set -u
BIN=${1:?BIN_DIR}; DUR=${2:?DUR}
DAEMON=${DAEMON:-ntmutexd}
[ -n "${DROP:-}" ] && export TOKENWATCHD_CHAOS__DROP_RATE="$DROP"
D=$(mktemp -d /tmp/busy.XXXX)
"$BIN/ftlab" up "$DAEMON" -n 5 --dir "$D" > "$D/up.out" 2>&1 &
UP=$!
for i in $(seq 1 100); do grep -q "running;" "$D/up.out" 2>/dev/null && break; sleep 0.2; done
sleep ${SETTLE:-3}
ADDRS=$(awk '/^[1-9] +[0-9]+ /{print $4}' "$D/up.out")
[ -z "$ADDRS" ] && { cat "$D/up.out"; kill $UP; exit 1; }
PIDS=()
for k in $(seq 1 ${SPIN:-8}); do (while :; do :; done) & PIDS+=($!); done
for k in $(seq 1 ${WRITERS:-2}); do (while :; do dd if=/dev/zero of=/tmp/busyw$k bs=1M count=128 conv=fsync status=none; done) & PIDS+=($!); done
END=$(( $(date +%s) + DUR ))
n=0
for a in $ADDRS; do
  n=$((n+1))
  ( while [ $(date +%s) -lt $END ]; do "$BIN/ftctl" --addr "$a" lock --timeout 30s -- sh -c 'sleep 1' 2>>"$D/err$n"; echo "rc=$?" >> "$D/rc$n"; done ) &
  PIDS+=($!)
done
sleep $DUR; sleep 3
kill ${PIDS[@]} 2>/dev/null; wait ${PIDS[@]} 2>/dev/null
kill $UP; wait $UP 2>/dev/null
rm -f /tmp/busyw1 /tmp/busyw2
total=$(cat $D/rc* | wc -l); lost=$(cat $D/rc* | grep -c "rc=69")
echo "holds=$total lost_lease=$lost dir=$D"
grep -h "lease" $D/err* | head -3
