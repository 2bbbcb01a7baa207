// cupyconv: Winograd input and output transforms for any spatial rank R.
//
// One launch handles one dense stride-1 *piece* of a Winograd convolution
// (cupyconv/core/winograd.py, axis_pieces: polyphase for the stride, residues for
// the dilation) and one batch chunk [n0, n0 + n_count).  Per axis i the piece runs
// F(m_i, r_i) tiles of alpha_i = m_i + r_i - 1 inputs (m_i = alpha_i = 1: no
// transform); tile j_i reads the padded-input samples
//
//   q = in_start_i + in_step_i * (j_i * m_i + a),   a < alpha_i
//
// (samples at or past the padded extent read as 0; padded coordinates are remapped
// through common/boundary.cuh, so no padded copy of x exists) and writes the outputs
// out_start_i + out_step_i * (j_i * m_i + o), o < m_i, of those below count_i.
//
//   winograd_input : d -> B^T d along every axis, written as the batched GEMM's B
//                    operand  V[p][c][col],  col = (n - n0) * T + t
//                    (per transform position p and group g a (C/G) x (n_count*T)
//                    matrix, row-major, groups consecutive: V[p] is C x cols);
//   winograd_output: M[p][k][col] (the GEMM's C = U[p][g] @ V[p][g]) -> A^T M along
//                    every axis, scattered into y (y = v, or y += v to add a stride
//                    phase).  Bias is added by the caller.
//
// Both kernels work on TB tiles per block in dynamic shared memory (TB * pitch
// elements of the compute type W; pitch = prod(alpha) rounded up to odd, so the
// per-tile columns read by consecutive threads hit distinct banks):
//   1. gather: consecutive threads take consecutive tile elements (input: through
//      the boundary remap, innermost axis fastest) or consecutive tiles of one
//      transform position (output: coalesced reads of M);
//   2. one pass per transformed axis: each thread applies the axis' matrix to one
//      fiber of alpha values held in registers (transform_axis<A>, the matrix size
//      A = alpha_i a template argument dispatched once per axis, so the fibers are
//      fully unrolled register arrays, never local memory), in place;
//   3. write: V (consecutive threads -> consecutive columns, coalesced) or y
//      (consecutive threads -> consecutive outputs along the innermost axis).
// The matrices (B^T per axis: alpha x alpha; A^T per axis: m x alpha) come from
// core/winograd.py's exact transforms, converted to the real type of W by the host,
// as a small device array mats[R][MAX_ALPHA][MAX_ALPHA]; each block stages them in
// static shared memory once.
#include "../platform.cuh"
#include "../common/conv_common.cuh"

