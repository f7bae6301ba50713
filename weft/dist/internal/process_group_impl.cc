#include "weft/dist/internal/process_group_impl.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <set>
#include <sstream>

#include "weft/base/system.h"
#include "weft/dist/algorithms/collectives.h"
#include "weft/dist/internal/call_check.h"
#include "weft/dist/internal/op_queue.h"

namespace weft::dist {

struct ProcessGroup::Impl::OpCall {
  OpContext op;
  std::uint64_t seq;
};

namespace {

using Sig = internal::CallSignature;

// Tag layout: [group id: 32][p2p flag: 1][sequence: 19][step: 12]. Sequence numbers wrap
// harmlessly: operations of one group run one at a time, so no two in flight share one.
constexpr Tag kP2PFlag = Tag{1} << 31;
constexpr int kStepBits = 12;
static_assert(kMaxSteps == 1 << kStepBits, "algorithms number steps in the tag's low bits");

Tag collective_tag(std::uint32_t group, std::uint64_t seq) {
  return (Tag{group} << 32) | ((seq & 0x7ffff) << kStepBits);
}

Tag p2p_tag(std::uint32_t group, int tag) {
  return (Tag{group} << 32) | kP2PFlag | static_cast<Tag>(tag);
}

// The group whose operation this thread will wait for at once, if any (CallerWaits, issue()).
// Here, beside issue(), so that reading it is a plain thread-local access.
thread_local const ProcessGroup* t_caller_waits_on = nullptr;

std::uint32_t mix(std::uint64_t x) {  // splitmix64's finalizer, folded to 32 bits
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<std::uint32_t>(x ^ (x >> 32));
}

bool is_half(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

template <class H>
void widen_typed(const void* in, float* out, std::size_t n) {
  const H* h = static_cast<const H*>(in);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(h[i]);
}

template <class H>
void narrow_typed(const float* in, void* out, std::size_t n) {
  H* h = static_cast<H*>(out);
  for (std::size_t i = 0; i < n; ++i) h[i] = H(in[i]);
}

std::vector<float> widen(const Buffer& b) {
  std::vector<float> wide(b.count);
  if (b.dtype == DType::kFloat16) widen_typed<Half>(b.data, wide.data(), b.count);
  if (b.dtype == DType::kBFloat16) widen_typed<BFloat16>(b.data, wide.data(), b.count);
  return wide;
}

void narrow(const std::vector<float>& wide, const Buffer& b) {
  if (b.dtype == DType::kFloat16) narrow_typed<Half>(wide.data(), b.data, b.count);
  if (b.dtype == DType::kBFloat16) narrow_typed<BFloat16>(wide.data(), b.data, b.count);
}

// Runs a reducing engine call `run(in, out, op)`: 16-bit floats on float32 copies unless the
// engine reduces them itself (so partial sums stay float32), kAvg as kSum followed by a
// division where the result lands.
template <class Run>
void reducing(const CollectiveEngine& engine, Buffer out, Buffer in, ReduceOp op, std::size_t n,
              bool result_here, Run run) {
  const ReduceOp base = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  if (!is_half(in.dtype) || engine.reduces_16bit_floats()) {
    run(out, in, base);
    if (op == ReduceOp::kAvg && result_here) finish_average(out.data, out.count, out.dtype, n);
    return;
  }
  std::vector<float> wide_in = widen(in);
  std::vector<float> wide_out = in.data == out.data ? std::vector<float>() : widen(out);
  std::vector<float>& wo = in.data == out.data ? wide_in : wide_out;
  run(Buffer(wo.data(), out.count, DType::kFloat32),
      Buffer(wide_in.data(), in.count, DType::kFloat32), base);
  if (!result_here) return;
  if (op == ReduceOp::kAvg) finish_average(wo.data(), out.count, DType::kFloat32, n);
  narrow(wo, out);
}

std::size_t sum(const std::vector<std::size_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::size_t{0});
}

[[noreturn]] void invalid(std::string_view op, const std::string& what) {
  throw InvalidArgument("dist::" + std::string(op) + ": " + what);
}

[[noreturn]] void invalid(Op op, const std::string& what) { invalid(op_name(op), what); }

}  // namespace

ProcessGroup::Impl::Impl(ProcessGroup& owner, std::shared_ptr<Backend> backend,
                         std::vector<int> members, GroupOptions options, std::uint32_t id,
                         bool world)
    : owner_(owner),
      backend_(std::move(backend)),
      members_(std::move(members)),
      rank_(-1),
      options_(std::move(options)),
      id_(id),
      recorder_(recorder::FlightRecorder::process()),
      recorder_group_(recorder::kMaxGroups) {
  collectives_.queue = std::make_unique<internal::OpQueue>();
  Promise<void> done;
  done.set_value();
  completed_ = std::make_shared<Work>(done.get_future());
  const int global = transport().rank();
  const auto it = std::find(members_.begin(), members_.end(), global);
  if (it == members_.end()) {
    throw InvalidArgument("dist::ProcessGroup: rank " + std::to_string(global) +
                          " is not among the group's members");
  }
  checked_timeout(options_.timeout, "dist::ProcessGroup's timeout");
  rank_ = static_cast<int>(it - members_.begin());
  engine_ =
      backend_->make_engine(members_, world, [this](std::int64_t mine) { return agree(mine); });
  if (world) agree_on_tuning();
  tune(backend_->tuning());
  if (world) recorder_.set_rank(global, transport().size());
  recorder_group_ = recorder_.add_group(id_, options_.name, members_, rank_);
}

void ProcessGroup::Impl::agree_on_tuning() {
  const TuningKey key{cpu_model(), std::string(backend_->name()), transport().size()};
  std::string why;
  std::optional<CollectiveTuning> table;
  try {  // every rank must reach agree(), whatever its file system says
    table = read_table(key, &why);
  } catch (const std::exception& e) {
    why = std::string("reading the collective table failed: ") + e.what() + "; using the defaults";
  }
  // On a tag of its own (the last sequence number's, long unused when the group's operations
  // reach it), so the user's first collective stays #0.
  const std::vector<std::int64_t> all = agree(table ? fingerprint(*table) : 0, 0x7ffff);
  const bool same =
      std::all_of(all.begin(), all.end(), [&](std::int64_t f) { return f == all[0]; });
  backend_->set_tuning(same && table ? *table : CollectiveTuning{});
  if (rank_ != 0) return;
  if (!why.empty()) std::fprintf(stderr, "weft: %s\n", why.c_str());
  if (!same) {
    std::fprintf(stderr,
                 "weft: the ranks read different collective tables (%s on rank 0): every rank "
                 "uses the defaults\n",
                 table_path(key).value_or("none").c_str());
  }
}

void ProcessGroup::Impl::tune(const CollectiveTuning& tuning) {
  tuning_ = tuning;
  engine_->tune(tuning);
}

// An all-gather of one integer on the generic engine, for the backend while it builds this
// group's engine: the group's first collective sequence number.
std::vector<std::int64_t> ProcessGroup::Impl::agree(std::int64_t mine) {
  return agree(mine, next_seq_++);
}

std::vector<std::int64_t> ProcessGroup::Impl::agree(std::int64_t mine, std::uint64_t seq) {
  GenericEngine bootstrap(backend_->transport(), members_);
  std::vector<std::int64_t> all(members_.size());
  const OpContext op{collective_tag(id_, seq), Deadline::after(options_.timeout)};
  try {
    bootstrap.all_gather(Buffer(all), Buffer(&mine, 1, DType::kInt64), op);
  } catch (const std::exception& e) {
    fail("creating " + describe() + " failed: " + e.what());
    throw;
  }
  return all;
}

ProcessGroup::CallerWaits::CallerWaits(const ProcessGroup* group) : previous_(t_caller_waits_on) {
  t_caller_waits_on = group;
}

ProcessGroup::CallerWaits::~CallerWaits() { t_caller_waits_on = previous_; }

ProcessGroup::Impl::~Impl() {
  bool unfinished;
  {
    std::lock_guard lock(mu_);
    unfinished = collectives_.outstanding > 0;
    for (const auto& [key, lane] : p2p_lanes_) unfinished |= lane->outstanding > 0;
    // Operations not started yet must not run: their buffers may already be gone (the
    // group is usually destroyed while its caller unwinds).
    if (broken_.empty()) broken_ = "the process group was destroyed";
  }
  // The peers of an operation that will never complete here must not wait for it.
  if (unfinished) {
    transport().abort("rank " + std::to_string(transport().rank()) + " destroyed " + describe() +
                      " with operations unfinished");
  }
  for (auto& [key, lane] : p2p_lanes_) lane->queue.reset();
  collectives_.queue.reset();
}

Seconds ProcessGroup::Impl::timeout() const {
  std::lock_guard lock(mu_);
  return options_.timeout;
}

void ProcessGroup::Impl::set_timeout(Seconds timeout) {
  checked_timeout(timeout, "ProcessGroup::set_timeout");
  std::lock_guard lock(mu_);
  options_.timeout = timeout;
}

std::string ProcessGroup::Impl::describe() const {
  return "group '" + options_.name + "' (backend " + std::string(backend_->name()) + ", rank " +
         rank_name(rank_) + " of " + std::to_string(size()) + ")";
}

template <class Body>
std::shared_ptr<Work> ProcessGroup::Impl::issue(Op op, OpOptions options,
                                                std::optional<internal::CallSignature> signature,
                                                Body body, int p2p_peer, bool p2p_send,
                                                bool at_once) {
  // Checked before anything changes: a refused call leaves the group as it was.
  if (options.timeout) checked_timeout(*options.timeout, "the operation's timeout");
  std::unique_lock lock(mu_);
  if (!broken_.empty()) {
    throw GroupBroken("dist::" + std::string(op_name(op)) + " on " + describe() +
                      ": the group is unusable after an earlier failure (" + broken_ +
                      "); create a new process group");
  }
  Lane& lane = p2p_peer == kNoPeer ? collectives_ : p2p_lane(p2p_peer, p2p_send);
  // An operation its caller waits for at once (CallerWaits: the blocking calls, and bindings
  // that wait), or one that will not wait for anyone, runs right here on an idle lane:
  // handing it to the queue thread and back would cost two wake-ups. Operations issued
  // meanwhile wait for it (see below).
  const bool run_here = (t_caller_waits_on == &owner_ || at_once) && lane.outstanding == 0;
  std::optional<Promise<void>> state;
  std::shared_ptr<Work> work;
  if (!run_here) {  // before the counts below, which a failed allocation must not change
    state.emplace();
    work = std::make_shared<Work>(state->get_future());
  }
  const std::uint64_t seq = signature ? next_seq_++ : 0;
  const std::uint64_t record = record_issue(op, seq, signature, p2p_peer, run_here);
  OpRun run{op, seq, options.timeout.value_or(options_.timeout), std::move(signature), record};
  ++lane.outstanding;
  if (run_here) {
    lane.inline_running = true;
    lock.unlock();
    std::exception_ptr error;
    {
      // However run_op leaves (its error handling can throw too), operations queued behind
      // this one must be released.
      struct Finish {
        Impl& group;
        Lane& lane;
        ~Finish() { group.finish_inline(lane); }
      } finish{*this, lane};
      error = run_op(run, body, /*queued=*/false);
    }
    // A receive's Work may be given its source after this; nothing else writes to one.
    if (!error && op != Op::recv_any) return completed_;
    Promise<void> done_here;
    complete(done_here, error);
    return std::make_shared<Work>(done_here.get_future());
  }
  lane.queue->push([this, &lane, state = *std::move(state), run = std::move(run),
                    body = std::move(body)]() mutable {
    {
      // Issued after an operation that runs on its caller's thread: keep issue order. No
      // deadline here because that operation has its own, which ends this wait too.
      std::unique_lock wait_lock(mu_);
      ++lane.inline_waiters;
      lane.inline_done.wait(wait_lock, [&lane] { return !lane.inline_running; });
      --lane.inline_waiters;
    }
    std::exception_ptr error;
    try {
      error = run_op(run, body, /*queued=*/true);
    } catch (...) {  // run_op's error handling failed itself (out of memory): still complete
      error = std::current_exception();
    }
    {
      // Before completing the Work: its waiter may destroy the group right after.
      std::lock_guard done_lock(mu_);
      --lane.outstanding;
    }
    complete(state, error);
  });
  return work;
}

std::uint64_t ProcessGroup::Impl::record_issue(
    Op op, std::uint64_t seq, const std::optional<internal::CallSignature>& signature, int peer,
    bool starts_now) {
  if (!recorder_.enabled()) return recorder::kWriting;
  recorder::OpInfo info{.group = recorder_group_, .seq = seq, .op = op_name(op)};
  info.started = starts_now;
  if (signature) {
    info.count = signature->count;
    info.dtype = signature->dtype;
    info.root = signature->root;
    if (signature->reduce) info.reduce = reduce_op_name(*signature->reduce);
  } else {
    info.collective = false;
    info.peer = peer;
  }
  return recorder_.issued(info);
}

void ProcessGroup::Impl::finish_inline(Lane& lane) {
  bool waited_for = false;
  {
    std::lock_guard done_lock(mu_);
    --lane.outstanding;
    lane.inline_running = false;
    waited_for = lane.inline_waiters > 0;
  }
  if (waited_for) lane.inline_done.notify_all();
}

ProcessGroup::Impl::Lane& ProcessGroup::Impl::p2p_lane(int peer, bool send) {
  auto& slot = p2p_lanes_[peer < 0 ? -1 : 2 * peer + (send ? 1 : 0)];
  if (!slot) {  // built whole before it is stored: a failed thread start leaves no half lane
    auto lane = std::make_unique<Lane>();
    lane->queue = std::make_unique<internal::OpQueue>();
    slot = std::move(lane);
  }
  return *slot;
}

void ProcessGroup::Impl::complete(Promise<void>& state, std::exception_ptr error) {
  if (error) {
    state.set_exception(error);
  } else {
    state.set_value();
  }
}

// Runs one operation, on the queue thread or inline; returns its error, or nullptr on success.
std::exception_ptr ProcessGroup::Impl::run_op(const OpRun& run,
                                              FunctionRef<void(const OpCall&)> body, bool queued) {
  if (queued) {  // an inline call checked just before, under the same lock as its issue
    std::lock_guard run_lock(mu_);
    if (!broken_.empty()) {
      return std::make_exception_ptr(GroupBroken("dist::" + std::string(op_name(run.op)) + " on " +
                                                 describe() +
                                                 ": not run, the group broke "
                                                 "earlier (" +
                                                 broken_ + ")"));
    }
  }
  const bool collective = run.signature.has_value();
  const OpCall call{OpContext{collective_tag(id_, run.seq), Deadline::after_first_use(run.timeout)},
                    run.seq};
  if (queued) recorder_.started(run.record);  // an inline one was recorded as started
  struct Recorded {                           // finished, whichever way run_op leaves
    recorder::FlightRecorder& recorder;
    std::uint64_t id;
    bool ok = false;
    ~Recorded() { recorder.finished(id, ok); }
  } recorded{recorder_, run.record};
  try {
    if (collective) engine_->note_arrival(call.op.tag);
    if (collective && internal::call_checks_enabled()) {
      internal::check_call(*engine_, call.op, size(), *run.signature, run.seq, options_.name);
    }
    body(call);
    recorded.ok = true;
    return nullptr;
  } catch (const PeerTimeout& e) {
    std::ostringstream msg;
    msg << "dist::" << op_name(run.op) << " #" << run.seq << " on " << describe()
        << " timed out after " << run.timeout.count()
        << " s: " << (collective ? missing_ranks(call.op.tag, e.peer()) : waited_for(e.peer()))
        << ". Check that every rank makes the same calls in the same order, or raise the "
           "timeout (GroupOptions::timeout, OpOptions::timeout)";
    fail(msg.str());
    return std::make_exception_ptr(TimeoutError(msg.str()));
  } catch (const CollectiveMismatch& e) {
    // Every rank found the mismatch from the same exchanged signatures; aborting the
    // transport would only replace their precise errors with PeerError.
    std::lock_guard broken_lock(mu_);
    if (broken_.empty()) broken_ = e.what();
    return std::current_exception();
  } catch (const std::exception& e) {
    fail("dist::" + std::string(op_name(run.op)) + " #" + std::to_string(run.seq) + " on " +
         describe() + " failed: " + e.what());
    return std::current_exception();
  } catch (const abi::__forced_unwind&) {
    throw;         // thread cancellation must unwind on
  } catch (...) {  // whatever it was, the operation must complete (with it) so nothing waits
    fail("dist::" + std::string(op_name(run.op)) + " #" + std::to_string(run.seq) + " on " +
         describe() + " failed with an exception that is not a std::exception");
    return std::current_exception();
  }
}

std::string ProcessGroup::Impl::group_rank_of(int global) const {
  const auto it = std::find(members_.begin(), members_.end(), global);
  return rank_name(static_cast<int>(it - members_.begin()));
}

// In a subgroup a rank's number is its place in the group; the global one is what weftrun's
// lines and the other groups' errors say.
std::string ProcessGroup::Impl::rank_name(int group_rank) const {
  const int global = members_[static_cast<std::size_t>(group_rank)];
  if (global == group_rank) return std::to_string(group_rank);
  return std::to_string(group_rank) + " (global rank " + std::to_string(global) + ")";
}

std::string ProcessGroup::Impl::waited_for(int global_peer) const {
  if (global_peer < 0) return "no rank sent";
  return "rank " + group_rank_of(global_peer) + " had not sent";
}

std::string ProcessGroup::Impl::missing_ranks(Tag op_tag, int global_peer) const {
  const auto missing = engine_->not_arrived(op_tag);
  if ((!missing || missing->empty()) && global_peer < 0) {
    return "the " + std::string(engine_->name()) +
           " engine could not say which rank had not arrived";
  }
  if (!missing || missing->empty()) {
    return "waiting for rank " + group_rank_of(global_peer) + ", whose own peers may be late";
  }
  std::string list;
  for (int r : *missing) list += (list.empty() ? "" : ", ") + rank_name(r);
  return (missing->size() == 1 ? "rank " : "ranks ") + list + " had not arrived";
}

void ProcessGroup::Impl::fail(const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    if (broken_.empty()) broken_ = reason;
  }
  // Tell every other rank now rather than let each wait for its own timeout.
  transport().abort("rank " + std::to_string(transport().rank()) + " failed: " + reason);
}

