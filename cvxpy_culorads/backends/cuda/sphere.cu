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

// Rows of the product of spheres (riemannian.py), one group of T lanes per row; lane l holds the row's columns
// l, l + T, ..., l + (C - 1) T (those below r) in registers, with T C >= r (gpu_launch.row_layout), so that its C
// loads are in flight together and a row's values are read once. The factors are F (double, or float in mixed
// precision); every row's sum and formula is taken in double and rounded once on store. A lane writes only the
// entries it read, after the group's sum, so out may be the first input (in place).
// out_i = scale (z_i - (z_i . x_i / squares_i) x_i): the tangent part of row z_i at the row x_i
template<int T, int C, typename F>
__global__ void sphere_tangent_kernel(const F* Z, const F* __restrict__ X,
                                      const double* __restrict__ squares, double scale, F* out,
                                      long long n, int r) {
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T;
    const int lane = threadIdx.x & (T - 1);
    if (i >= n) return;  // uniform over the group
    const unsigned mask = group_mask<T>();
    const long long base = i * r;
    double z[C], x[C], dot = 0.0;
#pragma unroll
    for (int k = 0; k < C; ++k)
        if (lane + k * T < r) {
            z[k] = (double)Z[base + lane + k * T];
            x[k] = (double)X[base + lane + k * T];
            dot = fma(z[k], x[k], dot);
        }
    const double along = group_sum<T>(dot, mask) / squares[i];
#pragma unroll
    for (int k = 0; k < C; ++k)
        if (lane + k * T < r) out[base + lane + k * T] = (F)(scale * fma(-along, x[k], z[k]));
}

// out_i = roots_i (x_i + tau d_i) / |x_i + tau d_i| (a zero row becomes roots_i e_1): the retraction; out is G, which
// may differ from the factors' F (a float factor projected into double for the measurement of a point)
template<int T, int C, typename F, typename G>
__global__ void sphere_retract_kernel(const F* __restrict__ X, const F* __restrict__ D, double tau,
                                      const double* __restrict__ roots, G* __restrict__ out,
                                      long long n, int r) {
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T;
    const int lane = threadIdx.x & (T - 1);
    if (i >= n) return;
    const unsigned mask = group_mask<T>();
    const long long base = i * r;
    double y[C], squares = 0.0;
#pragma unroll
    for (int k = 0; k < C; ++k)
        if (lane + k * T < r) {
            y[k] = fma(tau, (double)D[base + lane + k * T], (double)X[base + lane + k * T]);
            squares = fma(y[k], y[k], squares);
        }
    squares = group_sum<T>(squares, mask);
    const double f = squares > 0.0 ? roots[i] * rsqrt(squares) : 0.0;
#pragma unroll
    for (int k = 0; k < C; ++k) {
        const int j = lane + k * T;
        if (j < r) out[base + j] = (G)(squares > 0.0 ? f * y[k] : (j == 0 ? roots[i] : 0.0));
    }
}

