#include "gravitree/gravitree.hpp"
#include "common/parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace rml::gravitree {

namespace {

constexpr double kTol = 1e-9;  // slack on internal budget checks; the root filter is exact
constexpr double kInf = std::numeric_limits<double>::infinity();

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

inline int popcount64(std::uint64_t v) { return __builtin_popcountll(v); }

inline std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ULL;
  return h ^ (h >> 31);
}

struct RecKey {
  double loss, top, bot;
  std::int32_t leaves, nbr;
  bool operator==(const RecKey& o) const {
    return loss == o.loss && top == o.top && bot == o.bot && leaves == o.leaves && nbr == o.nbr;
  }
};

struct RecKeyHash {
  std::size_t operator()(const RecKey& k) const {
    auto bits = [](double d) {
      std::uint64_t u;
      static_assert(sizeof(u) == sizeof(d));
      std::memcpy(&u, &d, sizeof(d));
      return u;
    };
    std::uint64_t h = mix(bits(k.loss), bits(k.top));
    h = mix(h, bits(k.bot));
    h = mix(h, (static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.leaves)) << 32) |
                   static_cast<std::uint32_t>(k.nbr));
    return static_cast<std::size_t>(h);
  }
};

// Number of records of e with objective <= budget (+ slack): a prefix, records are sorted.
std::size_t prefix(const Entry* e, double budget) {
  const double lim = budget + kTol;
  auto it = std::upper_bound(e->recs.begin(), e->recs.end(), lim,
                             [](double v, const Rec& r) { return v < r.obj; });
  return static_cast<std::size_t>(it - e->recs.begin());
}

}  // namespace

Search::Search(const Problem& prob, const Config& cfg, Monitor monitor)
    : prob_(prob), cfg_(cfg), monitor_(std::move(monitor)) {
  if (prob_.m <= 0 || prob_.p <= 0) throw std::invalid_argument("empty problem");
  words_ = (prob_.m + 63) / 64;
  const auto W = static_cast<std::size_t>(words_);
  feat_.assign(static_cast<std::size_t>(prob_.p) * W, 0);
  root_.assign(W, 0);
  eq_.resize(static_cast<std::size_t>(prob_.m));
  bool eq_integral = prob_.integral && cfg_.loss == 0 && cfg_.cost == std::floor(cfg_.cost);
  double max_n = 0;
  for (int i = 0; i < prob_.m; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    const std::size_t w = iu / 64;
    const std::uint64_t bit = 1ULL << (iu % 64);
    root_[w] |= bit;
    for (int j = 0; j < prob_.p; ++j) {
      if (prob_.x[iu * static_cast<std::size_t>(prob_.p) + static_cast<std::size_t>(j)]) {
        feat_[static_cast<std::size_t>(j) * W + w] |= bit;
      }
    }
    const double P = prob_.pos[i], N = prob_.tot[i];
    eq_[iu] = cfg_.loss == 0 ? std::min(N - P, cfg_.cost * P) : leaf_loss(P, N);
    max_n = std::max(max_n, std::max(N, eq_[iu]));
  }
  use_planes_ = prob_.integral && eq_integral && max_n < 4294967296.0;
  if (use_planes_) {
    planes_ = 1;
    while (std::ldexp(1.0, planes_) <= max_n) ++planes_;
    const auto Q = static_cast<std::size_t>(planes_);
    plane_p_.assign(Q * W, 0);
    plane_n_.assign(Q * W, 0);
    plane_e_.assign(Q * W, 0);
    for (int i = 0; i < prob_.m; ++i) {
      const auto iu = static_cast<std::size_t>(i);
      const auto P = static_cast<std::uint64_t>(prob_.pos[i]);
      const auto N = static_cast<std::uint64_t>(prob_.tot[i]);
      const auto E = static_cast<std::uint64_t>(eq_[iu]);
      for (std::size_t q = 0; q < Q; ++q) {
        const std::uint64_t bit = 1ULL << (iu % 64);
        if ((P >> q) & 1ULL) plane_p_[q * W + iu / 64] |= bit;
        if ((N >> q) & 1ULL) plane_n_[q * W + iu / 64] |= bit;
        if ((E >> q) & 1ULL) plane_e_[q * W + iu / 64] |= bit;
      }
    }
  }
}