void ProcessGroup::Impl::check_root(Op op, int root) const {
  if (root < 0 || root >= size()) {
    invalid(op, "root " + std::to_string(root) + " is not a rank of the group (0 to " +
                    std::to_string(size() - 1) + ")");
  }
}

void ProcessGroup::Impl::check_reduce(Op op, const Buffer& buf, ReduceOp kind) const {
  if (is_bitwise(kind) && is_floating(buf.dtype)) {
    invalid(op, "reduce op " + std::string(reduce_op_name(kind)) +
                    " is bitwise and needs an "
                    "integer dtype, got " +
                    std::string(dtype_name(buf.dtype)));
  }
}

void ProcessGroup::Impl::check_same_dtype(Op op, const Buffer& a, const Buffer& b) const {
  if (a.dtype != b.dtype) {
    invalid(op, "output dtype " + std::string(dtype_name(a.dtype)) + " differs from input dtype " +
                    std::string(dtype_name(b.dtype)));
  }
}

void ProcessGroup::Impl::check_fits(Op op, std::initializer_list<Buffer> buffers) const {
  const std::size_t limit = backend_->max_message_bytes();
  for (const Buffer& b : buffers) {
    // 16-bit floats travel widened to float32 in the reducing operations.
    const std::size_t bytes = b.size_bytes() * (is_half(b.dtype) ? 2 : 1);
    if (bytes > limit) {
      invalid(op, "a buffer of " + std::to_string(b.size_bytes()) + " bytes exceeds the " +
                      std::string(backend_->name()) + " backend's message limit of " +
                      std::to_string(limit) + " bytes; split it into several operations");
    }
  }
}

