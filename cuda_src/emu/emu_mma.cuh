// Tensor-core warp collectives of the emulation layer: mma.sync.aligned
// (m8n8k4 f64, m16n8k8 tf32, m16n8k16 f16 and bf16 with f32 accumulation,
// m16n8k16 f64 of sm_90), ldmatrix
// (m8n8 .b16, x1/x2/x4, optional .trans) and cvt.rna.tf32.f32.  Included by
// cuda_emu.cuh only; kernels use the atoms of common/mma_atoms.cuh.
//
// A warp matrix instruction is one collective of all 32 lanes, like the other
// .sync.aligned collectives:
//
//   1. Checks on the calling lane: its warp must be a full warp of 32 existing
//      threads, no lane of it may have exited, and (ldmatrix) the row address
//      the lane supplies must be 16-byte aligned shared memory of the block.
//   2. The lane copies its operand registers (or its ldmatrix row address) into
//      a per-warp staging area together with its call site, the instruction and
//      the count of warp matrix instructions it has executed in this block.
//   3. Rendezvous R1: the full-mask warp collective of emu_sync.cuh.  A lane that
//      exits or waits elsewhere is reported by the scheduler as for any warp
//      collective ("... has exited", "deadlock: ..."); the wait is shown as the
//      `__syncwarp()` at the call site of the mma / ldmatrix.
//   4. Every lane checks that all 32 staged entries come from the same
//      instruction at the same call site and the same count (a warp whose lanes
//      reach different mma calls, or meet a __syncwarp of other lanes, is an
//      error naming both sites), rebuilds the full A, B, C matrices (or, for
//      ldmatrix, the rows, copied once per instruction by the first lane) and
//      computes its own D fragment.
//   5. Rendezvous R2: nobody overwrites the staging area before every lane of
//      the warp has read it.
//
// The fragment layouts below are transcribed from the PTX ISA ("Matrix
// fragments for mma.m8n8k4 with .f64", "... mma.m16n8k8" (.tf32),
// "... mma.m16n8k16 with floating point type", "ldmatrix") independently of
// the maps in common/mma_atoms.cuh, so a typo in one shows up in the tests as
// a wrong product.  With groupID g = lane >> 2 and threadID_in_group t = lane % 4:
//
//   m8n8k4 .f64       A a0: (g, t)          B b0: (t, g)      C/D c_i: (g, 2t + i)
//   m16n8k8 .tf32     A a_i: (g + 8(i&1), t + 4(i>>1))        B b_i: (t + 4i, g)
//                     C/D c_i: (g + 8(i>>1), 2t + (i&1))
//   m16n8k16 .f16     A a_i (halves): (g + 8((i>>1)&1), 2t + (i&1) + 8(i>>2))
//                     B b_i (halves): (2t + (i&1) + 8(i>>1), g)   C/D as m16n8k8
//   m16n8k16 .bf16    as .f16 (bf16x2 registers)
//   m16n8k16 .f64     A a_i: (g + 8(i&1), t + 4(i>>1)), i < 8     B b_i: (t + 4i, g), i < 4
//                     C/D as m16n8k8
//   (.f16x2 / .bf16x2 register r holds elements 2r (low 16 bits) and 2r + 1 (high 16 bits))
//
// Arithmetic.  PTX defines D = A * B + C but not the order or the internal
// rounding of the sums; the emulator reproduces an NVIDIA H200 (sm_90), bit for
// bit on all of about 700 000 outputs measured (docs/emulation.md):
//   f64:  d = c; for k = 0..3: d = fma(a[row][k], b[k][col], d) (IEEE double).
//   f64 m16n8k16 (sm_90): the same chain over k = 0..15.  NOT measured on a GPU: the
//        order is the m8n8k4 one extended; exact whenever the products and partial sums
//        are (small integers), otherwise compare with the chain's error bound.
//   bf16 with f32 accumulation: the f16 adder model with bf16 operands (whose subnormals
//        count with exponent -126).  NOT measured on a GPU either (the f16 path was).
//   tf32 / f16 with f32 accumulation (mma_f32_accumulate): products exact, a
//        product's exponent taken as e(a) + e(b); c and all K products aligned
//        to the largest exponent emax, truncated toward zero to multiples of
//        2^(emax - 25), summed exactly, rounded toward zero to float; overflow
//        gives +-Inf, NaN the canonical 0x7fffffff.
// Other GPUs may differ in the last bits (compare with a tolerance).  The .tf32
// operands are used with their low 13 bits cleared: the tensor core reads 19
// bits (operands from cvt.rna.tf32.f32 have zero low bits anyway).
#ifndef CUPYCONV_EMU_MMA_CUH
#define CUPYCONV_EMU_MMA_CUH

