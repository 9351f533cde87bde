// GraviTree: exact Rashomon sets of (falling) sparse decision trees on binary data.
//
// Plain C++ (no pybind11). See rml_fast/kernels/gravitree.py for the problem statement.
// Two passes over memoised subproblems (support bitset over deduplicated rows, depth left):
//   1. optimal pass: per subproblem a Pareto frontier of (objective, top risk, bottom risk,
//      branching nodes, internal?) over falling subtrees whose objective fits a budget;
//   2. Rashomon pass: per subproblem "records" grouping all subtrees with the same
//      (loss, leaves, branching nodes, top risk, bottom risk) together with their count and
//      the child-record pairs that build them, so the set size is known without
//      materialising any tree and the i-th tree is built on demand.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

namespace rml::gravitree {

using u128 = unsigned __int128;

struct Config {
  double lambda = 0.01;
  int depth = 4;          // max literals on a path (root split = depth 1)
  int branch = -1;        // max branching nodes; -1 = unlimited
  int max_leaves = -1;    // max leaves; -1 = unlimited (alternative budget reading)
  int loss = 0;           // 0 = weighted misclassification, 1 = log loss
  double tau = 0.5;       // predict 1 iff risk >= tau
  double cost = 1.0;      // false-negative cost C (loss of a predicted-0 leaf = C * P)
  bool falling = true;    // false: unconstrained (TreeFARMS) problem
  int bound_mode = 1;     // 0 optimal only, 1 multiplier, 2 adder, 3 absolute
  double bound_value = 0.05;
  double time_limit = 0;  // seconds; <= 0 means none
  double memory_limit = 0;  // bytes of search state; <= 0 means none
  int n_threads = 1;        // threads for the candidate splits of large subproblems
  bool prune = true;      // lower-bound pruning and orientation forcing (F1)
  bool ignore_trivial = false;  // drop splits into two leaves with the same prediction
};

struct Problem {
  int m = 0;                      // distinct rows
  int p = 0;                      // binary features
  const std::uint8_t* x = nullptr;  // (m, p) row-major 0/1
  const double* pos = nullptr;      // (m,) positive mass
  const double* tot = nullptr;      // (m,) total mass (> 0)
  double total_weight = 0;          // W
  bool integral = false;            // all masses integers below 2^52
};

struct Stats {
  std::int64_t n_subproblems = 0;
  std::int64_t n_expansions = 0;
  std::int64_t n_pruned_bound = 0;
  std::int64_t n_pruned_falling = 0;
  double time_optimal_s = 0;
  double time_s = 0;
};

struct Tree {
  std::vector<std::int32_t> feature, priority, second;
  std::vector<std::int8_t> orient;
  std::vector<double> risk;
  double loss = 0, objective = 0;
  std::int32_t n_leaves = 0;
};

struct Entry;

struct Pair {
  std::int32_t feature;
  std::int8_t orient;
  Entry* ep;
  std::int32_t ip;
  Entry* es;
  std::int32_t is;
};

struct Rec {
  double loss = 0, obj = 0, top = 0, bot = 0;
  std::int32_t leaves = 0, nbr = 0;
  u128 count = 0;
  std::vector<Pair> pairs;
};

struct Entry {
  std::vector<std::uint64_t> bits;
  int depth = 0;
  double budget = 0;
  double lo = -1.0, hi = 2.0;  // context interval of leaf risks (Rashomon pass, falling mode)
  double P = 0, N = 0, EQ = 0, risk = 0, leaf_loss = 0, leaf_obj = 0;
  bool complete = true;
  std::vector<Rec> recs;  // sorted by objective
};

// Called now and then with (phase, n_subproblems); returns true to stop (Ctrl-C).
using Monitor = std::function<bool(int, std::int64_t)>;

class Search {
 public:
  Search(const Problem& prob, const Config& cfg, Monitor monitor);
  ~Search();
  Search(const Search&) = delete;
  Search& operator=(const Search&) = delete;

  void run();

  double optimal_objective() const { return opt_; }
  double theta() const { return theta_; }
  u128 n_trees() const { return n_trees_; }
  bool complete() const { return complete_; }
  bool interrupted() const { return interrupted_; }
  // 0 = not stopped, 1 = time limit, 2 = memory limit, 3 = monitor (Ctrl-C / callback)
  int stop_reason() const { return stop_reason_; }
  double memory_bytes() const { return bytes_; }
  const Stats& stats() const { return stats_; }
  int n_records() const { return static_cast<int>(root_recs_); }
  double record_objective(int k) const;
  u128 record_count(int k) const;
  Tree get(u128 index) const;
  // Number of trees of the set that never test `feature` (exact, no materialisation).
  u128 count_without(int feature) const;

 private:
  struct Masses {
    double P, N, EQ;
  };
  Masses masses(const std::uint64_t* s) const;
  double leaf_loss(double P, double N) const;
  double one_sided_loss(const Masses& ms, double lo, double hi) const;
  double lower_bound(const std::uint64_t* s, int depth, const Masses& ms, double lo,
                     double hi) const;
  Entry* solve(const std::uint64_t* s, int depth, double budget, bool frontier, double lo,
               double hi);
  Entry* lookup(const std::uint64_t* s, int depth, bool frontier) const;
  void finalize(Entry* e, std::vector<Rec>& recs, bool frontier);
  bool should_stop(int phase);
  std::int32_t build(const Entry* e, int k, u128 index, Tree& out) const;
  std::uint64_t hash(const std::uint64_t* s, int depth) const;

  Problem prob_;
  Config cfg_;
  Monitor monitor_;
  int words_ = 0;
  std::vector<std::uint64_t> feat_;   // p * words_ feature bitsets
  std::vector<std::uint64_t> root_;   // all rows
  std::vector<double> eq_;            // per-row equivalent-points loss
  // bit-sliced mass planes (integral masses only): planes_ * words_ each
  int planes_ = 0;
  std::vector<std::uint64_t> plane_p_, plane_n_, plane_e_;
  bool use_planes_ = false;

  std::vector<std::unique_ptr<Entry>> arena_;
  std::unordered_map<std::uint64_t, std::vector<Entry*>> memo_[2];  // [0] rashomon, [1] frontier

  double opt_ = 0, theta_ = 0;
  u128 n_trees_ = 0;
  Entry* root_entry_ = nullptr;
  std::size_t root_recs_ = 0;
  bool complete_ = true, interrupted_ = false;
  int stop_reason_ = 0;
  double bytes_ = 0;  // approximate size of the memo (entries, records, pairs)
  Stats stats_;
  int phase_ = 0;
  std::int64_t tick_ = 0;
  double start_ = 0, last_monitor_ = 0;
};

}  // namespace rml::gravitree