Search::~Search() = default;

double Search::leaf_loss(double P, double N) const {
  if (cfg_.loss == 0) return (P / N >= cfg_.tau) ? (N - P) : cfg_.cost * P;
  const double r = P / N;
  double out = 0;
  if (P > 0) out -= P * std::log(r);
  if (N - P > 0) out -= (N - P) * std::log1p(-r);
  return out;
}

Search::Masses Search::masses(const std::uint64_t* s) const {
  Masses out{0, 0, 0};
  bool planes = use_planes_;
  if (planes) {
    // a gather over the set bits is cheaper than 3 * planes_ popcount passes on sparse supports
    std::int64_t bits = 0;
    for (int w = 0; w < words_; ++w) bits += popcount64(s[w]);
    planes = bits > 2 * static_cast<std::int64_t>(planes_) * words_;
  }
  if (planes) {
    const auto W = static_cast<std::size_t>(words_);
    for (int q = 0; q < planes_; ++q) {
      const std::size_t off = static_cast<std::size_t>(q) * W;
      std::int64_t cp = 0, cn = 0, ce = 0;
      for (std::size_t w = 0; w < W; ++w) {
        cp += popcount64(s[w] & plane_p_[off + w]);
        cn += popcount64(s[w] & plane_n_[off + w]);
        ce += popcount64(s[w] & plane_e_[off + w]);
      }
      const double scale = std::ldexp(1.0, q);
      out.P += scale * static_cast<double>(cp);
      out.N += scale * static_cast<double>(cn);
      out.EQ += scale * static_cast<double>(ce);
    }
    return out;
  }
  for (int w = 0; w < words_; ++w) {
    std::uint64_t bits = s[w];
    while (bits) {
      const int b = __builtin_ctzll(bits);
      bits &= bits - 1;
      const std::size_t i = static_cast<std::size_t>(w) * 64 + static_cast<std::size_t>(b);
      out.P += prob_.pos[i];
      out.N += prob_.tot[i];
      out.EQ += eq_[i];
    }
  }
  return out;
}

std::uint64_t Search::hash(const std::uint64_t* s, int depth) const {
  std::uint64_t h = static_cast<std::uint64_t>(depth) * 0x9E3779B97F4A7C15ULL;
  for (int w = 0; w < words_; ++w) h = mix(h, s[w]);
  return h;
}

Entry* Search::lookup(const std::uint64_t* s, int depth, bool frontier) const {
  const auto& memo = memo_[frontier ? 1 : 0];
  auto it = memo.find(hash(s, depth));
  if (it == memo.end()) return nullptr;
  for (Entry* e : it->second) {
    if (e->depth == depth && std::equal(e->bits.begin(), e->bits.end(), s)) return e;
  }
  return nullptr;
}

// Lower bound on the objective of any subtree on (s, depth) whose leaf risks lie in [lo, hi]:
// GOSDT's lambda + EQ/W, or, when the optimal pass has solved (s, depth), the best frontier
// point inside the interval (every such subtree is dominated by a frontier point inside it).
double Search::lower_bound(const std::uint64_t* s, int depth, const Masses& ms, double lo,
                           double hi) const {
  double lb = cfg_.lambda + one_sided_loss(ms, lo, hi) / prob_.total_weight;
  const Entry* fe = lookup(s, depth, true);
  if (fe != nullptr && fe->complete) {
    double known = fe->budget - kTol;
    for (const Rec& r : fe->recs) {
      if (r.top <= hi && r.bot >= lo) {
        known = r.obj;
        break;
      }
    }
    lb = std::max(lb, known);
  }
  return lb;
}