void ProcessGroup::Impl::check_tag(Op op, int tag) const {
  if (tag < 0) invalid(op, "tag " + std::to_string(tag) + " is negative (0 <= tag < 2^31)");
}

namespace {
void check_count(Op op, const char* what, std::size_t expected, std::size_t actual) {
  if (expected != actual) {
    invalid(op, std::string(what) + " has " + std::to_string(actual) + " elements, expected " +
                    std::to_string(expected));
  }
}
}  // namespace

std::shared_ptr<Work> ProcessGroup::Impl::broadcast_async(Buffer buf, int src, OpOptions o) {
  check_fits(Op::broadcast, {buf});
  check_root(Op::broadcast, src);
  return issue(Op::broadcast, o, Sig{Op::broadcast, buf.dtype, buf.count, src, {}},
               [buf, src, e = engine_.get()](const OpCall& c) { e->broadcast(buf, src, c.op); });
}

std::shared_ptr<Work> ProcessGroup::Impl::all_reduce_async(Buffer buf, ReduceOp op, OpOptions o) {
  check_fits(Op::all_reduce, {buf});
  check_reduce(Op::all_reduce, buf, op);
  const auto n = static_cast<std::size_t>(size());
  return issue(Op::all_reduce, o, Sig{Op::all_reduce, buf.dtype, buf.count, -1, op},
               [buf, op, n, e = engine_.get()](const OpCall& c) {
                 reducing(*e, buf, buf, op, n, true,
                          [&](Buffer out, Buffer, ReduceOp r) { e->all_reduce(out, r, c.op); });
               });
}

