#!/usr/bin/env python3
"""How late a sleeping process wakes on this host (docs/benchmarks.md,
Leases on a busy host): sleeps 10 ms in a loop for SECONDS and prints the
overshoot's percentiles. Run it under the load to judge, e.g. at a higher
priority: `nice -n -10 scripts/wakeup-latency.py 20` or `chrt -f 10 ...`."""
import sys
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
over = []
end = time.monotonic() + seconds
while time.monotonic() < end:
    t = time.monotonic()
    time.sleep(0.01)
    over.append((time.monotonic() - t - 0.01) * 1000)
over.sort()
n = len(over)
print(
    f"n={n} p50={over[n // 2]:.2f}ms p99={over[int(n * .99)]:.2f}ms "
    f"p999={over[int(n * .999)]:.2f}ms max={over[-1]:.2f}ms over17ms={sum(1 for o in over if o > 17)}"
)
