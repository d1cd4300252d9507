"""Benchmark: start-up. ``import kvmath`` and one command-line answer in a new process (issue 20's targets).

Run: python benchmarks/bench_startup.py [runs]      (default 20; about half a minute)

1. ``python -X importtime -c "import kvmath"``: the self time of kvmath's own
   modules, median over runs (goal: at most 10 ms), and which modules load
   (matplotlib, ipywidgets, Sphinx or kvbook must not). The public names load
   on first use, so the same is measured for ``from kvmath import
   Deployment``, which loads the library a question needs.
2. ``kvmath decode --model llama-3-8b --hardware h100-sxm --batch 1 --context
   4096 --json`` in a new process against ``python -c "import numpy"``, the
   two alternating run after run (goal: median ratio at most 1.2).

Bytecode is compiled first and written (PYTHONDONTWRITEBYTECODE is unset for
the timed processes), as an installed package has it.
"""

from __future__ import annotations

import compileall
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
ROOT = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
HEAVY = ("matplotlib", "ipywidgets", "sphinx", "kvbook", "IPython")


def run(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(args, env=ENV, capture_output=True, text=True, cwd="/", check=True)
    return time.perf_counter() - start, done


def import_time(statement: str) -> None:
    selves, loaded = [], set()
    for _ in range(RUNS):
        _, done = run([sys.executable, "-X", "importtime", "-c", statement])
        own = 0
        for line in done.stderr.splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
            if m:
                loaded.add(m.group(2).split(".")[0])
                if m.group(2).startswith("kvmath"):
                    own += int(m.group(1))
        selves.append(own / 1e3)
    med = statistics.median(selves)
    heavy = sorted(set(HEAVY) & loaded)
    print(f"1. {statement} (python -X importtime), kvmath's own modules' self time")
    print(f"   median {med:.1f} ms over {RUNS} runs (min {min(selves):.1f})  (goal <= 10 ms: "
          f"{'met' if med <= 10 else 'NOT met'})")
    print(f"   heavy modules loaded: {', '.join(heavy) if heavy else 'none'} (of {', '.join(HEAVY)})")


def cli_start() -> None:
    cli = [sys.executable, "-m", "kvmath", "decode", "--model", "llama-3-8b", "--hardware", "h100-sxm",
           "--batch", "1", "--context", "4096", "--json"]
    numpy = [sys.executable, "-c", "import numpy"]
    run(cli), run(numpy)  # warm the file cache and write bytecode
    ratios, a_times, b_times = [], [], []
    for i in range(RUNS):
        order = (cli, numpy) if i % 2 == 0 else (numpy, cli)
        times = {}
        for args in order:
            times[args is cli] = run(args)[0]
        a_times.append(times[True])
        b_times.append(times[False])
        ratios.append(times[True] / times[False])
    med = statistics.median(ratios)
    print("2. kvmath decode ... --json in a new process vs python -c 'import numpy' (alternating)")
    print(f"   median {statistics.median(a_times) * 1e3:.0f} ms vs {statistics.median(b_times) * 1e3:.0f} ms; "
          f"median ratio {med:.2f}  (goal <= 1.2: {'met' if med <= 1.2 else 'NOT met'})")


if __name__ == "__main__":
    compileall.compile_dir(str(ROOT / "kvmath"), quiet=1)
    import_time("import kvmath")  # the names load on first use (PEP 562)
    print()
    import_time("from kvmath import Deployment")  # what a script that asks a question loads
    print()
    cli_start()
