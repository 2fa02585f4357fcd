"""The CUDA C sources of the GPU kernels (package data read by :mod:`cvxpy_culorads.backends.gpu_sources`)."""