namespace cc {

/// The geometry of one piece; host mirror: cupyconv/_kernels/winograd_launch.py
/// (`piece_dtype`).  Every field is 8 bytes wide (no padding).
template <int R>
struct WinogradPiece {
  long long m[R];            ///< outputs per tile on axis i
  long long alpha[R];        ///< inputs per tile on axis i (m + r - 1)
  long long tiles[R];        ///< tiles on axis i
  long long count[R];        ///< outputs of the piece on axis i
  long long in_start[R];     ///< first padded-input sample of the piece
  long long in_step[R];      ///< padded-input step between samples
  long long padded[R];       ///< padded input extent (samples past it read as 0)
  long long out_start[R];    ///< first output of the piece
  long long out_step[R];     ///< output step
  long long tile_count;      ///< T = prod(tiles)
  long long vol;             ///< prod(alpha): transform positions P
  long long out_vol;         ///< prod(m)
  long long channels;        ///< C (input transform) or K (output transform)
  long long cols;            ///< GEMM columns n_count * T
  long long items;           ///< tiles of this launch: n_count * channels * T
  long long tiles_per_block; ///< TB
  long long pitch;           ///< shared elements per tile (>= vol, odd)
  long long accumulate;      ///< output transform: y += v (1) or y = v (0)
  FastDivmodParams div_alpha[R];   ///< by alpha[i]
  FastDivmodParams div_m[R];       ///< by m[i]
  FastDivmodParams div_tiles[R];   ///< by tiles[i]
  FastDivmodParams div_vol;        ///< by vol
  FastDivmodParams div_out_vol;    ///< by out_vol
  FastDivmodParams div_T;          ///< by tile_count
  FastDivmodParams div_channels;   ///< by channels
  FastDivmodParams div_tb;         ///< by tiles_per_block
};

/// Words of WinogradPiece<R>; winograd_launch.py checks the same count.
CC_CONSTEXPR int winograd_piece_words(int R) { return 9 * R + 9 + 4 * (3 * R + 5); }
static_assert(sizeof(WinogradPiece<1>) == 8 * winograd_piece_words(1), "WinogradPiece<1> must have no padding");
static_assert(sizeof(WinogradPiece<8>) == 8 * winograd_piece_words(8), "WinogradPiece<8> must have no padding");
static_assert(sizeof(WinogradPiece<8>) + sizeof(ConvParams<8>) + 4 * sizeof(void*) <= 4096,
              "the two parameter structs must fit the 4 KiB kernel-parameter limit");

/// Real type of a compute type (the transforms are real).
template <typename W> struct WinogradReal { using type = W; };
template <typename Real> struct WinogradReal<complex<Real>> { using type = Real; };

/// acc + c * v for a real coefficient c (one fused multiply-add per real component).
template <typename Real>
CC_DEVICE Real coef_fma(Real c, Real v, Real acc) { return fma(c, v, acc); }
template <typename Real>
CC_DEVICE complex<Real> coef_fma(Real c, complex<Real> v, complex<Real> acc) {
  return complex<Real>{fma(c, v.re, acc.re), fma(c, v.im, acc.im)};
}

/// Stages the R transform matrices (mats[R][MAX_ALPHA][MAX_ALPHA]) in shared memory.
template <int R, int MAX_ALPHA, typename Real>
CC_DEVICE void stage_matrices(const Real* __restrict__ mats, Real* __restrict__ smat) {
  for (int e = threadIdx.x; e < R * MAX_ALPHA * MAX_ALPHA; e += kBlockThreads) smat[e] = mats[e];
}

/// Applies the rows x A matrix `c` (row pitch MAX_ALPHA) along axis `ax` of the
/// `ntiles` (<= tb) shared tiles, in place: fiber element a sits at stride sst[ax].
/// Axes below `ax` hold m_i valid elements when `shrink_below` (the output transform
/// runs the axes in order), alpha_i otherwise.  `ax` is a runtime value: every
/// per-axis array is indexed by unrolled compile-time loops (registers, no local memory).
template <int A, int MAX_ALPHA, int R, typename W, typename Real>
CC_DEVICE void transform_axis(W* __restrict__ tile, int ntiles, int tb, int ax, int rows,
                              const Real* __restrict__ c, const WinogradPiece<R>& wp,
                              const int (&sst)[R], bool shrink_below) {
  int per_tile = 1, step = 1;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const bool shrunk = shrink_below && i < ax;
    if (i != ax) per_tile *= static_cast<int>(shrunk ? wp.m[i] : wp.alpha[i]);
    if (i == ax) step = sst[i];
  }
  const FastDivmod<int> div_tb(wp.div_tb);
  const int total = tb * per_tile;
#pragma unroll 1   // one fiber in registers at a time (unrolled fibers cost registers, not speed)
  for (int f = threadIdx.x; f < total; f += kBlockThreads) {
    int rest, tl;
    div_tb.divmod(f, rest, tl);   // consecutive threads: consecutive tiles (odd pitch)
    if (tl >= ntiles) continue;   // only in the last, partial chunk
    int off = tl * static_cast<int>(wp.pitch);
#pragma unroll
    for (int i = R - 1; i >= 0; --i) {
      if (i != ax) {
        const bool shrunk = shrink_below && i < ax;
        int q, ci;
        FastDivmod<int>(shrunk ? wp.div_m[i] : wp.div_alpha[i]).divmod(rest, q, ci);
        off += ci * sst[i];
        rest = q;
      }
    }
    W* __restrict__ s = tile + off;
    W v[A];
#pragma unroll
    for (int a = 0; a < A; ++a) v[a] = s[a * step];
#pragma unroll
    for (int j = 0; j < A; ++j) {
      if (j < rows) {
        W acc = zero<W>();
#pragma unroll
        for (int a = 0; a < A; ++a) acc = coef_fma(c[j * MAX_ALPHA + a], v[a], acc);
        s[j * step] = acc;
      }
    }
  }
}

