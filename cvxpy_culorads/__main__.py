"""Entry point of ``python -m cvxpy_culorads``; the command line itself is :mod:`cvxpy_culorads.cli`."""
from cvxpy_culorads.cli import main

raise SystemExit(main())
