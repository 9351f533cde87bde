#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "gravitree/gravitree.hpp"

namespace py = pybind11;
using namespace pybind11::literals;
using rml::gravitree::u128;

namespace {

py::int_ to_pyint(u128 v) {
  const auto hi = static_cast<std::uint64_t>(v >> 64);
  const auto lo = static_cast<std::uint64_t>(v);
  py::int_ out(hi);
  out = py::reinterpret_steal<py::int_>(PyNumber_Lshift(out.ptr(), py::int_(64).ptr()));
  return py::reinterpret_steal<py::int_>(PyNumber_Or(out.ptr(), py::int_(lo).ptr()));
}

u128 from_pyint(const py::int_& v, const char* name) {
  if (PyObject_RichCompareBool(v.ptr(), py::int_(0).ptr(), Py_LT) == 1) {
    throw py::index_error(std::string(name) + " must be non-negative");
  }
  py::int_ mask(0xFFFFFFFFFFFFFFFFULL);
  py::int_ lo = py::reinterpret_steal<py::int_>(PyNumber_And(v.ptr(), mask.ptr()));
  py::int_ hi = py::reinterpret_steal<py::int_>(PyNumber_Rshift(v.ptr(), py::int_(64).ptr()));
  if (PyObject_RichCompareBool(hi.ptr(), mask.ptr(), Py_GT) == 1) {
    throw py::index_error(std::string(name) + " is too large");
  }
  return (static_cast<u128>(hi.cast<std::uint64_t>()) << 64) | lo.cast<std::uint64_t>();
}

// Owns copies of the problem arrays and the search.
struct PySearch {
  std::vector<std::uint8_t> x;
  std::vector<double> pos, tot;
  rml::gravitree::Problem prob;
  std::unique_ptr<rml::gravitree::Search> search;
  bool keyboard_interrupt = false;
};

template <typename T>
std::vector<T> copy_array(const py::array& a, std::size_t n, const char* name) {
  auto arr = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!arr || static_cast<std::size_t>(arr.size()) != n) {
    throw py::value_error(std::string(name) + ": expected " + std::to_string(n) + " entries");
  }
  return std::vector<T>(arr.data(), arr.data() + n);
}

std::shared_ptr<PySearch> fit(const py::array& x, const py::array& pos, const py::array& tot,
                              double total_weight, bool integral, double lambda_, int depth,
                              int branch, int loss, double tau, double cost, bool falling,
                              int bound_mode, double bound_value, double time_limit, bool prune,
                              bool ignore_trivial, int max_leaves, double memory_limit_mb,
                              int n_threads,
                              const py::object& monitor) {
  if (x.ndim() != 2) throw py::value_error("x: expected a 2-D (m, p) array");
  const auto m = static_cast<std::size_t>(x.shape(0));
  const auto p = static_cast<std::size_t>(x.shape(1));
  if (m == 0 || p == 0) throw py::value_error("x: expected at least one row and one column");
  if (depth < 0 || depth > 64) throw py::value_error("depth must be in [0, 64]");
  if (loss != 0 && loss != 1) throw py::value_error("loss must be 0 or 1");
  if (bound_mode < 0 || bound_mode > 3) throw py::value_error("bound_mode must be in 0..3");
  if (!(total_weight > 0)) throw py::value_error("total_weight must be positive");
  auto out = std::make_shared<PySearch>();
  out->x = copy_array<std::uint8_t>(x, m * p, "x");
  out->pos = copy_array<double>(pos, m, "pos");
  out->tot = copy_array<double>(tot, m, "tot");
  for (std::size_t i = 0; i < m; ++i) {
    if (!(out->tot[i] > 0) || out->pos[i] < 0 || out->pos[i] > out->tot[i]) {
      throw py::value_error("tot must be positive and 0 <= pos <= tot");
    }
  }
  out->prob.m = static_cast<int>(m);
  out->prob.p = static_cast<int>(p);
  out->prob.x = out->x.data();
  out->prob.pos = out->pos.data();
  out->prob.tot = out->tot.data();
  out->prob.total_weight = total_weight;
  out->prob.integral = integral;
  rml::gravitree::Config cfg;
  cfg.lambda = lambda_;
  cfg.depth = depth;
  cfg.branch = branch;
  cfg.loss = loss;
  cfg.tau = tau;
  cfg.cost = cost;
  cfg.falling = falling;
  cfg.bound_mode = bound_mode;
  cfg.bound_value = bound_value;
  cfg.time_limit = time_limit;
  cfg.prune = prune;
  cfg.ignore_trivial = ignore_trivial;
  cfg.max_leaves = max_leaves;
  cfg.memory_limit = memory_limit_mb * 1048576.0;
  if (n_threads < 1) throw py::value_error("n_threads must be >= 1");
  cfg.n_threads = n_threads;
  PySearch* raw = out.get();
  rml::gravitree::Monitor mon = [raw, monitor](int phase, std::int64_t n_sub) -> bool {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      PyErr_Clear();
      raw->keyboard_interrupt = true;
      return true;
    }
    if (!monitor.is_none()) {
      try {
        return monitor(phase, n_sub).cast<bool>();
      } catch (py::error_already_set&) {
        return true;
      }
    }
    return false;
  };
  out->search = std::make_unique<rml::gravitree::Search>(out->prob, cfg, mon);
  {
    py::gil_scoped_release release;
    out->search->run();
  }
  return out;
}