namespace cupyconv_emu {
namespace detail {

/// cvt.rna.tf32.f32 bit for bit, as ptxas lowers it on sm_80 / sm_90
/// (FSETP.GEU |x|, +INF; @!P IADD x, 0x1000; LOP3 x & 0xffffe000): a finite x
/// rounds to 10 explicit mantissa bits, to nearest with ties away from zero
/// (the integer add carries into the exponent, so the largest finite floats
/// round to infinity and subnormals round like normals); +-Inf and NaN are not
/// rounded, only their low 13 bits cleared (so a NaN whose payload lies only in
/// those bits becomes an infinity of the same sign).
inline std::uint32_t tf32_rna_bits(float x) {
  std::uint32_t u = bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) < 0x7f800000u) u += 0x1000u;
  return u & 0xffffe000u;
}

/// Warp matrix instructions the emulator knows.
enum class MatrixInstr : int {
  kMmaF64 = 1, kMmaTf32, kMmaF16, kMmaBf16, kMmaF64K16,
  kLdmatrix = 16,  // + 4 * trans + num (1, 2 or 4)
};

inline std::string matrix_instr_name(int kind) {
  switch (kind) {
    case static_cast<int>(MatrixInstr::kMmaF64):
      return "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64";
    case static_cast<int>(MatrixInstr::kMmaTf32):
      return "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";
    case static_cast<int>(MatrixInstr::kMmaF16):
      return "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
    case static_cast<int>(MatrixInstr::kMmaBf16):
      return "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
    case static_cast<int>(MatrixInstr::kMmaF64K16):
      return "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64";
    default: break;
  }
  const int v = kind - static_cast<int>(MatrixInstr::kLdmatrix);
  return "ldmatrix.sync.aligned.m8n8.x" + std::to_string(v & 7) + ((v & 8) ? ".trans" : "") +
         ".shared.b16";
}

/// One lane's contribution to a warp matrix instruction.
struct MatrixLane {
  std::uint64_t count = 0;        ///< warp matrix instructions this lane executed in the block
  int kind = 0;                   ///< MatrixInstr (+ ldmatrix variant)
  Site site{"", 0};               ///< call site
  alignas(8) unsigned char data[128] = {};  ///< operand registers, or the ldmatrix row address
};

/// Staging area of one warp.
struct MatrixWarp {
  std::uint64_t block_serial = 0;   ///< block the entries belong to
  MatrixLane lane[32];              ///< one entry per lane
  std::uint64_t rows_count = 0;     ///< `count` of the ldmatrix whose rows are in `rows`
  unsigned short rows[4][8][8] = {};  ///< ldmatrix: [matrix][row][column] halves, read once
};

inline thread_local std::vector<MatrixWarp> t_matrix_warps;  // per warp of the running launch

inline std::string describe_site(const Site& s) {
  return std::string(s.file) + ":" + std::to_string(s.line);
}