// Loss lower bound of any subtree whose leaf risks lie in [lo, hi]: the equivalent-points loss,
// or, with the 0-1 loss, the exact loss when the interval is one-sided (F3): all leaves then
// predict 0 (hi < tau: loss C * P) or all predict 1 (lo >= tau: loss N - P).
double Search::one_sided_loss(const Masses& ms, double lo, double hi) const {
  double loss = ms.EQ;
  if (cfg_.loss == 0 && cfg_.prune) {
    if (hi < cfg_.tau) loss = std::max(loss, cfg_.cost * ms.P);
    if (lo >= cfg_.tau) loss = std::max(loss, ms.N - ms.P);
  }
  return loss;
}

bool Search::should_stop(int phase) {
  if (interrupted_) return true;
  if (cfg_.memory_limit > 0 && bytes_ > cfg_.memory_limit) {
    interrupted_ = true;
    stop_reason_ = 2;
    return true;
  }
  if ((++tick_ & 255) != 0) return false;
  const double t = now_s();
  if (cfg_.time_limit > 0 && t - start_ > cfg_.time_limit) {
    interrupted_ = true;
    stop_reason_ = 1;
    return true;
  }
  if (monitor_ && t - last_monitor_ > 0.1) {
    last_monitor_ = t;
    if (monitor_(phase, stats_.n_subproblems)) {
      interrupted_ = true;
      stop_reason_ = 3;
    }
  }
  return interrupted_;
}

void Search::finalize(Entry* e, std::vector<Rec>& recs, bool frontier) {
  for (Rec& r : recs) r.obj = r.loss / prob_.total_weight + cfg_.lambda * r.leaves;
  std::stable_sort(recs.begin(), recs.end(),
                   [](const Rec& a, const Rec& b) { return a.obj < b.obj; });
  if (frontier) {
    std::vector<Rec> kept;
    for (Rec& b : recs) {
      bool dominated = false;
      for (const Rec& a : kept) {
        if (a.obj <= b.obj && a.top <= b.top && a.bot >= b.bot &&
            (cfg_.branch < 0 || (a.nbr <= b.nbr && (a.leaves == 1 || b.leaves > 1))) &&
            (cfg_.max_leaves < 0 || a.leaves <= b.leaves)) {
          dominated = true;
          break;
        }
      }
      if (!dominated) kept.push_back(std::move(b));
    }
    recs.swap(kept);
  }
  e->recs = std::move(recs);
  double b = static_cast<double>(sizeof(Entry) + e->bits.size() * sizeof(std::uint64_t) +
                                 e->recs.size() * sizeof(Rec));
  for (const Rec& r : e->recs) b += static_cast<double>(r.pairs.size() * sizeof(Pair));
  bytes_ += b;
}