std::shared_ptr<Work> ProcessGroup::Impl::reduce_async(Buffer buf, int dst, ReduceOp op,
                                                       OpOptions o) {
  check_fits(Op::reduce, {buf});
  check_root(Op::reduce, dst);
  check_reduce(Op::reduce, buf, op);
  const auto n = static_cast<std::size_t>(size());
  const bool root = dst == rank_;
  return issue(Op::reduce, o, Sig{Op::reduce, buf.dtype, buf.count, dst, op},
               [buf, dst, op, n, root, e = engine_.get()](const OpCall& c) {
                 reducing(*e, buf, buf, op, n, root,
                          [&](Buffer out, Buffer, ReduceOp r) { e->reduce(out, dst, r, c.op); });
               });
}

std::shared_ptr<Work> ProcessGroup::Impl::all_gather_async(Buffer out, Buffer in, OpOptions o) {
  check_fits(Op::all_gather, {in});
  check_same_dtype(Op::all_gather, out, in);
  check_count(Op::all_gather, "out", in.count * static_cast<std::size_t>(size()), out.count);
  return issue(Op::all_gather, o, Sig{Op::all_gather, in.dtype, in.count, -1, {}},
               [out, in, e = engine_.get()](const OpCall& c) { e->all_gather(out, in, c.op); });
}

