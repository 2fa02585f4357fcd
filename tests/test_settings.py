"""Settings: validated once, unknown names rejected, device selection with the environment override."""
import dataclasses
import math
import re

import numpy as np
import pytest

from cvxpy_culorads import Settings
from cvxpy_culorads.backends.backend import gpu_available, select_backend
from cvxpy_culorads.cli import _parser
from cvxpy_culorads.settings import Algorithm, LoRADSSettings, SplitSettings, reference_rows

GROUP_FIELD = {LoRADSSettings: "lorads", SplitSettings: "split"}
GROUP_OF = {f.name: group for group in GROUP_FIELD for f in dataclasses.fields(group)}


def construct(name: str, value) -> Settings:
    """Settings built directly with one value, in the dataclass that holds it."""
    group = GROUP_OF.get(name)
    if group is None:
        return Settings(**{name: value})
    return Settings(**{GROUP_FIELD[group]: group(**{name: value})})


def value_of(settings: Settings, name: str):
    group = GROUP_OF.get(name)
    return getattr(settings if group is None else getattr(settings, GROUP_FIELD[group]), name)


def test_unknown_option_is_named():
    with pytest.raises(ValueError, match="unknown setting.*'tolerance'"):
        Settings.from_options(tolerance=1e-6)


INF, NAN = math.inf, math.nan


@pytest.mark.parametrize("name, value", [
    ("tol", 0), ("tol", -1.0), ("tol", True), ("tol", INF), ("tol", NAN), ("tol", 1.0), ("tol", "1e-6"), ("tol", None),
    ("phase1_tol", INF), ("rho_max", INF), ("heuristic_factor", NAN), ("reopt_scale", -INF), ("reopt_scale", 0),
    ("rank_factor", INF), ("rank_factor", 10**400), ("rank_growth", "x"), ("rank_growth", 1.0), ("rank_growth", INF),
    ("log_every", INF), ("log_every", -1), ("time_limit", NAN), ("time_limit", -INF), ("time_limit", 0),
    ("trace_bound", -1.0), ("trace_bound", INF), ("trace_bound", True),
    ("rank", True), ("rank", 0), ("rank", 2.0), ("max_iter", 0), ("max_iter", 1e6), ("max_iter", True),
    ("max_alm_outer", np.float64(3)), ("max_admm_iter", -1), ("lbfgs_memory", 0), ("interior_point_patience", 0),
    ("reopt_level", 3), ("reopt_level", np.int64(-1)), ("reopt_level", False),
    ("seed", -1), ("seed", 2**32), ("seed", True), ("seed", 1.5),
    ("device", "tpu"), ("device", None), ("criterion", 1), ("criterion", "DIMACS"),
    ("halo_precision", "half"), ("halo_precision", None), ("precision", "single"), ("precision", None),
    ("verbose", 1), ("interior_point_handover", "yes"), ("l2_rescaling", None), ("algorithm", "riemannian"),
    ("algorithm", None),
])
def test_invalid_values_name_the_setting_and_the_value(name, value):
    with pytest.raises(ValueError, match=rf"^{name} must be .*, got {re.escape(repr(value))}$"):
        construct(name, value)
    with pytest.raises(ValueError, match=f"^{name} must be"):
        Settings.from_options(**{name: value})


@pytest.mark.parametrize("name", Settings.names())
def test_every_setting_is_checked(name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        construct(name, object())


def test_numpy_scalars_are_stored_as_python_types():
    s = Settings(tol=np.float64(1e-6), time_limit=np.float32(2.5), trace_bound=np.int64(4), rank=np.int64(3),
                 seed=np.uint32(7), max_iter=np.int32(10), verbose=np.bool_(True), device=np.str_("cpu"))
    expected = dict(tol=1e-6, time_limit=2.5, trace_bound=4.0, rank=3, seed=7, max_iter=10, verbose=True, device="cpu")
    for name, value in expected.items():
        assert getattr(s, name) == value and type(getattr(s, name)) is type(value), name
    assert type(Settings(time_limit=60).time_limit) is float  # an int where a real is expected becomes a float
    for name in Settings.names():  # the defaults are plain types too (the method an enum)
        assert type(value_of(Settings(), name)) in (str, bool, int, float, type(None), Algorithm), name


@pytest.mark.parametrize("valid", [dict(time_limit=INF), dict(log_every=0), dict(trace_bound=0), dict(seed=0),
                                   dict(seed=2**32 - 1), dict(tol=0.999), dict(rank=None, trace_bound=None),
                                   dict(reopt_level=0), dict(rank_growth=1.0001), dict(lbfgs_memory=1)])
def test_values_at_the_edges_are_valid(valid):
    s = Settings.from_options(**valid)
    assert all(value_of(s, name) == value for name, value in valid.items())


def test_settings_are_frozen_and_overridable():
    s = Settings(tol=1e-6)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.tol = 1.0
    assert Settings.from_options(s, verbose=True).tol == 1e-6


def test_device_selection(monkeypatch):
    monkeypatch.setenv("CULORADS_DEVICE", "cpu")
    assert select_backend("auto").name == "cpu"
    monkeypatch.setenv("CULORADS_DEVICE", "quantum")
    with pytest.raises(ValueError, match="CULORADS_DEVICE"):
        select_backend("auto")
    monkeypatch.delenv("CULORADS_DEVICE")
    assert select_backend("auto").name == ("gpu" if gpu_available() else "cpu")
    if not gpu_available():
        with pytest.raises(RuntimeError, match="device='gpu'"):
            select_backend("gpu")


def test_options_reach_every_group_by_name():
    s = Settings.from_options(tol=1e-6, rho_max=10.0, halo_precision="single", algorithm="low_rank")
    assert (s.tol, s.lorads.rho_max, s.split.halo_precision, s.algorithm) == (1e-6, 10.0, "single", Algorithm.LOW_RANK)
    assert Settings.from_options(s, max_admm_iter=3).lorads.rho_max == 10.0  # applied on top, the group kept


@pytest.mark.parametrize("old, new", [
    (dict(riemannian=False), dict(algorithm=Algorithm.ALM_ADMM)),
    (dict(route="interior_point"), dict(algorithm=Algorithm.INTERIOR_POINT)),
    (dict(route="low_rank", riemannian=True), dict(algorithm=Algorithm.LOW_RANK)),
    (dict(interior_point=False), dict(interior_point_handover=False)),
])
def test_previous_keywords_warn_and_map_to_the_method(old, new):
    with pytest.warns(DeprecationWarning, match="deprecated"):
        s = Settings.from_options(**old)
    assert all(value_of(s, name) == value for name, value in new.items())


def test_contradictory_previous_keywords_are_refused():
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="no algorithm"):
        Settings.from_options(riemannian=False, route="interior_point")


def test_reference_and_command_line_cover_every_setting():
    rows = reference_rows()
    assert [row["name"] for row in rows] == list(Settings.names())
    assert all(row["help"] and row["allowed"] for row in rows)
    flags = {option for action in _parser()._actions for option in action.option_strings}
    # every setting has its flag but keep_log (the command line prints no iteration rows); verbose is --quiet
    assert {row["flag"] for row in rows if row["name"] != "keep_log"} <= flags
    assert {row["name"]: row["flag"] for row in rows if row["flag"] in ("--gpus", "--quiet", "")} == {
        "devices": "--gpus", "verbose": "--quiet", "keep_log": ""}
    for row in rows:
        default = value_of(Settings(), row["name"])
        assert row["default"] == repr(default.value if isinstance(default, Algorithm) else default)