Entry* Search::solve(const std::uint64_t* s, int depth, double budget, bool frontier,
                     double lo, double hi) {
  Entry* old = lookup(s, depth, frontier);
  if (old != nullptr && old->complete && old->budget >= budget && old->lo <= lo &&
      old->hi >= hi) {
    return old;
  }
  if (interrupted_ && old != nullptr) return old;
  if (old != nullptr && old->complete) {
    // widen to cover both requests, so that neither has to be recomputed again
    budget = std::max(budget, old->budget);
    lo = std::min(lo, old->lo);
    hi = std::max(hi, old->hi);
  }
  ++stats_.n_subproblems;
  const auto W = static_cast<std::size_t>(words_);
  arena_.push_back(std::make_unique<Entry>());
  Entry* e = arena_.back().get();
  e->bits.assign(s, s + W);
  e->depth = depth;
  e->budget = budget;
  e->lo = lo;
  e->hi = hi;
  const Masses ms = masses(s);
  e->P = ms.P;
  e->N = ms.N;
  e->EQ = ms.EQ;
  e->risk = ms.P / ms.N;
  e->leaf_loss = leaf_loss(ms.P, ms.N);
  e->leaf_obj = e->leaf_loss / prob_.total_weight + cfg_.lambda;
  {
    auto& bucket = memo_[frontier ? 1 : 0][hash(s, depth)];
    bool replaced = false;
    for (Entry*& slot : bucket) {
      if (slot == old && old != nullptr) {
        slot = e;
        replaced = true;
      }
    }
    if (!replaced) bucket.push_back(e);
  }

  std::vector<Rec> recs;
  std::unordered_map<RecKey, std::size_t, RecKeyHash> index;
  // (F0/F2) every subtree has a leaf at least as risky and one at most as risky as the pool:
  // outside [lo, hi] nothing on this support is feasible.
  const bool in_interval = e->risk >= lo && e->risk <= hi;
  if (!in_interval) {
    ++stats_.n_pruned_falling;
    finalize(e, recs, frontier);
    return e;
  }
  if (e->leaf_obj <= budget + kTol) {
    Rec leaf;
    leaf.loss = e->leaf_loss;
    leaf.leaves = 1;
    leaf.nbr = 0;
    leaf.top = cfg_.falling ? e->risk : 0.0;
    leaf.bot = leaf.top;
    leaf.count = 1;
    recs.push_back(std::move(leaf));
  }
  const double eq_bound = one_sided_loss(ms, lo, hi) / prob_.total_weight;
  if (cfg_.prune && cfg_.lambda + eq_bound > budget + kTol) {
    ++stats_.n_pruned_bound;
    finalize(e, recs, frontier);
    return e;
  }
  if (should_stop(frontier ? 0 : 1)) {
    e->complete = false;
    finalize(e, recs, frontier);
    return e;
  }
  // In the optimal pass the leaf dominates every split tree that is not strictly better.
  double split_budget = frontier ? std::min(budget, e->leaf_obj) : budget;
  if (depth == 0 || (cfg_.prune && 2 * cfg_.lambda + eq_bound > split_budget + kTol)) {
    if (depth > 0) ++stats_.n_pruned_bound;
    finalize(e, recs, frontier);
    return e;
  }
  ++stats_.n_expansions;
  // Risk intervals are propagated in the Rashomon pass of the falling problem (F2).
  const bool intervals = cfg_.falling && cfg_.prune && !frontier;

  struct Cand {
    int j, o;
    double lbp, lbs, rp, rs;
  };
  const int p = prob_.p;
  std::vector<std::uint64_t> kids(2 * static_cast<std::size_t>(p) * W);
  // Candidate splits: child bitsets, masses, orientation (F1), intervals and lower bounds.
  // Each feature writes its own slots, so running the features on several threads gives the
  // same candidates in the same order (deterministic output for any n_threads).
  std::vector<Cand> slots(2 * static_cast<std::size_t>(p));
  std::vector<std::int8_t> used(2 * static_cast<std::size_t>(p), 0);
  std::vector<std::int64_t> pruned(2 * static_cast<std::size_t>(p), 0);  // [bound, falling]
  auto gen = [&](int j) {
    std::uint64_t* s1 = kids.data() + 2 * static_cast<std::size_t>(j) * W;
    std::uint64_t* s0 = s1 + W;
    const std::uint64_t* f = feat_.data() + static_cast<std::size_t>(j) * W;
    const auto ju = static_cast<std::size_t>(j);
    bool any1 = false, any0 = false;
    for (std::size_t w = 0; w < W; ++w) {
      s1[w] = s[w] & f[w];
      s0[w] = s[w] & ~f[w];
      any1 |= s1[w] != 0;
      any0 |= s0[w] != 0;
    }
    if (!any1 || !any0) return;
    const Masses m1 = masses(s1);
    // integer masses: the complement's masses are exact differences
    const Masses m0 = prob_.integral && use_planes_
                          ? Masses{ms.P - m1.P, ms.N - m1.N, ms.EQ - m1.EQ}
                          : masses(s0);
    const double r1 = m1.P / m1.N, r0 = m0.P / m0.N;
    int orients[2] = {1, -1};
    if (cfg_.falling) {
      if (cfg_.prune) {
        orients[0] = r1 >= r0 ? 1 : 0;
        ++pruned[2 * ju + 1];  // the other orientation is never explored (F1)
      } else if (r1 != r0) {
        orients[1] = 0;  // ties: x_j = 1 first is the canonical orientation
      }
    }
    for (int k = 0; k < 2; ++k) {
      const int o = orients[k];
      if (o < 0) continue;
      const Masses& mp = o == 1 ? m1 : m0;
      const Masses& msec = o == 1 ? m0 : m1;
      Cand c{j, o, 0.0, 0.0, o == 1 ? r1 : r0, o == 1 ? r0 : r1};
      if (intervals && (c.rp > hi || c.rs < lo)) {
        ++pruned[2 * ju + 1];
        continue;
      }
      if (cfg_.prune) {
        const double lo_p = intervals ? std::max(lo, c.rs) : -1.0;
        const double hi_s = intervals ? std::min(hi, c.rp) : 2.0;
        c.lbp = lower_bound(o == 1 ? s1 : s0, depth - 1, mp, lo_p, intervals ? hi : 2.0);
        c.lbs = lower_bound(o == 1 ? s0 : s1, depth - 1, msec, intervals ? lo : -1.0, hi_s);
        if (c.lbp + c.lbs > split_budget + kTol) {
          ++pruned[2 * ju];
          continue;
        }
      }
      slots[2 * ju + static_cast<std::size_t>(k)] = c;
      used[2 * ju + static_cast<std::size_t>(k)] = 1;
    }
  };
  // Threads pay off only when each feature costs enough (many distinct rows).
  const bool threaded = cfg_.n_threads > 1 && static_cast<std::size_t>(p) * W >= 8192;
  if (threaded) {
#ifdef _OPENMP
#pragma omp parallel for num_threads(rml::cap_threads(cfg_.n_threads)) schedule(static)
#endif
    for (int j = 0; j < p; ++j) gen(j);
  } else {
    for (int j = 0; j < p; ++j) gen(j);
  }
  std::vector<Cand> cands;
  for (std::size_t k = 0; k < slots.size(); ++k) {
    if (used[k]) cands.push_back(slots[k]);
  }
  for (std::size_t j = 0; j < static_cast<std::size_t>(p); ++j) {
    stats_.n_pruned_bound += pruned[2 * j];
    stats_.n_pruned_falling += pruned[2 * j + 1];
  }
  // Only the objective matters when the frontier is one-dimensional, and at the root of the
  // optimal pass: there the budget shrinks to the best tree found so far (GOSDT-style).
  const bool is_root = depth == cfg_.depth && std::equal(s, s + W, root_.data());
  const bool single = frontier && cfg_.prune &&
                      ((!cfg_.falling && cfg_.branch < 0 && cfg_.max_leaves < 0) || is_root);
  if (single) {
    std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
      return a.lbp + a.lbs < b.lbp + b.lbs;
    });
  }
  std::vector<std::uint32_t> sel;
  for (const Cand& c : cands) {
    if (c.lbp + c.lbs > split_budget + kTol) {
      ++stats_.n_pruned_bound;
      continue;
    }
    const std::uint64_t* s1 = kids.data() + 2 * static_cast<std::size_t>(c.j) * W;
    const std::uint64_t* s0 = s1 + W;
    const std::uint64_t* sp = c.o == 1 ? s1 : s0;
    const std::uint64_t* ss = c.o == 1 ? s0 : s1;
    // priority child: leaves in [max(lo, r(S_s)), hi], since bot_p >= top_s >= r(S_s)
    const double lo_p = intervals ? std::max(lo, c.rs) : -1.0;
    const double hi_p = intervals ? hi : 2.0;
    Entry* ep = solve(sp, depth - 1, split_budget - c.lbs, frontier, lo_p, hi_p);
    const std::size_t np = prefix(ep, split_budget - c.lbs);
    sel.clear();
    double minp = kInf, maxbot = -1.0;
    for (std::size_t a = 0; a < np; ++a) {
      const Rec& ra = ep->recs[a];
      if (ra.top > hi_p || ra.bot < lo_p) continue;
      sel.push_back(static_cast<std::uint32_t>(a));
      minp = std::min(minp, ra.obj);
      maxbot = std::max(maxbot, ra.bot);
    }
    if (sel.empty()) continue;
    // second child: leaves in [lo, min(hi, r(S_p), max bot_p)]
    const double lo_s = intervals ? lo : -1.0;
    const double hi_s = intervals ? std::min(std::min(hi, c.rp), maxbot) : 2.0;
    if (intervals && (c.rs > hi_s)) {
      ++stats_.n_pruned_falling;
      continue;
    }
    Entry* es = solve(ss, depth - 1, split_budget - minp, frontier, lo_s, hi_s);
    const std::size_t ns = prefix(es, split_budget - minp);
    const bool trivial_pair = cfg_.ignore_trivial && (ep->risk >= cfg_.tau) == (es->risk >= cfg_.tau);
    if (interrupted_) e->complete = false;
    for (const std::uint32_t a : sel) {
      const Rec& ra = ep->recs[a];
      const double lim = split_budget - ra.obj + kTol;
      for (std::size_t b = 0; b < ns; ++b) {
        const Rec& rb = es->recs[b];
        if (rb.obj > lim) break;
        if (cfg_.falling && (ra.bot < rb.top || rb.bot < lo_s)) {
          ++stats_.n_pruned_falling;
          continue;
        }
        if (trivial_pair && ra.leaves == 1 && rb.leaves == 1) continue;
        if (cfg_.max_leaves >= 0 && ra.leaves + rb.leaves > cfg_.max_leaves) continue;
        std::int32_t nbr = 0;
        if (cfg_.branch >= 0) {
          nbr = ra.nbr + rb.nbr + ((ra.leaves > 1 && rb.leaves > 1) ? 1 : 0);
          if (nbr > cfg_.branch) continue;
        }
        const RecKey key{ra.loss + rb.loss, ra.top, rb.bot, ra.leaves + rb.leaves, nbr};
        auto [it, inserted] = index.try_emplace(key, recs.size());
        if (inserted) {
          Rec r;
          r.loss = key.loss;
          r.top = key.top;
          r.bot = key.bot;
          r.leaves = key.leaves;
          r.nbr = nbr;
          recs.push_back(std::move(r));
        }
        Rec& r = recs[it->second];
        const Pair pair{static_cast<std::int32_t>(c.j), static_cast<std::int8_t>(c.o), ep,
                        static_cast<std::int32_t>(a), es, static_cast<std::int32_t>(b)};
        if (!frontier) {
          r.count += ra.count * rb.count;
          r.pairs.push_back(pair);
        } else if (inserted) {
          r.count = 1;  // optimal pass: one witness tree per frontier point
          r.pairs.push_back(pair);
        }
      }
    }
    if (single) {
      for (const Rec& r : recs) {
        split_budget = std::min(split_budget, r.loss / prob_.total_weight + cfg_.lambda * r.leaves);
      }
    }
    if (interrupted_) break;
  }
  if (interrupted_) e->complete = false;
  finalize(e, recs, frontier);
  return e;
}

