"""Problem builders that scale to large instances, with their post-processing: MaxCut from a graph file
(:func:`read_graph` for Gset/rudy, Matrix Market, METIS and SNAP files, :func:`maxcut_problem`, and
:func:`maxcut_problem_from_edges` for edge lists too large for a symmetric matrix,
Goemans-Williamson rounding with :func:`goemans_williamson` and :func:`cut_value`, and
:func:`bundled_graph` for the graphs shipped with the package) and nuclear-norm matrix completion
(:func:`completion_problem`, :func:`random_low_rank_instance`, :func:`completion_error`), and the Lovasz theta
function (:func:`theta_problem` with a low-rank or a sparse formulation; Hamming graphs and odd cycles with their
known theta).
"""
from cvxpy_culorads.models.completion import completion_error, completion_problem, random_low_rank_instance
from cvxpy_culorads.models.maxcut import (
    GRAPH_FORMATS,
    bundled_graph,
    cut_value,
    goemans_williamson,
    maxcut_problem,
    maxcut_problem_from_edges,
    read_graph,
)
from cvxpy_culorads.models.theta import (
    THETA_FORMULATIONS,
    cycle_graph,
    cycle_theta,
    hamming_graph,
    hamming_theta,
    theta_problem,
)

__all__ = [
    "read_graph", "maxcut_problem", "maxcut_problem_from_edges", "goemans_williamson", "cut_value", "bundled_graph",
    "GRAPH_FORMATS",
    "completion_problem", "random_low_rank_instance", "completion_error",
    "theta_problem", "THETA_FORMULATIONS", "hamming_graph", "hamming_theta", "cycle_graph", "cycle_theta",
]