std::shared_ptr<Work> ProcessGroup::Impl::all_gather_async(std::vector<Buffer> outs, Buffer in,
                                                           OpOptions o) {
  check_fits(Op::all_gather, {in});
  check_count(Op::all_gather, "outs", static_cast<std::size_t>(size()), outs.size());
  bool adjacent = true;  // one block of memory after all (slices of one tensor, say)
  for (std::size_t r = 0; r < outs.size(); ++r) {
    check_same_dtype(Op::all_gather, outs[r], in);
    if (outs[r].count != in.count) {  // the message built only on failure: this runs per call
      check_count(Op::all_gather, ("outs[" + std::to_string(r) + "]").c_str(), in.count,
                  outs[r].count);
    }
    adjacent = adjacent && outs[r].bytes() == outs[0].bytes() + r * in.size_bytes();
  }
  if (adjacent) {
    return all_gather_async(Buffer(outs[0].data, outs.size() * in.count, in.dtype), in, o);
  }
  return issue(Op::all_gather, o, Sig{Op::all_gather, in.dtype, in.count, -1, {}},
               [outs = std::move(outs), in, e = engine_.get()](const OpCall& c) {
                 e->all_gather_list(outs, in, c.op);
               });
}

std::shared_ptr<Work> ProcessGroup::Impl::all_gather_v_async(Buffer out, Buffer in,
                                                             const std::vector<std::size_t>& counts,
                                                             OpOptions o) {
  check_fits(Op::all_gather_v, {in});
  check_same_dtype(Op::all_gather_v, out, in);
  check_count(Op::all_gather_v, "counts", static_cast<std::size_t>(size()), counts.size());
  check_count(Op::all_gather_v, "in", counts[static_cast<std::size_t>(rank_)], in.count);
  check_count(Op::all_gather_v, "out", sum(counts), out.count);
  return issue(Op::all_gather_v, o, Sig{Op::all_gather_v, in.dtype, out.count, -1, {}},
               [out, in, counts, e = engine_.get()](const OpCall& c) {
                 e->all_gather_v(out, in, counts, c.op);
               });
}