py::dict tree_dict(const rml::gravitree::Tree& t) {
  auto vec = [](const auto& v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
  };
  py::dict d;
  d["feature"] = vec(t.feature);
  d["orient"] = vec(t.orient);
  d["priority"] = vec(t.priority);
  d["second"] = vec(t.second);
  d["risk"] = vec(t.risk);
  d["loss"] = t.loss;
  d["objective"] = t.objective;
  d["n_leaves"] = t.n_leaves;
  return d;
}

}  // namespace

void register_gravitree(py::module_ m) {
  m.doc() = "GraviTree: exact Rashomon sets of falling / unconstrained sparse trees";
  py::class_<PySearch, std::shared_ptr<PySearch>>(m, "Search")
      .def_property_readonly("optimal_objective",
                             [](const PySearch& s) { return s.search->optimal_objective(); })
      .def_property_readonly("theta", [](const PySearch& s) { return s.search->theta(); })
      .def_property_readonly("n_trees", [](const PySearch& s) { return to_pyint(s.search->n_trees()); })
      .def_property_readonly("complete", [](const PySearch& s) { return s.search->complete(); })
      .def_property_readonly("keyboard_interrupt",
                             [](const PySearch& s) { return s.keyboard_interrupt; })
      .def_property_readonly("stats",
                             [](const PySearch& s) {
                               const auto& st = s.search->stats();
                               py::dict d;
                               d["n_subproblems"] = st.n_subproblems;
                               d["n_expansions"] = st.n_expansions;
                               d["n_pruned_bound"] = st.n_pruned_bound;
                               d["n_pruned_falling"] = st.n_pruned_falling;
                               d["time_optimal_s"] = st.time_optimal_s;
                               d["memory_mb"] = s.search->memory_bytes() / 1048576.0;
                               static const char* reasons[] = {"", "time_limit", "memory_limit",
                                                               "interrupt"};
                               d["stop_reason"] = reasons[s.search->stop_reason()];
                               d["time_s"] = st.time_s;
                               return d;
                             })
      .def("record_objectives",
           [](const PySearch& s) {
             const int k = s.search->n_records();
             py::array_t<double> a(k);
             for (int i = 0; i < k; ++i) a.mutable_data()[i] = s.search->record_objective(i);
             return a;
           })
      .def("record_counts",
           [](const PySearch& s) {
             py::list out;
             for (int i = 0; i < s.search->n_records(); ++i) {
               out.append(to_pyint(s.search->record_count(i)));
             }
             return out;
           })
      .def(
          "count_without",
          [](const PySearch& s, int feature) {
            if (feature < 0 || feature >= s.prob.p) throw py::index_error("feature out of range");
            u128 c;
            {
              py::gil_scoped_release release;
              c = s.search->count_without(feature);
            }
            return to_pyint(c);
          },
          "feature"_a, "Number of trees of the set that never test this feature.")
      .def(
          "get",
          [](const PySearch& s, const py::int_& i) {
            const u128 idx = from_pyint(i, "i");
            if (idx >= s.search->n_trees()) throw py::index_error("tree index out of range");
            return tree_dict(s.search->get(idx));
          },
          "i"_a, "The i-th tree (objective order) as flat pre-order arrays.");
  m.def("fit", &fit, "x"_a, "pos"_a, "tot"_a, "total_weight"_a, "integral"_a, "lambda_"_a,
        "depth"_a, "branch"_a, "loss"_a, "tau"_a, "cost"_a, "falling"_a, "bound_mode"_a,
        "bound_value"_a, "time_limit"_a, "prune"_a,
        "ignore_trivial"_a = false, "max_leaves"_a = -1,
        "memory_limit_mb"_a = 0.0, "n_threads"_a = 1, "monitor"_a = py::none(),
        "Optimal pass then Rashomon enumeration over deduplicated binary rows "
        "(x: (m, p) uint8, pos/tot: (m,) masses). Releases the GIL while searching.");
}