/// transform_axis<alpha> for a runtime alpha in [2, MAX_ALPHA] (one uniform branch per axis).
template <int A, int MAX_ALPHA, bool Past = (A > MAX_ALPHA)>
struct AxisDispatch {
  template <int R, typename W, typename Real>
  static CC_DEVICE void run(int alpha, W* tile, int ntiles, int tb, int ax, int rows, const Real* c,
                            const WinogradPiece<R>& wp, const int (&sst)[R], bool shrink_below) {
    if (alpha == A) {
      transform_axis<A, MAX_ALPHA>(tile, ntiles, tb, ax, rows, c, wp, sst, shrink_below);
    } else {
      AxisDispatch<A + 1, MAX_ALPHA>::run(alpha, tile, ntiles, tb, ax, rows, c, wp, sst, shrink_below);
    }
  }
};
template <int A, int MAX_ALPHA>
struct AxisDispatch<A, MAX_ALPHA, true> {
  template <int R, typename W, typename Real>
  static CC_DEVICE void run(int, W*, int, int, int, int, const Real*, const WinogradPiece<R>&,
                            const int (&)[R], bool) {}
};

/// Stops the launch unless every axis has 1 <= m <= alpha <= MAX_ALPHA (the host
/// promises it: cupyconv/_kernels/winograd_launch.py refuses other tiles).
template <int MAX_ALPHA, int R>
CC_DEVICE void require_piece(const WinogradPiece<R>& wp) {
  bool ok = wp.tiles_per_block >= 1 && wp.pitch >= wp.vol;
#pragma unroll
  for (int i = 0; i < R; ++i) ok = ok && wp.m[i] >= 1 && wp.m[i] <= wp.alpha[i] && wp.alpha[i] <= MAX_ALPHA;
  require(ok, "winograd piece with m > alpha, alpha > MAX_ALPHA or no tiles per block");
}

/// Shared-memory strides of a tile: row-major over alpha, innermost axis contiguous.
template <int R>
CC_DEVICE void tile_strides(const WinogradPiece<R>& wp, int (&sst)[R]) {
  int s = 1;
#pragma unroll
  for (int i = R - 1; i >= 0; --i) {
    sst[i] = s;
    s *= static_cast<int>(wp.alpha[i]);
  }
}

/// Splits a tile index t (row-major over the tile grid) into per-axis tile coordinates.
template <int R, typename Index>
CC_DEVICE void tile_coords(const WinogradPiece<R>& wp, Index t, Index (&j)[R]) {
  split_row_major(wp.div_tiles, t, j);
}

/// The items of a piece's transform -- (image of the launch, channel, tile), numbered
/// image-major -- and where each sits in V / M: [position][channel][column], column =
/// image * tiles + tile (the layout the batched GEMM reads and writes).
template <typename Index>
struct TransformItems {
  FastDivmod<Index> div_T;    ///< by the tiles of an image
  FastDivmod<Index> div_ch;   ///< by the channels (C for V, K for M)
  Index tiles, channels, cols;

  template <int R>
  CC_DEVICE explicit TransformItems(const WinogradPiece<R>& wp)
      : div_T(wp.div_T), div_ch(wp.div_channels), tiles(static_cast<Index>(wp.tile_count)),
        channels(static_cast<Index>(wp.channels)), cols(static_cast<Index>(wp.cols)) {}

  /// Item -> image within the launch, channel and tile.
  CC_DEVICE void split(Index item, Index& n, Index& ch, Index& t) const {
    Index nch;
    div_T.divmod(item, nch, t);
    div_ch.divmod(nch, n, ch);
  }

  /// Offset in V / M of the item's element at transform position `pos`.
  CC_DEVICE Index offset(int pos, Index item) const {
    Index n, ch, t;
    split(item, n, ch, t);
    return (static_cast<Index>(pos) * channels + ch) * cols + n * tiles + t;
  }
};

}  // namespace cc