/// Steps 1-4 above for the calling lane: checks, staging, R1, consistency.
/// Returns the warp's staging area (valid until matrix_release()).
inline MatrixWarp& matrix_gather(Site site, int kind, const void* data, std::size_t bytes) {
  ThreadCtx* t = t_thread;
  Launch* L = t_launch;
  const std::string name = matrix_instr_name(kind);
  if (t == nullptr || L == nullptr) fail_here(name + " called outside a kernel");
  const std::string where = name + " at " + describe_site(site);
  const unsigned lane = lane_id(), base = t->tid & ~31u, warp = t->tid / 32;
  if (base + 32 > L->nthreads) {
    fail_here(describe_thread(*t) + " executes " + where + " in warp " + std::to_string(warp) +
              " of the block, which has only " + std::to_string(L->nthreads - base) +
              " threads: warp matrix instructions need all 32 lanes (a block of " +
              std::to_string(L->nthreads) + " threads is not a multiple of 32)");
  }
  const unsigned live = active_mask();
  if (live != 0xffffffffu) {
    unsigned l = 0;
    while ((live >> l) & 1u) ++l;
    fail_here(describe_thread(*t) + " executes " + where + ", but lane " + std::to_string(l) +
              " (" + describe_thread(L->threads[base + l]) +
              ") has exited: warp matrix instructions need all 32 lanes");
  }
  const std::size_t nwarps = (L->nthreads + 31) / 32;
  if (t_matrix_warps.size() < nwarps) t_matrix_warps.resize(nwarps);
  {
    MatrixWarp& w = t_matrix_warps[warp];
    if (w.block_serial != L->block_serial) {
      for (MatrixLane& e : w.lane) e = MatrixLane{};
      w.rows_count = 0;
      w.block_serial = L->block_serial;
    }
    MatrixLane& me = w.lane[lane];
    me.count += 1;
    me.kind = kind;
    me.site = site;
    std::memcpy(me.data, data, bytes);
  }
  warp_collective(site, Op::kSyncwarp, 0xffffffffu, -1, 0);  // R1
  MatrixWarp& w = t_matrix_warps[warp];
  const MatrixLane& me = w.lane[lane];
  for (unsigned l = 0; l < 32; ++l) {
    const MatrixLane& o = w.lane[l];
    if (o.count == me.count && o.kind == me.kind && same_site(o.site, me.site)) continue;
    const ThreadCtx& other = L->threads[base + l];
    if (o.count != me.count) {
      fail_here("divergent warp: " + describe_thread(*t) + " executes " + where + ", but lane " +
                std::to_string(l) + " (" + describe_thread(other) +
                ") met it in another collective (a __syncwarp or a different warp matrix "
                "instruction count): every lane must execute the same warp matrix instruction");
    }
    fail_here("divergent warp: " + describe_thread(*t) + " executes " + where + ", but lane " +
              std::to_string(l) + " (" + describe_thread(other) + ") executes " +
              matrix_instr_name(o.kind) + " at " + describe_site(o.site) +
              ": every lane must execute the same warp matrix instruction");
  }
  return w;
}

/// Step 5: the second rendezvous, after which the staging area may be reused.
inline void matrix_release(Site site) {
  warp_collective(site, Op::kSyncwarp, 0xffffffffu, -1, 0);  // R2
}

inline int mma_group(unsigned lane) { return static_cast<int>(lane >> 2); }
inline int mma_tig(unsigned lane) { return static_cast<int>(lane & 3u); }

template <class T>
inline T staged(const MatrixLane& e, std::size_t offset) {
  T v;
  std::memcpy(&v, e.data + offset, sizeof(T));
  return v;
}

/// mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {d0,d1}, {a0}, {b0}, {c0,c1}.
inline void mma_m8n8k4_f64(Site site, double* d, const double* a, const double* b,
                           const double* c) {
  double in[4] = {a[0], b[0], c[0], c[1]};
  MatrixWarp& w = matrix_gather(site, static_cast<int>(MatrixInstr::kMmaF64), in, sizeof(in));
  double A[8][4], B[4][8];
  for (unsigned l = 0; l < 32; ++l) {
    const int g = mma_group(l), t = mma_tig(l);
    A[g][t] = staged<double>(w.lane[l], 0);
    B[t][g] = staged<double>(w.lane[l], 8);
  }
  const unsigned lane = lane_id();
  const int g = mma_group(lane), t = mma_tig(lane);
  double out[2];
  for (int i = 0; i < 2; ++i) {
    const int row = g, col = 2 * t + i;
    double acc = staged<double>(w.lane[lane], 16 + 8 * i);
    for (int k = 0; k < 4; ++k) acc = std::fma(A[row][k], B[k][col], acc);
    out[i] = acc;
  }
  matrix_release(site);
  d[0] = out[0];
  d[1] = out[1];
}