void Search::run() {
  start_ = now_s();
  last_monitor_ = start_;
  Entry* fr = solve(root_.data(), cfg_.depth, kInf, true, -1.0, 2.0);
  stats_.time_optimal_s = now_s() - start_;
  opt_ = fr->recs.empty() ? fr->leaf_obj : fr->recs.front().obj;
  switch (cfg_.bound_mode) {
    case 0: theta_ = opt_; break;
    case 1: theta_ = (1.0 + cfg_.bound_value) * opt_; break;
    case 2: theta_ = opt_ + cfg_.bound_value; break;
    default: theta_ = cfg_.bound_value; break;
  }
  auto count_root = [this](Entry* root) {
    root_entry_ = root;
    root_recs_ = 0;
    n_trees_ = 0;
    for (const Rec& r : root->recs) {
      if (r.obj > theta_) break;  // exact: every tree of a record has this objective
      ++root_recs_;
      n_trees_ += r.count;
    }
  };
  if (!interrupted_) count_root(solve(root_.data(), cfg_.depth, theta_, false, -1.0, 2.0));
  if (interrupted_ && n_trees_ == 0) {
    // Stopped before the Rashomon pass found anything: return the best trees of the optimal
    // pass (one witness per frontier point of the root) rather than nothing.
    count_root(fr);
  }
  complete_ = !interrupted_;
  stats_.time_s = now_s() - start_;
}

