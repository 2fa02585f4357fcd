"""Reference values of the data sets in ``../shared/data``, read from their READMEs.

Shared by the benchmark suites (``suites.py``) and the tests (``tests/support.py`` loads this file), so
the parsing rules live in one place. Every function takes the data set's folder and raises ``KeyError``
for a name its README does not list. Mittelmann's instances are the exception: ``MITTELMANN`` is their README's
table transcribed once, since its cells are free text ("hamming_8: 1 s COPT (COPT 1 s)");
``tests/test_mittelmann.py`` checks that the two agree.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

__all__ = ["sdplib_optimum", "gset_value", "gset_names", "MittelmannEntry", "MITTELMANN"]

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


class MittelmannEntry(NamedTuple):
    """A Mittelmann instance: its class, known optimal value in min form (``Result.primal_objective``; the SDPA
    objective is its negative) and the times on Mittelmann's page (plato.asu.edu/ftp/sparse_sdp.html, run of
    2026-04-25): the best solver's, COPT 8's (CPU) and cuLoRADS 1.0's (GPU), where the instance is on the page."""

    category: str
    known: float | None = None  # optimal value in min form (None: none published)
    best_s: float | None = None  # the page's best time, by best_solver
    best_solver: str = ""
    copt_s: float | None = None
    culorads_s: float | None = None
    page_name: str = ""  # the instance's name on Mittelmann's page
    note: str = ""


_KOCVARA = "Kocvara's structural set"
MITTELMANN = {
    "toruspm3-8-50": MittelmannEntry("MaxCut (torus)", -527.8086),
    "torusg3-8": MittelmannEntry("MaxCut (torus)", -48340946.36),
    "copo14": MittelmannEntry("copositivity", 0.0),
    "trto3": MittelmannEntry("truss topology", -12800.0, note=_KOCVARA),
    "rose13": MittelmannEntry("polynomial (Rosenbrock)"),
    "buck3": MittelmannEntry("truss buckling", -607.6035, note=_KOCVARA),
    "vibra3": MittelmannEntry("truss vibration", -172.6126, note=_KOCVARA),
    "shmup2": MittelmannEntry("free material", -3462.4267, note=_KOCVARA),
    "hamming_8_3_4": MittelmannEntry("theta (Hamming)", -25.6, 1.0, "COPT", 1.0, 2.0, "hamming_8"),
    "ice_2.0": MittelmannEntry("image (MaxCut-like)", None, 8.0, "cuLoRADS", 269.0, 8.0, "ice_2.0"),
    "p_auss2_3.0": MittelmannEntry("image (MaxCut-like)", None, 6.0, "cuLoRADS", 290.0, 6.0, "p_auss2"),
    "neu1g": MittelmannEntry("polynomial (neu)", 125.0, 3.0, "COPT", 3.0, 91.0, "neu1g"),
    "fap09": MittelmannEntry("frequency assignment", 10.7978, 65.0, "COPT", 65.0, 156.0, "fap09"),
    "BH2_2A1_STO-6GN7r14g1T2": MittelmannEntry("quantum chemistry", 30.43016155, 12.0, "cuLoRADS", 41.0, 12.0,
                                         "BH2.r14"),
    "NH2_2B1_STO-6GN9r14g1T2": MittelmannEntry("quantum chemistry", 62.97979483, 5.0, "cuLoRADS", 25.0, 5.0,
                                         "NH2-.r14", "the page's NH2-.r14 has n = 2046, this file 2166"),
    "taha1a": MittelmannEntry("two-block (taha)", None, 5.0, "COPT", 5.0, 1325.0, "taha1",
                        "the page's taha1 taken to be taha1a"),
}