/// Fraction bits the f32-accumulating multi-term adder keeps below the largest exponent.
constexpr int kMmaF32AdderBits = 25;

/// The value the tensor core reads from a .tf32 register (low 13 bits ignored).
inline float tf32_operand(std::uint32_t bits) { return bit_cast<float>(bits & 0xffffe000u); }

/// floor(log2 |x|) of a nonzero x, at least `emin` (a subnormal's exponent field).
inline int mma_exponent(double x, int emin) {
  int e = 0;
  std::frexp(x, &e);
  return std::max(e - 1, emin);
}

/// One element of D of an f32-accumulating tensor-core mma with f16 or tf32 operands:
/// c + sum_k a[k] * b[k] as the multi-term adder of sm_90 does it (measured on an H200,
/// see the top of this file): every product exact, its exponent taken as
/// e(a) + e(b); c and all K products aligned to the largest exponent emax of the
/// nonzero terms and truncated (toward zero) to multiples of 2^(emax - 25); the exact
/// sum of those rounded toward zero to float, +-Inf beyond the float range.  Operands
/// with Inf or NaN take the IEEE sum (a NaN result is the GPU's canonical 0x7fffffff);
/// all-zero terms give the IEEE sum of zeros.  `emin` is the operand type's minimum
/// exponent (-14 for f16, -126 for tf32), the exponent a subnormal operand counts with.
inline float mma_f32_accumulate(const float* a, const float* b, int K, float c, int emin) {
  bool finite = std::isfinite(c);
  bool nonzero = c != 0.0f;
  for (int k = 0; k < K; ++k) {
    finite = finite && std::isfinite(a[k]) && std::isfinite(b[k]);
    nonzero = nonzero || (a[k] != 0.0f && b[k] != 0.0f);
  }
  if (!finite || !nonzero) {
    double s = c;
    for (int k = 0; k < K; ++k) s += static_cast<double>(a[k]) * static_cast<double>(b[k]);
    if (std::isnan(s)) return bit_cast<float>(0x7fffffffu);  // the GPU's canonical NaN
    return static_cast<float>(s);
  }
  int emax = c != 0.0f ? mma_exponent(c, -126) : std::numeric_limits<int>::min();
  for (int k = 0; k < K; ++k) {
    if (a[k] != 0.0f && b[k] != 0.0f)
      emax = std::max(emax, mma_exponent(a[k], emin) + mma_exponent(b[k], emin));
  }
  const int shift = emax - kMmaF32AdderBits;  // every term becomes a multiple of 2^shift
  // |term| < 2^(emax + 2), so |term| / 2^shift < 2^27 and the sum of <= 17 terms is exact.
  long long sum = static_cast<long long>(std::trunc(std::ldexp(static_cast<double>(c), -shift)));
  for (int k = 0; k < K; ++k) {
    const double p = static_cast<double>(a[k]) * static_cast<double>(b[k]);  // exact
    sum += static_cast<long long>(std::trunc(std::ldexp(p, -shift)));
  }
  const double v = std::ldexp(static_cast<double>(sum), shift);  // exact
  if (std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max()))
    return v > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  float f = static_cast<float>(v);
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);  // toward zero
  return f;
}

/// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {d0..d3}, {a0..a3}, {b0,b1}, {c0..c3}.
inline void mma_m16n8k8_tf32(Site site, float* d, const std::uint32_t* a, const std::uint32_t* b,
                             const float* c) {
  unsigned char in[40];
  std::memcpy(in, a, 16);
  std::memcpy(in + 16, b, 8);
  std::memcpy(in + 24, c, 16);
  MatrixWarp& w = matrix_gather(site, static_cast<int>(MatrixInstr::kMmaTf32), in, sizeof(in));
  float A[16][8], B[8][8];
  for (unsigned l = 0; l < 32; ++l) {
    const int g = mma_group(l), t = mma_tig(l);
    for (int i = 0; i < 4; ++i)
      A[g + 8 * (i & 1)][t + 4 * (i >> 1)] = tf32_operand(staged<std::uint32_t>(w.lane[l], 4 * i));
    for (int i = 0; i < 2; ++i)
      B[t + 4 * i][g] = tf32_operand(staged<std::uint32_t>(w.lane[l], 16 + 4 * i));
  }
  const unsigned lane = lane_id();
  const int g = mma_group(lane), t = mma_tig(lane);
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float bcol[8];
    for (int k = 0; k < 8; ++k) bcol[k] = B[k][col];
    out[i] = mma_f32_accumulate(A[row], bcol, 8, staged<float>(w.lane[lane], 24 + 4 * i), -126);
  }
  matrix_release(site);
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