double Search::record_objective(int k) const {
  return root_entry_->recs[static_cast<std::size_t>(k)].obj;
}

u128 Search::record_count(int k) const { return root_entry_->recs[static_cast<std::size_t>(k)].count; }

std::int32_t Search::build(const Entry* e, int k, u128 index, Tree& out) const {
  const auto id = static_cast<std::int32_t>(out.feature.size());
  out.feature.push_back(-1);
  out.orient.push_back(-1);
  out.priority.push_back(-1);
  out.second.push_back(-1);
  out.risk.push_back(e->risk);
  const Rec& r = e->recs[static_cast<std::size_t>(k)];
  if (r.leaves == 1) return id;
  for (const Pair& pr : r.pairs) {
    const u128 cp = pr.ep->recs[static_cast<std::size_t>(pr.ip)].count;
    const u128 cs = pr.es->recs[static_cast<std::size_t>(pr.is)].count;
    const u128 c = cp * cs;
    if (index < c) {
      const auto idu = static_cast<std::size_t>(id);
      out.feature[idu] = pr.feature;
      out.orient[idu] = pr.orient;
      const std::int32_t a = build(pr.ep, pr.ip, index / cs, out);
      const std::int32_t b = build(pr.es, pr.is, index % cs, out);
      out.priority[idu] = a;
      out.second[idu] = b;
      return id;
    }
    index -= c;
  }
  throw std::logic_error("gravitree: tree index past the record's count");
}