/// Input transform: V[p][c][col] = (B^T d B) of the tile (n, c, t) at position p.
/// Launch: 1-D grid of any size (grid-stride over blocks of TB tiles), blocks of
/// CUPYCONV_BLOCK_THREADS threads, TB * pitch * sizeof(W) bytes of dynamic shared memory.
template <typename T, typename W, int R, typename Index, int MAX_ALPHA>
__global__ void CUPYCONV_LAUNCH_BOUNDS
winograd_input(const cc::ConvParams<R> p, const cc::WinogradPiece<R> wp, const T* __restrict__ x,
               const typename cc::WinogradReal<W>::type* __restrict__ mats, W* __restrict__ v) {
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  static_assert(MAX_ALPHA >= 2 && MAX_ALPHA <= 16, "MAX_ALPHA must be in [2, 16]");
  using Real = typename cc::WinogradReal<W>::type;
  cc::require_block_shape();
  CUPYCONV_DYNAMIC_SHARED(W, tile);
  CUPYCONV_STATIC_SHARED(Real, smat, [R * MAX_ALPHA * MAX_ALPHA]);
  cc::stage_matrices<R, MAX_ALPHA>(mats, smat);
  cc::require_piece<MAX_ALPHA>(wp);
  const T cval = cc::make_scalar<T>(p.cval_re, p.cval_im);
  const W wcval = cc::to_accum<W>(cval);
  const int tb = static_cast<int>(wp.tiles_per_block);
  const int vol = static_cast<int>(wp.vol);
  const int pitch = static_cast<int>(wp.pitch);
  const cc::TransformItems<Index> items(wp);
  const cc::FastDivmod<int> div_vol(wp.div_vol), div_tb(wp.div_tb);
  int sst[R];
  cc::tile_strides(wp, sst);

  for (long long first = static_cast<long long>(blockIdx.x) * tb; first < wp.items;
       first += static_cast<long long>(gridDim.x) * tb) {
    const int ntiles = static_cast<int>(wp.items - first < tb ? wp.items - first : tb);
    __syncthreads();   // the previous chunk's tiles are written out (and smat staged)
    // 1. gather through the boundary remap
    for (int e = threadIdx.x; e < ntiles * vol; e += cc::kBlockThreads) {
      int tl, a_lin;
      div_vol.divmod(e, tl, a_lin);
      Index nl, c, t;
      items.split(static_cast<Index>(first + tl), nl, c, t);
      Index j[R];
      cc::tile_coords(wp, t, j);
      Index off = (static_cast<Index>(p.n0) + nl) * static_cast<Index>(p.x_stride_n) +
                  c * static_cast<Index>(p.x_stride_c);
      bool inside = true, beyond = false;
#pragma unroll
      for (int i = R - 1; i >= 0; --i) {
        int qa, a;
        cc::FastDivmod<int>(wp.div_alpha[i]).divmod(a_lin, qa, a);
        a_lin = qa;
        const Index s = static_cast<Index>(wp.in_start[i]) +
                        static_cast<Index>(wp.in_step[i]) * (j[i] * static_cast<Index>(wp.m[i]) + a);
        beyond = beyond || s >= static_cast<Index>(wp.padded[i]);
        Index q = s - static_cast<Index>(p.pad_before[i]);
        inside = cc::remap_coord(q, static_cast<Index>(p.in_ext[i]), static_cast<int>(p.pad_mode)) && inside;
        off += q * static_cast<Index>(p.x_stride[i]);
      }
      W val = cc::zero<W>();
      if (!beyond) val = inside ? cc::to_accum<W>(x[off]) : wcval;
      tile[tl * pitch + (e - tl * vol)] = val;
    }
    __syncthreads();
    // 2. B^T along every axis with alpha > 1
#pragma unroll 1
    for (int ax = 0; ax < R; ++ax) {
      const int alpha = static_cast<int>(wp.alpha[ax]);
      if (alpha > 1) {
        cc::AxisDispatch<2, MAX_ALPHA>::run(alpha, tile, ntiles, tb, ax, alpha,
                                            smat + ax * MAX_ALPHA * MAX_ALPHA, wp, sst, false);
        __syncthreads();
      }
    }
    // 3. V[p][c][col], consecutive threads on consecutive columns
    for (int e = threadIdx.x; e < tb * vol; e += cc::kBlockThreads) {
      int pos, tl;
      div_tb.divmod(e, pos, tl);
      if (tl >= ntiles) continue;   // only in the last, partial chunk
      v[items.offset(pos, static_cast<Index>(first + tl))] = tile[tl * pitch + pos];
    }
  }
}