std::shared_ptr<Work> ProcessGroup::Impl::gather_async(Buffer out, Buffer in, int dst,
                                                       OpOptions o) {
  check_fits(Op::gather, {in});
  check_root(Op::gather, dst);
  if (dst == rank_) {
    check_same_dtype(Op::gather, out, in);
    check_count(Op::gather, "out (on the root)", in.count * static_cast<std::size_t>(size()),
                out.count);
  }
  return issue(
      Op::gather, o, Sig{Op::gather, in.dtype, in.count, dst, {}},
      [out, in, dst, e = engine_.get()](const OpCall& c) { e->gather(out, in, dst, c.op); });
}

std::shared_ptr<Work> ProcessGroup::Impl::scatter_async(Buffer out, Buffer in, int src,
                                                        OpOptions o) {
  check_fits(Op::scatter, {out});
  check_root(Op::scatter, src);
  if (src == rank_) {
    check_same_dtype(Op::scatter, out, in);
    check_count(Op::scatter, "in (on the root)", out.count * static_cast<std::size_t>(size()),
                in.count);
  }
  return issue(
      Op::scatter, o, Sig{Op::scatter, out.dtype, out.count, src, {}},
      [out, in, src, e = engine_.get()](const OpCall& c) { e->scatter(out, in, src, c.op); });
}