u128 Search::count_without(int feature) const {
  std::unordered_map<const Rec*, u128> memo;
  std::function<u128(const Rec&)> count = [&](const Rec& r) -> u128 {
    if (r.leaves == 1) return 1;
    auto it = memo.find(&r);
    if (it != memo.end()) return it->second;
    u128 total = 0;
    for (const Pair& pr : r.pairs) {
      if (pr.feature == feature) continue;
      const u128 a = count(pr.ep->recs[static_cast<std::size_t>(pr.ip)]);
      if (a == 0) continue;
      total += a * count(pr.es->recs[static_cast<std::size_t>(pr.is)]);
    }
    memo.emplace(&r, total);
    return total;
  };
  u128 out = 0;
  for (std::size_t k = 0; k < root_recs_; ++k) out += count(root_entry_->recs[k]);
  return out;
}

Tree Search::get(u128 index) const {
  if (index >= n_trees_) throw std::out_of_range("tree index out of range");
  for (std::size_t k = 0; k < root_recs_; ++k) {
    const Rec& r = root_entry_->recs[k];
    if (index < r.count) {
      Tree t;
      build(root_entry_, static_cast<int>(k), index, t);
      t.loss = r.loss;
      t.objective = r.obj;
      t.n_leaves = r.leaves;
      return t;
    }
    index -= r.count;
  }
  throw std::out_of_range("tree index out of range");
}

}  // namespace rml::gravitree
