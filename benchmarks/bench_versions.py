"""Benchmark: this tree's kvmath against an earlier commit's, side by side in one run, as ratios and medians.

Run: python benchmarks/bench_versions.py OLD_COMMIT [rounds]   (default 7 rounds; about a minute)

The earlier commit is checked out into a temporary git worktree. Each round runs the same
timing script once under each version, in turn, in a fresh interpreter (``PYTHONPATH`` set to
that version's tree), so a busy machine slows both alike; the report gives each operation's
median over the rounds and the ratio new / old (below 1: this tree is faster). The operations
use only the public calls both versions have: a decode step of Llama 2 70B on 8 H100s at
B = 64, S = 4,096 (deployment built once, and built from preset names each time), the strict
step over a 1,000 x 1,000 (batch, context) grid, a capacity question, and ``kvmath.sizing.size`` for three
questions whose layouts tie on chip count (24 arrival rates from 0.1 to 50 requests/s, 2,000 tokens in and 200
out, TTFT p90 at most 1 s and 50 ms per output token): Llama 3.1 70B on up to 8 RTX 4090s, Llama 3 8B on up to
16 H100s and Mixtral 8x7B on up to 8 H100s. An old commit without ``kvmath.sizing`` times only the others.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TIMING = r'''
import json, time
import numpy as np
import kvmath

def per_call(fn, seconds=0.4):
    n, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        fn(); n += 1
    return (time.process_time() - start) / n

dep = kvmath.Deployment("llama-2-70b", "h100-sxm", "tp=8")
batch, context = np.meshgrid(np.arange(1, 1001), np.linspace(128, 131072, 1000), indexing="ij")
out = {
    "step, deployment built once (us)": per_call(lambda: dep.step(64, 4096)) * 1e6,
    "step, built from preset names (us)": per_call(
        lambda: kvmath.Deployment("llama-2-70b", "h100-sxm", "tp=8").step(64, 4096)) * 1e6,
    "strict step, 10^6 grid (ms)": per_call(lambda: dep.step(batch, context).strict_s, 1.5) * 1e3,
    "capacity at 4,096 tokens (us)": per_call(lambda: dep.capacity(4096)) * 1e6,
}
try:
    from kvmath.sizing import size
except ImportError:  # a commit from before the sizing
    size = None
if size is not None:
    rates = np.geomspace(0.1, 50.0, 24)
    for model, chip, most in (("llama-3.1-70b", "rtx-4090", 8), ("llama-3-8b", "h100-sxm", 16),
                              ("mixtral-8x7b", "h100-sxm", 8)):
        ask = lambda: size(model, chip, most, 1.0, 0.05, 2000, 200, arrival_rate=rates)
        ask()  # builds and caches the layouts' engines, as the CLI's one call does once
        out[f"size, {model} on {most} {chip} (ms)"] = per_call(ask, 1.0) * 1e3
print(json.dumps(out))
'''


def run(tree: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, "-c", TIMING], env=env, cwd=tempfile.gettempdir(),
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.splitlines()[2])
        return 2
    old, rounds = argv[0], int(argv[1]) if len(argv) > 1 else 7
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), old], check=True)
        try:
            results: dict[str, list[dict]] = {"old": [], "new": []}
            for _ in range(rounds):
                results["old"].append(run(tree))
                results["new"].append(run(ROOT))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
    label = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True).stdout.strip()
    print(f"{rounds} rounds, old = {old}, new = {label} (this tree); CPU time per call, medians")
    width = max(map(len, results["new"][0]))
    print(f"{'operation':{width}s} {'old':>10s} {'new':>10s} {'new/old':>8s}")
    for op in results["new"][0]:
        n = statistics.median(r[op] for r in results["new"])
        if op not in results["old"][0]:
            print(f"{op:{width}s} {'-':>10s} {n:10.2f} {'-':>8s}")
            continue
        o = statistics.median(r[op] for r in results["old"])
        print(f"{op:{width}s} {o:10.2f} {n:10.2f} {n / o:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
