// normal[0] = <Z, R> / size over L entries and, with ``multiplier``, multiplier[0] += weight normal[0]; the
// subtraction of normal[0] R from Z follows in a second launch (every block needs the finished sum)
__global__ void sphere_normal_kernel(const double* __restrict__ Z, const double* __restrict__ R, long long L,
                                     double size, double* partial, unsigned* ticket, double* normal,
                                     double* multiplier, double weight) {
    __shared__ double sums[1];
    double acc[1] = {0.0};
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < L; i += (long long)gridDim.x * blockDim.x)
        acc[0] = fma(Z[i], R[i], acc[0]);
    if (!grid_sum<1>(acc, partial, ticket, sums) || threadIdx.x != 0) return;
    normal[0] = sums[0] / size;
    if (multiplier != nullptr) multiplier[0] += weight * normal[0];
}

// Rows of the product of spheres (riemannian.py), one group of T lanes per row, lanes over the rank. A lane writes
// only the entries it read, after the group's sum, so out may be the first input (in place).
// out_i = scale (z_i - (z_i . x_i / squares_i) x_i): the tangent part of row z_i at the row x_i
template<int T>
__global__ void sphere_tangent_kernel(const double* Z, const double* __restrict__ X,
                                      const double* __restrict__ squares, double scale, double* out,
                                      long long n, int r) {
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T;
    const int lane = threadIdx.x & (T - 1);
    if (i >= n) return;  // uniform over the group
    const unsigned mask = group_mask<T>();
    const double* z = Z + i * r;
    const double* x = X + i * r;
    double dot = 0.0;
    for (int j = lane; j < r; j += T) dot = fma(z[j], x[j], dot);
    const double along = group_sum<T>(dot, mask) / squares[i];
    double* o = out + i * r;
    for (int j = lane; j < r; j += T) o[j] = scale * fma(-along, x[j], z[j]);
}

// out_i = roots_i (x_i + tau d_i) / |x_i + tau d_i| (a zero row becomes roots_i e_1): the retraction
template<int T>
__global__ void sphere_retract_kernel(const double* __restrict__ X, const double* __restrict__ D, double tau,
                                      const double* __restrict__ roots, double* __restrict__ out,
                                      long long n, int r) {
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T;
    const int lane = threadIdx.x & (T - 1);
    if (i >= n) return;
    const unsigned mask = group_mask<T>();
    const double* x = X + i * r;
    const double* d = D + i * r;
    double squares = 0.0;
    for (int j = lane; j < r; j += T) {
        const double y = fma(tau, d[j], x[j]);
        squares = fma(y, y, squares);
    }
    squares = group_sum<T>(squares, mask);
    double* o = out + i * r;
    if (squares > 0.0) {
        const double f = roots[i] * rsqrt(squares);
        for (int j = lane; j < r; j += T) o[j] = f * fma(tau, d[j], x[j]);
    } else {
        for (int j = lane; j < r; j += T) o[j] = j == 0 ? roots[i] : 0.0;
    }
}
