"""Settings: validated once, unknown names rejected, device selection with the environment override."""
import pytest

from cvxpy_culorads import Settings
from cvxpy_culorads.backend import gpu_available, select_backend


def test_unknown_option_is_named():
    with pytest.raises(ValueError, match="unknown setting.*'tolerance'"):
        Settings.from_options(tolerance=1e-6)


@pytest.mark.parametrize("bad", [dict(tol=0), dict(tol=-1.0), dict(device="tpu"), dict(reopt_level=3),
                                 dict(max_iter=0), dict(rank=0), dict(rank_growth=1.0), dict(time_limit=float("nan"))])
def test_invalid_values_raise(bad):
    with pytest.raises(ValueError):
        Settings(**bad)


def test_settings_are_frozen_and_overridable():
    s = Settings(tol=1e-6)
    with pytest.raises(Exception):
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
