"""Reference values of the data sets in ``../shared/data``, read from their READMEs.

Shared by the benchmark suites (``suites.py``) and the tests (``tests/conftest.py`` loads this file), so
the parsing rules live in one place. Every function takes the data set's folder and raises ``KeyError``
for a name its README does not list.
"""
from __future__ import annotations

import re
from pathlib import Path

__all__ = ["sdplib_optimum", "gset_value", "gset_names"]

# Corrections recorded in the SDPLIB README: maxG51 is exactly Gset G51 (its certified value), and the
# table's qap10 entry has the wrong exponent (SDPA-GMP gives -1092.6075).
_SDPLIB_CORRECTIONS = {"maxG51": 4006.2555, "qap10": -1092.6075}


def _table(readme: Path) -> list[list[str]]:
    return [[c.strip() for c in line.split("|")[1:-1]] for line in readme.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| ---")]


def sdplib_optimum(folder: Path, name: str) -> float:
    """The optimal value of an SDPLIB problem in the SDPA sign convention: the high-precision SDPA-GMP
    value where it converged to one number, else the SDPLIB table (some of whose entries have only 3 or
    4 digits, e.g. gpp500-1 = -25.3), with the README's corrections."""
    if name in _SDPLIB_CORRECTIONS:
        return _SDPLIB_CORRECTIONS[name]
    for row in _table(Path(folder) / "README.md"):
        if re.fullmatch(rf"{re.escape(name)}\.dat-s(\.xz)?", row[0]):
            gmp = row[7].split()
            return float(gmp[0]) if len(gmp) > 1 and gmp[1] != "/" else float(row[5])
    raise KeyError(name)


def gset_value(folder: Path, name: str) -> float:
    """Certified Gset MaxCut SDP value: the midpoint of the primal/dual bounds in the README."""
    for row in _table(Path(folder) / "README.md"):
        if row[0] == name:
            low, high = (float(v) for v in row[5].split("/"))
            return 0.5 * (low + high)
    raise KeyError(name)


def gset_names(folder: Path) -> list[str]:
    """The graphs with a certified value, in numerical order (G1, G2, ..., G81)."""
    names = [row[0] for row in _table(Path(folder) / "README.md")
             if re.fullmatch(r"G\d+", row[0]) and "/" in row[5]]
    return sorted(names, key=lambda g: int(g[1:]))
