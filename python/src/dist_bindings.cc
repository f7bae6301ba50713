#include "python/src/dist_bindings.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "python/src/buffer_arg.h"
#include "python/src/interrupt.h"
#include "weft/dist/init.h"
#include "weft/dist/launch_env.h"
#include "weft/dist/process_group.h"

namespace weft::python {
namespace {

namespace py = pybind11;
using dist::OpOptions;
using dist::ProcessGroup;
using dist::ReduceOp;
using WorkPtr = std::shared_ptr<dist::Work>;
using Buffers = std::vector<BufferArg>;

// How often a wait that Python may interrupt looks for Ctrl-C.
constexpr Seconds kSignalCheck{0.1};

// Async operations whose Work object Python dropped before they finished: their memory must
// outlive them. Pruned whenever an async operation starts; touched only with the GIL held.
std::vector<std::pair<WorkPtr, Buffers>>& orphans() {
  static auto* list = new std::vector<std::pair<WorkPtr, Buffers>>();
  return *list;
}

// An async operation's handle, holding the memory it reads and writes until it completes.
class Work {
 public:
  Work(WorkPtr work, Buffers buffers) : work_(std::move(work)), buffers_(std::move(buffers)) {
    std::erase_if(orphans(), [](const auto& o) { return o.first->is_completed(); });
  }
  Work(Work&&) noexcept = default;
  Work& operator=(Work&&) noexcept = default;
  ~Work() {
    if (work_ && !work_->is_completed()) orphans().emplace_back(work_, std::move(buffers_));
  }

  // Blocks until the operation completed and raises its error. With a timeout, raises
  // weft.TimeoutError if it has not completed by then (the operation goes on). Either way
  // Ctrl-C interrupts the wait within kSignalCheck.
  void wait(std::optional<double> timeout) const {
    if (timeout && std::isnan(*timeout)) throw InvalidArgument("Work.wait: timeout is NaN");
    // Slices of kSignalCheck while more is left, in doubles (math.inf must not overflow a
    // clock duration), then what is left.
    const auto start = std::chrono::steady_clock::now();
    const auto left = [&] {
      return *timeout - Seconds(std::chrono::steady_clock::now() - start).count();
    };
    for (;;) {
      if (timeout && left() <= kSignalCheck.count()) break;
      bool done = false;
      {
        py::gil_scoped_release release;
        done = work_->wait_for(kSignalCheck);
      }
      if (done) break;
      raise_if_interrupted();
    }
    py::gil_scoped_release release;
    if (!work_->wait_for(Seconds(timeout ? std::max(left(), 0.0) : 0.0))) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", *timeout);
      throw dist::TimeoutError(std::string("Work.wait: the operation did not finish within ") +
                               seconds + " s (it keeps running until its own timeout)");
    }
    work_->wait();
  }
  bool is_completed() const { return work_->is_completed(); }
  int source_rank() const { return work_->source_rank(); }

