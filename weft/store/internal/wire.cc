#include "weft/store/internal/wire.h"

#include <cstdio>
#include <cstring>
#include <span>

#include "weft/store/internal/crc32.h"
#include "weft/store/internal/kv_table.h"

namespace weft::store::internal {
namespace {

// Little-endian encoding by shifts, so the format does not depend on the host's byte order.
void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_le(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(in[at + i]);
  return v;
}

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

std::string encode_frame(MsgType type, std::string_view payload) {
  std::string out;
  out.reserve(kHeaderBytes + payload.size());
  put_le(out, kMagic, 4);
  put_le(out, kVersion, 2);
  put_le(out, static_cast<std::uint16_t>(type), 2);
  put_le(out, payload.size(), 4);
  put_le(out, crc32(payload), 4);
  out.append(payload);
  return out;
}

FrameHeader decode_header(std::string_view bytes) {
  FrameHeader h;
  h.magic = static_cast<std::uint32_t>(get_le(bytes, 0, 4));
  h.version = static_cast<std::uint16_t>(get_le(bytes, 4, 2));
  h.type = static_cast<MsgType>(get_le(bytes, 6, 2));
  h.length = static_cast<std::uint32_t>(get_le(bytes, 8, 4));
  h.crc = static_cast<std::uint32_t>(get_le(bytes, 12, 4));
  if (h.magic != kMagic) {
    throw ProtocolError(ErrorCode::kMalformed,
                        "bad frame magic " + hex(h.magic) + " (expected " + hex(kMagic) +
                            "); the peer does not speak the TCPStore protocol");
  }
  if (h.version != kVersion) {
    throw ProtocolError(ErrorCode::kBadVersion,
                        "protocol version " + std::to_string(h.version) + " (this side speaks " +
                            std::to_string(kVersion) + "); use the same weft on both sides");
  }
  if (h.length > kMaxRecordBytes) {
    throw ProtocolError(ErrorCode::kTooLarge, "frame payload of " + std::to_string(h.length) +
                                                  " bytes exceeds the " +
                                                  std::to_string(kMaxRecordBytes) + "-byte limit");
  }
  return h;
}

void check_crc(const FrameHeader& header, std::string_view payload) {
  if (crc32(payload) != header.crc) {
    throw ProtocolError(ErrorCode::kMalformed, "frame payload fails its checksum");
  }
}

void send_frame(net::Socket& socket, MsgType type, std::string_view payload, Deadline deadline) {
  const std::string frame = encode_frame(type, payload);
  socket.send_all(std::as_bytes(std::span(frame)), deadline);
}

Frame recv_frame(net::Socket& socket, Deadline deadline) {
  std::string header(kHeaderBytes, '\0');
  socket.recv_all(std::as_writable_bytes(std::span(header)), deadline);
  const FrameHeader h = decode_header(header);
  Frame f{h.type, std::string(h.length, '\0')};
  socket.recv_all(std::as_writable_bytes(std::span(f.payload)), deadline);
  check_crc(h, f.payload);
  return f;
}

PayloadWriter& PayloadWriter::u32(std::uint32_t v) {
  put_le(out_, v, 4);
  return *this;
}

PayloadWriter& PayloadWriter::i64(std::int64_t v) {
  put_le(out_, static_cast<std::uint64_t>(v), 8);
  return *this;
}

PayloadWriter& PayloadWriter::str(std::string_view s) {
  u32(static_cast<std::uint32_t>(s.size()));
  out_.append(s);
  return *this;
}

PayloadWriter& PayloadWriter::bytes(std::span<const std::byte> b) {
  return str({reinterpret_cast<const char*>(b.data()), b.size()});
}

PayloadWriter& PayloadWriter::keys(const std::vector<std::string>& keys) {
  u32(static_cast<std::uint32_t>(keys.size()));
  for (const std::string& k : keys) str(k);
  return *this;
}

std::string_view PayloadReader::take(std::size_t n) {
  if (n > rest_.size()) {
    throw ProtocolError(ErrorCode::kMalformed,
                        "payload field of " + std::to_string(n) + " bytes runs past the " +
                            std::to_string(rest_.size()) + " bytes left in the frame");
  }
  const std::string_view field = rest_.substr(0, n);
  rest_.remove_prefix(n);
  return field;
}

std::uint32_t PayloadReader::u32() { return static_cast<std::uint32_t>(get_le(take(4), 0, 4)); }

std::int64_t PayloadReader::i64() { return static_cast<std::int64_t>(get_le(take(8), 0, 8)); }

std::string PayloadReader::str() { return std::string(take(u32())); }

void PayloadReader::bytes(std::span<std::byte> out) {
  const std::uint32_t n = u32();
  if (n != out.size()) {
    throw ProtocolError(ErrorCode::kMalformed, "a field of " + std::to_string(n) + " bytes where " +
                                                   std::to_string(out.size()) + " were expected");
  }
  std::memcpy(out.data(), take(n).data(), n);
}

std::vector<std::string> PayloadReader::keys() {
  const std::uint32_t count = u32();
  // Each key takes at least its 4-byte length: a larger count cannot be honest.
  if (count > rest_.size() / 4) {
    throw ProtocolError(ErrorCode::kMalformed, "key count " + std::to_string(count) +
                                                   " cannot fit in the rest of the frame");
  }
  std::vector<std::string> keys;
  keys.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) keys.push_back(str());
  return keys;
}

void PayloadReader::finish() const {
  if (!rest_.empty()) {
    throw ProtocolError(ErrorCode::kMalformed,
                        std::to_string(rest_.size()) + " unexpected bytes at the end of a frame");
  }
}

}  // namespace weft::store::internal