/// Output transform: y[n, k, outputs of tile t] (+)= A^T M A of the products M[p][k][col].
/// Launch: as winograd_input.  wp.accumulate adds to y (a further stride phase).
template <typename T, typename W, int R, typename Index, int MAX_ALPHA>
__global__ void CUPYCONV_LAUNCH_BOUNDS
winograd_output(const cc::ConvParams<R> p, const cc::WinogradPiece<R> wp, const W* __restrict__ prod,
                const typename cc::WinogradReal<W>::type* __restrict__ mats, T* __restrict__ y) {
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  static_assert(MAX_ALPHA >= 2 && MAX_ALPHA <= 16, "MAX_ALPHA must be in [2, 16]");
  using Real = typename cc::WinogradReal<W>::type;
  cc::require_block_shape();
  CUPYCONV_DYNAMIC_SHARED(W, tile);
  CUPYCONV_STATIC_SHARED(Real, smat, [R * MAX_ALPHA * MAX_ALPHA]);
  cc::stage_matrices<R, MAX_ALPHA>(mats, smat);
  cc::require_piece<MAX_ALPHA>(wp);
  const int tb = static_cast<int>(wp.tiles_per_block);
  const int vol = static_cast<int>(wp.vol);
  const int out_vol = static_cast<int>(wp.out_vol);
  const int pitch = static_cast<int>(wp.pitch);
  const cc::TransformItems<Index> items(wp);
  const bool accumulate = wp.accumulate != 0;
  const cc::FastDivmod<int> div_out_vol(wp.div_out_vol), div_tb(wp.div_tb);
  int sst[R];
  cc::tile_strides(wp, sst);

  for (long long first = static_cast<long long>(blockIdx.x) * tb; first < wp.items;
       first += static_cast<long long>(gridDim.x) * tb) {
    const int ntiles = static_cast<int>(wp.items - first < tb ? wp.items - first : tb);
    __syncthreads();
    // 1. M[p][k][col] -> shared, consecutive threads on consecutive columns
    for (int e = threadIdx.x; e < tb * vol; e += cc::kBlockThreads) {
      int pos, tl;
      div_tb.divmod(e, pos, tl);
      if (tl >= ntiles) continue;
      tile[tl * pitch + pos] = prod[items.offset(pos, static_cast<Index>(first + tl))];
    }
    __syncthreads();
    // 2. A^T along every axis, alpha_i -> m_i valid elements in place
#pragma unroll 1
    for (int ax = 0; ax < R; ++ax) {
      const int alpha = static_cast<int>(wp.alpha[ax]);
      if (alpha > 1) {
        cc::AxisDispatch<2, MAX_ALPHA>::run(alpha, tile, ntiles, tb, ax, static_cast<int>(wp.m[ax]),
                                            smat + ax * MAX_ALPHA * MAX_ALPHA, wp, sst, true);
        __syncthreads();
      }
    }
    // 3. scatter the valid outputs, innermost axis fastest
    for (int e = threadIdx.x; e < ntiles * out_vol; e += cc::kBlockThreads) {
      int tl, o_lin;
      div_out_vol.divmod(e, tl, o_lin);
      Index nl, k, t;
      items.split(static_cast<Index>(first + tl), nl, k, t);
      Index j[R];
      cc::tile_coords(wp, t, j);
      int soff = tl * pitch;
      bool valid = true;
      Index off = (static_cast<Index>(p.n0) + nl) * static_cast<Index>(p.y_stride_n) +
                  k * static_cast<Index>(p.y_stride_k);
#pragma unroll
      for (int i = R - 1; i >= 0; --i) {
        int qo, o;
        cc::FastDivmod<int>(wp.div_m[i]).divmod(o_lin, qo, o);
        o_lin = qo;
        soff += o * sst[i];
        const Index u = j[i] * static_cast<Index>(wp.m[i]) + o;
        valid = valid && u < static_cast<Index>(wp.count[i]);
        off += (static_cast<Index>(wp.out_start[i]) + static_cast<Index>(wp.out_step[i]) * u) *
               static_cast<Index>(p.y_stride[i]);
      }
      if (!valid) continue;
      W val = tile[soff];
      if (accumulate) val += cc::to_accum<W>(y[off]);
      y[off] = cc::from_accum<T>(val);
    }
  }
}
