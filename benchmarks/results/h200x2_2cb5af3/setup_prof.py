"""cProfile of the split set-up of completion (n1 = 1e7, m = 6e8, two GPUs): where its ~50 s go."""
import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, "benchmarks")
from multi_gpu_completion import draw_instance  # noqa: E402
from run import warm_up  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.models import completion_problem  # noqa: E402

n1, m = int(float(sys.argv[1])), int(float(sys.argv[2]))
warm_up(select_backend("gpu"))
t = time.perf_counter()
rows, cols, values, _ = draw_instance(n1, m, 1, 0)
print(f"drawn {time.perf_counter() - t:.1f} s", flush=True)
t = time.perf_counter()
problem = completion_problem(rows, cols, values, (n1, n1))
del rows, cols, values
print(f"problem {time.perf_counter() - t:.1f} s", flush=True)
prof = cProfile.Profile()
prof.enable()
r = cl.solve(problem, device="gpu", devices=2, max_iter=1, verbose=True)
prof.disable()
print(f"setup {r.setup_time:.1f} s, solve {r.solve_time:.1f} s, {r.status.value}", flush=True)
out = os.environ.get("OUT", "/tmp")
for key, name in (("cumulative", "cum"), ("tottime", "tot")):
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats(key).print_stats(70)
    open(f"{out}/setup_{name}.txt", "w").write(text.getvalue())
