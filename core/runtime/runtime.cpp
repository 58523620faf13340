// The non-virtual front of core::Runtime: each operation issues through the backend's hook
// and hands back the awaitable, so every backend gets the same scheduling points.
#include "core/runtime/runtime.hpp"

namespace shardcheck::core {

std::string_view to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_gather:
      return "all_gather";
    case CollectiveKind::reduce_scatter:
      return "reduce_scatter";
    case CollectiveKind::all_reduce:
      return "all_reduce";
    case CollectiveKind::broadcast:
      return "broadcast";
    case CollectiveKind::reduce:
      return "reduce";
    case CollectiveKind::all_to_all:
      return "all_to_all";
    case CollectiveKind::barrier:
      return "barrier";
  }
  return "?";
}

bool different_tensors(const TensorOrigin& a, const TensorOrigin& b) {
  using Kind = TensorOrigin::Kind;
  if (a.kind == Kind::none || b.kind == Kind::none || a.kind != b.kind) return false;
  if (a.kind == Kind::parameter) return a.where != b.where;
  if (a.where != b.where) return a.exact && b.exact;
  return a.nth >= 0 && b.nth >= 0 && a.of == b.of && a.nth != b.nth;
}

std::string to_string(const TensorOrigin& o) {
  switch (o.kind) {
    case TensorOrigin::Kind::none:
      return "";
    case TensorOrigin::Kind::parameter:
      return "parameter '" + o.where + "'";
    case TensorOrigin::Kind::allocated:
      break;
  }
  if (o.nth < 0) return "the tensor allocated at " + o.where;
  const int64_t n = o.nth + 1;
  const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th"
                       : n % 10 == 1                    ? "st"
                       : n % 10 == 2                    ? "nd"
                       : n % 10 == 3                    ? "rd"
                                                        : "th";
  return "the " + std::to_string(n) + suffix + " tensor allocated at " + o.where;
}

std::string op_name(const KernelCall& c) { return "kernel '" + c.name + "'"; }
std::string op_name(const CollectiveCall& c) { return std::string(to_string(c.kind)) + " '" + c.tag + "'"; }
std::string op_name(const P2PCall& c, bool send) {
  return std::string(send ? "send '" : "recv '") + c.tag + (send ? "' to " : "' from ") +
         std::to_string(c.peer);
}

Issued<BufferId> Runtime::alloc(int64_t bytes, StreamId stream, std::string_view name) {
  return Issued<BufferId>(this, do_alloc(bytes, stream, name));
}
Issued<BufferId> Runtime::alloc_at(int64_t bytes, StreamId stream, std::string_view name, uint64_t address) {
  return Issued<BufferId>(this, do_alloc_at(bytes, stream, name, address));
}
Issued<> Runtime::free(BufferId buffer) {
  do_free(buffer);
  return Issued<>(this);
}
Issued<> Runtime::record_stream(BufferId buffer, StreamId stream) {
  do_record_stream(buffer, stream);
  return Issued<>(this);
}
Issued<> Runtime::record(EventId event, StreamId stream) {
  do_record(event, stream);
  return Issued<>(this);
}
Issued<> Runtime::wait_event(StreamId stream, EventId event) {
  do_wait_event(stream, event);
  return Issued<>(this);
}
Issued<> Runtime::wait_stream(StreamId waiter, StreamId waited) {
  do_wait_stream(waiter, waited);
  return Issued<>(this);
}
Issued<> Runtime::sync(StreamId stream) {
  do_sync(stream);
  return Issued<>(this);
}
Issued<> Runtime::sync_event(EventId event) {
  do_sync_event(event);
  return Issued<>(this);
}
Issued<> Runtime::sync_device() {
  do_sync_device();
  return Issued<>(this);
}
Issued<> Runtime::launch(KernelCall call) {
  do_launch(std::move(call));
  return Issued<>(this);
}
Issued<> Runtime::collective(CollectiveCall call) {
  do_collective(std::move(call));
  return Issued<>(this);
}
Issued<> Runtime::send(P2PCall call) {
  do_send(std::move(call));
  return Issued<>(this);
}
Issued<> Runtime::recv(P2PCall call) {
  do_recv(std::move(call));
  return Issued<>(this);
}
Issued<> Runtime::upload(TensorRef dst, StreamId stream, std::span<const std::byte> data) {
  do_upload(dst, stream, data);
  return Issued<>(this);
}
Issued<> Runtime::download(TensorRef src, StreamId stream, std::span<std::byte> out) {
  do_download(src, stream, out);
  return Issued<>(this);
}

namespace {
std::string collective_label(const CollectiveCall& c) {
  return std::string(to_string(c.kind)) + " '" + c.tag + "'";
}

// A list form's parts: one per member, each of the whole's dtype, together the whole's size.
Status check_parts(const CollectiveCall& c, const TensorRef& whole, const std::vector<TensorRef>& parts,
                   int members, const char* side) {
  const std::string what = collective_label(c) + ": its " + side + " list";
  if (whole.buffer != -1)
    return fail(what + " stands for the whole " + side + ", which has no buffer of its own");
  if (static_cast<int>(parts.size()) != members) return fail(what + " must hold one tensor per member");
  for (const TensorRef& p : parts) {
    if (p.dtype != whole.dtype) return fail(what + " holds another dtype");
    if (p.numel * members != whole.numel) return fail(what + " must split the whole into equal blocks");
  }
  return {};
}
}  // namespace

Status check_collective_shape(const CollectiveCall& c, int members) {
  const int64_t in = c.input.numel, out = c.output.numel;
  // Named only when something is wrong: every collective of every rank is checked.
  const auto what = [&c] { return collective_label(c); };
  if (c.input.dtype != c.output.dtype) return fail(what() + ": input and output dtypes differ");
  const bool gathers = c.kind == CollectiveKind::all_gather || c.kind == CollectiveKind::all_to_all;
  const bool scatters = c.kind == CollectiveKind::reduce_scatter || c.kind == CollectiveKind::all_to_all;
  if (!c.input_parts.empty()) {
    if (!scatters) return fail(what() + ": only reduce_scatter and all_to_all take a list of inputs");
    if (Status e = check_parts(c, c.input, c.input_parts, members, "input"); !e) return e;
  }
  if (!c.output_parts.empty()) {
    if (!gathers) return fail(what() + ": only all_gather and all_to_all take a list of outputs");
    if (Status e = check_parts(c, c.output, c.output_parts, members, "output"); !e) return e;
  }
  switch (c.kind) {
    case CollectiveKind::all_gather:
      if (out != in * members) return fail(what() + ": output must hold input x group size elements");
      break;
    case CollectiveKind::reduce_scatter:
      if (in != out * members) return fail(what() + ": input must hold output x group size elements");
      break;
    case CollectiveKind::all_reduce:
    case CollectiveKind::broadcast:
    case CollectiveKind::reduce:
      if (in != out) return fail(what() + ": input and output must have the same length");
      break;
    case CollectiveKind::all_to_all:
      if (in != out) return fail(what() + ": input and output must have the same length");
      if (in % members != 0) return fail(what() + ": its length must be a multiple of the group size");
      break;
    case CollectiveKind::barrier:
      if (in != 0 || out != 0) return fail(what() + ": a barrier moves no data");
      break;
  }
  if ((c.kind == CollectiveKind::broadcast || c.kind == CollectiveKind::reduce) &&
      (c.root < 0 || c.root >= members)) {
    return fail(what() + ": root is not a group rank");
  }
  return {};
}

}  // namespace shardcheck::core