std::shared_ptr<Work> ProcessGroup::Impl::reduce_scatter_async(Buffer out, Buffer in, ReduceOp op,
                                                               OpOptions o) {
  check_fits(Op::reduce_scatter, {in});
  check_same_dtype(Op::reduce_scatter, out, in);
  check_reduce(Op::reduce_scatter, in, op);
  check_count(Op::reduce_scatter, "in", out.count * static_cast<std::size_t>(size()), in.count);
  const auto n = static_cast<std::size_t>(size());
  return issue(Op::reduce_scatter, o, Sig{Op::reduce_scatter, out.dtype, out.count, -1, op},
               [out, in, op, n, e = engine_.get()](const OpCall& c) {
                 reducing(*e, out, in, op, n, true, [&](Buffer wo, Buffer wi, ReduceOp r) {
                   e->reduce_scatter(wo, wi, r, c.op);
                 });
               });
}

std::shared_ptr<Work> ProcessGroup::Impl::all_to_all_async(Buffer out, Buffer in, OpOptions o) {
  check_fits(Op::all_to_all, {in});
  check_same_dtype(Op::all_to_all, out, in);
  check_count(Op::all_to_all, "out", in.count, out.count);
  const auto n = static_cast<std::size_t>(size());
  if (in.count % n != 0) {
    invalid(Op::all_to_all, "in has " + std::to_string(in.count) +
                                " elements, not divisible by the group size " + std::to_string(n));
  }
  return issue(Op::all_to_all, o, Sig{Op::all_to_all, in.dtype, in.count, -1, {}},
               [out, in, e = engine_.get()](const OpCall& c) { e->all_to_all(out, in, c.op); });
}

std::shared_ptr<Work> ProcessGroup::Impl::all_to_all_v_async(
    Buffer out, const std::vector<std::size_t>& out_counts, Buffer in,
    const std::vector<std::size_t>& in_counts, OpOptions o) {
  check_fits(Op::all_to_all_v, {in});
  check_same_dtype(Op::all_to_all_v, out, in);
  check_count(Op::all_to_all_v, "out_counts", static_cast<std::size_t>(size()), out_counts.size());
  check_count(Op::all_to_all_v, "in_counts", static_cast<std::size_t>(size()), in_counts.size());
  check_count(Op::all_to_all_v, "out", sum(out_counts), out.count);
  check_count(Op::all_to_all_v, "in", sum(in_counts), in.count);
  return issue(Op::all_to_all_v, o, Sig{Op::all_to_all_v, in.dtype, Sig::kAnyCount, -1, {}},
               [out, out_counts, in, in_counts, e = engine_.get()](const OpCall& c) {
                 e->all_to_all_v(out, out_counts, in, in_counts, c.op);
               });
}

std::shared_ptr<Work> ProcessGroup::Impl::barrier_async(OpOptions o) {
  return issue(Op::barrier, o, Sig{Op::barrier, DType::kUInt8, 0, -1, {}},
               [e = engine_.get()](const OpCall& c) { e->barrier(c.op); });
}