/// The float a bf16 element holds (its bits are the float's high half).
inline float bf16_bits_to_float(unsigned short h) {
  return bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

/// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 {d0..d3}, {a0..a3},
/// {b0,b1}, {c0..c3}: `kind` names the instruction, `to_float` reads one 16-bit element
/// and `emin` is the operand type's minimum exponent (-14 for f16, -126 for bf16).
inline void mma_m16n8k16_f32acc(Site site, int kind, float* d, const std::uint32_t* a,
                                const std::uint32_t* b, const float* c,
                                float (*to_float)(unsigned short), int emin) {
  unsigned char in[40];
  std::memcpy(in, a, 16);
  std::memcpy(in + 16, b, 8);
  std::memcpy(in + 24, c, 16);
  MatrixWarp& w = matrix_gather(site, kind, in, sizeof(in));
  auto half_at = [to_float](const MatrixLane& e, std::size_t offset, int i) {  // element i
    const std::uint32_t r = staged<std::uint32_t>(e, offset + 4 * static_cast<std::size_t>(i >> 1));
    return to_float(static_cast<unsigned short>((i & 1) ? (r >> 16) : (r & 0xffffu)));
  };
  float A[16][16], B[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const int g = mma_group(l), t = mma_tig(l);
    for (int i = 0; i < 8; ++i)
      A[g + 8 * ((i >> 1) & 1)][2 * t + (i & 1) + 8 * (i >> 2)] = half_at(w.lane[l], 0, i);
    for (int i = 0; i < 4; ++i)
      B[2 * t + (i & 1) + 8 * (i >> 1)][g] = half_at(w.lane[l], 16, i);
  }
  const unsigned lane = lane_id();
  const int g = mma_group(lane), t = mma_tig(lane);
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float bcol[16];
    for (int k = 0; k < 16; ++k) bcol[k] = B[k][col];
    out[i] = mma_f32_accumulate(A[row], bcol, 16, staged<float>(w.lane[lane], 24 + 4 * i), emin);
  }
  matrix_release(site);
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

/// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {d0..d3}, {a0..a3}, {b0,b1}, {c0..c3}.
inline void mma_m16n8k16_f16(Site site, float* d, const std::uint32_t* a, const std::uint32_t* b,
                             const float* c) {
  mma_m16n8k16_f32acc(site, static_cast<int>(MatrixInstr::kMmaF16), d, a, b, c,
                      half_bits_to_float, -14);
}

/// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {d0..d3}, {a0..a3}, {b0,b1}, {c0..c3}.
inline void mma_m16n8k16_bf16(Site site, float* d, const std::uint32_t* a, const std::uint32_t* b,
                              const float* c) {
  mma_m16n8k16_f32acc(site, static_cast<int>(MatrixInstr::kMmaBf16), d, a, b, c,
                      bf16_bits_to_float, -126);
}

/// mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {d0..d3}, {a0..a7}, {b0..b3}, {c0..c3}
/// (sm_90): a chain of fused multiply-adds in k order from c.
inline void mma_m16n8k16_f64(Site site, double* d, const double* a, const double* b,
                             const double* c) {
  double in[16];
  std::memcpy(in, a, 64);
  std::memcpy(in + 8, b, 32);
  std::memcpy(in + 12, c, 32);
  MatrixWarp& w = matrix_gather(site, static_cast<int>(MatrixInstr::kMmaF64K16), in, sizeof(in));
  double A[16][16], B[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const int g = mma_group(l), t = mma_tig(l);
    for (int i = 0; i < 8; ++i) A[g + 8 * (i & 1)][t + 4 * (i >> 1)] = staged<double>(w.lane[l], 8 * i);
    for (int i = 0; i < 4; ++i) B[t + 4 * i][g] = staged<double>(w.lane[l], 64 + 8 * i);
  }
  const unsigned lane = lane_id();
  const int g = mma_group(lane), t = mma_tig(lane);
  double out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    double acc = staged<double>(w.lane[lane], 96 + 8 * i);
    for (int k = 0; k < 16; ++k) acc = std::fma(A[row][k], B[k][col], acc);
    out[i] = acc;
  }
  matrix_release(site);
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

/// ldmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16 {r0..}, [row_address].
/// Lane l < 8 * num supplies the address of row l % 8 of matrix l / 8 (16
/// bytes, 16-byte aligned, shared memory of the block); the other lanes'
/// addresses are ignored.  Register m of lane l receives from matrix m the
/// halves (row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1) -- with .trans the
/// halves (rows 2 (l % 4) and 2 (l % 4) + 1, column l / 4) -- low half first.
inline void ldmatrix_m8n8(Site site, std::uint32_t* r, int num, bool trans,
                          const void* row_address) {
  const int kind = static_cast<int>(MatrixInstr::kLdmatrix) + num + (trans ? 8 : 0);
  if (num != 1 && num != 2 && num != 4) fail_here("ldmatrix .num must be 1, 2 or 4");
  const unsigned lane = lane_id();
  if (t_thread != nullptr && t_launch != nullptr && lane < 8u * static_cast<unsigned>(num)) {
    const std::string where = matrix_instr_name(kind) + " at " + describe_site(site);
    const auto addr = reinterpret_cast<std::uintptr_t>(row_address);
    if (addr % 16 != 0) {
      fail_here(describe_thread(*t_thread) + " executes " + where + " with row address " +
                std::to_string(addr % 16) + " bytes past a 16-byte boundary (lane " +
                std::to_string(lane) + " supplies row " + std::to_string(lane % 8) +
                " of matrix " + std::to_string(lane / 8) + ")");
    }
    if (!is_shared(*t_launch, static_cast<const unsigned char*>(row_address), 16)) {
      fail_here(describe_thread(*t_thread) + " executes " + where +
                " with a row address that is not shared memory of this block (lane " +
                std::to_string(lane) + " supplies row " + std::to_string(lane % 8) +
                " of matrix " + std::to_string(lane / 8) +
                "; use dynamic shared memory or a CUPYCONV_STATIC_SHARED array)");
    }
  }
  MatrixWarp& w = matrix_gather(site, kind, &row_address, sizeof(row_address));
  const MatrixLane& me = w.lane[lane];
  if (w.rows_count != me.count) {  // the first lane to resume reads the 8 * num rows once
    for (int l = 0; l < 8 * num; ++l) {
      const void* p = staged<const void*>(w.lane[l], 0);
      std::memcpy(w.rows[l / 8][l % 8], p, 16);
    }
    w.rows_count = me.count;
  }
  const int row = static_cast<int>(lane / 4), col = 2 * static_cast<int>(lane % 4);
  std::uint32_t out[4] = {};
  for (int m = 0; m < num; ++m) {
    const unsigned short lo = trans ? w.rows[m][col][row] : w.rows[m][row][col];
    const unsigned short hi = trans ? w.rows[m][col + 1][row] : w.rows[m][row][col + 1];
    out[m] = static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
  }
  matrix_release(site);
  for (int m = 0; m < num; ++m) r[m] = out[m];
}

}  // namespace detail
}  // namespace cupyconv_emu

#endif  // CUPYCONV_EMU_MMA_CUH