// The single-precision line search's scalars (CpuKernels.sphere_decrease): one group of T lanes per row (C columns
// per lane, as above), rows in a grid-stride loop; per row the dots a = rn.crn, b = rn.cr, c = r.crn, d = r.cr,
// |rn|^2, |r|^2 and |crn|^2 in double, then out = (sum a (2 - |rn|^2 / q), that minus sum d (2 - |r|^2 / q) plus
// sum (b - c), sum |crn|^2)
template<int T, int C, typename F>
__global__ void sphere_decrease_kernel(const F* __restrict__ Rn, const F* __restrict__ R, const F* __restrict__ CRn,
                                       const F* __restrict__ CR, const double* __restrict__ squares, long long n,
                                       int r, double* partial, unsigned* ticket, double* out) {
    __shared__ double sums[3];
    double acc[3] = {0.0, 0.0, 0.0};
    const int lane = threadIdx.x & (T - 1);
    const unsigned mask = group_mask<T>();
    const long long groups = (long long)gridDim.x * blockDim.x / T;
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T; i < n; i += groups) {
        const long long base = i * r;
        double a = 0.0, b = 0.0, c = 0.0, d = 0.0, nn = 0.0, oo = 0.0, cc = 0.0;
#pragma unroll
        for (int k = 0; k < C; ++k)
            if (lane + k * T < r) {
                const long long j = base + lane + k * T;
                const double xn = (double)Rn[j], x = (double)R[j], yn = (double)CRn[j], y = (double)CR[j];
                a = fma(xn, yn, a);
                b = fma(xn, y, b);
                c = fma(x, yn, c);
                d = fma(x, y, d);
                nn = fma(xn, xn, nn);
                oo = fma(x, x, oo);
                cc = fma(yn, yn, cc);
            }
        a = group_sum<T>(a, mask);
        b = group_sum<T>(b, mask);
        c = group_sum<T>(c, mask);
        d = group_sum<T>(d, mask);
        nn = group_sum<T>(nn, mask);
        oo = group_sum<T>(oo, mask);
        cc = group_sum<T>(cc, mask);
        if (lane == 0) {
            const double q = squares[i];
            const double projected = a * (2.0 - nn / q);
            acc[0] += projected;
            acc[1] += projected - d * (2.0 - oo / q) + (b - c);
            acc[2] += cc;
        }
    }
    if (!grid_sum<3>(acc, partial, ticket, sums) || threadIdx.x != 0) return;
    out[0] = sums[0];
    out[1] = sums[1];
    out[2] = sums[2];
}

// The Riemannian step's product (CpuKernels.sphere_product_gradient): for the CSR matrix C (n rows: indptr, indices,
// data), gradient = scale P_R(C R) row by row, C R itself in product where KEEP, and objective[0] = <R, C R>. One
// group of T lanes per row in a grid-stride loop, C columns per lane (as above): each of the row's entries has its
// index and value loaded once and the lane's C gathered factor entries in flight together. Each entry of C R is
// summed in double in the row's entry order (as csr_matmul_kernel sums it) and rounded to F, the row's dot with r_i is
// summed from the rounded entries, and the projection is taken from the registers: C R goes to memory only where it
// is kept.
template<typename I, int T, int C, typename F, bool KEEP>
__global__ void sphere_product_kernel(const I* __restrict__ indptr, const I* __restrict__ indices,
                                      const double* __restrict__ data, const F* __restrict__ R,
                                      const double* __restrict__ squares, double scale, F* gradient,
                                      F* __restrict__ product, long long n, int r, double* partial,
                                      unsigned* ticket, double* objective) {
    __shared__ double sums[1];
    double acc[1] = {0.0};
    const int lane = threadIdx.x & (T - 1);
    const unsigned mask = group_mask<T>();
    const long long groups = (long long)gridDim.x * blockDim.x / T;
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T; i < n; i += groups) {
        const long long base = i * r, start = indptr[i], end = indptr[i + 1];
        double s[C], x[C], dot = 0.0;
#pragma unroll
        for (int k = 0; k < C; ++k) s[k] = 0.0;
#pragma unroll 2
        for (long long e = start; e < end; ++e) {
            const double w = data[e];
            const F* row = R + (long long)indices[e] * r;
#pragma unroll
            for (int k = 0; k < C; ++k)
                if (lane + k * T < r) s[k] = fma(w, (double)row[lane + k * T], s[k]);
        }
#pragma unroll
        for (int k = 0; k < C; ++k)
            if (lane + k * T < r) {
                const F y = (F)s[k];
                if (KEEP) product[base + lane + k * T] = y;
                s[k] = (double)y;
                x[k] = (double)R[base + lane + k * T];
                dot = fma(s[k], x[k], dot);
            }
        dot = group_sum<T>(dot, mask);
        const double along = dot / squares[i];
#pragma unroll
        for (int k = 0; k < C; ++k)
            if (lane + k * T < r) gradient[base + lane + k * T] = (F)(scale * fma(-along, x[k], s[k]));
        if (lane == 0) acc[0] += dot;
    }
    if (grid_sum<1>(acc, partial, ticket, sums) && threadIdx.x == 0) objective[0] = sums[0];
}