std::shared_ptr<Work> ProcessGroup::Impl::send_async(Buffer buf, int dst, int tag, OpOptions o) {
  check_fits(Op::send, {buf});
  check_root(Op::send, dst);
  check_tag(Op::send, tag);
  const Tag t = p2p_tag(id_, tag);
  const int global = members_[static_cast<std::size_t>(dst)];
  return issue(
      Op::send, o, std::nullopt,
      [this, buf, global, t](const OpCall& c) {
        transport().send(global, t, {buf.bytes(), buf.size_bytes()}, c.op.deadline);
      },
      dst, /*p2p_send=*/true, transport().sends_at_once(global, buf.size_bytes()));
}

std::shared_ptr<Work> ProcessGroup::Impl::recv_async(Buffer buf, int src, int tag, OpOptions o) {
  check_fits(Op::recv, {buf});
  check_root(Op::recv, src);
  check_tag(Op::recv, tag);
  const Tag t = p2p_tag(id_, tag);
  const int global = members_[static_cast<std::size_t>(src)];
  return issue(
      Op::recv, o, std::nullopt,
      [this, buf, global, t](const OpCall& c) {
        transport().recv(global, t, {buf.bytes(), buf.size_bytes()}, c.op.deadline);
      },
      src, /*p2p_send=*/false);
}

std::shared_ptr<Work> ProcessGroup::Impl::recv_any_async(Buffer buf, int tag, OpOptions o) {
  check_fits(Op::recv_any, {buf});
  check_tag(Op::recv_any, tag);
  const Tag t = p2p_tag(id_, tag);
  auto source = std::make_shared<int>(-1);
  auto work = issue(
      Op::recv_any, o, std::nullopt,
      [this, buf, t, source](const OpCall& c) {
        const int global = transport().recv_any(t, {buf.bytes(), buf.size_bytes()}, c.op.deadline);
        const auto it = std::find(members_.begin(), members_.end(), global);
        *source = static_cast<int>(it - members_.begin());
      },
      -1, /*p2p_send=*/false);
  work->source_ = std::move(source);  // before anyone else holds the Work
  return work;
}

// Collective over the new group (its engine may need the members to agree on something).
std::shared_ptr<ProcessGroup> ProcessGroup::Impl::make_subgroup(const std::vector<int>& group_ranks,
                                                                std::string name,
                                                                std::uint32_t index) {
  std::vector<int> globals;
  for (int r : group_ranks) globals.push_back(members_[static_cast<std::size_t>(r)]);
  // The creation index alone tells groups apart: the groups made by one call (a split) have
  // disjoint members.
  const std::uint32_t id = mix((std::uint64_t{id_} << 32) | index);
  return std::shared_ptr<ProcessGroup>(
      new ProcessGroup(backend_, std::move(globals), GroupOptions{timeout(), std::move(name)}, id,
                       /*world=*/false));
}

std::shared_ptr<ProcessGroup> ProcessGroup::Impl::new_group(const std::vector<int>& ranks) {
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= size()) {
      invalid("new_group", "rank " + std::to_string(r) + " is not a rank of the group (0 to " +
                               std::to_string(size() - 1) + ")");
    }
    if (!seen.insert(r).second)
      invalid("new_group", "rank " + std::to_string(r) + " is listed twice");
  }
  std::uint32_t index;
  {
    std::lock_guard lock(mu_);
    index = subgroups_++;
  }
  if (!seen.contains(rank_)) return nullptr;
  return make_subgroup(ranks, options_.name + "/" + std::to_string(index), index);
}

std::shared_ptr<ProcessGroup> ProcessGroup::Impl::split(int color, int key) {
  std::uint32_t index;
  {
    std::lock_guard lock(mu_);
    index = subgroups_++;
  }
  const auto n = static_cast<std::size_t>(size());
  std::vector<std::int64_t> mine{color, key};
  std::vector<std::int64_t> all(2 * n);
  owner_.all_gather(all, mine);
  if (color < 0) return nullptr;
  std::vector<int> ranks;
  for (std::size_t r = 0; r < n; ++r) {
    if (all[2 * r] == color) ranks.push_back(static_cast<int>(r));
  }
  std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) {
    return all[2 * static_cast<std::size_t>(a) + 1] < all[2 * static_cast<std::size_t>(b) + 1];
  });
  return make_subgroup(
      ranks, options_.name + "/" + std::to_string(index) + ":" + std::to_string(color), index);
}

}  // namespace weft::dist