 private:
  WorkPtr work_;
  Buffers buffers_;
};

OpOptions options(std::optional<double> timeout) {
  OpOptions o;
  if (timeout) o.timeout = Seconds(*timeout);
  return o;
}

// `call(async)` issues the operation: with async, its _async form (returning the Work);
// without, its blocking form, run with the GIL released and interruptible by Ctrl-C.
using Call = std::function<WorkPtr(bool async)>;

py::object run(ProcessGroup& group, bool async_op, Buffers buffers, const Call& call) {
  if (async_op) {
    WorkPtr work;
    {
      py::gil_scoped_release release;
      work = call(true);
    }
    return py::cast(Work(std::move(work), std::move(buffers)));
  }
  std::exception_ptr error;
  {
    py::gil_scoped_release release;  // first: the call is unregistered before the GIL is back
    BlockingCall blocking(&group);
    try {
      call(false);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) {
    raise_if_interrupted();  // Ctrl-C aborted the call: KeyboardInterrupt says so best
    std::rethrow_exception(error);
  }
  return py::none();
}

// run() for an operation whose blocking and _async forms take the same arguments: the
// common case, without a lambda per operation.
template <class... Params, class... Args>
py::object issue(ProcessGroup& group, bool async_op, Buffers buffers,
                 WorkPtr (ProcessGroup::*async_form)(Params...),
                 void (ProcessGroup::*blocking_form)(Params...), const Args&... args) {
  return run(group, async_op, std::move(buffers), [&](bool async) -> WorkPtr {
    if (async) return (group.*async_form)(args...);
    (group.*blocking_form)(args...);
    return nullptr;
  });
}

Buffers args(std::initializer_list<std::pair<const py::object*, bool>> objects,
             std::initializer_list<const char*> names) {
  Buffers out;
  out.reserve(objects.size());
  auto name = names.begin();
  for (const auto& [object, writable] : objects) out.emplace_back(*object, *name++, writable);
  return out;
}

// An argument that is ignored on some ranks (gather's output off the root): None there.
dist::Buffer buffer_or_empty(Buffers& buffers, const py::object& object, const char* what,
                             bool writable) {
  if (object.is_none()) return {};
  buffers.emplace_back(object, what, writable);
  return buffers.back().buffer();
}

// all_gather's list form: outputs[r] (one writable buffer per rank) gets rank r's input.
py::object all_gather_into_list(ProcessGroup& g, const py::object& outputs, const py::object& input,
                                OpOptions o, bool async_op) {
  Buffers b;
  b.reserve(py::len(outputs) + 1);
  for (const auto& item : outputs) {
    b.emplace_back(py::reinterpret_borrow<py::object>(item), "output", /*writable=*/true);
  }
  std::vector<dist::Buffer> outs;
  for (const auto& arg : b) outs.push_back(arg.buffer());
  b.emplace_back(input, "input", /*writable=*/false);
  const dist::Buffer in = b.back().buffer();
  return run(g, async_op, std::move(b), [&](bool async) -> WorkPtr {
    if (async) return g.all_gather_async(outs, in, o);
    g.all_gather(outs, in, o);
    return nullptr;
  });
}

void bind_reduce_op(py::module_& m) {
  py::enum_<ReduceOp>(m, "ReduceOp", "The reduction of all_reduce, reduce and reduce_scatter.")
      .value("SUM", ReduceOp::kSum)
      .value("PRODUCT", ReduceOp::kProduct)
      .value("MIN", ReduceOp::kMin)
      .value("MAX", ReduceOp::kMax)
      .value("AVG", ReduceOp::kAvg, "sum / group size (integer division for integers)")
      .value("BAND", ReduceOp::kBAnd, "bitwise and (integer dtypes)")
      .value("BOR", ReduceOp::kBOr)
      .value("BXOR", ReduceOp::kBXor);
}

void bind_work(py::module_& m) {
  py::class_<Work>(m, "Work", "The handle an operation called with async_op=True returns.")
      .def("wait", &Work::wait, py::arg("timeout") = py::none(),
           "Blocks until the operation completed (its buffers may then be used) and raises "
           "its error. With timeout (seconds), raises weft.TimeoutError if it has not "
           "completed by then; the operation goes on.")
      .def("is_completed", &Work::is_completed)
      .def("source_rank", &Work::source_rank,
           "recv_any's sender once completed; -1 before, on failure, and for other operations.");
}

void bind_group_basics(py::class_<ProcessGroup, std::shared_ptr<ProcessGroup>>& c) {
  c.def("rank", &ProcessGroup::rank, "This process's rank in the group.")
      .def("size", &ProcessGroup::size, "The number of ranks in the group.")
      .def_property_readonly("backend",
                             [](const ProcessGroup& g) { return std::string(g.backend_name()); })
      .def_property_readonly("engine",
                             [](const ProcessGroup& g) { return std::string(g.engine_name()); })
      .def_property_readonly("name", &ProcessGroup::name)
      .def_property(
          "timeout", [](const ProcessGroup& g) { return g.timeout().count(); },
          [](ProcessGroup& g, double s) { g.set_timeout(Seconds(s)); },
          "Seconds each operation may wait for its peers (300 unless set).")
      .def("abort", &ProcessGroup::abort, py::arg("reason") = "aborted from Python",
           py::call_guard<py::gil_scoped_release>(),
           "Makes the group unusable: the operation in progress fails, later ones raise "
           "GroupBroken, the other ranks get PeerError(reason).")
      .def(
          "new_group",
          [](ProcessGroup& g, const std::vector<int>& ranks) {
            py::gil_scoped_release release;
            return g.new_group(ranks);
          },
          py::arg("ranks"),
          "A subgroup of `ranks` (this group's numbering). Collective: every rank calls it; "
          "None on ranks not in it.")
      .def(
          "split",
          [](ProcessGroup& g, int color, int key) {
            py::gil_scoped_release release;
            return g.split(color, key);
          },
          py::arg("color"), py::arg("key") = 0,
          "Ranks with equal colors form one group, ordered by key then rank; a negative color "
          "joins none (None). Collective.");
}

void bind_collectives(py::class_<ProcessGroup, std::shared_ptr<ProcessGroup>>& c) {
  const auto timeout = py::arg("timeout") = py::none();
  const auto async_op = py::arg("async_op") = false;
  c.def(
      "broadcast",
      [](ProcessGroup& g, const py::object& tensor, int src, std::optional<double> t, bool a) {
        Buffers b = args({{&tensor, g.rank() != src}}, {"tensor"});  // the root only reads
        const dist::Buffer buf = b[0].buffer();
        return issue(g, a, std::move(b), &ProcessGroup::broadcast_async, &ProcessGroup::broadcast,
                     buf, src, options(t));
      },
      py::arg("tensor"), py::arg("src"), py::kw_only(), timeout, async_op,
      "Copies src's tensor into every rank's.");
  c.def(
      "all_reduce",
      [](ProcessGroup& g, const py::object& tensor, ReduceOp op, std::optional<double> t, bool a) {
        Buffers b = args({{&tensor, true}}, {"tensor"});
        const dist::Buffer buf = b[0].buffer();
        return issue(g, a, std::move(b), &ProcessGroup::all_reduce_async, &ProcessGroup::all_reduce,
                     buf, op, options(t));
      },
      py::arg("tensor"), py::arg("op") = ReduceOp::kSum, py::kw_only(), timeout, async_op,
      "Reduces every rank's tensor element-wise; every rank gets the result, in place.");
  c.def(
      "reduce",
      [](ProcessGroup& g, const py::object& tensor, int dst, ReduceOp op, std::optional<double> t,
         bool a) {
        Buffers b = args({{&tensor, true}}, {"tensor"});
        const dist::Buffer buf = b[0].buffer();
        return issue(g, a, std::move(b), &ProcessGroup::reduce_async, &ProcessGroup::reduce, buf,
                     dst, op, options(t));
      },
      py::arg("tensor"), py::arg("dst"), py::arg("op") = ReduceOp::kSum, py::kw_only(), timeout,
      async_op,
      "As all_reduce, but only dst gets the result; other tensors are left as they were.");
  c.def(
      "all_gather",
      [](ProcessGroup& g, const py::object& output, const py::object& input,
         std::optional<double> t, bool a) {
        if (py::isinstance<py::list>(output) || py::isinstance<py::tuple>(output)) {
          return all_gather_into_list(g, output, input, options(t), a);
        }
        Buffers b = args({{&output, true}, {&input, false}}, {"output", "input"});
        const dist::Buffer out = b[0].buffer(), in = b[1].buffer();
        // The one-buffer forms (ProcessGroup also has all_gather into a list of buffers).
        using Async = WorkPtr (ProcessGroup::*)(dist::Buffer, dist::Buffer, OpOptions);
        using Blocking = void (ProcessGroup::*)(dist::Buffer, dist::Buffer, OpOptions);
        return issue(g, a, std::move(b), static_cast<Async>(&ProcessGroup::all_gather_async),
                     static_cast<Blocking>(&ProcessGroup::all_gather), out, in, options(t));
      },
      py::arg("output"), py::arg("input"), py::kw_only(), timeout, async_op,
      "output holds size() * input's elements; rank r's input lands at r * len(input) "
      "(torch's all_gather_into_tensor); or output is a list of size() arrays, rank r's "
      "input landing in output[r] (torch's all_gather).");
  c.def(
      "all_gather_v",
      [](ProcessGroup& g, const py::object& output, const py::object& input,
         const std::vector<std::size_t>& counts, std::optional<double> t, bool a) {
        Buffers b = args({{&output, true}, {&input, false}}, {"output", "input"});
        const dist::Buffer out = b[0].buffer(), in = b[1].buffer();
        return issue(g, a, std::move(b), &ProcessGroup::all_gather_v_async,
                     &ProcessGroup::all_gather_v, out, in, counts, options(t));
      },
      py::arg("output"), py::arg("input"), py::arg("counts"), py::kw_only(), timeout, async_op,
      "counts[r] elements from rank r, packed in rank order.");
  c.def(
      "gather",
      [](ProcessGroup& g, const py::object& output, const py::object& input, int dst,
         std::optional<double> t, bool a) {
        Buffers b = args({{&input, false}}, {"input"});
        const dist::Buffer in = b[0].buffer();
        const dist::Buffer out = buffer_or_empty(b, output, "output", true);
        return issue(g, a, std::move(b), &ProcessGroup::gather_async, &ProcessGroup::gather, out,
                     in, dst, options(t));
      },
      py::arg("output"), py::arg("input"), py::arg("dst"), py::kw_only(), timeout, async_op,
      "On dst, output gets size() * input's elements in rank order; elsewhere output may be "
      "None.");
  c.def(
      "scatter",
      [](ProcessGroup& g, const py::object& output, const py::object& input, int src,
         std::optional<double> t, bool a) {
        Buffers b = args({{&output, true}}, {"output"});
        const dist::Buffer out = b[0].buffer();
        const dist::Buffer in = buffer_or_empty(b, input, "input", false);
        return issue(g, a, std::move(b), &ProcessGroup::scatter_async, &ProcessGroup::scatter, out,
                     in, src, options(t));
      },
      py::arg("output"), py::arg("input"), py::arg("src"), py::kw_only(), timeout, async_op,
      "src's input holds size() blocks; rank r's output gets block r. Elsewhere input may be "
      "None.");
  c.def(
      "reduce_scatter",
      [](ProcessGroup& g, const py::object& output, const py::object& input, ReduceOp op,
         std::optional<double> t, bool a) {
        Buffers b = args({{&output, true}, {&input, false}}, {"output", "input"});
        const dist::Buffer out = b[0].buffer(), in = b[1].buffer();
        return issue(g, a, std::move(b), &ProcessGroup::reduce_scatter_async,
                     &ProcessGroup::reduce_scatter, out, in, op, options(t));
      },
      py::arg("output"), py::arg("input"), py::arg("op") = ReduceOp::kSum, py::kw_only(), timeout,
      async_op,
      "input holds size() blocks of len(output); rank r gets the reduction of every rank's "
      "block r (torch's reduce_scatter_tensor).");
  c.def(
      "all_to_all",
      [](ProcessGroup& g, const py::object& output, const py::object& input,
         std::optional<double> t, bool a) {
        Buffers b = args({{&output, true}, {&input, false}}, {"output", "input"});
        const dist::Buffer out = b[0].buffer(), in = b[1].buffer();
        return issue(g, a, std::move(b), &ProcessGroup::all_to_all_async, &ProcessGroup::all_to_all,
                     out, in, options(t));
      },
      py::arg("output"), py::arg("input"), py::kw_only(), timeout, async_op,
      "Block j of input goes to rank j; block i of output comes from rank i.");
  c.def(
      "all_to_all_v",
      [](ProcessGroup& g, const py::object& output, const std::vector<std::size_t>& out_counts,
         const py::object& input, const std::vector<std::size_t>& in_counts,
         std::optional<double> t, bool a) {
        Buffers b = args({{&output, true}, {&input, false}}, {"output", "input"});
        const dist::Buffer out = b[0].buffer(), in = b[1].buffer();
        return issue(g, a, std::move(b), &ProcessGroup::all_to_all_v_async,
                     &ProcessGroup::all_to_all_v, out, out_counts, in, in_counts, options(t));
      },
      py::arg("output"), py::arg("output_counts"), py::arg("input"), py::arg("input_counts"),
      py::kw_only(), timeout, async_op,
      "As all_to_all with input_counts[j] elements for rank j and output_counts[i] from i.");
  c.def(
      "barrier",
      [](ProcessGroup& g, std::optional<double> t, bool a) {
        return issue(g, a, {}, &ProcessGroup::barrier_async, &ProcessGroup::barrier, options(t));
      },
      py::kw_only(), timeout, async_op, "Returns once every rank has called it.");
}

void bind_point_to_point(py::class_<ProcessGroup, std::shared_ptr<ProcessGroup>>& c) {
  const auto timeout = py::arg("timeout") = py::none();
  const auto async_op = py::arg("async_op") = false;
  c.def(
      "send",
      [](ProcessGroup& g, const py::object& tensor, int dst, int tag, std::optional<double> t,
         bool a) {
        Buffers b = args({{&tensor, false}}, {"tensor"});
        const dist::Buffer buf = b[0].buffer();
        return issue(g, a, std::move(b), &ProcessGroup::send_async, &ProcessGroup::send, buf, dst,
                     tag, options(t));
      },
      py::arg("tensor"), py::arg("dst"), py::arg("tag") = 0, py::kw_only(), timeout, async_op,
      "Sends to dst; matched by (source, tag) in order. Does not wait for the receive.");
  c.def(
      "recv",
      [](ProcessGroup& g, const py::object& tensor, int src, int tag, std::optional<double> t,
         bool a) {
        Buffers b = args({{&tensor, true}}, {"tensor"});
        const dist::Buffer buf = b[0].buffer();
        return issue(g, a, std::move(b), &ProcessGroup::recv_async, &ProcessGroup::recv, buf, src,
                     tag, options(t));
      },
      py::arg("tensor"), py::arg("src"), py::arg("tag") = 0, py::kw_only(), timeout, async_op,
      "Receives src's next message with tag into tensor (sizes must match).");
  c.def(
      "recv_any",
      [](ProcessGroup& g, const py::object& tensor, int tag, std::optional<double> t,
         bool a) -> py::object {
        Buffers b = args({{&tensor, true}}, {"tensor"});
        const dist::Buffer buf = b[0].buffer();
        int source = -1;
        py::object work = run(g, a, std::move(b), [&](bool async) -> WorkPtr {
          if (async) return g.recv_any_async(buf, tag, options(t));
          source = g.recv_any(buf, tag, options(t));
          return nullptr;
        });
        return a ? work : py::int_(source);
      },
      py::arg("tensor"), py::arg("tag") = 0, py::kw_only(), timeout, async_op,
      "Receives from whichever rank sends first with tag; returns its rank (async: "
      "Work.source_rank()).");
}

}  // namespace

void bind_dist(py::module_& m) {
  bind_reduce_op(m);
  bind_work(m);
  py::class_<ProcessGroup, std::shared_ptr<ProcessGroup>> group(
      m, "ProcessGroup",
      "Ranks that cooperate through collectives (weft/dist/process_group.h). Tensors are "
      "numpy arrays, torch CPU tensors or any contiguous buffer; they are used in place, "
      "without copies.");
  bind_group_basics(group);
  bind_collectives(group);
  bind_point_to_point(group);
  m.def(
      "init_process_group",
      [](const std::string& backend, const std::string& init_method, int rank, int world_size,
         std::optional<double> timeout) {
        arm_interrupts();
        dist::InitOptions o{.backend = backend,
                            .init_method = init_method,
                            .rank = rank,
                            .world_size = world_size,
                            .timeout = std::nullopt};
        if (timeout) o.timeout = Seconds(*timeout);
        py::gil_scoped_release release;
        return dist::init_process_group(o);
      },
      py::arg("backend") = "", py::arg("init_method") = "", py::arg("rank") = -1,
      py::arg("world_size") = -1, py::arg("timeout") = py::none(),
      "Joins the job and returns its world group (weft/dist/init.h): the rank, world size "
      "and master from weftrun's (or torchrun's, mpirun's, srun's) environment unless given.");
  m.def("registered_backends", &dist::registered_backends);
  m.def(
      "_launch_environment",
      []() -> std::optional<py::dict> {
        const auto env = dist::launch_environment();
        if (!env) return std::nullopt;
        py::dict d;
        d["launcher"] = env->launcher;
        d["rank"] = env->rank;
        d["world_size"] = env->world_size;
        d["local_rank"] = env->local_rank;
        d["local_world_size"] = env->local_world_size;
        d["master_addr"] = env->master_addr ? py::object(py::str(*env->master_addr)) : py::none();
        d["master_port"] = env->master_port ? py::object(py::int_(*env->master_port)) : py::none();
        return d;
      },
      "This process's place in its job as its launcher (weftrun, torchrun, mpirun, an MPI "
      "launcher speaking PMI, srun) set it (weft/dist/launch_env.h), as a dict; None outside "
      "a launcher.");
}

}  // namespace weft::python
